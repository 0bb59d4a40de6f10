"""Adopting stripe_safe mid-flight: a job whose raw SDK call under key K charged before the deploy retries
through the wrapper under the same K. The wrapper stamps metadata, so Stripe sees other params under K and
answers idempotency_error. The charge happened: the intent must not end "rejected, no effect" (a job would
then charge again under a new key), and no retry may replay K (the raw call's key expires on its own clock)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from safe_effects import EffectStatus, EffectUnknown, Operator

from .conftest import KEY, PI, Env, raw_client


def _charge(env: Env) -> None:
    env.client.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # type: ignore[arg-type]


def _posts(env: Env) -> int:
    return len(env.fake.requests("POST", "/v1/payment_intents"))


def test_a_key_the_raw_sdk_charged_under_is_unknown_and_never_replayed(env: Env) -> None:
    raw_client(env.fake.url).v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    env.clock.advance(timedelta(hours=12))  # the job's retry, after the deploy
    with pytest.raises(EffectUnknown, match="IdempotencyError"):
        _charge(env)
    record = env.ledger.get(KEY)
    assert (record.status, record.last_error_class, record.last_error_code) == (
        EffectStatus.UNKNOWN,
        "IdempotencyError",
        "idempotency_error",
    )
    assert _posts(env) == 2  # the raw charge, and the wrapper's refused request
    # 13 h on, the raw call's key is gone at Stripe (25 h) while the wrapper's own window (23 h from its first
    # send) is still open: a same-key replay now would charge a second time
    env.clock.advance(timedelta(hours=13))
    for _ in range(2):
        with pytest.raises(EffectUnknown, match="not resent"):
            _charge(env)
    assert _posts(env) == 2  # no replay, then or now
    assert len(env.fake.payment_intents) == 1
    assert env.ledger.get(KEY).status is EffectStatus.UNKNOWN  # for an operator, with the Dashboard's evidence


def test_an_operator_settles_it_with_the_raw_charge_and_the_job_gets_the_receipt(env: Env) -> None:
    raw = raw_client(env.fake.url).v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    with pytest.raises(EffectUnknown):
        _charge(env)
    Operator(env.ledger).resolve(
        KEY,
        to=EffectStatus.CONFIRMED,
        operator="ops@example.com",
        reason="charged by the raw SDK before the wrapper was deployed",
        expect_version=env.ledger.get(KEY).version,
        provider_result_id=raw.id,
        evidence=f"dashboard: {raw.id} created under this idempotency key",
    )
    _charge(env)  # answered from the ledger: a read of the raw charge, no second create
    assert len(env.fake.payment_intents) == 1
    assert env.ledger.get(KEY).provider_result_id == raw.id


def test_the_raw_calls_object_found_by_its_key_does_not_settle_the_intent(env: Env) -> None:
    """Found by a Stripe audit: the events lookup matched an event by the idempotency key alone, so the raw call's
    PaymentIntent (another amount) confirmed the intent. Stripe's idempotency_error says that key's request was
    not this one: the key proves nothing here, and the intent stays unknown for an operator."""
    raw = raw_client(env.fake.url).v1.payment_intents.create(
        params={"amount": 1500, "currency": "eur", "payment_method": "pm_card_visa", "confirm": True},
        options={"idempotency_key": KEY},
    )
    env.clock.advance(timedelta(minutes=10))  # the job's retry, inside the hour the events lookup reads
    with pytest.raises(EffectUnknown, match="IdempotencyError"):
        _charge(env)

    record = env.reconciled()

    assert [pi["id"] for pi in env.fake.payment_intents] == [raw.id]  # the raw call's only
    assert env.fake.effect_count("payment_intents.create") == 1
    assert _posts(env) == 2  # the raw charge, and the wrapper's refused request
    assert [r.path for r in env.fake.requests("GET")] == ["/v1/payment_intents/search"]  # no events read
    assert (record.status, record.provider_result_id) == (EffectStatus.UNKNOWN, None)
    assert env.ledger.get(KEY).last_error_code == "idempotency_error"
