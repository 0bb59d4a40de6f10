"""Event Webhook ingestion: signatures, malformed and foreign events, redelivery, the WSGI and ASGI endpoints."""

from __future__ import annotations

import http.client
import io
import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing, contextmanager
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit
from wsgiref.simple_server import WSGIRequestHandler, make_server
from wsgiref.types import WSGIApplication

import pytest
import trio
import uvicorn
import werkzeug.serving
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_trio_serve

import ses_safe
from safe_effects import EffectRecord, EffectStatus, EffectUnknown, Ledger
from safe_effects.testing import Fault, RecordingObserver
from sendgrid_safe import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    MalformedWebhook,
    SendGridAPIClient,
    WebhookSignatureError,
    ingest_events,
    make_asgi_app,
    make_wsgi_app,
    parse_event,
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


@pytest.mark.parametrize(
    ("bounce_type", "timestamp", "kept"),
    [
        (
            "blocked",
            1764500000,
            {"bounce_type": "blocked", "timestamp": 1764500000, "occurred_at": "2025-11-30T10:53:20+00:00"},
        ),
        ("alice@example.com", True, {"bounce_type": "unlisted"}),  # not SendGrid's word: may quote an address
        ("bounce", 10**40, {"bounce_type": "bounce"}),  # not a time SendGrid sends
    ],
    ids=["sendgrid's words", "an address", "an odd timestamp"],
)
def test_a_bounce_keeps_sendgrids_words_only(
    bounce_type: str,
    timestamp: object,
    kept: dict[str, object],
    ledger: Ledger,
    key: str,
    unknown_send: list[dict[str, Any]],
) -> None:
    """The second QA pass stored a bounce ``type`` of 'alice@example.com' and a ``timestamp`` of True: evidence
    keeps ids and the providers' fixed words only (docs/operations.md)."""
    delivered = unknown_send[1]
    bounce = {**delivered, "event": "bounce", "type": bounce_type, "timestamp": timestamp, "sg_event_id": "b-1"}
    report = ingest_events(ledger, json.dumps([bounce]).encode(), {}, public_key=None)
    assert report.recorded == 1
    (stored,) = ledger.store.evidence_for("default", key)
    assert {k: v for k, v in stored.detail.items() if k not in ("sg_message_id", "recipients")} == kept
    assert "alice@example.com" not in json.dumps(stored.detail)


@pytest.mark.parametrize("kind", ["dropped", "delivered"])
def test_an_event_sendgrid_stamped_before_the_record_existed_decides_nothing(
    kind: str, fake: FakeSendGrid, ledger: Ledger, key: str, unknown_send: list[dict[str, Any]]
) -> None:
    """An event about an earlier send of the key (another environment's on a shared account, skipped then as
    unmatched, so no id of it is on file) posted again: once, a drop rejected a delivered mail (a second one went
    under :v2) and a delivery confirmed a mail that never left. SendGrid's own time for it says it is not this
    record's; posted with its current time, the same event settles it."""
    created = ledger.get(key).created_at
    earlier = {**unknown_send[1], "event": kind, "sg_event_id": f"old-{kind}"}
    earlier["timestamp"] = int((created - timedelta(minutes=10)).timestamp())
    report = ingest_events(ledger, json.dumps([earlier]).encode(), {}, public_key=None)
    assert report.recorded == 1  # kept, deduplicated from now on, and weighed for nothing
    assert ledger.get(key).status is S.UNKNOWN
    current = {**earlier, "sg_event_id": f"now-{kind}", "timestamp": int(created.timestamp()) + 1}
    ingest_events(ledger, json.dumps([current]).encode(), {}, public_key=None)
    assert ledger.get(key).status is (S.REJECTED if kind == "dropped" else S.CONFIRMED)
    assert fake.effect_count() == 1


