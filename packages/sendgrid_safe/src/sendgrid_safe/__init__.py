"""sendgrid_safe: a drop-in SendGrid client whose sends go through the safe-effects ledger, once per intent."""

from ._adapter import SendGridAdapter
from ._asgi import make_asgi_app
from ._client import LedgerResponse, SendResponse
from ._from_env import adapter_from_env
from ._rules import (
    CONTRACT,
    INTENT_ARG,
    OPERATION,
    PROVIDER,
    RECIPIENTS_ARG,
    TENANT_ARG,
    classify,
    event_verdict,
)
from ._signature import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    WebhookSignatureError,
    load_public_key,
    verify_signature,
)
from ._webhook import IngestReport, MalformedWebhook, ingest_events, parse_event
from ._webhook_settings import DECIDING_EVENTS, EventWebhookSetup, check_event_webhook
from ._wrapper import SendGridAPIClient
from ._wsgi import make_wsgi_app

__all__ = [
    "adapter_from_env",
    # the drop-in client
    "SendGridAPIClient",
    "LedgerResponse",
    "SendResponse",
    # the provider seam
    "SendGridAdapter",
    "CONTRACT",
    "PROVIDER",
    "OPERATION",
    "INTENT_ARG",
    "TENANT_ARG",
    "RECIPIENTS_ARG",
    "classify",
    "event_verdict",
    # event webhook
    "ingest_events",
    "parse_event",
    "IngestReport",
    "MalformedWebhook",
    "make_wsgi_app",
    "make_asgi_app",
    "verify_signature",
    "load_public_key",
    "WebhookSignatureError",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "check_event_webhook",
    "EventWebhookSetup",
    "DECIDING_EVENTS",
]
