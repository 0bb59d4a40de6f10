"""Test helpers: a fault proxy for moto, and SES events shaped as SNS or EventBridge delivers them (needs
``ses-safe[testing]`` for moto)."""

from ._events import eventbridge_event, intent_tags, ses_event, sns_envelope
from ._moto import moto_sent_messages, moto_server, reset_moto
from ._proxy import MotoFaultProxy, is_send
from ._signing import SnsSigner

__all__ = [
    "MotoFaultProxy",
    "SnsSigner",
    "eventbridge_event",
    "is_send",
    "moto_sent_messages",
    "moto_server",
    "reset_moto",
    "ses_event",
    "sns_envelope",
    "intent_tags",
]