def test_a_bad_signature_is_refused_and_nothing_is_recorded(
    fake: FakeSendGrid, ledger: Ledger, key: str, unknown_send: list[dict[str, Any]]
) -> None:
    body, headers = fake.webhook_request(unknown_send)
    forged = {**headers, **WebhookSigner().headers(body, headers[TIMESTAMP_HEADER])}  # another key pair
    with pytest.raises(WebhookSignatureError):
        ingest_events(ledger, body, forged, public_key=fake.signer.public_key)
    _nothing_recorded(ledger, key)
    assert fake.effect_count() == 1


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


def test_events_for_an_intent_the_ledger_lacks_are_counted_and_logged(
    fake: FakeSendGrid,
    ledger: Ledger,
    key: str,
    unknown_send: list[dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """After a restore from a backup the record of a sent email is gone: its events are the only trace left,
    and were dropped without one. They are still not stored, but counted and logged."""
    seen = RecordingObserver()
    ledger.observer = seen
    lost = [{**event, "safe_effects_intent": "invoice:lost:email:v1"} for event in unknown_send]
    body, headers = fake.webhook_request(lost)
    with caplog.at_level(logging.WARNING, logger="sendgrid_safe"):
        report = ingest_events(ledger, body, headers, public_key=fake.signer.public_key)
    assert (report.events, report.unmatched) == (len(lost), len(lost))
    assert seen.named("unmatched_evidence") == [{"provider": "sendgrid", "source": "sendgrid_webhook"}] * len(lost)
    named = f"{len(lost)} SendGrid event(s) name intents this ledger has no record of (default/invoice:lost:email:v1)"
    assert named in caplog.text  # each intent once, however many of its events came
    assert ledger.store.evidence_for("default", "invoice:lost:email:v1") == []
    _nothing_recorded(ledger, key)


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
    assert fake.effect_count() == 1


@contextmanager
def _wsgi_server(app: WSGIApplication) -> Iterator[str]:
    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: Any) -> None:
            """Keep test output clean."""

    yield from _serving(make_server("127.0.0.1", 0, app, handler_class=Quiet))


def _serving(server: Any) -> Iterator[str]:
    """Serve ``server`` (wsgiref's or werkzeug's: both socketserver-based) on a thread; yields the events URL."""
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/sendgrid/events"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def _asgi_server(app: Any) -> Iterator[str]:
    """uvicorn in a thread, lifespan on, on a free port."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="on", log_level="warning", ws="none")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive(), "uvicorn stopped while starting"
        assert time.monotonic() < deadline, "uvicorn did not start within 10 s"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/sendgrid/events"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextmanager
def _trio_asgi_server(app: Any) -> Iterator[str]:
    """hypercorn's trio worker in a thread, lifespan on, serving a socket bound here (so its port is known)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    config = HypercornConfig()
    config.bind = [f"fd://{listener.detach()}"]  # hypercorn owns and closes the socket from here on
    config.loglevel = "WARNING"
    running: list[tuple[trio.lowlevel.TrioToken, trio.Event]] = []
    ready = threading.Event()

    async def serve_until_stopped() -> None:
        stop = trio.Event()
        running.append((trio.lowlevel.current_trio_token(), stop))
        ready.set()
        await hypercorn_trio_serve(app, config, shutdown_trigger=stop.wait)  # type: ignore[arg-type]

    thread = threading.Thread(target=trio.run, args=(serve_until_stopped,), daemon=True)
    thread.start()
    assert ready.wait(10), "trio did not start within 10 s"
    try:
        yield f"http://127.0.0.1:{port}/sendgrid/events"
    finally:
        token, stop = running[0]
        trio.from_thread.run_sync(stop.set, trio_token=token)
        thread.join(timeout=10)


_SERVERS = {"wsgi": (make_wsgi_app, _wsgi_server), "asgi": (make_asgi_app, _asgi_server)}
_SERVERS["asgi-trio"] = (make_asgi_app, _trio_asgi_server)


@pytest.fixture(params=list(_SERVERS))
def serve(request: pytest.FixtureRequest, ledger: Ledger, fake: FakeSendGrid) -> Iterator[Callable[..., str]]:
    """Starts the webhook endpoint: ``make_wsgi_app`` under wsgiref, ``make_asgi_app`` under uvicorn (asyncio)
    or hypercorn's trio worker."""
    make_app, server = _SERVERS[request.param]
    with ExitStack() as servers:

        def start(**options: Any) -> str:
            return servers.enter_context(server(make_app(ledger, public_key=fake.signer.public_key, **options)))

        yield start


@pytest.fixture
def endpoint(serve: Callable[..., str]) -> str:
    return serve()


def _status(url: str, method: str) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def test_the_endpoint_confirms_from_a_signed_post(
    endpoint: str, fake: FakeSendGrid, record: Record, key: str, unknown_send: list[dict[str, Any]]
) -> None:
    assert fake.post_events(endpoint, unknown_send) == 200
    assert record(key).status is S.CONFIRMED
    assert fake.effect_count() == 1


def test_the_endpoint_refuses_unsigned_and_malformed_posts(
    endpoint: str,
    fake: FakeSendGrid,
    ledger: Ledger,
    key: str,
    unknown_send: list[dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert fake.post_events(endpoint, unknown_send, sign=False) == 403
    assert fake.post_events(endpoint, {"event": "processed"}) == 400
    _nothing_recorded(ledger, key)
    # a wrong verification key refuses every POST, and SendGrid gives up retrying: it must show in the logs
    refusals = [r.getMessage() for r in caplog.records if r.name == "sendgrid_safe"]
    assert [r.split(" (")[0] for r in refusals] == [
        "SendGrid event webhook POST refused with 403",
        "SendGrid event webhook POST refused with 400",
    ]
    assert all(r.endswith("; nothing recorded") for r in refusals)


def test_the_endpoint_refuses_other_methods_and_bodies_over_its_limit(
    serve: Callable[..., str], fake: FakeSendGrid, ledger: Ledger, key: str, unknown_send: list[dict[str, Any]]
) -> None:
    body, _ = fake.webhook_request(unknown_send)
    endpoint = serve(max_body=len(body) - 1)
    assert _status(endpoint, "GET") == 405
    assert fake.post_events(endpoint, unknown_send) == 413
    _nothing_recorded(ledger, key)
    assert fake.effect_count() == 1


@pytest.mark.parametrize("kind", ["asgi", "wsgi"])
def test_a_chunked_body_counts_against_the_limit(
    kind: str, fake: FakeSendGrid, ledger: Ledger, key: str, unknown_send: list[dict[str, Any]]
) -> None:
    body, headers = fake.webhook_request(unknown_send)
    limit = {"public_key": fake.signer.public_key, "max_body": len(body) - 1}
    server = (
        _asgi_server(make_asgi_app(ledger, **limit))
        if kind == "asgi"
        else _werkzeug_server(make_wsgi_app(ledger, **limit))
    )
    with server as url:
        assert _chunked_post(url, body, headers) == 413
    _nothing_recorded(ledger, key)


DEEP = b"[" * 100_000 + b"]" * 100_000  # 200 kB of nesting: far under max_body, far past the JSON parser's depth


def _unstorable_events(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Events SendGrid never sends that used to escape as untyped errors (the JSON "\\ud800" escape is valid JSON):
    with our custom_args (a decisive kind, for the worst case) or without (another sender's on the account)."""
    delivered = events[1]
    return {
        "surrogate event id": {**delivered, "sg_event_id": "e\ud800"},
        "surrogate kind": {**delivered, "event": "delivered\udfff"},
        "surrogate email": {**delivered, "email": "a\ud800@example.com"},
        "surrogate key": {"event": "click", "x\ud800": 1},
        "nul url": {"event": "click", "url": "https://example.com/\u0000"},
        "nul event id": {**delivered, "sg_event_id": "e\u0000"},
        # names the ledger cannot keep: counted "unmatched", as if the ledger had no record of the intent
        "blank event id": {**delivered, "sg_event_id": "   "},
        "long event id": {**delivered, "sg_event_id": "e" * 2000},
        "blank kind": {**delivered, "event": "   "},
        "long kind": {**delivered, "event": "d" * 300},
    }


UNSTORABLE = [
    "surrogate event id",
    "surrogate kind",
    "surrogate email",
    "surrogate key",
    "nul url",
    "nul event id",
    "blank event id",
    "long event id",
    "blank kind",
    "long kind",
]


def test_a_body_too_deep_to_parse_is_malformed_and_nothing_is_recorded(
    fake: FakeSendGrid, ledger: Ledger, key: str, unknown_send: list[dict[str, Any]]
) -> None:
    with pytest.raises(MalformedWebhook):
        ingest_events(ledger, DEEP, {}, public_key=None)
    _nothing_recorded(ledger, key)
    assert fake.effect_count() == 1


@pytest.mark.parametrize("unstorable", UNSTORABLE)
def test_an_event_with_unstorable_text_is_malformed_alone_and_the_rest_of_its_batch_counts(
    unstorable: str, fake: FakeSendGrid, ledger: Ledger, key: str, unknown_send: list[dict[str, Any]]
) -> None:
    """A helper posted 50 decisive events and one foreign click whose url held a NUL: the whole POST was a
    400, which SendGrid retries for a day and then drops, and all 50 intents stayed unknown."""
    batch = [_unstorable_events(unknown_send)[unstorable], unknown_send[1]]  # then the send's "delivered"
    report = ingest_events(ledger, json.dumps(batch).encode(), {}, public_key=None)
    assert (report.events, report.malformed, report.recorded) == (2, 1, 1)
    record = ledger.get(key)
    assert (record.status, record.provider_result_id) == ("confirmed", unknown_send[1]["sg_message_id"].split(".")[0])
    assert [e.event_id for e in ledger.store.evidence_for("default", key)] == [unknown_send[1]["sg_event_id"]]
    assert fake.effect_count() == 1


def test_an_event_without_an_id_too_deep_to_digest_is_malformed(
    ledger: Ledger, unknown_send: list[dict[str, Any]]
) -> None:
    """An event's id is then its digest: one too deep to digest is a malformed event, never a crash.

    (Through a body, the JSON parser's depth and the digest's depend on the stack at each call: the event is
    built here, as the parser would have returned it.)
    """
    nested: list[Any] = []
    for _ in range(100_000):
        nested = [nested]
    event = {**{k: v for k, v in unknown_send[0].items() if k != "sg_event_id"}, "x": nested}
    assert parse_event(event, ledger.clock()) == "malformed"


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """POST a raw body; the status and the JSON the endpoint answered."""
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return int(error.code), json.loads(error.read())


def test_the_endpoint_answers_400_to_a_body_too_deep_to_parse(
    endpoint: str, fake: FakeSendGrid, ledger: Ledger, key: str, unknown_send: list[dict[str, Any]]
) -> None:
    headers = {"Content-Type": "application/json", **fake.signer.headers(DEEP, str(int(time.time())))}
    assert _post(endpoint, DEEP, headers) == (400, {"error": "malformed_webhook"})
    _nothing_recorded(ledger, key)
    assert fake.effect_count() == 1


@contextmanager
def _blackhole() -> Iterator[str]:
    """A port that takes connections and never answers: a real SDK call through it times out after sending."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


@pytest.fixture
def ses_unknown(ledger: Ledger) -> str:
    """An SES intent in the same ledger, left unknown by a request whose response never came."""
    ses_key = f"order:o_{uuid.uuid4().hex[:12]}:receipt:v1"
    email = {
        "FromEmailAddress": "billing@example.com",
        "Destination": {"ToAddresses": ["customer@example.com"]},
        "Content": {"Simple": {"Subject": {"Data": "Receipt"}, "Body": {"Text": {"Data": "Thanks."}}}},
    }
    with _blackhole() as url:
        sesv2 = ses_safe.client(
            "sesv2",
            ledger=ledger,
            region_name="us-east-1",
            endpoint_url=url,
            configuration_set="safe-effects",
            read_timeout=0.3,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        with pytest.raises(EffectUnknown):
            sesv2.send_email(IntentKey=ses_key, **email)
    assert ledger.get(ses_key).provider == "ses"
    return ses_key


def test_an_event_naming_another_providers_intent_is_unmatched_and_not_stored(
    endpoint: str,
    fake: FakeSendGrid,
    ledger: Ledger,
    record: Record,
    key: str,
    unknown_send: list[dict[str, Any]],
    ses_unknown: str,
) -> None:
    forged = {**unknown_send[0], "safe_effects_intent": ses_unknown, "sg_event_id": "names-the-ses-intent"}
    body, headers = fake.webhook_request([*unknown_send, forged])
    status, counts = _post(endpoint, body, headers)
    assert (status, counts["events"], counts["recorded"], counts["unmatched"]) == (200, 3, 2, 1)
    assert ledger.store.evidence_for("default", ses_unknown) == []
    assert record(ses_unknown).status is S.UNKNOWN  # a SendGrid event proves nothing about an SES send
    assert record(key).status is S.CONFIRMED
    assert fake.effect_count() == 1


def _chunked_post(url: str, body: bytes, headers: dict[str, str]) -> int:
    """POST ``body`` in two chunks without a Content-Length; returns the status."""
    parts = urlsplit(url)
    halves = iter([body[: len(body) // 2], body[len(body) // 2 :]])
    with closing(http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)) as connection:
        connection.request("POST", parts.path, body=halves, headers=headers, encode_chunked=True)
        return connection.getresponse().status


@contextmanager
def _werkzeug_server(app: WSGIApplication) -> Iterator[str]:
    """Werkzeug's server decodes a chunked body and marks it ``wsgi.input_terminated`` (wsgiref cannot)."""
    yield from _serving(werkzeug.serving.make_server("127.0.0.1", 0, app))


def test_the_wsgi_endpoint_reads_a_chunked_body_its_server_terminated(
    fake: FakeSendGrid, ledger: Ledger, record: Record, key: str, unknown_send: list[dict[str, Any]]
) -> None:
    body, headers = fake.webhook_request(unknown_send)
    with _werkzeug_server(make_wsgi_app(ledger, public_key=fake.signer.public_key)) as url:
        assert _chunked_post(url, body, headers) == 200
    assert len(ledger.store.evidence_for("default", key)) == 2
    assert record(key).status is S.CONFIRMED
    assert fake.effect_count() == 1


def test_a_wsgi_body_without_length_or_terminated_input_is_not_read(
    fake: FakeSendGrid, ledger: Ledger, key: str, unknown_send: list[dict[str, Any]]
) -> None:
    """PEP 3333: without ``wsgi.input_terminated`` reading past a missing Content-Length may block forever. The
    answer names the length, not the signature, which an empty body would fail: the server is at fault."""
    body, headers = fake.webhook_request(unknown_send)
    environ = {"REQUEST_METHOD": "POST", "wsgi.input": io.BytesIO(body)}
    environ |= {"HTTP_" + name.upper().replace("-", "_"): value for name, value in headers.items()}
    statuses: list[str] = []
    app = make_wsgi_app(ledger, public_key=fake.signer.public_key)
    answer = app(environ, lambda s, h: statuses.append(s))
    assert (statuses, json.loads(b"".join(answer))) == (["411 Length Required"], {"error": "Content-Length required"})
    assert environ["wsgi.input"].tell() == 0
    _nothing_recorded(ledger, key)
