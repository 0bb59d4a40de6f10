"""Test helpers: a fake SendGrid the real SDK talks to over HTTP, and a webhook signing key pair."""

from ._fake import FakeSendGrid, SentMessage
from ._signing import WebhookSigner

__all__ = ["FakeSendGrid", "SentMessage", "WebhookSigner"]
