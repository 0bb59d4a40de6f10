"""SES event ingestion: SNS envelopes (inside SQS bodies) become evidence; anything odd is counted and skipped."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

import ses_safe
from safe_effects import (
    OCCURRED_AT,
    EffectDeferred,
    EffectStatus,
    EffectUnknown,
    EvidenceVerdict,
    IntentKey,
    InvalidInput,
    Ledger,
    LedgerUnavailable,
    PostgresStore,
    PrometheusObserver,
    SQLiteStore,
)
from safe_effects.testing import Fault, RecordingObserver
from ses_safe import INTENT_TAG, IngestOutcome, ingest_event, intent_tag, tenant_tag
from ses_safe.testing import MotoFaultProxy, SnsSigner, intent_tags, moto_sent_messages, ses_event, sns_envelope

from .conftest import LoseASend

KEY = "order:o_1:receipt:v1"


@pytest.fixture
def unknown_send(lose_a_send: LoseASend) -> tuple[str, dict[str, str]]:
    """An SES send of ``KEY`` whose response was lost: (moto's MessageId, the tags that went out)."""
    return lose_a_send(KEY)


def test_a_send_deferred_under_one_configuration_set_and_sent_under_another_is_settled_by_the_new_sets_events(
    ledger: Ledger, wrapped: Any, proxy: MotoFaultProxy, moto: str, v2_email: dict[str, Any]
) -> None:
    """The deploys review: release A's send was throttled (prepared); release B, whose client has another
    default configuration set, sent it and lost the answer. The record still named A's set, so B's set's events
    were refused as another account's and the send stayed unknown for good. A claim now records the summary of
    what it sends."""
    proxy.refuse_sends("TooManyRequestsException", status=429, times=ledger.retry.max_attempts)  # every attempt
    with pytest.raises(EffectDeferred):
        wrapped("sesv2", configuration_set="cs-old").send_email(IntentKey=KEY, **v2_email)
    assert ledger.get(KEY).summary["configuration_set"] == "cs-old"
    proxy.inject(Fault.drop_after_commit())
    with pytest.raises(EffectUnknown):
        wrapped("sesv2", configuration_set="cs-new").send_email(IntentKey=KEY, **v2_email)
    [sent] = moto_sent_messages(moto)
    assert json.loads(proxy.sends()[-1].body)["ConfigurationSetName"] == "cs-new"
    assert ledger.get(KEY).summary["configuration_set"] == "cs-new"
    tags = intent_tags(intent_tag(IntentKey.parse(KEY)), tenant_tag("default"))
    delivered = ses_event("Delivery", message_id=sent["id"], tags=tags, configuration_set="cs-new")
    assert ingest_event(ledger, sns_envelope(delivered), signatures=None).outcome is IngestOutcome.RECORDED
    record = ledger.get(KEY)
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, sent["id"])
    assert len(moto_sent_messages(moto)) == 1


def test_tenant_tag_escapes_what_ses_tags_forbid_injectively() -> None:
    assert tenant_tag("acme.eu") == "acme_2eeu"
    assert tenant_tag("a_b") == "a_5fb"
    assert tenant_tag("a.b") != tenant_tag("a_b")


def test_malformed_and_foreign_events_are_counted_skipped_and_deleted(
    ledger: Ledger, queue: tuple[Any, str], unknown_send: tuple[str, dict[str, str]]
) -> None:
    message_id, tags = unknown_send
    sqs, queue_url = queue
    bodies = [
        "not json",
        "[1, 2]",
        json.dumps({"Type": "Notification", "MessageId": "n-1", "Message": "{broken"}),
        sns_envelope({"eventType": "Send"}),  # no mail object
        sns_envelope({"mail": {"messageId": "x"}}),  # no eventType
        sns_envelope(ses_event("Send", message_id="m-foreign")),  # another sender on the configuration set
        sns_envelope(ses_event("Send", message_id="m-other", tags=intent_tags("order-o_5f9-receipt-v1", "default"))),
        sns_envelope(ses_event("Send", message_id=message_id, tags={**tags, "safe-effects-tenant": "other"})),
        sns_envelope(ses_event("Quarantine", message_id=message_id, tags=tags)),  # a type this release does not know
    ]
    for body in bodies:
        sqs.send_message(QueueUrl=queue_url, MessageBody=body)
    poller = ses_safe.SQSEventPoller(ledger, sqs, queue_url)
    seen = RecordingObserver()
    ledger.observer = seen
    poller.drain()

    assert poller.counts == {"malformed": 5, "foreign": 1, "unmatched": 2, "recorded": 1}
    # counted beside the poller's own tally: after a restore, a lost record's events are all that is left of it
    assert seen.named("unmatched_evidence") == [{"provider": "ses", "source": "ses_event"}] * 2
    assert "Messages" not in sqs.receive_message(QueueUrl=queue_url)
    record = ledger.get(KEY)
    assert record.status is EffectStatus.UNKNOWN  # nothing above may confirm it
    evidence = ledger.store.evidence_for("default", KEY)
    assert {e.verdict for e in evidence} == {EvidenceVerdict.INFORMATIONAL}


