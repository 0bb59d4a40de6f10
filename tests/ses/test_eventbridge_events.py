"""SES events routed through EventBridge (the configuration set's EventBridge destination, a rule on
``source: aws.ses``, an SQS target) settle an unknown send as the SNS route does.

Until 2026-12-01 only SNS envelopes and bare events were read: an EventBridge event has no top-level
``eventType``, so every one was counted malformed and deleted, and a lost send stayed unknown for good.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import ses_safe
from safe_effects import EffectStatus, EvidenceVerdict, Ledger
from ses_safe import IngestOutcome, SnsSignatureInvalid, UntrustedTopic, ingest_event
from ses_safe.testing import (
    SnsSigner,
    eventbridge_event,
    moto_sent_messages,
    ses_event,
)

from .conftest import LoseASend

KEY = "order:o_7:receipt:v1"


@pytest.fixture
def unknown_send(lose_a_send: LoseASend) -> tuple[str, dict[str, str]]:
    """An SES send of ``KEY`` whose response was lost: (moto's MessageId, the tags that went out)."""
    return lose_a_send(KEY)


def _unchanged(ledger: Ledger) -> None:
    assert ledger.get(KEY).status is EffectStatus.UNKNOWN
    assert ledger.store.evidence_for("default", KEY) == []


@pytest.mark.parametrize("with_event_type", [True, False], ids=["eventType in detail", "detail-type only"])
def test_a_delivery_through_eventbridge_and_sqs_confirms_the_lost_send_and_the_retry_sends_nothing(
    ledger: Ledger,
    sesv2: Any,
    moto: str,
    queue: tuple[Any, str],
    v2_email: dict[str, Any],
    unknown_send: tuple[str, dict[str, str]],
    with_event_type: bool,
) -> None:
    message_id, tags = unknown_send
    sqs, queue_url = queue
    delivered = ses_event("Delivery", message_id=message_id, tags=tags)
    sqs.send_message(QueueUrl=queue_url, MessageBody=eventbridge_event(delivered, with_event_type=with_event_type))

    poller = ses_safe.SQSEventPoller(ledger, sqs, queue_url)
    poller.drain()

    assert poller.counts == {"recorded": 1}
    assert "Messages" not in sqs.receive_message(QueueUrl=queue_url)
    record = ledger.get(KEY)
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, message_id)
    [evidence] = ledger.store.evidence_for("default", KEY)
    assert (evidence.kind, evidence.verdict) == ("Delivery", EvidenceVerdict.CONFIRMS)
    answer = sesv2.send_email(IntentKey=KEY, **v2_email)  # the job's retry: answered by the ledger
    assert answer["MessageId"] == message_id
    assert answer["SafeEffects"]["FromLedger"] is True
    assert len(moto_sent_messages(moto)) == 1


@pytest.mark.parametrize("kind", ["Reject", "Rendering Failure"])
def test_a_rejection_through_eventbridge_rejects_the_lost_send(
    ledger: Ledger, moto: str, unknown_send: tuple[str, dict[str, str]], kind: str
) -> None:
    message_id, tags = unknown_send
    result = ingest_event(ledger, eventbridge_event(ses_event(kind, message_id=message_id, tags=tags)), signatures=None)
    assert (result.outcome, result.event_type) == (IngestOutcome.RECORDED, kind)
    assert ledger.get(KEY).status is EffectStatus.REJECTED
    assert len(moto_sent_messages(moto)) == 1


def test_an_acceptance_through_eventbridge_is_an_acceptance_not_a_confirmation(
    ledger: Ledger, unknown_send: tuple[str, dict[str, str]]
) -> None:
    message_id, tags = unknown_send
    body = eventbridge_event(ses_event("Send", message_id=message_id, tags=tags), with_event_type=False)
    result = ingest_event(ledger, body, signatures=None)
    assert result.evidence is not None
    assert result.evidence.verdict is EvidenceVerdict.ACCEPTS  # a Reject may still follow: not settled yet
    assert ledger.get(KEY).status is EffectStatus.UNKNOWN


def test_a_redelivered_eventbridge_event_is_a_duplicate_by_its_id(
    ledger: Ledger, unknown_send: tuple[str, dict[str, str]]
) -> None:
    message_id, tags = unknown_send
    body = eventbridge_event(ses_event("Send", message_id=message_id, tags=tags))
    assert ingest_event(ledger, body, signatures=None).outcome is IngestOutcome.RECORDED
    assert ingest_event(ledger, body, signatures=None).outcome is IngestOutcome.DUPLICATE
    [evidence] = ledger.store.evidence_for("default", KEY)
    assert evidence.event_id == json.loads(body)["id"]


def _reshaped(body: str, **fields: Any) -> str:
    outer = json.loads(body)
    outer.update(fields)
    return json.dumps(outer)


def test_odd_eventbridge_events_are_counted_skipped_and_settle_nothing(
    ledger: Ledger, queue: tuple[Any, str], unknown_send: tuple[str, dict[str, str]]
) -> None:
    message_id, tags = unknown_send
    sqs, queue_url = queue
    delivered = eventbridge_event(ses_event("Delivery", message_id=message_id, tags=tags))
    rejected = eventbridge_event(ses_event("Reject", message_id=message_id, tags=tags))
    account_event = _reshaped(delivered, **{"detail-type": "Sending Status Disabled", "detail": {"status": "x"}})
    bodies = {
        "detail-type and eventType disagree": _reshaped(rejected, **{"detail-type": "Email Delivered"}),
        "no detail": _reshaped(delivered, detail="Delivery"),
        "not written by SES": _reshaped(delivered, source="my.app"),  # only AWS may put "aws." sources
        "an event about the account": account_event,
        "another sender's": eventbridge_event(ses_event("Delivery", message_id="m-foreign")),
    }
    for body in bodies.values():
        sqs.send_message(QueueUrl=queue_url, MessageBody=body)
    poller = ses_safe.SQSEventPoller(ledger, sqs, queue_url)
    results = poller.drain()

    assert poller.counts == {"malformed": 3, "foreign": 2}
    assert any("not an event of a send" in (r.reason or "") for r in results)
    assert "Messages" not in sqs.receive_message(QueueUrl=queue_url)
    _unchanged(ledger)


def test_an_eventbridge_event_is_refused_where_signatures_or_topics_are_required(
    ledger: Ledger, unknown_send: tuple[str, dict[str, str]]
) -> None:
    """EventBridge signs nothing and names no topic: a caller who asked for either gets a refusal, not a pass."""
    message_id, tags = unknown_send
    body = eventbridge_event(ses_event("Reject", message_id=message_id, tags=tags))
    with pytest.raises(SnsSignatureInvalid):
        ingest_event(ledger, body, signatures=SnsSigner().signatures())
    with pytest.raises(UntrustedTopic):
        ingest_event(ledger, body, signatures=None, expected_topic_arns=["arn:aws:sns:us-east-1:123456789012:ses"])
    _unchanged(ledger)
