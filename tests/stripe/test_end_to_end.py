"""End to end: the real SDK over real HTTP to FakeStripe, through the wrapped client and the ledger.

Every case that involves a ledger asserts both sides: what reached the fake (its request log, what it answered,
the objects it holds) and the ledger row (status, last error class and code, the provider id).
"""

from __future__ import annotations

import inspect
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
import stripe

from safe_effects import (
    ConcurrentSameKey,
    EarlierVersionInDoubt,
    EffectDeferred,
    EffectRejected,
    EffectStatus,
    EffectUnknown,
    IntentNotFound,
    LookupKind,
)
from safe_effects.testing import FakeClock, Fault
from stripe_safe import BASE_CONTRACT, StripeClient, contract_for
from stripe_safe._contract import CONNECT_TIMEOUT, READ_TIMEOUT
from stripe_safe.testing import DECLINES, FakeStripe, rate_limit_fault, server_error_fault

from .conftest import API_KEY, FAST_RETRY, KEY, PI, SHORT_TIMEOUT, Env, raw_client

Arrange = Callable[[Env], tuple[StripeClient, Callable[[], None]]]


def _nothing() -> None:
    """No clean-up needed."""


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wrapped(env: Env, api_key: str = API_KEY, url: str | None = None) -> StripeClient:
    return StripeClient(api_key, ledger=env.ledger, base_addresses={"api": url or env.fake.url}, timeout=SHORT_TIMEOUT)


def _post_exchanges(fake: FakeStripe, *, settle_within: float = 3.0) -> list[Any]:
    """The POST exchanges once every arrived POST has been answered (a delay fault logs its exchange late)."""
    deadline = time.monotonic() + settle_within
    while True:
        done = [e for e in fake.server.exchanges if e.request.method == "POST"]
        if len(done) >= len(fake.requests("POST")) or time.monotonic() >= deadline:
            return done
        time.sleep(0.02)


# -- how each case prepares the fake and picks the client -------------------------------------------------------


def _plain(env: Env) -> tuple[StripeClient, Callable[[], None]]:
    return env.client, _nothing


def _with_fault(fault: Fault) -> Arrange:
    def arrange(env: Env) -> tuple[StripeClient, Callable[[], None]]:
        env.fake.inject(fault)
        return env.client, _nothing

    return arrange


def _saved_500_after_commit(env: Env) -> tuple[StripeClient, Callable[[], None]]:
    env.fake.fail_next_write(after_commit=True)
    return env.client, _nothing


def _wrong_api_key(env: Env) -> tuple[StripeClient, Callable[[], None]]:
    return _wrapped(env, api_key="sk_live_not_a_test_key"), _nothing


def _restricted_api_key(env: Env) -> tuple[StripeClient, Callable[[], None]]:
    return _wrapped(env, api_key="rk_test_restricted"), _nothing


def _key_used_outside_this_ledger(env: Env) -> tuple[StripeClient, Callable[[], None]]:
    """Another writer (a raw SDK call, another ledger, a purged record) used the key with other params."""
    raw_client(env.fake.url).v1.payment_intents.create(
        params={**PI, "amount": 999},  # type: ignore[arg-type]
        options={"idempotency_key": KEY},
    )
    return env.client, _nothing


def _key_in_flight_elsewhere(env: Env) -> tuple[StripeClient, Callable[[], None]]:
    """A request with the same key is still executing at the fake when the wrapped call arrives: 409."""
    env.fake.processing_seconds = 0.5
    arrived = threading.Event()
    env.fake.server.on_received(lambda _: arrived.set())
    patient = raw_client(env.fake.url, timeout=(1.0, 5.0))
    holder = threading.Thread(
        target=lambda: patient.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    )
    holder.start()
    assert arrived.wait(5)
    time.sleep(0.1)  # let the holder reserve its key
    env.fake.server.clear_hooks()
    return env.client, holder.join


def _refused_connection(env: Env) -> tuple[StripeClient, Callable[[], None]]:
    return _wrapped(env, url=f"http://127.0.0.1:{_closed_port()}"), _nothing


@dataclass(frozen=True)
class Case:
    arrange: Arrange
    params: dict[str, Any]
    raises: type[Exception]
    sdk_error: type[stripe.StripeError]
    status: EffectStatus
    error_class: str
    error_code: str | None
    answers: list[int | None]  # what the fake answered to each POST (None: dropped unanswered), any order
    payment_intents: int  # objects the fake holds afterwards
    effects: int  # requests that changed the fake's state
    records_object: bool = False  # the ledger row names the fake's PaymentIntent
    extra: dict[str, Any] = field(default_factory=dict)


