"""A refund run as the compensation of an intent (``client.compensating(key)``) must refund that intent's payment:
linked to another payment's refund, the original was marked compensated while its money stayed taken. The real
SDK over HTTP to FakeStripe, the ledger on SQLite and PostgreSQL; each case asserts what reached the fake and the
ledger rows."""

from __future__ import annotations

import pytest
import stripe

from safe_effects import EffectStatus, IntentNotFound, InvalidInput

from .conftest import KEY, PI, Env

OTHER_KEY = "invoice:inv_43:collect:v1"
REFUND_KEY = "invoice:inv_42:refund:v1"


def _charged(env: Env, key: str) -> stripe.PaymentIntent:
    return env.client.v1.payment_intents.create(params=PI, options={"idempotency_key": key})  # type: ignore[arg-type]


def _refund_of_a(env: Env, params: dict[str, str]) -> stripe.Refund:
    return env.client.compensating(KEY).v1.refunds.create(params=params, options={"idempotency_key": REFUND_KEY})  # type: ignore[arg-type]


@pytest.mark.parametrize("named", ["payment_intent", "charge"])
def test_a_refund_of_another_payment_is_refused_before_anything_is_recorded_or_sent(env: Env, named: str) -> None:
    a, b = _charged(env, KEY), _charged(env, OTHER_KEY)
    original = env.record()
    other = {"payment_intent": b.id, "charge": b.latest_charge}[named]
    assert isinstance(other, str)

    with pytest.raises(InvalidInput, match=rf"refunds {named} {other}, but that intent made payment_intent {a.id}"):
        _refund_of_a(env, {named: other})

    assert env.fake.requests("POST", "/v1/refunds") == []
    assert env.fake.refunds == []
    with pytest.raises(IntentNotFound):
        env.record(REFUND_KEY)
    assert env.record() == original  # not named as compensated_by, same version
    assert env.record(OTHER_KEY).status is EffectStatus.CONFIRMED


@pytest.mark.parametrize("named", ["payment_intent", "charge"])
def test_a_refund_of_the_originals_own_payment_is_linked_to_it(env: Env, named: str) -> None:
    a = _charged(env, KEY)
    own = {"payment_intent": a.id, "charge": a.latest_charge}[named]
    assert isinstance(own, str)

    refund = _refund_of_a(env, {named: own})

    assert [r["payment_intent"] for r in env.fake.refunds] == [a.id]
    assert env.fake.effect_count("refunds.create") == 1
    assert (env.record().status, env.record().compensated_by) == (EffectStatus.COMPENSATED, REFUND_KEY)
    assert (env.record(REFUND_KEY).status, env.record(REFUND_KEY).provider_result_id) == (
        EffectStatus.CONFIRMED,
        refund.id,
    )


def test_a_refund_by_payment_intent_of_a_charge_it_did_not_make_is_refused(env: Env) -> None:
    """An original made by ``charges.create`` (no PaymentIntent): a refund naming a PaymentIntent is another's."""
    charge = env.client.v1.charges.create(
        params={"amount": 300, "currency": "eur", "source": "tok_visa"}, options={"idempotency_key": KEY}
    )
    b = _charged(env, OTHER_KEY)
    original = env.record()

    with pytest.raises(InvalidInput, match=rf"refunds payment_intent {b.id}, but that intent made charge {charge.id}"):
        _refund_of_a(env, {"payment_intent": b.id})

    assert env.fake.requests("POST", "/v1/refunds") == []
    with pytest.raises(IntentNotFound):
        env.record(REFUND_KEY)
    assert env.record() == original
