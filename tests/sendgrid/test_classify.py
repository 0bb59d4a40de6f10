"""Each classification from a real failure of the real SDK against the fake, checked on both sides."""

from __future__ import annotations

import socket
import ssl
import time
import urllib.error
from collections.abc import Callable
from typing import Any

import pytest
import sendgrid

from safe_effects import (
    EffectDeferred,
    EffectRecord,
    EffectRejected,
    EffectStatus,
    EffectUnknown,
    Ledger,
    Outcome,
)
from safe_effects.testing import Fault
from sendgrid_safe import INTENT_ARG, SendGridAPIClient, classify
from sendgrid_safe._rules import retry_after
from sendgrid_safe.testing import FakeSendGrid

S = EffectStatus
Record = Callable[[str], EffectRecord]
MakeSG = Callable[..., SendGridAPIClient]
PAST_TIMEOUT = 2.5  # the conftest client timeout is 1.0 s


def _failure(raw: Any, message: Any) -> BaseException:
    with pytest.raises(Exception) as caught:  # noqa: PT011 - any exception: the classifier decides
        raw.send(message)
    return caught.value


@pytest.mark.parametrize("status", [400, 404, 405, 409, 413, 415, 422])
def test_client_errors_are_final_and_nothing_is_sent(
    status: int, *, sg: SendGridAPIClient, fake: FakeSendGrid, ledger: Ledger, key: str, mail: Any
) -> None:
    fake.inject(Fault.status_code(status))
    with pytest.raises(EffectRejected) as rejected:
        sg.send(mail(), intent_key=key)
    assert classify(rejected.value.provider_error).outcome is Outcome.FINAL  # type: ignore[arg-type]
    assert (len(fake.sends()), fake.effect_count()) == (1, 0)
    assert ledger.get(key).status is S.REJECTED
    assert ledger.get(key).last_error_code == f"http_{status}"


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_api_key_or_sender_defers_the_send_and_nothing_is_sent(
    status: int, *, sg: SendGridAPIClient, fake: FakeSendGrid, ledger: Ledger, key: str, mail: Any
) -> None:
    """401 (the key) and 403 (a scope, an unverified sender identity): SendGrid considered no message, and
    the same send should go once the account is fixed, so the intent waits (prepared) instead of ending
    rejected."""
    fake.inject(Fault.status_code(status))
    with pytest.raises(EffectDeferred) as deferred:
        sg.send(mail(), intent_key=key)
    assert classify(deferred.value.provider_error).outcome is Outcome.RETRYABLE  # type: ignore[arg-type]
    assert deferred.value.retry_after == 60.0
    assert (len(fake.sends()), fake.effect_count()) == (1, 0)
    assert ledger.get(key).status is S.PREPARED
    assert ledger.get(key).last_error_code == f"http_{status}"


def test_a_wrong_api_key_is_a_real_401_and_the_fixed_key_sends_once(
    fake: FakeSendGrid, make_sg: MakeSG, record: Record, key: str, mail: Any
) -> None:
    with pytest.raises(EffectDeferred):
        make_sg("SG.wrong").send(mail(), intent_key=key)
    assert fake.effect_count() == 0
    assert (record(key).status, record(key).last_error_class) == (S.PREPARED, "UnauthorizedError")
    make_sg().send(mail(), intent_key=key)  # the same intent, once the key is fixed
    assert fake.effect_count() == 1
    assert record(key).status is S.CONFIRMED


@pytest.mark.parametrize(
    ("fault", "committed"),
    [
        (Fault.status_code(500), 0),
        (Fault.status_code(502), 0),
        (Fault.status_code(503), 0),
        (Fault.status_code(504), 0),
        (Fault.status_after_commit(500), 1),
        (Fault.drop_before_commit(), 0),
        (Fault.drop_after_commit(), 1),
        (Fault.reset_after_commit(), 1),
        (Fault.delay(PAST_TIMEOUT), 1),
    ],
    ids=[
        "500",
        "502",
        "503",
        "504",
        "500-after-commit",
        "drop-before",
        "drop-after",
        "reset-after",
        "delay-past-timeout",
    ],
)
def test_server_errors_and_lost_answers_are_unknown(
    fault: Fault, committed: int, *, sg: SendGridAPIClient, fake: FakeSendGrid, ledger: Ledger, key: str, mail: Any
) -> None:
    fake.inject(fault)
    with pytest.raises(EffectUnknown):
        sg.send(mail(), intent_key=key)
    assert (len(fake.sends()), fake.effect_count()) == (1, committed)
    assert ledger.get(key).status is S.UNKNOWN


def test_a_202_with_a_cut_body_is_unknown(
    sg: SendGridAPIClient, fake: FakeSendGrid, record: Record, key: str, mail: Any
) -> None:
    fake.accept_body = b'{"note": "SendGrid sends no body; this one exists to be cut"}'
    fake.inject(Fault.cut_body())
    with pytest.raises(EffectUnknown) as unknown:
        sg.send(mail(), intent_key=key)
    assert type(unknown.value.__cause__).__name__ == "IncompleteRead"
    assert (len(fake.sends()), fake.effect_count()) == (1, 1)
    assert record(key).status is S.UNKNOWN