def _server_error(arrange: Arrange, *, committed: int) -> Case:
    """A 500: unknown whether or not the fake had committed, which only the fake's log tells."""
    return Case(
        arrange,
        PI,
        EffectUnknown,
        stripe.APIError,
        EffectStatus.UNKNOWN,
        "APIError",
        "http_500",
        [500],
        payment_intents=committed,
        effects=committed,
    )


def _answer_lost_after_commit(fault: Fault, answered: int | None = None) -> Case:
    """The fake committed, then the client got no answer: closed, reset, or answered after its read timeout."""
    return Case(
        _with_fault(fault),
        PI,
        EffectUnknown,
        stripe.APIConnectionError,
        EffectStatus.UNKNOWN,
        "APIConnectionError",
        "after_send",
        [answered],
        payment_intents=1,
        effects=1,
    )


CASES = {
    "card_declined": Case(
        _plain,
        {**PI, "payment_method": "pm_card_chargeDeclined"},
        EffectRejected,
        stripe.CardError,
        EffectStatus.REJECTED,
        "CardError",
        "card_declined",
        [402],
        payment_intents=1,
        effects=1,
        records_object=True,
    ),
    "invalid_request": Case(
        _plain,
        {**PI, "amount": 0},
        EffectRejected,
        stripe.InvalidRequestError,
        EffectStatus.REJECTED,
        "InvalidRequestError",
        "amount_too_small",
        [400],
        payment_intents=0,
        effects=0,
    ),
    # the key itself refused: deferred, never rejected, so the same intent goes through once it is fixed
    "authentication_error": Case(
        _wrong_api_key,
        PI,
        EffectDeferred,
        stripe.AuthenticationError,
        EffectStatus.PREPARED,
        "AuthenticationError",
        None,
        [401],
        payment_intents=0,
        effects=0,
    ),
    "permission_error": Case(
        _restricted_api_key,
        PI,
        EffectDeferred,
        stripe.PermissionError,
        EffectStatus.PREPARED,
        "PermissionError",
        None,
        [403],
        payment_intents=0,
        effects=0,
    ),
    # Through one ledger the same key with other params is an IntentConflict before sending, and the same
    # digest always sends the same stamped body: Stripe's 400 idempotency_error is only reachable when the
    # key was used by a writer outside this ledger. The fake then holds that writer's PaymentIntent, which may
    # be this very intent's charge (the raw SDK before adoption): unknown, never "rejected, no effect".
    "idempotency_error_key_used_elsewhere": Case(
        _key_used_outside_this_ledger,
        PI,
        EffectUnknown,
        stripe.IdempotencyError,
        EffectStatus.UNKNOWN,
        "IdempotencyError",
        "idempotency_error",
        [200, 400],
        payment_intents=1,
        effects=1,
    ),
    "conflict_409_same_key_in_flight": Case(
        _key_in_flight_elsewhere,
        PI,
        EffectUnknown,
        stripe.APIError,
        EffectStatus.UNKNOWN,
        "APIError",
        "idempotency_key_in_use",
        [409, 200],
        payment_intents=1,
        effects=1,
    ),
    "server_error_500_before_execution": _server_error(_with_fault(server_error_fault()), committed=0),
    "server_error_500_after_commit": _server_error(_saved_500_after_commit, committed=1),
    "response_dropped_after_commit": _answer_lost_after_commit(Fault.drop_after_commit()),
    "connection_reset_after_commit": _answer_lost_after_commit(Fault.reset_after_commit()),
    "read_timeout_after_commit": _answer_lost_after_commit(Fault.delay(SHORT_TIMEOUT[1] + 0.3), answered=200),
    "rate_limited_on_every_attempt": Case(
        _with_fault(rate_limit_fault(times=FAST_RETRY.max_attempts)),
        PI,
        EffectDeferred,
        stripe.RateLimitError,
        EffectStatus.PREPARED,
        "RateLimitError",
        "rate_limit",
        [429] * FAST_RETRY.max_attempts,
        payment_intents=0,
        effects=0,
    ),
    "connection_refused_before_send": Case(
        _refused_connection,
        PI,
        EffectDeferred,
        stripe.APIConnectionError,
        EffectStatus.PREPARED,
        "APIConnectionError",
        "before_send:NewConnectionError",
        [],
        payment_intents=0,
        effects=0,
    ),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_each_classification_through_the_wrapper_asserts_the_fake_and_the_ledger(env: Env, case: Case) -> None:
    client, clean_up = case.arrange(env)
    try:
        with pytest.raises(case.raises) as caught:
            client.v1.payment_intents.create(params=case.params, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    finally:
        clean_up()
    assert isinstance(caught.value.__cause__, case.sdk_error)

    # the fake's side: what reached it, what it answered, what it holds
    posts = env.fake.requests("POST")
    assert len(posts) == len(case.answers)
    assert all(p.header("idempotency-key") == KEY for p in posts)
    assert env.fake.requests("GET") == []  # nothing was looked up on the way
    assert Counter(e.status for e in _post_exchanges(env.fake)) == Counter(case.answers)
    held = env.fake.payment_intents
    assert len(held) == case.payment_intents
    assert env.fake.effect_count("payment_intents.create") == case.effects

    # the ledger's side
    record = env.record()
    assert (record.status, record.last_error_class, record.last_error_code) == (
        case.status,
        case.error_class,
        case.error_code,
    )
    assert record.provider_result_id == (held[0]["id"] if case.records_object else None)
    assert record.lease_owner is None


# -- 429 on a same-key replay -----------------------------------------------------------------------------------


def create(env: Env, params: dict[str, Any] = PI, key: str = KEY) -> stripe.PaymentIntent:
    return env.client.v1.payment_intents.create(params=params, options={"idempotency_key": key})  # type: ignore[arg-type]


def test_a_refused_api_key_defers_the_charge_and_the_fixed_key_charges_it_once(env: Env) -> None:
    """A deploy with a wrong or rotated key: the charge waits (EffectDeferred, the intent prepared again), and
    the same intent, retried once the key is fixed, charges once. Rejected, it could never be sent again."""
    wrong, _ = _wrong_api_key(env)
    with pytest.raises(EffectDeferred) as deferred:
        wrong.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    assert deferred.value.retry_after == 60.0
    assert env.record().status is EffectStatus.PREPARED
    assert env.fake.effect_count("payment_intents.create") == 0
    intent = create(env)
    assert env.record().status is EffectStatus.CONFIRMED
    assert env.record().provider_result_id == intent.id
    assert env.fake.effect_count("payment_intents.create") == 1
    assert [p.header("idempotency-key") for p in env.fake.requests("POST")] == [KEY, KEY]


def test_rate_limited_replay_of_an_unknown_goes_back_to_unknown_and_a_later_replay_confirms_one_intent(
    env: Env,
) -> None:
    env.fake.inject(Fault.drop_after_commit(path_prefix="/v1/payment_intents"))
    with pytest.raises(EffectUnknown):
        create(env)
    assert env.record().status is EffectStatus.UNKNOWN
    assert len(env.fake.payment_intents) == 1

    env.fake.inject(rate_limit_fault(retry_after=1, times=FAST_RETRY.max_attempts, path_prefix="/v1/payment_intents"))
    with pytest.raises(EffectDeferred) as deferred:
        create(env)  # within 24 h: the ledger replays the key, the fake answers 429 to every attempt
    assert isinstance(deferred.value.provider_error, stripe.RateLimitError)
    assert deferred.value.retry_after == 1.0
    record = env.record()
    assert record.status is EffectStatus.UNKNOWN  # an earlier attempt acted: never back to prepared
    assert (record.last_error_class, record.last_error_code) == ("RateLimitError", "rate_limit")
    assert record.provider_result_id is None
    posts = env.fake.requests("POST")
    assert len(posts) == 1 + FAST_RETRY.max_attempts
    assert {p.header("idempotency-key") for p in posts} == {KEY}
    assert [e.status for e in _post_exchanges(env.fake)] == [None] + [429] * FAST_RETRY.max_attempts
    assert len(env.fake.payment_intents) == 1
    assert env.fake.effect_count("payment_intents.create") == 1

    settled = create(env)

    only = env.fake.payment_intents
    assert len(only) == 1
    assert settled.id == only[0]["id"]
    assert env.fake.effect_count("payment_intents.create") == 1
    exchanges = _post_exchanges(env.fake)
    assert len(exchanges) == 2 + FAST_RETRY.max_attempts
    assert (exchanges[-1].status, exchanges[-1].committed) == (200, False)  # the fake replayed, did not act
    record = env.record()
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, settled.id)
    assert record.resolution is not None
    assert record.resolution.method == "key_replay"


# -- the fake's idempotency, with the raw SDK (no ledger) -------------------------------------------------------


def test_a_v2_key_while_v1_may_have_charged_is_refused_and_only_v1_charges(env: Env) -> None:
    """The double charge the forensics review found: inv_43's v1 lost its answer after Stripe charged, the app
    "retried" with :v2, Stripe charged again, and a later lookup confirmed v1 too."""
    env.fake.inject(Fault.drop_after_commit(path_prefix="/v1/payment_intents"))
    with pytest.raises(EffectUnknown):
        env.client.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})
    v2 = KEY.replace(":v1", ":v2")
    with pytest.raises(EarlierVersionInDoubt, match=f"while '{KEY}' is unknown"):
        env.client.v1.payment_intents.create(params=PI, options={"idempotency_key": v2})
    assert env.posts("/v1/payment_intents") == 1
    assert env.fake.effect_count("payment_intents.create") == 1
    with pytest.raises(IntentNotFound):
        env.record(v2)
    retried = env.client.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # the right retry
    assert env.record().status is EffectStatus.CONFIRMED
    assert env.record().provider_result_id == retried.id
    assert env.fake.effect_count("payment_intents.create") == 1  # Stripe replayed v1: one charge in all


