"""Event Webhook ingestion: signatures, malformed and foreign events, redelivery, the WSGI endpoint."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest

from safe_effects import EffectRecord, EffectStatus, Ledger
from safe_effects.testing import Fault
from sendgrid_safe import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    MalformedWebhook,
    SendGridAPIClient,
    WebhookSignatureError,
    ingest_events,
    make_wsgi_app,
)
from sendgrid_safe.testing import FakeSendGrid, WebhookSigner

S = EffectStatus
Record = Callable[[str], EffectRecord]


@pytest.fixture
def unknown_send(sg: SendGridAPIClient, fake: FakeSendGrid, key: str, mail: Any) -> list[dict[str, Any]]:
    """An intent left unknown by a lost 202, and the processed + delivered events for it."""
    fake.activity_visible = False
    fake.inject(Fault.drop_after_commit())
    with pytest.raises(Exception):  # noqa: B017, PT011 - EffectUnknown, checked elsewhere
        sg.send(mail(), intent_key=key)
    return fake.events(fake.messages[0])


def _nothing_recorded(ledger: Ledger, key: str) -> None:
    assert ledger.store.evidence_for("default", key) == []
    assert ledger.get(key).status is S.UNKNOWN


def test_a_bad_signature_is_refused_and_nothing_is_recorded(
    fake: FakeSendGrid, ledger: Ledger, key: str, unknown_send: list[dict[str, Any]]
) -> None:
    body, headers = fake.webhook_request(unknown_send)
    forged = {**headers, **WebhookSigner().headers(body, headers[TIMESTAMP_HEADER])}  # another key pair
    with pytest.raises(WebhookSignatureError):
        ingest_events(ledger, body, forged, public_key=fake.signer.public_key)
    _nothing_recorded(ledger, key)
    assert fake.effect_count == 1


@pytest.mark.parametrize("tamper", ["body", "timestamp", "missing", "garbage"])
def test_any_tampering_fails_verification(
    tamper: str, fake: FakeSendGrid, ledger: Ledger, key: str, unknown_send: list[dict[str, Any]]
) -> None:
    body, headers = fake.webhook_request(unknown_send)
    if tamper == "body":
        body = body.replace(b"processed", b"delivered")
    elif tamper == "timestamp":
        headers[TIMESTAMP_HEADER] += "1"
    elif tamper == "missing":
        del headers[SIGNATURE_HEADER]
    else:
        headers[SIGNATURE_HEADER] = "not base64!"
    with pytest.raises(WebhookSignatureError):
        ingest_events(ledger, body, headers, public_key=fake.signer.public_key)
    _nothing_recorded(ledger, key)


def test_lower_case_header_names_verify(
    fake: FakeSendGrid, ledger: Ledger, record: Record, key: str, unknown_send: list[dict[str, Any]]
) -> None:
    body, headers = fake.webhook_request(unknown_send)
    lowered = {name.lower(): value for name, value in headers.items()}
    assert ingest_events(ledger, body, lowered, public_key=fake.signer.public_key).recorded == 2
    assert record(key).status is S.CONFIRMED


def test_malformed_and_foreign_events_are_skipped_and_counted(
    fake: FakeSendGrid, ledger: Ledger, record: Record, key: str, unknown_send: list[dict[str, Any]]
) -> None:
    processed = unknown_send[0]
    events: list[Any] = [
        "not an object",
        {"email": "x@example.com"},  # no event type
        {**processed, "safe_effects_intent": "not a key"},
        {**processed, "safe_effects_tenant": "bad tenant!"},
        {**processed, "sg_message_id": None, "sg_event_id": "no-message-id"},
        {k: v for k, v in processed.items() if not k.startswith("safe_effects_")},  # foreign
        {**processed, "safe_effects_intent": "invoice:never_sent:email:v1", "sg_event_id": "other"},
    ]
    body, headers = fake.webhook_request(events)
    report = ingest_events(ledger, body, headers, public_key=fake.signer.public_key)
    assert (report.events, report.malformed, report.foreign, report.unmatched, report.recorded) == (7, 5, 1, 1, 0)
    _nothing_recorded(ledger, key)
    assert ledger.store.evidence_for("default", "invoice:never_sent:email:v1") == []


@pytest.mark.parametrize("body", [b"{not json", b'{"event": "processed"}', b"\xff\xfe"])
def test_a_body_that_is_not_an_event_array_is_refused(
    body: bytes, fake: FakeSendGrid, ledger: Ledger, key: str, unknown_send: list[dict[str, Any]]
) -> None:
    with pytest.raises(MalformedWebhook):
        ingest_events(ledger, body, {}, public_key=None)
    _nothing_recorded(ledger, key)


def test_redelivered_events_are_duplicates(
    fake: FakeSendGrid, ledger: Ledger, record: Record, key: str, unknown_send: list[dict[str, Any]]
) -> None:
    body, headers = fake.webhook_request(unknown_send)
    first = ingest_events(ledger, body, headers, public_key=fake.signer.public_key)
    again = ingest_events(ledger, body, headers, public_key=fake.signer.public_key)
    assert (first.recorded, again.recorded, again.duplicates) == (2, 0, 2)
    assert len(ledger.store.evidence_for("default", key)) == 2
    assert record(key).status is S.CONFIRMED


def test_engagement_events_inform_but_decide_nothing(
    fake: FakeSendGrid, ledger: Ledger, record: Record, key: str, unknown_send: list[dict[str, Any]]
) -> None:
    events = fake.events(fake.messages[0], kinds=["open", "click"])
    body, headers = fake.webhook_request(events)
    assert ingest_events(ledger, body, headers, public_key=fake.signer.public_key).recorded == 2
    assert record(key).status is S.UNKNOWN
    assert fake.effect_count == 1


@pytest.fixture
def endpoint(ledger: Ledger, fake: FakeSendGrid) -> Iterator[str]:
    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: Any) -> None:
            """Keep test output clean."""

    app = make_wsgi_app(ledger, public_key=fake.signer.public_key)
    server = make_server("127.0.0.1", 0, app, handler_class=Quiet)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/sendgrid/events"
    server.shutdown()
    server.server_close()


def test_the_wsgi_endpoint_confirms_from_a_signed_post(
    endpoint: str, fake: FakeSendGrid, record: Record, key: str, unknown_send: list[dict[str, Any]]
) -> None:
    assert fake.post_events(endpoint, unknown_send) == 200
    assert record(key).status is S.CONFIRMED
    assert fake.effect_count == 1


def test_the_wsgi_endpoint_refuses_unsigned_and_malformed_posts(
    endpoint: str, fake: FakeSendGrid, ledger: Ledger, key: str, unknown_send: list[dict[str, Any]]
) -> None:
    assert fake.post_events(endpoint, unknown_send, sign=False) == 403
    assert fake.post_events(endpoint, {"event": "processed"}) == 400
    _nothing_recorded(ledger, key)
