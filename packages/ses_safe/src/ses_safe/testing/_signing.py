"""An SNS signer of its own: a fresh RSA key and certificate, served from an SNS-shaped certificate URL."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID

from ses_safe import SnsSignatures
from ses_safe._sns_signature import string_to_sign

_HASHES = {"1": hashes.SHA1, "2": hashes.SHA256}


class SnsSigner:
    """Signs SNS envelopes as SNS does; :meth:`signatures` verifies them, fetching the certificate from this
    signer instead of the network. ``fetched`` lists the certificate URLs asked for, in order."""

    def __init__(self, *, region: str = "us-east-1", version: str = "2") -> None:
        self._private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sns.amazonaws.com")])
        now = datetime.now(UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._private.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(days=1))
            .not_valid_after(now + timedelta(days=30))
            .sign(self._private, hashes.SHA256())
        )
        self.pem = certificate.public_bytes(Encoding.PEM)
        self.cert_url = f"https://sns.{region}.amazonaws.com/SimpleNotificationService-safe-effects-test.pem"
        self.version = version
        self.fetched: list[str] = []

    def sign(self, envelope: str | Mapping[str, Any]) -> str:
        """``envelope`` (JSON or a mapping) with ``SignatureVersion``, ``SigningCertURL`` and ``Signature`` set."""
        signed = dict(json.loads(envelope) if isinstance(envelope, str) else envelope)
        signed |= {"SignatureVersion": self.version, "SigningCertURL": self.cert_url}
        signature = self._private.sign(string_to_sign(signed), padding.PKCS1v15(), _HASHES[self.version]())
        signed["Signature"] = base64.b64encode(signature).decode()
        return json.dumps(signed)

    def fetch(self, url: str) -> bytes:
        """The certificate, for its own URL; any other URL fails as an unreachable host would."""
        self.fetched.append(url)
        if url != self.cert_url:
            raise OSError(f"{url}: no such certificate")
        return self.pem

    def signatures(self) -> SnsSignatures:
        """A verifier that gets its certificates from this signer."""
        return SnsSignatures(fetch=self.fetch)