def test_a_same_key_request_is_replayed_with_the_idempotent_replayed_header(fake: FakeStripe) -> None:
    sdk = raw_client(fake.url)
    first = sdk.v1.customers.create(params={"name": "a"}, options={"idempotency_key": "customer:c_1:create:v1"})
    again = sdk.v1.customers.create(params={"name": "a"}, options={"idempotency_key": "customer:c_1:create:v1"})
    assert first.last_response is not None
    assert again.last_response is not None
    assert first.last_response.headers.get("Idempotent-Replayed") is None
    assert again.last_response.headers.get("Idempotent-Replayed") == "true"
    assert again.last_response.headers.get("Original-Request") == first.last_response.request_id
    assert again.id == first.id
    assert len(fake.customers) == 1
    assert fake.effect_count("customers.create") == 1
    assert len(fake.requests("POST")) == 2
    assert [e.committed for e in fake.server.exchanges] == [True, False]


def test_the_fake_forgets_a_key_after_its_configured_window_on_the_injected_clock(clock: FakeClock) -> None:
    window = timedelta(minutes=10)
    with FakeStripe(clock=clock, key_retention=window) as fake:
        sdk = raw_client(fake.url)

        def create_customer() -> stripe.Customer:
            return sdk.v1.customers.create(params={"name": "a"}, options={"idempotency_key": "customer:c_1:create:v1"})

        first = create_customer()
        clock.advance(window - timedelta(seconds=1))
        inside = create_customer()
        clock.advance(timedelta(seconds=1))  # first use + window: forgotten
        after = create_customer()

        assert inside.last_response is not None
        assert after.last_response is not None
        assert (inside.id, inside.last_response.headers.get("Idempotent-Replayed")) == (first.id, "true")
        assert after.id != first.id
        assert after.last_response.headers.get("Idempotent-Replayed") is None
        assert sorted(c["id"] for c in fake.customers) == sorted([first.id, after.id])
        assert fake.effect_count("customers.create") == 2
        assert len(fake.requests("POST")) == 3
        assert [e.committed for e in fake.server.exchanges] == [True, False, True]


