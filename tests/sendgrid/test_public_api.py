"""The public surface changes only on purpose."""

from __future__ import annotations

import sendgrid_safe
import sendgrid_safe.testing


def test_all_is_pinned() -> None:
    assert sorted(sendgrid_safe.__all__) == sorted(
        [
            "SendGridAPIClient",
            "adapter_from_env",
            "LedgerResponse",
            "SendGridAdapter",
            "CONTRACT",
            "PROVIDER",
            "OPERATION",
            "INTENT_ARG",
            "TENANT_ARG",
            "RECIPIENTS_ARG",
            "classify",
            "event_verdict",
            "ingest_events",
            "parse_event",
            "IngestReport",
            "MalformedWebhook",
            "make_wsgi_app",
            "verify_signature",
            "load_public_key",
            "WebhookSignatureError",
            "SIGNATURE_HEADER",
            "TIMESTAMP_HEADER",
        ]
    )
    assert sorted(sendgrid_safe.testing.__all__) == ["FakeSendGrid", "SentMessage", "WebhookSigner"]
    for name in sendgrid_safe.__all__:
        assert hasattr(sendgrid_safe, name)
