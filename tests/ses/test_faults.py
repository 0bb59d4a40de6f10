"""Transport faults between boto3 and moto: every test checks moto's sent messages and the ledger."""

from __future__ import annotations

import json
import threading
import time
from typing import Any
from urllib.parse import parse_qs

import pytest
from botocore.config import Config

import ses_safe
from safe_effects import EffectDeferred, EffectRejected, EffectStatus, EffectUnknown
from safe_effects.testing import Fault
from ses_safe.testing import MotoFaultProxy, is_send, ses_event, sns_envelope

KEY = "invoice:inv_42:email:v1"

LOST_RESPONSES = {
    "dropped after commit": Fault.drop_after_commit(),
    "answer delayed past the read timeout": Fault.delay(2.5),
    "body cut mid-way": Fault.cut_body(),
}


def wire_tags(proxy: MotoFaultProxy) -> dict[str, str]:
    """The EmailTags the wrapper really put on the wire (moto does not store tags)."""
    body = json.loads(proxy.sends()[0].body)
    return {tag["Name"]: tag["Value"] for tag in body["EmailTags"]}


def publish(queue: tuple[Any, str], event_type: str, message_id: str, tags: dict[str, str]) -> None:
    """What SES -> SNS -> SQS would deliver for this send."""
    sqs, queue_url = queue
    event = ses_event(event_type, message_id=message_id, tags=tags)
    sqs.send_message(QueueUrl=queue_url, MessageBody=sns_envelope(event))


def lose_response(env: Any, v2_email: dict[str, Any], fault: Fault | None = None) -> str:
    """Send once with the response lost; returns the MessageId moto assigned."""
    env.proxy.inject(fault or Fault.drop_after_commit())
    with pytest.raises(EffectUnknown):
        env.sesv2.send_email(IntentKey=KEY, **v2_email)
    [sent] = env.sent()
    return str(sent["id"])


@pytest.mark.parametrize("fault", LOST_RESPONSES.values(), ids=LOST_RESPONSES.keys())
def test_lost_response_is_unknown_not_resent_then_confirmed_by_the_send_event(
    env: Any, queue: tuple[Any, str], v2_email: dict[str, Any], fault: Fault, monkeypatch: pytest.MonkeyPatch
) -> None:
    message_id = lose_response(env, v2_email, fault)
    with pytest.raises(EffectUnknown):  # the retry reconciles instead of sending again
        env.sesv2.send_email(IntentKey=KEY, **v2_email)
    assert len(env.proxy.sends()) == 1
    assert env.ledger.get(KEY).status is EffectStatus.UNKNOWN

    publish(queue, "Send", message_id, wire_tags(env.proxy))
    poller = ses_safe.SQSEventPoller(env.ledger, *queue)
    poller.poll_once()
    assert poller.counts == {"recorded": 1}
    assert env.ledger.get(KEY).status is EffectStatus.UNKNOWN  # accepted: a Reject may still follow
    window = env.sesv2.adapter.contract_for(env.ledger.get(KEY).operation).rejection_window
    now = env.ledger.clock()
    monkeypatch.setattr(env.ledger, "clock", lambda: now + window)  # the reconciler's run once it has passed
    env.ledger.reconcile(env.sesv2.adapter, intent_key=KEY)

    record = env.ledger.get(KEY)
    assert record.status is EffectStatus.CONFIRMED
    assert record.provider_result_id == message_id
    assert record.resolution is not None
    assert record.resolution.method == "evidence:ses_event"
    answer = env.sesv2.send_email(IntentKey=KEY, **v2_email)
    assert answer["MessageId"] == message_id
    assert answer["SafeEffects"]["FromLedger"] is True
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert len(env.sent()) == 1
    assert len(env.proxy.sends()) == 1
    assert "Messages" not in queue[0].receive_message(QueueUrl=queue[1])


def test_without_an_event_the_intent_stays_unknown(env: Any, queue: tuple[Any, str], v2_email: dict[str, Any]) -> None:
    lose_response(env, v2_email)
    assert ses_safe.SQSEventPoller(env.ledger, *queue).poll_once() == []

    record = env.ledger.reconcile(env.sesv2.adapter, intent_key=KEY)
    assert record.status is EffectStatus.UNKNOWN
    assert record.provider_result_id is None
    assert len(env.sent()) == 1
    assert len(env.proxy.sends()) == 1


