"""A test key pair and the signing half of SendGrid's Signed Event Webhook, for fakes and tests."""

from __future__ import annotations

import base64

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from sendgrid_safe._signature import SIGNATURE_HEADER, TIMESTAMP_HEADER


class WebhookSigner:
    """Holds a fresh P-256 key pair; ``public_key`` is in the form SendGrid's console shows."""

    def __init__(self) -> None:
        self._private = ec.generate_private_key(ec.SECP256R1())
        der = self._private.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
        self.public_key = base64.b64encode(der).decode()

    def headers(self, body: bytes, timestamp: str) -> dict[str, str]:
        """The two headers SendGrid sends with a signed POST of ``body``."""
        signature = self._private.sign(timestamp.encode() + body, ec.ECDSA(hashes.SHA256()))
        return {SIGNATURE_HEADER: base64.b64encode(signature).decode(), TIMESTAMP_HEADER: timestamp}
