"""Signed Event Webhook: ECDSA P-256 / SHA-256 over ``timestamp + raw body``, key shown as base64 DER."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_der_public_key

from safe_effects import InvalidInput, SafeEffectsError

SIGNATURE_HEADER = "X-Twilio-Email-Event-Webhook-Signature"
TIMESTAMP_HEADER = "X-Twilio-Email-Event-Webhook-Timestamp"

PublicKey = ec.EllipticCurvePublicKey


class WebhookSignatureError(SafeEffectsError):
    """An Event Webhook POST whose signature is missing or wrong: refused, nothing recorded."""

    code = "webhook_signature_invalid"


def load_public_key(key: str | PublicKey) -> PublicKey:
    """Parse the verification key as SendGrid's console shows it (base64 of a DER SubjectPublicKeyInfo)."""
    if isinstance(key, ec.EllipticCurvePublicKey):
        return key
    try:
        loaded = load_der_public_key(base64.b64decode(key.strip(), validate=True))
    except (ValueError, binascii.Error) as error:
        raise InvalidInput(f"not a base64 DER public key: {error}") from error
    if not isinstance(loaded, ec.EllipticCurvePublicKey):
        raise InvalidInput(f"the webhook verification key must be an EC key, got {type(loaded).__name__}")
    return loaded


def verify_signature(key: PublicKey, body: bytes, headers: Mapping[str, str]) -> None:
    """Raise :class:`WebhookSignatureError` unless the headers sign exactly these raw body bytes."""
    lowered = {name.lower(): value for name, value in headers.items()}
    signature = lowered.get(SIGNATURE_HEADER.lower())
    timestamp = lowered.get(TIMESTAMP_HEADER.lower())
    if not signature or not timestamp:
        raise WebhookSignatureError("signature or timestamp header missing")
    try:
        raw = base64.b64decode(signature, validate=True)
        key.verify(raw, timestamp.encode() + body, ec.ECDSA(hashes.SHA256()))
    except (binascii.Error, ValueError, InvalidSignature) as error:
        raise WebhookSignatureError("signature does not match the body and timestamp") from error
