"""A charge whose answer was lost, looked up after its PaymentIntent was cancelled with nothing received: the
PaymentIntent exists, but no money moved and none ever will (a cancelled PaymentIntent cannot be paid), so the
lookup rejects the intent with the PaymentIntent's id rather than confirming a payment that never happened. An
update clears ``last_payment_error`` on Stripe, so the decline itself may no longer show. The real SDK over
HTTP to FakeStripe, the ledger on SQLite and PostgreSQL; each case asserts what reached the fake and the ledger
row."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from safe_effects import EffectRecord, EffectStatus, EffectUnknown
from safe_effects.testing import Fault
from stripe_safe import BASE_CONTRACT

from .conftest import KEY, PI, Env, raw_client

KEY_WINDOW_PASSED = timedelta(hours=25)
UNPAID = {
    "declined": {**PI, "payment_method": "pm_card_chargeDeclined"},  # left requires_payment_method
    "authorized": {**PI, "capture_method": "manual"},  # left requires_capture: cancelling releases the hold
}


def _cancelled_by_someone_else(env: Env, pi_id: str) -> dict[str, Any]:
    """The PaymentIntent updated (clearing its decline) and cancelled outside the ledger (the Dashboard)."""
    raw = raw_client(env.fake.url).v1.payment_intents
    raw.update(pi_id, params={"description": "abandoned checkout"})
    raw.cancel(pi_id, params={"cancellation_reason": "abandoned"})
    [kept] = [pi for pi in env.fake.payment_intents if pi["id"] == pi_id]
    assert (kept["status"], kept["amount_received"], kept["last_payment_error"]) == ("canceled", 0, None)
    return kept


def _rejected_with(record: EffectRecord, pi_id: str, method: str) -> None:
    assert (record.status, record.provider_result_id) == (EffectStatus.REJECTED, pi_id)
    assert record.resolution is not None
    assert record.resolution.method == f"lookup:{method}"


@pytest.mark.parametrize("lookup", ["search", "events"])
@pytest.mark.parametrize("unpaid", sorted(UNPAID))
def test_a_lost_create_and_confirm_cancelled_since_with_nothing_received_is_rejected(
    env: Env, unpaid: str, lookup: str
) -> None:
    if lookup == "events":
        env.fake.search_lag = KEY_WINDOW_PASSED * 2  # the search finds nothing yet: the create's event settles it
    env.fake.inject(Fault.drop_after_commit(path_prefix="/v1/payment_intents"))
    with pytest.raises(EffectUnknown):
        env.client.v1.payment_intents.create(params=UNPAID[unpaid], options={"idempotency_key": KEY})  # type: ignore[arg-type]
    [pi] = env.fake.payment_intents
    _cancelled_by_someone_else(env, pi["id"])
    env.clock.advance(KEY_WINDOW_PASSED)

    record = env.reconciled()

    assert env.fake.effect_count("payment_intents.create") == 1
    assert [r.path for r in env.fake.requests("POST")].count("/v1/payment_intents") == 1
    assert not any(charge["captured"] for charge in env.fake.objects("charges"))  # no money moved
    _rejected_with(record, pi["id"], lookup)


@pytest.mark.parametrize("lookup", ["search", "events"])
def test_a_lost_create_and_confirm_whose_decline_an_update_cleared_is_rejected(env: Env, lookup: str) -> None:
    """Declined, then updated (which clears ``last_payment_error`` on Stripe) but not cancelled: the
    PaymentIntent waits for a payment method with no decline to show. A create that confirmed and left it there
    charged nothing; confirmed, the caller would ship an order nobody paid for."""
    if lookup == "events":
        env.fake.search_lag = KEY_WINDOW_PASSED * 2  # the search finds nothing yet: the create's event settles it
    env.fake.inject(Fault.drop_after_commit(path_prefix="/v1/payment_intents"))
    with pytest.raises(EffectUnknown):
        env.client.v1.payment_intents.create(params=UNPAID["declined"], options={"idempotency_key": KEY})  # type: ignore[arg-type]
    [pi] = env.fake.payment_intents
    raw_client(env.fake.url).v1.payment_intents.update(pi["id"], params={"description": "retry later"})
    [kept] = env.fake.payment_intents
    assert (kept["status"], kept["last_payment_error"]) == ("requires_payment_method", None)
    env.clock.advance(KEY_WINDOW_PASSED)

    record = env.reconciled()

    assert env.fake.effect_count("payment_intents.create") == 1
    assert env.fake.objects("charges") == []
    _rejected_with(record, pi["id"], lookup)


def test_a_lost_create_without_confirm_found_waiting_for_a_payment_method_is_confirmed(env: Env) -> None:
    """A create that did not confirm leaves every PaymentIntent waiting for a payment method: that is its
    success, not a decline."""
    env.fake.inject(Fault.drop_after_commit(path_prefix="/v1/payment_intents"))
    unconfirmed = {"amount": 2000, "currency": "eur"}
    with pytest.raises(EffectUnknown):
        env.client.v1.payment_intents.create(params=unconfirmed, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    [pi] = env.fake.payment_intents
    env.clock.advance(KEY_WINDOW_PASSED)

    record = env.reconciled()

    assert env.fake.effect_count("payment_intents.create") == 1
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, pi["id"])
    assert pi["status"] == "requires_payment_method"


def test_a_lost_confirm_of_a_payment_intent_cancelled_since_with_nothing_received_is_rejected(env: Env) -> None:
    pi = raw_client(env.fake.url).v1.payment_intents.create(params={"amount": 2000, "currency": "eur"})
    confirm_key = "order:o_1:confirm:v1"
    env.fake.inject(Fault.drop_after_commit(path_prefix=f"/v1/payment_intents/{pi.id}/confirm"))
    with pytest.raises(EffectUnknown):
        env.client.v1.payment_intents.confirm(
            pi.id, params={"payment_method": "pm_card_chargeDeclined"}, options={"idempotency_key": confirm_key}
        )
    _cancelled_by_someone_else(env, pi.id)
    env.clock.advance(BASE_CONTRACT.normal_response_window)  # before it, a refusal may be a confirm still running

    record = env.ledger.reconcile(env.client.adapter, intent_key=confirm_key)

    assert env.fake.effect_count("payment_intents.confirm") == 1
    assert env.fake.objects("charges") == []
    _rejected_with(record, pi.id, "retrieve")


def test_a_lost_cancel_found_cancelled_is_still_confirmed(env: Env) -> None:
    """Cancelling is what a cancel intent asks: nothing received is its success, not a refusal."""
    pi = raw_client(env.fake.url).v1.payment_intents.create(params={"amount": 2000, "currency": "eur"})
    cancel_key = "order:o_1:cancel:v1"
    env.fake.inject(Fault.drop_after_commit(path_prefix=f"/v1/payment_intents/{pi.id}/cancel"))
    with pytest.raises(EffectUnknown):
        env.client.v1.payment_intents.cancel(pi.id, options={"idempotency_key": cancel_key})

    record = env.ledger.reconcile(env.client.adapter, intent_key=cancel_key)

    assert env.fake.effect_count("payment_intents.cancel") == 1
    assert env.fake.payment_intents[0]["status"] == "canceled"
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, pi.id)


def test_a_lost_capture_of_a_payment_intent_cancelled_since_is_rejected(env: Env) -> None:
    """A capture whose answer was lost, the authorisation cancelled since (a succeeded PaymentIntent cannot be
    cancelled, so the capture never took the money): refused, where it stayed unknown for an operator."""
    pi = raw_client(env.fake.url).v1.payment_intents.create(params=UNPAID["authorized"])
    capture_key = "order:o_1:capture:v1"
    env.fake.inject(Fault.drop_before_commit(path_prefix=f"/v1/payment_intents/{pi.id}/capture"))
    with pytest.raises(EffectUnknown):
        env.client.v1.payment_intents.capture(pi.id, options={"idempotency_key": capture_key})
    raw_client(env.fake.url).v1.payment_intents.cancel(pi.id)
    env.clock.advance(BASE_CONTRACT.normal_response_window)

    record = env.reconciled(capture_key)

    assert env.fake.effect_count("payment_intents.capture") == 0
    assert not any(charge["captured"] for charge in env.fake.objects("charges"))
    _rejected_with(record, pi.id, "retrieve")