@pytest.mark.parametrize(
    "wrap",
    [
        pytest.param(sns_envelope, id="sns envelope"),
        pytest.param(json.dumps, id="bare event"),
        pytest.param(lambda event: {"MessageId": "q", "ReceiptHandle": "r", "Body": sns_envelope(event)}, id="sqs msg"),
    ],
)
def test_delivery_event_confirms_in_every_wrapping(
    ledger: Ledger, unknown_send: tuple[str, dict[str, str]], wrap: Any
) -> None:
    message_id, tags = unknown_send
    result = ingest_event(ledger, wrap(ses_event("Delivery", message_id=message_id, tags=tags)), signatures=None)
    assert result.outcome is IngestOutcome.RECORDED
    record = ledger.get(KEY)
    assert record.status is EffectStatus.CONFIRMED
    assert record.provider_result_id == message_id


@pytest.mark.parametrize("kind", ["Delivery", "DeliveryDelay", "Bounce", "Complaint", "Open", "Click", "Subscription"])
def test_every_event_after_ses_tried_to_deliver_confirms(
    kind: str, ledger: Ledger, moto: str, unknown_send: tuple[str, dict[str, str]]
) -> None:
    """A bounce, a delay, a complaint, an open: SES sent the message, whichever of them a set publishes."""
    message_id, tags = unknown_send
    result = ingest_event(ledger, sns_envelope(ses_event(kind, message_id=message_id, tags=tags)), signatures=None)
    assert result.evidence is not None
    assert result.evidence.verdict is EvidenceVerdict.CONFIRMS
    record = ledger.get(KEY)
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, message_id)
    assert len(moto_sent_messages(moto)) == 1


