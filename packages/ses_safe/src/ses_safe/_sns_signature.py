"""SNS message signatures: proof that an envelope came from Amazon SNS, for events taken from anywhere.

SNS signs every message it delivers (to HTTPS endpoints and, inside the envelope, to SQS) with RSA over a
fixed "string to sign": SHA1 for ``SignatureVersion`` 1, SHA256 for 2. The certificate is fetched from the
envelope's ``SigningCertURL``, which must be HTTPS on an SNS host (``sns.<region>.amazonaws.com``, ``.com.cn``
in China): TLS then proves who served it, so a forger cannot point to a certificate of their own.
Checked against https://docs.aws.amazon.com/sns/latest/dg/sns-verify-signature-of-message.html.
"""

from __future__ import annotations

import base64
import binascii
import re
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509 import load_pem_x509_certificate

from safe_effects import SafeEffectsError

# the fields signed, in the documented (byte-sorted) order; Subject only when the message has one
_SIGNED_FIELDS = {
    "Notification": ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    "SubscriptionConfirmation": ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"),
    "UnsubscribeConfirmation": ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"),
}
_OPTIONAL = frozenset({"Subject"})
_HASHES: Mapping[str, Callable[[], hashes.HashAlgorithm]] = {"1": hashes.SHA1, "2": hashes.SHA256}
SNS_CERT_HOST = re.compile(r"sns\.[a-z0-9-]+\.amazonaws\.com(\.cn)?")
_MAX_CERTIFICATE = 64 * 1024  # an SNS signing certificate is about 2 KiB
_CACHED_CERTIFICATES = 32  # SNS rotates its certificate rarely; one per region in use


class SnsSignatureInvalid(SafeEffectsError):
    """An SNS envelope whose signature is missing, malformed, made with a certificate from outside SNS, or does
    not match its fields (or a payload with no envelope to verify): refused, nothing recorded."""

    code = "sns_signature_invalid"


class SnsCertificateUnavailable(SafeEffectsError):
    """SNS's signing certificate could not be fetched (network, DNS): nothing recorded; try again later (the
    poller leaves the message on its queue)."""

    code = "sns_certificate_unavailable"


def fetch_certificate(url: str) -> bytes:
    """GET ``url`` (an SNS certificate URL, checked before this is called), at most 64 KiB, within 10 s."""
    with urllib.request.urlopen(url, timeout=10) as answer:  # https on an SNS host: checked before the call
        body: bytes = answer.read(_MAX_CERTIFICATE + 1)
    if len(body) > _MAX_CERTIFICATE:
        raise ValueError(f"{url} answered more than {_MAX_CERTIFICATE} bytes: not a certificate")
    return body


def is_sns_certificate_url(url: str) -> bool:
    """HTTPS, default port, no credentials, an SNS host, a ``.pem`` path: where SNS keeps its certificates."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return False
    return (
        parts.scheme == "https"
        and port in (None, 443)
        and parts.username is None
        and parts.hostname is not None
        and SNS_CERT_HOST.fullmatch(parts.hostname) is not None
        and parts.path.endswith(".pem")
    )


def string_to_sign(envelope: Mapping[str, Any]) -> bytes:
    """The bytes SNS signed for ``envelope``: each signed field's name and value, each on its own line."""
    kind = envelope.get("Type")
    fields = _SIGNED_FIELDS.get(kind) if isinstance(kind, str) else None
    if fields is None:
        raise SnsSignatureInvalid(f"an SNS envelope of Type {str(kind)[:64]!r} is not one SNS signs")
    lines: list[str] = []
    for name in fields:
        value = envelope.get(name)
        if value is None and name in _OPTIONAL:
            continue
        if not isinstance(value, str):
            raise SnsSignatureInvalid(f"the SNS envelope's {name} is missing or not text: nothing to verify")
        lines += [name, value]
    return ("\n".join(lines) + "\n").encode()


class SnsSignatures:
    """Verifies SNS envelopes' signatures; certificates are fetched once per URL and kept.

    ``fetch`` takes a certificate URL (already checked to be an SNS one) and returns its PEM bytes; the default
    GETs it. ``is_trusted_url`` decides which certificate URLs may be fetched at all.
    """

    def __init__(
        self,
        *,
        fetch: Callable[[str], bytes] = fetch_certificate,
        is_trusted_url: Callable[[str], bool] = is_sns_certificate_url,
    ) -> None:
        self._fetch = fetch
        self._is_trusted_url = is_trusted_url
        self._keys: dict[str, rsa.RSAPublicKey] = {}

    def verify(self, envelope: Mapping[str, Any]) -> None:
        """Raise :class:`SnsSignatureInvalid` unless SNS signed exactly these fields of ``envelope``;
        :class:`SnsCertificateUnavailable` when its certificate cannot be fetched now."""
        version, url, signature = (envelope.get(name) for name in ("SignatureVersion", "SigningCertURL", "Signature"))
        if not isinstance(signature, str):
            raise SnsSignatureInvalid("the SNS envelope has no Signature: refused")
        hash_of = _HASHES.get(version) if isinstance(version, str) else None
        if hash_of is None:
            raise SnsSignatureInvalid(f"SignatureVersion {str(version)[:16]!r} is not one SNS uses (1 or 2)")
        if not isinstance(url, str) or not self._is_trusted_url(url):
            raise SnsSignatureInvalid(f"SigningCertURL {str(url)[:256]!r} is not an SNS certificate URL")
        signed = string_to_sign(envelope)
        try:
            raw = base64.b64decode(signature, validate=True)
            self._key(url).verify(raw, signed, padding.PKCS1v15(), hash_of())
        except (binascii.Error, InvalidSignature) as error:
            raise SnsSignatureInvalid("the SNS signature does not match the envelope: refused") from error

    def _key(self, url: str) -> rsa.RSAPublicKey:
        key = self._keys.get(url)
        if key is not None:
            return key
        try:
            pem = self._fetch(url)
        except Exception as error:  # the network, DNS, an HTTP error: nothing to judge the signature by now
            raise SnsCertificateUnavailable(f"SNS signing certificate {url} could not be fetched: {error}") from error
        try:
            loaded = load_pem_x509_certificate(pem).public_key()
        except ValueError as error:
            raise SnsSignatureInvalid(f"{url} did not serve a PEM certificate: refused") from error
        if not isinstance(loaded, rsa.RSAPublicKey):
            raise SnsSignatureInvalid(f"{url} serves a {type(loaded).__name__}, not the RSA key SNS signs with")
        if len(self._keys) >= _CACHED_CERTIFICATES:
            self._keys.clear()
        self._keys[url] = loaded
        return loaded