def test_reject_event_settles_an_unknown_send_as_rejected(
    env: Any, queue: tuple[Any, str], v2_email: dict[str, Any]
) -> None:
    message_id = lose_response(env, v2_email)
    publish(queue, "Reject", message_id, wire_tags(env.proxy))
    ses_safe.SQSEventPoller(env.ledger, *queue).poll_once()

    assert env.ledger.get(KEY).status is EffectStatus.REJECTED
    with pytest.raises(EffectRejected):
        env.sesv2.send_email(IntentKey=KEY, **v2_email)
    assert len(env.proxy.sends()) == 1
    assert len(env.sent()) == 1  # SES accepted the call, then rejected the message: nothing was delivered


@pytest.mark.parametrize("order", [("Send", "Reject"), ("Reject", "Send")], ids=["send-first", "reject-first"])
def test_send_then_reject_rejects_in_either_order(
    env: Any, queue: tuple[Any, str], v2_email: dict[str, Any], order: tuple[str, str]
) -> None:
    """SES publishes Send, then Reject (a virus found after acceptance); a standard queue may swap them."""
    message_id = lose_response(env, v2_email)
    for kind in order:
        publish(queue, kind, message_id, wire_tags(env.proxy))
        ses_safe.SQSEventPoller(env.ledger, *queue).poll_once()

    assert env.ledger.get(KEY).status is EffectStatus.REJECTED
    assert len(env.proxy.sends()) == 1


def test_the_pollers_loop_outlasts_sqs_failing_and_then_settles_the_send(
    env: Any, queue: tuple[Any, str], v2_email: dict[str, Any], raw_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    message_id = lose_response(env, v2_email)
    publish(queue, "Delivery", message_id, wire_tags(env.proxy))
    # the poller's SQS goes through the proxy, which fails its first three calls as an outage would
    sqs = raw_client("sqs", env.proxy.url, config=Config(retries={"total_max_attempts": 1}))
    env.proxy.inject(Fault.status_code(500, body={"__type": "InternalError"}, times=2))
    env.proxy.inject(Fault.drop_before_commit())
    poller = ses_safe.SQSEventPoller(env.ledger, sqs, queue[1])
    stop = threading.Event()
    loop = threading.Thread(target=poller.run, args=(stop,), kwargs={"min_wait": 0.05, "max_wait": 0.2})

    loop.start()
    deadline = time.monotonic() + 10
    while env.ledger.get(KEY).status is not EffectStatus.CONFIRMED and time.monotonic() < deadline:
        time.sleep(0.02)
    stop.set()
    loop.join(timeout=5)

    assert not loop.is_alive()
    assert env.ledger.get(KEY).status is EffectStatus.CONFIRMED
    assert env.ledger.get(KEY).provider_result_id == message_id
    assert poller.counts["recorded"] == 1
    failures = [r.getMessage() for r in caplog.records if r.name == "ses_safe"]
    assert len(failures) == 3
    assert "InternalError" in failures[0]
    assert "ConnectionClosedError" in failures[2]
    assert len(env.sent()) == 1
    assert len(env.proxy.sends()) == 1
    assert "Messages" not in queue[0].receive_message(QueueUrl=queue[1])  # ingested, then deleted


def test_v1_body_cut_mid_way_is_unknown_until_the_delivery_event(
    env: Any, queue: tuple[Any, str], v1_email: dict[str, Any]
) -> None:
    env.proxy.inject(Fault.cut_body())
    with pytest.raises(EffectUnknown):  # botocore: ResponseParserError on the half XML body
        env.ses.send_email(IntentKey=KEY, **v1_email)
    [sent] = env.sent()
    form = parse_qs(env.proxy.sends()[0].body.decode())
    tags = {form[f"Tags.member.{i}.Name"][0]: form[f"Tags.member.{i}.Value"][0] for i in (1, 2)}
    publish(queue, "Delivery", sent["id"], tags)
    ses_safe.SQSEventPoller(env.ledger, *queue).poll_once()

    assert env.ledger.get(KEY).provider_result_id == sent["id"]
    assert env.ses.send_email(IntentKey=KEY, **v1_email)["MessageId"] == sent["id"]
    assert len(env.proxy.sends()) == 1


@pytest.mark.parametrize(
    ("service", "code", "status"),
    [
        ("sesv2", "TooManyRequestsException", 429),
        ("sesv2", "ThrottlingException", 400),  # the daily quota, or the rate: a 400 that is not a refusal
        ("ses", "Throttling", 400),
    ],
)
def test_throttled_send_is_retried_in_the_boundary_and_sent_once(
    env: Any, emails: dict[str, dict[str, Any]], service: str, code: str, status: int
) -> None:
    env.proxy.refuse_sends(code, status=status, message="Maximum sending rate exceeded.", times=2)
    answer = env.wrapped(service).send_email(IntentKey=KEY, **emails[service])

    [sent] = env.sent()
    assert answer["MessageId"] == sent["id"]
    assert [e.status for e in env.proxy.exchanges if is_send(e.request)] == [status, status, 200]
    record = env.ledger.get(KEY)
    assert record.status is EffectStatus.CONFIRMED
    assert record.provider_result_id == sent["id"]


def test_throttling_that_outlasts_the_retry_budget_defers_without_sending(env: Any, v2_email: dict[str, Any]) -> None:
    env.proxy.refuse_sends("TooManyRequestsException", status=429, times=10)
    with pytest.raises(EffectDeferred):
        env.sesv2.send_email(IntentKey=KEY, **v2_email)
    assert env.sent() == []
    assert env.ledger.get(KEY).status is EffectStatus.PREPARED
    assert len(env.proxy.sends()) == env.ledger.retry.max_attempts


@pytest.mark.parametrize(
    ("service", "code"),
    [("ses", "IncompleteSignature"), ("ses", "RequestExpired"), ("sesv2", "AccessDeniedException")],
)
def test_a_credentials_refusal_answered_with_a_400_defers_the_send_and_it_goes_once_fixed(
    env: Any, emails: dict[str, dict[str, Any]], service: str, code: str
) -> None:
    """SES's API reference (Common Errors) answers these with a 400, the status of a refusal of the request: by
    its status alone the intent would end rejected, and the receipt never go under its key once the key is fixed."""
    env.proxy.refuse_sends(code, status=400)
    with pytest.raises(EffectDeferred) as deferred:
        env.wrapped(service).send_email(IntentKey=KEY, **emails[service])
    assert deferred.value.retry_after == 60.0
    assert env.sent() == []
    assert len(env.proxy.sends()) == 1  # deferred at once: not retried inside the boundary
    record = env.ledger.get(KEY)
    assert (record.status, record.last_error_code) == (EffectStatus.PREPARED, code)

    answer = env.wrapped(service).send_email(IntentKey=KEY, **emails[service])
    [sent] = env.sent()
    assert answer["MessageId"] == sent["id"]
    assert len(env.proxy.sends()) == 2
    record = env.ledger.get(KEY)
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, sent["id"])