@pytest.mark.parametrize(
    ("kind", "detail"),
    [
        ("Bounce", {"bounceType": "Permanent", "bounceSubType": "Suppressed", "bouncedRecipients": []}),
        ("Bounce", {"bounceType": "Permanent", "bounceSubType": "OnAccountSuppressionList", "bouncedRecipients": []}),
        ("Bounce", {"bounceType": "Permanent", "bounceSubType": "UnsubscribedRecipient", "bouncedRecipients": []}),
        ("Complaint", {"complaintSubType": "OnAccountSuppressionList", "complainedRecipients": []}),
    ],
    ids=["suppressed", "account suppression list", "unsubscribed", "complaint on the account list"],
)
def test_ses_own_event_for_a_suppressed_address_is_an_acceptance_like_send(
    kind: str,
    detail: dict[str, Any],
    ledger: Ledger,
    sesv2: Any,
    moto: str,
    unknown_send: tuple[str, dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SES answers for a suppressed address itself, without trying it: the call was taken, nothing more is
    known yet, so the intent confirms only once the rejection window has passed with no Reject."""
    message_id, tags = unknown_send
    result = ingest_event(
        ledger, sns_envelope(ses_event(kind, message_id=message_id, tags=tags, detail=detail)), signatures=None
    )
    assert result.evidence is not None
    assert result.evidence.verdict is EvidenceVerdict.ACCEPTS
    assert ledger.get(KEY).status is EffectStatus.UNKNOWN

    window = sesv2.adapter.contract_for(ledger.get(KEY).operation).rejection_window
    now = ledger.clock()
    monkeypatch.setattr(ledger, "clock", lambda: now + window)
    assert ledger.reconcile(sesv2.adapter, intent_key=KEY).status is EffectStatus.CONFIRMED
    assert len(moto_sent_messages(moto)) == 1


def test_event_verdict_reads_one_unwrapped_event() -> None:
    bounce = ses_event("Bounce", message_id="m-1")
    suppressed = ses_event("Bounce", message_id="m-1", detail={"bounceSubType": "OnAccountSuppressionList"})
    identity_notification = {**ses_event("Delivery", message_id="m-1"), "notificationType": "Delivery"}
    del identity_notification["eventType"]
    assert ses_safe.event_verdict(bounce) is EvidenceVerdict.CONFIRMS
    assert ses_safe.event_verdict(suppressed) is EvidenceVerdict.ACCEPTS
    assert ses_safe.event_verdict(ses_event("Send", message_id="m-1")) is EvidenceVerdict.ACCEPTS
    assert ses_safe.event_verdict(ses_event("Reject", message_id="m-1")) is EvidenceVerdict.REJECTS
    assert ses_safe.event_verdict(identity_notification) is EvidenceVerdict.CONFIRMS
    assert ses_safe.event_verdict({"mail": {"messageId": "m-1"}}) is EvidenceVerdict.INFORMATIONAL  # no type


@pytest.mark.parametrize(
    ("kind", "detail", "kept"),
    [
        (
            "Bounce",
            {"bounceType": "Permanent", "bounceSubType": "General", "bouncedRecipients": [{"emailAddress": "a@b.c"}]},
            {"bounce_type": "Permanent", "bounce_subtype": "General"},
        ),
        ("Complaint", {"complaintFeedbackType": "abuse", "complainedRecipients": []}, {"complaint_type": "abuse"}),
        ("Bounce", {"bounceType": "Permanent a@b.c", "bounceSubType": 7}, {}),  # not SES's words: left out
    ],
    ids=["bounce", "complaint", "odd"],
)
def test_a_bounce_or_complaint_keeps_its_type_for_the_operator_and_no_address(
    kind: str, detail: dict[str, Any], kept: dict[str, str], ledger: Ledger, unknown_send: tuple[str, dict[str, str]]
) -> None:
    """The forensics review: `show` of a confirmed send that bounced said "Bounce" with no type, so a
    permanent bounce (the customer never got it) read like a soft one."""
    message_id, tags = unknown_send
    result = ingest_event(
        ledger, sns_envelope(ses_event(kind, message_id=message_id, tags=tags, detail=detail)), signatures=None
    )
    assert result.evidence is not None
    (stored,) = ledger.store.evidence_for("default", KEY)
    assert {k: v for k, v in stored.detail.items() if k not in ("mail_timestamp", OCCURRED_AT)} == kept
    assert "a@b.c" not in json.dumps(stored.detail)
    assert ledger.get(KEY).status is EffectStatus.CONFIRMED


def test_a_bounce_subtype_of_another_shape_is_read_as_a_plain_bounce(
    ledger: Ledger, unknown_send: tuple[str, dict[str, str]]
) -> None:
    message_id, tags = unknown_send
    odd = {"bounceType": "Permanent", "bounceSubType": ["Suppressed"]}  # a list: SES sends a string
    result = ingest_event(
        ledger, sns_envelope(ses_event("Bounce", message_id=message_id, tags=tags, detail=odd)), signatures=None
    )
    assert result.outcome is IngestOutcome.RECORDED
    assert ledger.get(KEY).status is EffectStatus.CONFIRMED


def test_ingest_event_trusts_nothing_by_default(ledger: Ledger, unknown_send: tuple[str, dict[str, str]]) -> None:
    """An HTTPS endpoint that left ``signatures`` out recorded a forged, unsigned Reject, and the job's next version
    sent a second email (the misuse review): the caller must say whether the payload is verified or trusted."""
    message_id, tags = unknown_send
    forged = sns_envelope(ses_event("Reject", message_id=message_id, tags=tags))
    with pytest.raises(TypeError, match="signatures"):
        ingest_event(ledger, forged)  # type: ignore[call-arg]
    assert ledger.get(KEY).status is EffectStatus.UNKNOWN
    assert ledger.store.evidence_for("default", KEY) == []


def test_a_redelivered_notification_is_a_duplicate(ledger: Ledger, unknown_send: tuple[str, dict[str, str]]) -> None:
    message_id, tags = unknown_send
    body = sns_envelope(ses_event("Send", message_id=message_id, tags=tags))
    assert ingest_event(ledger, body, signatures=None).outcome is IngestOutcome.RECORDED
    assert ingest_event(ledger, body, signatures=None).outcome is IngestOutcome.DUPLICATE
    assert len(ledger.store.evidence_for("default", KEY)) == 1


def test_rendering_failure_rejects(ledger: Ledger, unknown_send: tuple[str, dict[str, str]]) -> None:
    message_id, tags = unknown_send
    result = ingest_event(
        ledger, sns_envelope(ses_event("Rendering Failure", message_id=message_id, tags=tags)), signatures=None
    )
    assert result.evidence is not None
    assert result.evidence.verdict is EvidenceVerdict.REJECTS
    assert ledger.get(KEY).status is EffectStatus.REJECTED


@pytest.mark.parametrize("kind", ["Reject", "Delivery"])
def test_an_event_of_a_send_made_before_the_record_existed_decides_nothing(
    kind: str, ledger: Ledger, moto: str, unknown_send: tuple[str, dict[str, str]]
) -> None:
    """Every SES event carries its send's time (``mail.timestamp``). One about an earlier send of the key (a
    purged record's, another environment's skipped then as unmatched) put on the queue again rejected a sent mail,
    inviting a second, or confirmed one that never left; the send's time says it is not this record's."""
    message_id, tags = unknown_send
    created = ledger.get(KEY).created_at
    earlier = ses_event(kind, message_id=message_id, tags=tags)
    earlier["mail"]["timestamp"] = (created - timedelta(minutes=10)).isoformat(timespec="milliseconds")
    result = ingest_event(ledger, sns_envelope(earlier), signatures=None)
    assert result.outcome is IngestOutcome.RECORDED  # kept, deduplicated from now on, and weighed for nothing
    assert ledger.get(KEY).status is EffectStatus.UNKNOWN
    current = _with_envelope_id(sns_envelope(ses_event(kind, message_id=message_id, tags=tags)), "n-2")
    ingest_event(ledger, current, signatures=None)
    settled = EffectStatus.REJECTED if kind == "Reject" else EffectStatus.CONFIRMED
    assert ledger.get(KEY).status is settled
    assert len(moto_sent_messages(moto)) == 1


def test_a_message_whose_ingestion_raises_stays_on_the_queue(
    ledger: Ledger, queue: tuple[Any, str], unknown_send: tuple[str, dict[str, str]]
) -> None:
    message_id, tags = unknown_send
    sqs, queue_url = queue
    sqs.send_message(QueueUrl=queue_url, MessageBody=sns_envelope(ses_event("Send", message_id=message_id, tags=tags)))
    misconfigured = Ledger(ledger.store, tenants=["someone-else"])  # record_evidence raises UnknownTenant
    poller = ses_safe.SQSEventPoller(misconfigured, sqs, queue_url, visibility_timeout=0)
    assert poller.poll_once() == []
    assert poller.counts == {"error": 1}
    assert len(sqs.receive_message(QueueUrl=queue_url)["Messages"]) == 1
    assert ledger.get(KEY).status is EffectStatus.UNKNOWN


@contextmanager
def ledger_not_answering(store_url: str) -> Iterator[Ledger]:
    """A ledger on the test's store whose evidence writes give up at once: another connection holds what they
    need (SQLite's write lock; PostgreSQL's evidence table)."""
    if store_url.startswith("sqlite:///"):
        path = store_url.removeprefix("sqlite:///")
        holder: Any = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        down = Ledger(SQLiteStore(path, busy_timeout=0.05))
    else:
        conninfo, _, schema = store_url.rpartition("?schema=")
        holder = psycopg.connect(conninfo)
        holder.execute(f'LOCK TABLE "{schema}".effect_evidence IN EXCLUSIVE MODE')
        down = Ledger(PostgresStore(f"{conninfo}?options=-c%20lock_timeout%3D50", schema=schema))
    try:
        yield down
    finally:
        down.close()
        holder.rollback()
        holder.close()


def test_a_ledger_that_does_not_answer_stops_the_batch_with_one_warning_and_keeps_the_events(
    store_url: str,
    ledger: Ledger,
    queue: tuple[Any, str],
    unknown_send: tuple[str, dict[str, str]],
    moto: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each message would wait out the ledger's timeout in turn and log its traceback: the first says it all."""
    message_id, tags = unknown_send
    sqs, queue_url = queue
    for kind in ("Send", "Delivery"):
        event = ses_event(kind, message_id=message_id, tags=tags)
        sqs.send_message(QueueUrl=queue_url, MessageBody=sns_envelope(event))
    with ledger_not_answering(store_url) as down:
        poller = ses_safe.SQSEventPoller(down, sqs, queue_url, visibility_timeout=0)
        with pytest.raises(LedgerUnavailable):  # raised, so a loop backs off (receives count toward the DLQ)
            poller.poll_once()
        stop = threading.Event()
        loop = threading.Thread(target=poller.run, args=(stop,), kwargs={"min_wait": 5.0})
        with caplog.at_level(logging.INFO, logger="ses_safe"):
            loop.start()  # polls at once, fails, then waits 5 s: stopped meanwhile, it polls no more
            time.sleep(0.5)
            stop.set()
            loop.join(timeout=5)
    assert not loop.is_alive()
    assert poller.counts == {"error": 2}
    logged = [r for r in caplog.records if r.name == "ses_safe"]
    # one warning per failed poll, no traceback per message; the loop's pause is information
    assert [(r.levelname, r.exc_info) for r in logged] == [("WARNING", None), ("WARNING", None), ("INFO", None)]
    assert logged[0].getMessage().startswith("SES events not ingested, left on the queue from ")
    assert logged[1].getMessage().startswith("SES events not ingested, left on the queue from ")
    assert "polling again in 5.0 s" in logged[2].getMessage()
    assert ledger.get(KEY).status is EffectStatus.UNKNOWN

    ses_safe.SQSEventPoller(ledger, sqs, queue_url).drain()  # the ledger is back: both events are still there
    assert ledger.get(KEY).status is EffectStatus.CONFIRMED
    assert len(ledger.store.evidence_for("default", KEY)) == 2
    assert len(moto_sent_messages(moto)) == 1


def test_two_tenants_sharing_an_intent_key_are_settled_apart(
    env: Any, proxy: MotoFaultProxy, moto: str, v2_email: dict[str, Any]
) -> None:
    acme = env.wrapped("sesv2", tenant="acme")
    proxy.inject(Fault.drop_after_commit())
    with pytest.raises(EffectUnknown):
        env.sesv2.send_email(IntentKey=KEY, **v2_email)
    proxy.inject(Fault.drop_after_commit())
    with pytest.raises(EffectUnknown):
        acme.send_email(IntentKey=KEY, **v2_email)
    default_id, acme_id = (sent["id"] for sent in moto_sent_messages(moto))
    tag = intent_tag(IntentKey.parse(KEY))

    result = ingest_event(
        env.ledger,
        sns_envelope(ses_event("Delivery", message_id=acme_id, tags=intent_tags(tag, "acme"))),
        signatures=None,
    )

    assert result.outcome is IngestOutcome.RECORDED
    assert env.ledger.get(KEY, tenant="acme").status is EffectStatus.CONFIRMED
    assert env.ledger.get(KEY, tenant="acme").provider_result_id == acme_id
    assert env.ledger.get(KEY).status is EffectStatus.UNKNOWN  # the default tenant's send is still open
    assert default_id != acme_id
    assert len(moto_sent_messages(moto)) == 2


DEEP = "[" * 100_000 + "]" * 100_000  # 200 kB of nesting: under SNS/SQS's 256 KiB, past the JSON parser's depth


def _with_envelope_id(envelope: str, message_id: str) -> str:
    return json.dumps({**json.loads(envelope), "MessageId": message_id})


def _hostile_bodies(message_id: str, tags: dict[str, str]) -> dict[str, str]:
    """Payloads SNS never carries that used to escape ``ingest_event`` as untyped errors.

    The JSON escape "\\ud800" is valid JSON for a lone surrogate no store can encode; PostgreSQL refuses NUL.
    """
    send = ses_event("Send", message_id=message_id, tags=tags)

    def intent_tagged(value: str) -> str:
        return sns_envelope(ses_event("Send", message_id=message_id, tags={**tags, INTENT_TAG: value}))

    return {
        "deep message": json.dumps({"Type": "Notification", "MessageId": "n-deep", "Message": DEEP}),
        "deep body": DEEP,
        "surrogate intent tag": intent_tagged("o\ud800"),
        "surrogate envelope id": _with_envelope_id(sns_envelope(send), "n-\ud800"),
        "surrogate event type": sns_envelope({**send, "eventType": "Send\udfff"}),
        "surrogate message id": sns_envelope(ses_event("Send", message_id="m-\ud800", tags=tags)),
        "nul intent tag": intent_tagged("o\u0000"),
        "nul envelope id": _with_envelope_id(sns_envelope(send), "n-\u0000"),
        "empty message id": sns_envelope(ses_event("Delivery", message_id="", tags=tags)),
        "blank message id": sns_envelope(ses_event("Delivery", message_id="  ", tags=tags)),
        # names the ledger cannot keep: ingest_event raised InvalidInput, the poller kept them for the DLQ
        "blank event type": sns_envelope({**send, "eventType": "   "}),
        "long event type": sns_envelope({**send, "eventType": "S" * 300}),
        "blank envelope id": _with_envelope_id(sns_envelope(send), "  "),
        "long envelope id": _with_envelope_id(sns_envelope(send), "n" * 2000),
    }


HOSTILE = [
    "deep message",
    "deep body",
    "surrogate intent tag",
    "surrogate envelope id",
    "surrogate event type",
    "surrogate message id",
    "nul intent tag",
    "nul envelope id",
    "empty message id",
    "blank message id",
    "blank event type",
    "long event type",
    "blank envelope id",
    "long envelope id",
]


def _nothing_recorded(ledger: Ledger) -> None:
    assert ledger.store.evidence_for("default", KEY) == []
    assert ledger.get(KEY).status is EffectStatus.UNKNOWN


@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_hostile_payload_is_malformed_never_raised(
    hostile: str, ledger: Ledger, unknown_send: tuple[str, dict[str, str]]
) -> None:
    body = _hostile_bodies(*unknown_send)[hostile]
    result = ingest_event(ledger, body, signatures=None)
    assert (result.outcome, result.evidence) == (IngestOutcome.MALFORMED, None)
    _nothing_recorded(ledger)


def test_a_mapping_that_is_not_json_shaped_is_malformed_never_raised(
    ledger: Ledger, unknown_send: tuple[str, dict[str, str]]
) -> None:
    message_id, tags = unknown_send
    event: dict[Any, Any] = {**ses_event("Send", message_id=message_id, tags=tags), 1: "a key json.dumps cannot sort"}
    assert ingest_event(ledger, event, signatures=None).outcome is IngestOutcome.MALFORMED
    _nothing_recorded(ledger)


def test_the_poller_counts_and_deletes_hostile_messages(
    ledger: Ledger, queue: tuple[Any, str], unknown_send: tuple[str, dict[str, str]]
) -> None:
    sqs, queue_url = queue
    for body in _hostile_bodies(*unknown_send).values():
        sqs.send_message(QueueUrl=queue_url, MessageBody=body)
    poller = ses_safe.SQSEventPoller(ledger, sqs, queue_url, visibility_timeout=0)  # a kept message comes back
    poller.drain()
    assert poller.counts == {"malformed": len(HOSTILE)}
    assert "Messages" not in sqs.receive_message(QueueUrl=queue_url)  # deleted, not redelivered forever
    _nothing_recorded(ledger)


def test_a_failure_event_after_a_confirmed_send_is_kept_counted_and_logged(
    ledger: Ledger, proxy: MotoFaultProxy, moto: str, v2_email: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """SES took the call (200, a MessageId: confirmed), then says it sent nothing (a template that does not
    render). The record stays confirmed, sending again would fail the same way, but the contradiction is
    made seen: a warning, a counter an operator can alert on, and the evidence on the record."""
    registry = CollectorRegistry()
    watched = Ledger(ledger.store, observer=PrometheusObserver(registry))
    client = ses_safe.client(  # type: ignore[call-overload]
        "sesv2", ledger=watched, region_name="us-east-1", endpoint_url=proxy.url, configuration_set="cs",
        aws_access_key_id="testing", aws_secret_access_key="testing",
    )  # fmt: skip
    answer = client.send_email(IntentKey=KEY, **v2_email)
    tags = intent_tags(intent_tag(IntentKey.parse(KEY)), tenant_tag("default"))
    failure = ses_event("Rendering Failure", message_id=answer["MessageId"], tags=tags, configuration_set="cs")

    with caplog.at_level(logging.WARNING, logger="safe_effects"):
        assert ingest_event(watched, sns_envelope(failure), signatures=None).outcome is IngestOutcome.RECORDED

    assert watched.get(KEY).status is EffectStatus.CONFIRMED
    [evidence] = ledger.store.evidence_for("default", KEY)
    assert (evidence.kind, evidence.verdict) == ("Rendering Failure", EvidenceVerdict.REJECTS)
    labels = {"tenant": "default", "provider": "ses", "source": "ses_event", "kind": "Rendering Failure"}
    assert registry.get_sample_value("safe_effects_contradicting_evidence_total", labels) == 1
    assert f"intent '{KEY}' (tenant 'default') is confirmed, but ses_event evidence" in caplog.text
    assert len(moto_sent_messages(moto)) == 1
    delivered = ses_event("Delivery", message_id=answer["MessageId"], tags=tags, configuration_set="cs")
    assert ingest_event(watched, sns_envelope(delivered), signatures=None).outcome is IngestOutcome.RECORDED
    assert registry.get_sample_value("safe_effects_contradicting_evidence_total", labels) == 1  # only refusals


def test_an_event_from_another_configuration_set_than_the_sends_is_unmatched_and_records_nothing(
    ledger: Ledger, unknown_send: tuple[str, dict[str, str]]
) -> None:
    """Another account's or tenant's sender can write our tags on its own mail: only an event published by the
    configuration set the send went through may settle it (a forged Reject invites a second email)."""
    message_id, tags = unknown_send
    other_set = ses_event("Reject", message_id=message_id, tags=tags, configuration_set="acme-cs")
    result = ingest_event(ledger, sns_envelope(other_set), signatures=None)
    assert result.outcome is IngestOutcome.UNMATCHED
    assert result.reason == "published by configuration set 'acme-cs', the send used 'safe-effects'"
    _nothing_recorded(ledger)
    own = ses_event("Delivery", message_id=message_id, tags=tags)  # its own set's event still settles it
    assert ingest_event(ledger, sns_envelope(own), signatures=None).outcome is IngestOutcome.RECORDED
    assert ledger.get(KEY).status is EffectStatus.CONFIRMED


SES_TOPIC = "arn:aws:sns:us-east-1:123456789012:ses"
EVIL_TOPIC = "arn:aws:sns:us-east-1:000000000000:evil"


def test_an_envelope_from_an_unexpected_topic_is_refused_and_records_nothing(
    ledger: Ledger, unknown_send: tuple[str, dict[str, str]]
) -> None:
    """The SNS signature is not verified: a forged Reject would settle the unknown send as rejected and invite
    a resend (a duplicate email). With ``expected_topic_arns`` only the SES topic's envelopes are taken."""
    message_id, tags = unknown_send
    reject = ses_event("Reject", message_id=message_id, tags=tags)
    expected = {SES_TOPIC}
    for forged in (sns_envelope(reject, topic_arn=EVIL_TOPIC), json.dumps(reject)):  # another topic; no envelope
        with pytest.raises(ses_safe.UntrustedTopic) as refused:
            ingest_event(ledger, forged, expected_topic_arns=expected, signatures=None)
        assert refused.value.code == "untrusted_topic"
        _nothing_recorded(ledger)
    assert refused.value.topic_arn is None
    sqs_wrapped = {"MessageId": "q", "ReceiptHandle": "r", "Body": sns_envelope(reject, topic_arn=EVIL_TOPIC)}
    with pytest.raises(ses_safe.UntrustedTopic, match=EVIL_TOPIC):
        ingest_event(ledger, sqs_wrapped, expected_topic_arns=expected, signatures=None)
    _nothing_recorded(ledger)

    delivered = sns_envelope(ses_event("Delivery", message_id=message_id, tags=tags), topic_arn=SES_TOPIC)
    assert (
        ingest_event(ledger, delivered, expected_topic_arns=expected, signatures=None).outcome is IngestOutcome.RECORDED
    )
    assert ledger.get(KEY).status is EffectStatus.CONFIRMED


@pytest.mark.parametrize("topics", [SES_TOPIC, [], [""]])
def test_expected_topic_arns_that_can_only_be_a_mistake_are_invalid_input(
    ledger: Ledger, queue: tuple[Any, str], topics: Any
) -> None:
    with pytest.raises(InvalidInput, match="expected_topic_arns"):
        ingest_event(
            ledger, sns_envelope(ses_event("Send", message_id="m")), expected_topic_arns=topics, signatures=None
        )
    with pytest.raises(InvalidInput, match="expected_topic_arns"):
        ses_safe.SQSEventPoller(ledger, *queue, expected_topic_arns=topics)


def test_the_poller_leaves_messages_from_an_unexpected_topic_on_the_queue_unrecorded(
    ledger: Ledger, queue: tuple[Any, str], unknown_send: tuple[str, dict[str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    """Refused, not deleted: a typo in expected_topic_arns would otherwise delete every genuine event for good."""
    message_id, tags = unknown_send
    sqs, queue_url = queue
    forged = sns_envelope(ses_event("Reject", message_id=message_id, tags=tags), topic_arn=EVIL_TOPIC)
    sqs.send_message(QueueUrl=queue_url, MessageBody=forged)
    poller = ses_safe.SQSEventPoller(ledger, sqs, queue_url, visibility_timeout=0, expected_topic_arns=[SES_TOPIC])
    with caplog.at_level(logging.WARNING, logger="ses_safe"):
        assert poller.drain() == []
    assert poller.counts["untrusted_topic"] >= 1
    assert EVIL_TOPIC in caplog.text
    [kept] = sqs.receive_message(QueueUrl=queue_url)["Messages"]  # still there, for a dead-letter queue
    assert kept["Body"] == forged
    _nothing_recorded(ledger)

    genuine = sns_envelope(ses_event("Delivery", message_id=message_id, tags=tags), topic_arn=SES_TOPIC)
    sqs.send_message(QueueUrl=queue_url, MessageBody=genuine)
    poller.drain()
    assert poller.counts["recorded"] == 1
    assert ledger.get(KEY).status is EffectStatus.CONFIRMED


# -- SNS signatures ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def signer() -> SnsSigner:
    return SnsSigner()


def test_a_signed_event_settles_and_a_forged_or_unsigned_one_records_nothing(
    ledger: Ledger, unknown_send: tuple[str, dict[str, str]], signer: SnsSigner
) -> None:
    """With signatures verified, the topic is no longer anyone's to claim: a forged Reject would invite a resend."""
    message_id, tags = unknown_send
    signatures, asked_before = signer.signatures(), len(signer.fetched)
    reject = ses_event("Reject", message_id=message_id, tags=tags)
    tampered = json.loads(signer.sign(sns_envelope(ses_event("Send", message_id=message_id, tags=tags))))
    tampered["Message"] = json.dumps(reject)  # a genuine envelope, its event swapped
    forgeries = {
        "tampered": json.dumps(tampered),
        "unsigned": sns_envelope(reject, topic_arn=SES_TOPIC),
        "raw delivery": json.dumps(reject),
        "another key, SNS's certificate URL": SnsSigner().sign(sns_envelope(reject, topic_arn=SES_TOPIC)),
        "in an SQS message": {"MessageId": "q", "ReceiptHandle": "r", "Body": json.dumps(tampered)},
    }
    for name, forged in forgeries.items():
        with pytest.raises(ses_safe.SnsSignatureInvalid) as refused:
            ingest_event(ledger, forged, expected_topic_arns={SES_TOPIC}, signatures=signatures)
        assert refused.value.code == "sns_signature_invalid", name
        _nothing_recorded(ledger)

    delivered = signer.sign(sns_envelope(ses_event("Delivery", message_id=message_id, tags=tags), topic_arn=SES_TOPIC))
    result = ingest_event(ledger, delivered, expected_topic_arns={SES_TOPIC}, signatures=signatures)
    assert result.outcome is IngestOutcome.RECORDED
    assert ledger.get(KEY).status is EffectStatus.CONFIRMED
    assert signer.fetched[asked_before:] == [signer.cert_url]  # fetched once, then kept


@pytest.mark.parametrize("version", ["1", "2"])
def test_both_signature_versions_verify_and_the_subject_is_signed_too(version: str) -> None:
    signer = SnsSigner(version=version)
    signatures = signer.signatures()
    envelope = json.loads(sns_envelope(ses_event("Send", message_id="m-1")))
    for extra in ({}, {"Subject": "Amazon SES Email Event Notification"}, {"Subject": None}):
        signed = json.loads(signer.sign({**envelope, **extra}))
        signatures.verify(signed)
        with pytest.raises(ses_safe.SnsSignatureInvalid, match="does not match"):
            signatures.verify({**signed, "Subject": "changed"})
    with pytest.raises(ses_safe.SnsSignatureInvalid, match="SignatureVersion '3'"):
        signatures.verify({**signed, "SignatureVersion": "3"})


@pytest.mark.parametrize(
    "url",
    [
        "http://sns.us-east-1.amazonaws.com/cert.pem",
        "https://sns.us-east-1.amazonaws.com.evil.example/cert.pem",
        "https://evil.example/sns.us-east-1.amazonaws.com/cert.pem",
        "https://sns.us-east-1.amazonaws.com:8443/cert.pem",
        "https://user@sns.us-east-1.amazonaws.com/cert.pem",
        "https://sns.us-east-1.amazonaws.com/cert.txt",
        "https://s3.amazonaws.com/sns/cert.pem",
        "https://sns.us-east-1.amazonaws.com:bad/cert.pem",
    ],
)
def test_a_certificate_url_outside_sns_is_refused_before_any_fetch(url: str, signer: SnsSigner) -> None:
    signed = json.loads(signer.sign(sns_envelope(ses_event("Send", message_id="m-1"))))
    asked_before = len(signer.fetched)
    with pytest.raises(ses_safe.SnsSignatureInvalid, match="not an SNS certificate URL"):
        signer.signatures().verify({**signed, "SigningCertURL": url})
    assert signer.fetched[asked_before:] == []


def test_sns_certificate_urls_of_every_partition_are_taken() -> None:
    from ses_safe._sns_signature import is_sns_certificate_url

    assert is_sns_certificate_url("https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-abc.pem")
    assert is_sns_certificate_url("https://sns.cn-north-1.amazonaws.com.cn/SimpleNotificationService-abc.pem")


def test_a_message_naming_a_certificate_that_cannot_be_fetched_does_not_hold_back_the_genuine_ones_behind_it(
    ledger: Ledger, queue: tuple[Any, str], unknown_send: tuple[str, dict[str, str]], signer: SnsSigner
) -> None:
    """One message with a certificate URL on an SNS host that does not exist stopped the batch at it on every
    poll, so the genuine Delivery behind it waited until the dead-letter queue took both: the send stayed
    unknown. Now the batch goes on; the failure is raised at its end, for ``run`` to back off."""
    message_id, tags = unknown_send
    sqs, queue_url = queue
    poison = json.loads(signer.sign(sns_envelope(ses_event("Reject", message_id=message_id, tags=tags))))
    poison["SigningCertURL"] = "https://sns.us-east-1.amazonaws.com/no-such-certificate.pem"

    def fetch(url: str) -> bytes:
        if url != signer.cert_url:
            raise OSError("404 Not Found")
        return signer.fetch(url)

    poller = ses_safe.SQSEventPoller(
        ledger, sqs, queue_url, visibility_timeout=30, signatures=ses_safe.SnsSignatures(fetch=fetch)
    )
    sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps(poison))
    genuine = signer.sign(sns_envelope(ses_event("Delivery", message_id=message_id, tags=tags)))
    sqs.send_message(QueueUrl=queue_url, MessageBody=genuine)
    with pytest.raises(ses_safe.SnsCertificateUnavailable):
        poller.poll_once()
    assert (poller.counts["error"], poller.counts["recorded"]) == (1, 1)
    assert ledger.get(KEY).status is EffectStatus.CONFIRMED
    assert [e.kind for e in ledger.store.evidence_for("default", KEY)] == ["Delivery"]
    counts = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
    left = int(counts["ApproximateNumberOfMessages"]) + int(counts["ApproximateNumberOfMessagesNotVisible"])
    assert left == 1  # the poison, kept for the dead-letter queue; the Delivery was deleted once recorded


def test_the_poller_keeps_forged_messages_and_waits_for_an_unreachable_certificate(
    ledger: Ledger,
    queue: tuple[Any, str],
    unknown_send: tuple[str, dict[str, str]],
    signer: SnsSigner,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A forgery is kept for the dead-letter queue; a genuine event whose certificate cannot be fetched now is
    left for the next receive, never deleted unrecorded (SES has no lookup to recover it)."""
    message_id, tags = unknown_send
    sqs, queue_url = queue
    reachable = [False]

    def fetch(url: str) -> bytes:
        if not reachable[0]:
            raise OSError("network is unreachable")
        return signer.fetch(url)

    signatures = ses_safe.SnsSignatures(fetch=fetch)
    poller = ses_safe.SQSEventPoller(ledger, sqs, queue_url, visibility_timeout=0, signatures=signatures)
    forged = sns_envelope(ses_event("Reject", message_id=message_id, tags=tags))
    sqs.send_message(QueueUrl=queue_url, MessageBody=forged)
    with caplog.at_level(logging.WARNING, logger="ses_safe"):
        assert poller.poll_once() == []
    assert dict(poller.counts) == {"sns_signature_invalid": 1}
    assert "has no Signature: refused" in caplog.text
    [kept] = sqs.receive_message(QueueUrl=queue_url)["Messages"]
    assert kept["Body"] == forged
    sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=kept["ReceiptHandle"])

    genuine = signer.sign(sns_envelope(ses_event("Delivery", message_id=message_id, tags=tags)))
    sqs.send_message(QueueUrl=queue_url, MessageBody=genuine)
    with pytest.raises(ses_safe.SnsCertificateUnavailable):
        poller.poll_once()
    assert poller.counts["error"] == 1
    _nothing_recorded(ledger)
    reachable[0] = True
    poller.drain()
    assert poller.counts["recorded"] == 1
    assert ledger.get(KEY).status is EffectStatus.CONFIRMED
    assert "Messages" not in sqs.receive_message(QueueUrl=queue_url)
