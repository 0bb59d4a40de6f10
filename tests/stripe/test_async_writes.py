"""Async writes through the wrapped client, as async code calls the raw SDK: ``create_async`` and its twins run
the ledger-guarded synchronous call in anyio's worker thread, under asyncio and under trio. Each case asserts
FakeStripe's requests and effects and the ledger row."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
import stripe

from safe_effects import EffectRejected, EffectStatus, EffectUnknown, MissingIntentKey
from safe_effects.testing import Fault
from stripe_safe import receipt_of

from .conftest import KEY, PI, Env

LIBRARIES = ["asyncio", "trio"]


def _run(library: str, body: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(body, backend=library)


async def _create(env: Env, params: dict[str, Any] = PI, **options: str) -> stripe.PaymentIntent:
    return await env.client.v1.payment_intents.create_async(params=params, options=options)  # type: ignore[arg-type]


@pytest.mark.parametrize("library", LIBRARIES)
def test_create_async_charges_once_and_a_repeat_is_answered_from_the_ledger(env: Env, library: str) -> None:
    async def twice() -> tuple[stripe.PaymentIntent, stripe.PaymentIntent]:
        return await _create(env, idempotency_key=KEY), await _create(env, idempotency_key=KEY)

    first, again = _run(library, twice)

    assert again.id == first.id
    assert (receipt_of(first).from_ledger, receipt_of(again).from_ledger) == (False, True)
    assert env.fake.effect_count("payment_intents.create") == 1
    assert env.posts("/v1/payment_intents") == 1  # the repeat was a read
    record = env.record()
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, first.id)


@pytest.mark.parametrize("library", LIBRARIES)
def test_the_ledgers_outcomes_reach_the_awaiting_code_typed(env: Env, library: str) -> None:
    declined = {**PI, "payment_method": "pm_card_chargeDeclined"}
    with pytest.raises(MissingIntentKey):  # refused before anything is recorded or sent
        _run(library, lambda: _create(env))
    with pytest.raises(EffectRejected):
        _run(library, lambda: _create(env, declined, idempotency_key=KEY))

    assert env.posts("/v1/payment_intents") == 1
    assert env.record().status is EffectStatus.REJECTED


def test_a_lost_async_answer_is_unknown_and_the_same_key_replays_it(env: Env) -> None:
    env.fake.inject(Fault.drop_after_commit(path_prefix="/v1/payment_intents"))
    with pytest.raises(EffectUnknown):
        asyncio.run(_create(env, idempotency_key=KEY))

    replayed = asyncio.run(_create(env, idempotency_key=KEY))

    assert env.fake.effect_count("payment_intents.create") == 1
    assert env.posts("/v1/payment_intents") == 2  # sent twice under one key: Stripe replayed the second
    record = env.record()
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, replayed.id)
    assert record.resolution is not None
    assert record.resolution.method == "key_replay"


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_cancelled_await_returns_at_once_and_the_call_finishes_and_is_recorded(env: Env, library: str) -> None:
    env.fake.inject(Fault.delay(0.5, path_prefix="/v1/payment_intents"))  # Stripe is slow to answer

    async def timed_out() -> None:
        with anyio.fail_after(0.05):  # a request handler's deadline, under either library
            await _create(env, idempotency_key=KEY)

    started = time.monotonic()
    with pytest.raises(TimeoutError):
        _run(library, timed_out)
    assert time.monotonic() - started < 0.4  # the caller was not held for the call

    deadline = time.monotonic() + 10
    while env.record().status is not EffectStatus.CONFIRMED and time.monotonic() < deadline:
        time.sleep(0.02)  # the call runs on in its thread

    assert env.fake.effect_count("payment_intents.create") == 1
    assert env.posts("/v1/payment_intents") == 1
    assert env.record().status is EffectStatus.CONFIRMED