@pytest.mark.parametrize(("service", "sender_field"), [("ses", "Source"), ("sesv2", "FromEmailAddress")])
def test_unverified_sender_is_rejected_and_nothing_is_sent(
    env: Any, emails: dict[str, dict[str, Any]], service: str, sender_field: str
) -> None:
    email = {**emails[service], sender_field: "stranger@example.com"}
    with pytest.raises(EffectRejected) as raised:
        env.wrapped(service).send_email(IntentKey=KEY, **email)
    assert raised.value.provider_error is not None
    assert env.sent() == []
    assert len(env.proxy.sends()) == 1
    record = env.ledger.get(KEY)
    assert record.status is EffectStatus.REJECTED
    assert record.last_error_code == "MessageRejected"


def test_refused_connection_is_retried_then_deferred_with_nothing_sent(
    env: Any, v2_email: dict[str, Any], unused_port: int
) -> None:
    client = env.wrapped("sesv2", endpoint_url=f"http://127.0.0.1:{unused_port}")
    with pytest.raises(EffectDeferred):
        client.send_email(IntentKey=KEY, **v2_email)
    assert env.sent() == []
    record = env.ledger.get(KEY)
    assert record.status is EffectStatus.PREPARED
    assert record.last_error_class == "EndpointConnectionError"


@pytest.mark.parametrize(("code", "status"), [("InternalFailure", 500), ("ServiceUnavailable", 503)])
def test_server_errors_leave_the_send_unknown(env: Any, v2_email: dict[str, Any], code: str, status: int) -> None:
    env.proxy.refuse_sends(code, status=status)
    with pytest.raises(EffectUnknown):
        env.sesv2.send_email(IntentKey=KEY, **v2_email)
    assert env.sent() == []  # the proxy answered for SES; a real 5xx may or may not have sent
    assert len(env.proxy.sends()) == 1
    record = env.ledger.get(KEY)
    assert record.status is EffectStatus.UNKNOWN
    assert record.last_error_code == code