# -- charges ----------------------------------------------------------------------------------------------------


def test_a_declined_charge_is_rejected_and_no_charge_succeeded(env: Env) -> None:
    assert "tok_chargeDeclined" in DECLINES
    key = "order:o_3:charge:v1"
    params = {"amount": 300, "currency": "eur", "source": "tok_chargeDeclined"}
    with pytest.raises(EffectRejected) as caught:
        env.client.v1.charges.create(params=params, options={"idempotency_key": key})  # type: ignore[arg-type]
    assert isinstance(caught.value.provider_error, stripe.CardError)
    charges = env.fake.charges
    assert [(c["status"], c["captured"], c["amount_captured"]) for c in charges] == [("failed", False, 0)]
    assert env.posts("/v1/charges") == 1
    record = env.record(key)
    assert (record.status, record.operation) == (EffectStatus.REJECTED, "charges.create")
    assert (record.last_error_class, record.last_error_code) == ("CardError", "card_declined")
    assert record.provider_result_id == charges[0]["id"]  # the failed charge, from the error's ``charge``

    with pytest.raises(EffectRejected):  # the ledger answers; nothing is sent again
        env.client.v1.charges.create(params=params, options={"idempotency_key": key})  # type: ignore[arg-type]
    assert env.posts() == 1
    assert not [c for c in env.fake.charges if c["status"] == "succeeded"]