@pytest.mark.parametrize("status", [429, 408])
def test_429_is_retried_with_the_same_intent_and_sends_once(
    status: int, *, sg: SendGridAPIClient, fake: FakeSendGrid, record: Record, key: str, mail: Any
) -> None:
    fake.inject(Fault.status_code(status, headers={"Retry-After": "0"}, times=2))
    response = sg.send(mail(), intent_key=key)
    assert response.status_code == 202
    assert (len(fake.sends()), fake.effect_count()) == (3, 1)
    assert {send.json()["custom_args"][INTENT_ARG] for send in fake.sends()} == {key}  # every attempt, one intent
    assert record(key).status is S.CONFIRMED
    assert record(key).provider_result_id == fake.messages[0].message_id


def test_429_that_outlasts_the_budget_defers_with_nothing_sent(
    sg: SendGridAPIClient, fake: FakeSendGrid, ledger: Ledger, key: str, mail: Any
) -> None:
    fake.inject(Fault.status_code(429, headers={"Retry-After": "0"}, times=50))
    with pytest.raises(EffectDeferred):
        sg.send(mail(), intent_key=key)
    assert (len(fake.sends()), fake.effect_count()) == (ledger.retry.max_attempts, 0)
    assert ledger.get(key).status is S.PREPARED


@pytest.mark.parametrize("header", ["Retry-After", "X-RateLimit-Reset"])
def test_a_wait_past_max_wait_defers_at_once_and_hands_the_job_sendgrids_wait(
    header: str, *, sg: SendGridAPIClient, fake: FakeSendGrid, ledger: Ledger, key: str, mail: Any
) -> None:
    """SendGrid's wait is waited out as given, never shortened: past the policy's max_wait (0 s here) no retry is
    made inside the boundary, and the job is told to come back when SendGrid said, not at once and not in 50
    years. Its rate limits answer a 429 with X-RateLimit-Reset, the epoch second the limit resets."""
    value = "120" if header == "Retry-After" else str(int(time.time()) + 120)
    fake.inject(Fault.status_code(429, headers={header: value}, times=5))
    with pytest.raises(EffectDeferred) as deferred:
        sg.send(mail(), intent_key=key)
    assert deferred.value.retry_after is not None
    assert 115 <= deferred.value.retry_after <= 120
    assert (len(fake.sends()), fake.effect_count()) == (1, 0)
    record = ledger.get(key)
    assert (record.status, record.last_error_code) == (S.PREPARED, "http_429")


def test_a_refused_port_is_retried_then_deferred(
    fake: FakeSendGrid, make_sg: MakeSG, record: Record, key: str, mail: Any
) -> None:
    with socket.socket() as probe:  # a port nobody listens on once the probe closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sg = make_sg(host=f"http://127.0.0.1:{port}")
    with pytest.raises(EffectDeferred) as deferred:
        sg.send(mail(), intent_key=key)
    error = deferred.value.provider_error
    assert isinstance(error, urllib.error.URLError)
    assert isinstance(error.reason, ConnectionRefusedError)
    assert fake.effect_count() == 0
    assert record(key).status is S.PREPARED


def test_raw_sdk_failures_classify_as_documented(fake: FakeSendGrid, raw: Any, mail: Any) -> None:
    """The same table without the ledger: the exception types the SDK really raises."""
    cases = [
        (Fault.status_code(400), "BadRequestsError", Outcome.FINAL),
        (Fault.status_code(429), "TooManyRequestsError", Outcome.RETRYABLE),
        (Fault.status_code(502), "HTTPError", Outcome.UNKNOWN),
        (Fault.drop_after_commit(), "RemoteDisconnected", Outcome.UNKNOWN),
        (Fault.reset_after_commit(), "ConnectionResetError", Outcome.UNKNOWN),
        (Fault.delay(PAST_TIMEOUT), "TimeoutError", Outcome.UNKNOWN),
    ]
    for fault, error_class, outcome in cases:
        fake.inject(fault)
        verdict = classify(_failure(raw, mail()))
        assert (verdict.error_class, verdict.outcome) == (error_class, outcome)


def test_url_errors_without_a_socket_reason_are_final() -> None:
    assert classify(urllib.error.URLError("unknown url type: htp")).outcome is Outcome.FINAL
    tls = urllib.error.URLError(ssl.SSLCertVerificationError(1, "certificate verify failed"))
    assert classify(tls).outcome is Outcome.FINAL


def test_anything_unrecognised_is_unknown() -> None:
    assert classify(RuntimeError("surprise")).outcome is Outcome.UNKNOWN


def test_retry_after_reads_seconds_dates_and_rate_limit_reset() -> None:
    assert retry_after({"Retry-After": "3"}) == 3.0
    assert retry_after({"Retry-After": "-3"}) == 0.0  # a negative wait would make the retry's sleep raise
    assert retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert (retry_after({"X-RateLimit-Reset": str(2**31)}) or 0) > 0
    assert retry_after({"Retry-After": "soon"}) is None
    assert retry_after({}) is None


def test_the_raw_sdk_has_no_timeout_by_default() -> None:
    """Why the wrapper sets one: the SDK would wait forever on a hung connection."""
    assert sendgrid.SendGridAPIClient("SG.any").client.timeout is None
