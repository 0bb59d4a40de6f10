"""Each verdict from a real SDK exception, produced by the real SDK talking HTTP to the fake (no ledger)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import stripe
from stripe.oauth_error import InvalidClientError, InvalidGrantError, OAuthError

from safe_effects import Outcome, Verdict
from safe_effects.testing import Fault
from stripe_safe import classify
from stripe_safe.testing import FakeStripe, rate_limit_fault, server_error_fault, stripe_error_fault

from .conftest import API_KEY, PI, raw_client


def verdict_of(call: object) -> tuple[Verdict, BaseException]:
    """Run ``call`` (which must raise) and classify what the SDK raised."""
    with pytest.raises(Exception) as caught:  # noqa: PT011 - the classifier decides, not the test
        call()  # type: ignore[operator]
    return classify(caught.value), caught.value


@pytest.fixture
def sdk(fake: FakeStripe) -> stripe.StripeClient:
    return raw_client(fake.url)


def test_declined_card_is_final_and_names_the_payment_intent(fake: FakeStripe, sdk: stripe.StripeClient) -> None:
    params = {**PI, "payment_method": "pm_card_chargeDeclined"}
    verdict, error = verdict_of(
        lambda: sdk.v1.payment_intents.create(params=params, options={"idempotency_key": "k:1:a:v1"})
    )
    assert isinstance(error, stripe.CardError)
    assert verdict.outcome is Outcome.FINAL
    assert verdict.error_code == "card_declined"
    assert verdict.provider_result_id == fake.payment_intents[0]["id"]


def test_invalid_request_is_final(sdk: stripe.StripeClient) -> None:
    verdict, error = verdict_of(lambda: sdk.v1.payment_intents.create(params={"currency": "eur"}))
    assert isinstance(error, stripe.InvalidRequestError)
    assert (verdict.outcome, verdict.error_code) == (Outcome.FINAL, "parameter_missing")


def test_a_refused_api_key_is_deferred_not_final(fake: FakeStripe) -> None:
    """Nothing was considered, and the same request should go once the key is fixed: retryable, with a hint
    long enough that the executor defers the call instead of retrying it at once."""
    bad_key, _ = verdict_of(raw_client(fake.url, api_key="pk_live_wrong").v1.customers.create)
    restricted, error = verdict_of(raw_client(fake.url, api_key="rk_test_1").v1.customers.create)
    assert (bad_key.error_class, bad_key.outcome, bad_key.retry_after) == ("AuthenticationError", Outcome.RETRYABLE, 60)
    assert isinstance(error, stripe.PermissionError)
    assert (restricted.outcome, restricted.retry_after) == (Outcome.RETRYABLE, 60)
    assert fake.customers == []


def test_same_key_other_params_is_an_idempotency_error(sdk: stripe.StripeClient) -> None:
    sdk.v1.customers.create(params={"name": "a"}, options={"idempotency_key": "k:2:a:v1"})
    verdict, error = verdict_of(
        lambda: sdk.v1.customers.create(params={"name": "b"}, options={"idempotency_key": "k:2:a:v1"})
    )
    assert isinstance(error, stripe.IdempotencyError)
    assert (verdict.outcome, verdict.error_code) == (Outcome.UNKNOWN, "idempotency_error")  # the first may have acted


V2_PATH = "/v2/money_management/outbound_payments"
V2_PAYMENT = {"from": {"financial_account": "fa_1", "currency": "usd"}, "amount": {"value": 100, "currency": "usd"}}


@pytest.mark.parametrize(
    ("status", "type_", "error_class", "outcome"),
    [
        (400, "insufficient_funds", stripe.InsufficientFundsError, Outcome.FINAL),
        (400, "already_canceled", stripe.AlreadyCanceledError, Outcome.FINAL),
        (400, "not_cancelable", stripe.NotCancelableError, Outcome.FINAL),
        (400, "quota_exceeded", stripe.QuotaExceededError, Outcome.FINAL),
        (403, "blocked_by_stripe", stripe.BlockedByStripeError, Outcome.FINAL),
        # by status, whatever the type (mutation review 2026-11-30: 402 and 404 were unpinned, and so was a
        # typed error answered with a 5xx, which may follow an effect and must never read as a refusal)
        (402, "insufficient_funds", stripe.InsufficientFundsError, Outcome.FINAL),
        (404, "quota_exceeded", stripe.QuotaExceededError, Outcome.FINAL),
        (500, "not_cancelable", stripe.NotCancelableError, Outcome.UNKNOWN),
        (503, "insufficient_funds", stripe.InsufficientFundsError, Outcome.UNKNOWN),
        (409, "not_cancelable", stripe.NotCancelableError, Outcome.UNKNOWN),  # a conflict: not a plain refusal
        (400, "idempotency_error", stripe.IdempotencyError, Outcome.UNKNOWN),  # the key's first request may have acted
        (409, "idempotency_error", stripe.IdempotencyError, Outcome.UNKNOWN),  # the key's first request still runs
        (500, "api_error", stripe.APIError, Outcome.UNKNOWN),
    ],
)
def test_v2_typed_errors_are_final_only_as_a_refusal(
    fake: FakeStripe,
    sdk: stripe.StripeClient,
    status: int,
    type_: str,
    error_class: type[stripe.StripeError],
    outcome: Outcome,
) -> None:
    fake.inject(stripe_error_fault(status, type_, "refused", code=type_, path_prefix=V2_PATH))
    verdict, error = verdict_of(lambda: sdk.v2.money_management.outbound_payments.create(params=V2_PAYMENT))  # type: ignore[arg-type]
    assert type(error) is error_class
    assert verdict.outcome is outcome


@pytest.mark.parametrize(
    ("status", "code", "error_class"),
    [(400, "invalid_grant", InvalidGrantError), (401, "invalid_client", InvalidClientError)],
)
def test_an_oauth_error_is_final(fake: FakeStripe, status: int, code: str, error_class: type[OAuthError]) -> None:
    sdk = stripe.StripeClient(
        API_KEY,
        base_addresses={"api": fake.url, "connect": fake.url},
        max_network_retries=0,
        http_client=stripe.RequestsClient(),
    )
    fake.inject(Fault.status_code(status, body={"error": code, "error_description": "refused"}, path_prefix="/oauth/"))
    verdict, error = verdict_of(lambda: sdk.oauth.token(params={"grant_type": "authorization_code", "code": "ac_x"}))
    assert type(error) is error_class
    assert (verdict.outcome, verdict.error_code, verdict.provider_result_id) == (Outcome.FINAL, code, None)


@pytest.mark.parametrize(("given", "kept"), [(2.5, 2.5), (-3, 0.0)])  # a negative wait would make the sleep raise
def test_rate_limit_is_retryable_with_retry_after(
    given: float, kept: float, *, fake: FakeStripe, sdk: stripe.StripeClient
) -> None:
    fake.inject(rate_limit_fault(retry_after=given))
    verdict, error = verdict_of(lambda: sdk.v1.customers.create(params={"name": "a"}))
    assert isinstance(error, stripe.RateLimitError)
    assert (verdict.outcome, verdict.retry_after) == (Outcome.RETRYABLE, kept)


def test_server_error_is_unknown(fake: FakeStripe, sdk: stripe.StripeClient) -> None:
    fake.inject(server_error_fault())
    verdict, error = verdict_of(lambda: sdk.v1.customers.create(params={"name": "a"}))
    assert type(error) is stripe.APIError
    assert verdict.outcome is Outcome.UNKNOWN


def test_concurrent_same_key_409_is_unknown_and_reads_the_code_from_the_body(
    fake: FakeStripe, sdk: stripe.StripeClient
) -> None:
    fake.processing_seconds = 0.5
    arrived = threading.Event()
    fake.server.on_received(lambda _: arrived.set())
    patient = raw_client(fake.url, timeout=(1.0, 5.0))  # outlasts processing_seconds: only the second one fails
    first = threading.Thread(
        target=lambda: patient.v1.customers.create(params={"name": "a"}, options={"idempotency_key": "k:3:a:v1"})
    )
    first.start()
    assert arrived.wait(5)
    time.sleep(0.1)  # let the first request reserve its key
    verdict, error = verdict_of(
        lambda: sdk.v1.customers.create(params={"name": "a"}, options={"idempotency_key": "k:3:a:v1"})
    )
    first.join()
    assert type(error) is stripe.APIError
    assert error.code is None  # the SDK leaves APIError.code empty; the classifier reads error.error.code
    assert (verdict.outcome, verdict.error_code) == (Outcome.UNKNOWN, "idempotency_key_in_use")
    assert len(fake.customers) == 1


def test_response_lost_after_commit_is_unknown(fake: FakeStripe, sdk: stripe.StripeClient) -> None:
    fake.inject(Fault.drop_after_commit())
    verdict, error = verdict_of(lambda: sdk.v1.customers.create(params={"name": "a"}))
    assert isinstance(error, stripe.APIConnectionError)
    assert (verdict.outcome, verdict.error_code) == (Outcome.UNKNOWN, "after_send")
    assert len(fake.customers) == 1


def test_read_timeout_is_unknown(fake: FakeStripe, sdk: stripe.StripeClient) -> None:
    fake.inject(Fault.delay(2.0))
    verdict, _ = verdict_of(lambda: sdk.v1.customers.create(params={"name": "a"}))
    assert (verdict.outcome, verdict.error_code) == (Outcome.UNKNOWN, "after_send")


def test_refused_connection_is_retryable(closed_port: int) -> None:
    sdk = raw_client(f"http://127.0.0.1:{closed_port}")
    verdict, error = verdict_of(lambda: sdk.v1.customers.create(params={"name": "a"}))
    assert isinstance(error, stripe.APIConnectionError)
    assert (verdict.outcome, verdict.error_code) == (Outcome.RETRYABLE, "before_send:NewConnectionError")


@pytest.fixture
def full_backlog() -> Iterator[int]:
    """A listener whose accept queue is full and never drained: new connections time out while connecting."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = int(listener.getsockname()[1])
    fillers = []
    for _ in range(8):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    yield port
    for filler in fillers:
        filler.close()
    listener.close()


