"""The other covered writes: actions on objects, refunds as linked compensations, and their lookups."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import stripe

from safe_effects import EffectStatus, EffectUnknown, UndigestibleRequest
from safe_effects.testing import Fault
from stripe_safe.testing._form import decode_form

from .conftest import KEY, PI, Env

REFUND_KEY = "invoice:inv_42:refund:v1"


def test_confirm_capture_cancel_customers_charges_and_invoices_are_guarded(env: Env) -> None:
    v1 = env.client.v1
    customer = v1.customers.create(
        params={"email": "a@example.com"}, options={"idempotency_key": "customer:c_1:create:v1"}
    )
    pi = v1.payment_intents.create(
        params={"amount": 500, "currency": "eur", "payment_method": "pm_card_visa", "capture_method": "manual"},
        options={"idempotency_key": "order:o_1:authorize:v1"},
    )
    confirmed = v1.payment_intents.confirm(pi.id, options={"idempotency_key": "order:o_1:confirm:v1"})
    captured = v1.payment_intents.capture(pi.id, options={"idempotency_key": "order:o_1:capture:v1"})
    other = v1.payment_intents.create(
        params={"amount": 100, "currency": "eur"}, options={"idempotency_key": "order:o_2:authorize:v1"}
    )
    canceled = v1.payment_intents.cancel(other.id, options={"idempotency_key": "order:o_2:cancel:v1"})
    charge = v1.charges.create(
        params={"amount": 300, "currency": "eur", "source": "tok_visa"},
        options={"idempotency_key": "order:o_3:charge:v1"},
    )
    invoice = v1.invoices.create(
        params={"customer": customer.id}, options={"idempotency_key": "invoice:inv_9:create:v1"}
    )
    paid = v1.invoices.pay(invoice.id, options={"idempotency_key": "invoice:inv_9:pay:v1"})
    assert (confirmed.status, captured.status, canceled.status, charge.status, paid.status) == (
        "requires_capture",
        "succeeded",
        "canceled",
        "succeeded",
        "paid",
    )
    operations = {r.operation for r in env.ledger.store.list_by_status([EffectStatus.CONFIRMED])}
    assert operations == {
        "customers.create",
        "payment_intents.create",
        "payment_intents.confirm",
        "payment_intents.capture",
        "payment_intents.cancel",
        "charges.create",
        "invoices.create",
        "invoices.pay",
    }
    assert env.ledger.get("order:o_1:capture:v1").provider_result_id == pi.id
    again = v1.payment_intents.capture(pi.id, options={"idempotency_key": "order:o_1:capture:v1"})
    assert again.status == "succeeded"
    assert env.posts("/v1/payment_intents") == 5


def test_same_action_key_on_another_object_is_a_conflict(env: Env) -> None:
    from safe_effects import IntentConflict

    a = env.client.v1.payment_intents.create(
        params={"amount": 1, "currency": "eur"}, options={"idempotency_key": "o:1:a:v1"}
    )
    b = env.client.v1.payment_intents.create(
        params={"amount": 1, "currency": "eur"}, options={"idempotency_key": "o:2:a:v1"}
    )
    env.client.v1.payment_intents.cancel(a.id, options={"idempotency_key": "o:1:cancel:v1"})
    with pytest.raises(IntentConflict):
        env.client.v1.payment_intents.cancel(b.id, options={"idempotency_key": "o:1:cancel:v1"})
    assert env.fake.objects("payment_intents")[1]["status"] == "requires_payment_method"


def test_lost_confirm_after_the_window_is_settled_by_retrieving_the_object(env: Env) -> None:
    pi = env.client.v1.payment_intents.create(
        params={"amount": 500, "currency": "eur", "payment_method": "pm_card_visa"},
        options={"idempotency_key": "order:o_1:authorize:v1"},
    )
    env.fake.inject(Fault.drop_after_commit(path_prefix=f"/v1/payment_intents/{pi.id}/confirm"))
    with pytest.raises(EffectUnknown):
        env.client.v1.payment_intents.confirm(pi.id, options={"idempotency_key": "order:o_1:confirm:v1"})
    env.clock.advance(timedelta(hours=25))
    done = env.client.v1.payment_intents.confirm(pi.id, options={"idempotency_key": "order:o_1:confirm:v1"})
    assert done.status == "succeeded"
    assert env.fake.effect_count("payment_intents.confirm") == 1
    assert env.posts(f"/v1/payment_intents/{pi.id}/confirm") == 1
    record = env.record("order:o_1:confirm:v1")
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, pi.id)
    assert record.resolution is not None
    assert record.resolution.method == "lookup:retrieve"


def charged(env: Env) -> stripe.PaymentIntent:
    return env.client.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # type: ignore[arg-type]


def test_refund_is_a_compensation_linked_to_the_charge(env: Env) -> None:
    pi = charged(env)
    refund = env.client.compensating(KEY).v1.refunds.create(
        params={"payment_intent": pi.id}, options={"idempotency_key": REFUND_KEY}
    )
    assert refund.amount == PI["amount"]
    assert len(env.fake.refunds) == 1
    original, compensation = env.record(), env.record(REFUND_KEY)
    assert (original.status, original.compensated_by) == (EffectStatus.COMPENSATED, REFUND_KEY)
    assert (compensation.status, compensation.compensates, compensation.provider_result_id) == (
        EffectStatus.CONFIRMED,
        KEY,
        refund.id,
    )
    again = env.client.compensating(KEY).v1.refunds.create(
        params={"payment_intent": pi.id}, options={"idempotency_key": REFUND_KEY}
    )
    assert again.id == refund.id
    assert env.posts("/v1/refunds") == 1


def test_lost_refund_after_the_window_is_found_by_listing_the_parent(env: Env) -> None:
    pi = charged(env)
    env.fake.inject(Fault.drop_after_commit(path_prefix="/v1/refunds"))
    with pytest.raises(EffectUnknown):
        env.client.compensating(KEY).v1.refunds.create(
            params={"payment_intent": pi.id}, options={"idempotency_key": REFUND_KEY}
        )
    env.clock.advance(timedelta(hours=25))
    refund = env.client.compensating(KEY).v1.refunds.create(
        params={"payment_intent": pi.id}, options={"idempotency_key": REFUND_KEY}
    )
    assert env.posts("/v1/refunds") == 1
    assert len(env.fake.refunds) == 1
    assert len(env.fake.requests("GET", "/v1/refunds")) == 2  # the list, then the retrieve for the caller
    record = env.record(REFUND_KEY)
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, refund.id)
    assert record.resolution is not None
    assert record.resolution.method == "lookup:list"
    assert env.record().status is EffectStatus.COMPENSATED


def test_the_sdks_own_encodings_digest_as_they_are_sent(env: Env) -> None:
    """stripe-python sends a datetime as a Unix timestamp, a Decimal as its text and a Stripe object as its id;
    the digest covers what is sent, so each spelling of the same call is the same intent, not a refusal."""
    v1 = env.client.v1
    customer = v1.customers.create(params={"name": "A"}, options={"idempotency_key": "customer:c_9:create:v1"})
    trial_end = datetime(2027, 1, 1, tzinfo=UTC)
    key = {"idempotency_key": "customer:c_9:subscribe:v1"}
    items = [{"price": "price_1", "quantity": 1}]
    first = v1.subscriptions.create(
        params={"customer": customer, "items": items, "trial_end": trial_end, "metadata": {"rate": Decimal("1.50")}},  # type: ignore[typeddict-item]
        options=key,
    )
    sent = decode_form(env.fake.requests("POST", "/v1/subscriptions")[0].body)
    assert (sent["customer"], sent["trial_end"], sent["metadata"]["rate"]) == (customer.id, "1798761600", "1.50")
    again = v1.subscriptions.create(
        params={"customer": customer.id, "items": items, "trial_end": 1798761600, "metadata": {"rate": "1.50"}},
        options=key,
    )
    assert again.id == first.id
    assert env.posts("/v1/subscriptions") == 1
    assert env.record("customer:c_9:subscribe:v1").status is EffectStatus.CONFIRMED


def test_a_file_upload_is_refused_before_anything_is_recorded(env: Env) -> None:
    """files.create sends multipart bytes, which the digest cannot cover: refused by name, never sent."""
    with pytest.raises(UndigestibleRequest, match=r"params\.params\.file is a bytes"):
        env.client.v1.files.create(
            params={"file": b"%PDF-1.4", "purpose": "dispute_evidence"},  # type: ignore[typeddict-item]
            options={"idempotency_key": "dispute:dp_1:evidence:v1"},
        )
    assert env.fake.requests("POST") == []
    assert env.ledger.store.get("default", "dispute:dp_1:evidence:v1") is None