# -- the wrapper's SDK settings ---------------------------------------------------------------------------------


@pytest.mark.parametrize("setting", [{"proxy": "http://proxy:3128"}, {"verify_ssl_certs": False}])
def test_transport_settings_beside_an_http_client_are_refused_as_the_sdk_refuses_them(
    env: Env, setting: dict[str, object]
) -> None:
    """The SDK raises rather than drop them silently; so does the wrapper."""
    http_client = stripe.RequestsClient(timeout=5)
    with pytest.raises(ValueError, match="You cannot specify `proxy` or `verify_ssl_certs` when passing `http_client`"):
        StripeClient(API_KEY, ledger=env.ledger, http_client=http_client, **setting)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="You cannot specify `proxy` or `verify_ssl_certs`"):
        stripe.StripeClient(API_KEY, http_client=http_client, **setting)  # type: ignore[arg-type]


def test_sdk_retries_a_call_asks_for_are_forced_off_for_a_write(env: Env) -> None:
    """The client's own ``max_network_retries=`` is tested in test_dropin (reads only)."""
    env.fake.inject(server_error_fault(times=4))  # enough 500s for every retry the SDK would make
    with pytest.raises(EffectUnknown):
        env.client.v1.payment_intents.create(
            params=PI,  # type: ignore[arg-type]
            options={"idempotency_key": KEY, "max_network_retries": 3},
        )
    assert env.posts() == 1  # the SDK would have sent 4
    assert env.fake.payment_intents == []
    record = env.record()
    assert (record.status, record.last_error_class, record.last_error_code) == (
        EffectStatus.UNKNOWN,
        "APIError",
        "http_500",
    )

    # Where the built RequestsClient keeps its timeout is private (``_requestor._client._timeout``), so only
    # the public default of the ``timeout`` argument is asserted here.
    default = inspect.signature(StripeClient.__init__).parameters["timeout"].default
    assert default == (CONNECT_TIMEOUT, READ_TIMEOUT)


# -- contract facts not asserted in test_contract.py ------------------------------------------------------------


def test_contract_conflict_lookups_with_lag_and_response_window(fake: FakeStripe) -> None:
    assert BASE_CONTRACT.idempotency.concurrent_same_key is ConcurrentSameKey.CONFLICT
    for operation in ("payment_intents.create", "payment_intents.confirm", "refunds.create", "charges.create"):
        assert contract_for(operation).idempotency.concurrent_same_key is ConcurrentSameKey.CONFLICT

    by_kind = {m.kind: m for m in BASE_CONTRACT.lookups}
    assert {LookupKind.RETRIEVE, LookupKind.SEARCH} <= by_kind.keys()
    assert by_kind[LookupKind.SEARCH].lag == timedelta(hours=1)
    assert by_kind[LookupKind.RETRIEVE].lag is None  # consistent reads
    assert not any(m.proves_absence for m in BASE_CONTRACT.lookups)
    assert [m.kind for m in contract_for("payment_intents.confirm").lookups] == [
        LookupKind.KEY_REPLAY,
        LookupKind.RETRIEVE,
    ]
    assert [m.lag for m in contract_for("customers.create").lookups if m.kind is LookupKind.SEARCH] == [
        timedelta(hours=1)
    ]

    assert BASE_CONTRACT.normal_response_window == timedelta(seconds=READ_TIMEOUT)
    assert contract_for("payment_intents.create").normal_response_window == timedelta(seconds=READ_TIMEOUT)
    assert BASE_CONTRACT.forced_sdk_settings["connect_timeout_seconds"] == str(CONNECT_TIMEOUT)
    assert BASE_CONTRACT.forced_sdk_settings["read_timeout_seconds"] == str(READ_TIMEOUT)
    assert fake.key_retention == BASE_CONTRACT.idempotency.retention  # the fake's default is the contract's