def test_connect_timeout_is_retryable(full_backlog: int) -> None:
    sdk = raw_client(f"http://127.0.0.1:{full_backlog}", timeout=(0.3, 0.3))
    verdict, _ = verdict_of(lambda: sdk.v1.customers.create(params={"name": "a"}))
    assert verdict.outcome is Outcome.RETRYABLE
    assert verdict.error_code is not None
    assert verdict.error_code.startswith("before_send:")


def test_anything_unrecognised_is_unknown() -> None:
    assert classify(RuntimeError("boom")).outcome is Outcome.UNKNOWN
    assert classify(stripe.APIConnectionError("no cause")).outcome is Outcome.UNKNOWN
    assert classify(stripe.SignatureVerificationError("sig", "hdr")).outcome is Outcome.UNKNOWN
    assert API_KEY.startswith("sk_test_")


def test_a_409_key_in_use_typed_as_idempotency_error_stays_replayable(
    fake: FakeStripe, sdk: stripe.StripeClient
) -> None:
    """v2 types Stripe's 409 "a request under this key is still running" as an IdempotencyError. That request is
    this intent's own, so a later replay of the key is still deduped: its code must not be the mismatch code
    (``idempotency_error``, a key another request holds), which the contract never replays."""
    fake.inject(
        stripe_error_fault(409, "idempotency_error", "in use", code="idempotency_key_in_use", path_prefix=V2_PATH)
    )
    verdict, error = verdict_of(lambda: sdk.v2.money_management.outbound_payments.create(params=V2_PAYMENT))  # type: ignore[arg-type]
    assert type(error) is stripe.IdempotencyError
    assert (verdict.outcome, verdict.error_code) == (Outcome.UNKNOWN, "idempotency_key_in_use")
