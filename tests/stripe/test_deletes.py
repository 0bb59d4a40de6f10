"""DELETEs go through the ledger like POSTs: ``subscriptions.cancel`` with ``invoice_now`` bills and collects a
final invoice, so a repeated or blind retried cancel is a money movement too.

Stripe ignores Idempotency-Key on a DELETE, so there is no same-key replay: a lost answer is settled by a
retrieve of the object (its status shows the cancel), never by sending the DELETE again.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import stripe

from safe_effects import EffectRejected, EffectStatus, EffectUnknown, Ledger, MissingIntentKey
from safe_effects.testing import FakeHTTPServer, FakeRequest, FakeResponse, Fault
from stripe_safe import StripeClient, contract_for, receipt_of

from .conftest import API_KEY, Env, raw_client

CANCEL = "subscription:sub_42:cancel:v1"


def subscription(env: Env) -> stripe.Subscription:
    raw = raw_client(env.fake.url)
    customer = raw.v1.customers.create(params={"email": "a@example.com"})
    price = {"currency": "eur", "unit_amount": 1500, "product": "prod_1", "recurring": {"interval": "month"}}
    return raw.v1.subscriptions.create(params={"customer": customer.id, "items": [{"price_data": price}]})  # type: ignore[typeddict-item]


def cancel(env: Env, sub_id: str) -> stripe.Subscription:
    return env.client.v1.subscriptions.cancel(sub_id, params={"invoice_now": True}, options={"idempotency_key": CANCEL})


def test_a_subscription_cancel_needs_an_intent_and_runs_once(env: Env) -> None:
    sub = subscription(env)
    with pytest.raises(MissingIntentKey):
        env.client.v1.subscriptions.cancel(sub.id, params={"invoice_now": True})
    assert env.fake.requests("DELETE") == []
    assert env.ledger.store.list_by_status(list(EffectStatus)) == []

    first = cancel(env, sub.id)
    again = cancel(env, sub.id)

    receipts = receipt_of(first), receipt_of(again)
    assert [r.from_ledger for r in receipts if r is not None] == [False, True]
    assert (first.status, again.status, again.id) == ("canceled", "canceled", sub.id)
    deletes = env.fake.requests("DELETE")
    assert [(d.path, d.header("idempotency-key")) for d in deletes] == [(f"/v1/subscriptions/{sub.id}", None)]
    assert env.fake.effect_count("subscriptions.delete") == 1
    assert [(i["status"], i["amount_due"]) for i in env.fake.invoices] == [("paid", 1500)]  # charged once
    record = env.record(CANCEL)
    assert (record.status, record.operation, record.provider_result_id) == (
        EffectStatus.CONFIRMED,
        "subscriptions.delete",
        sub.id,
    )
    assert record.summary == {"path": f"/v1/subscriptions/{sub.id}", "method": "delete", "amount": "unknown"}


def test_a_lost_cancel_answer_is_settled_by_a_retrieve_not_a_second_delete(env: Env) -> None:
    sub = subscription(env)
    env.fake.inject(Fault.drop_after_commit(method="DELETE", path_prefix="/v1/subscriptions"))
    with pytest.raises(EffectUnknown):
        cancel(env, sub.id)
    assert env.record(CANCEL).status is EffectStatus.UNKNOWN

    settled = cancel(env, sub.id)  # no key replay: Stripe would run this DELETE again

    assert settled.status == "canceled"
    assert len(env.fake.requests("DELETE")) == 1
    assert len(env.fake.requests("GET", f"/v1/subscriptions/{sub.id}")) >= 1
    assert env.fake.effect_count("subscriptions.delete") == 1
    assert len(env.fake.invoices) == 1
    record = env.record(CANCEL)
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, sub.id)
    assert record.resolution is not None
    assert record.resolution.method == "lookup:retrieve"


def test_a_delete_has_no_key_replay_in_its_contract() -> None:
    contract = contract_for("subscriptions.delete")
    assert not contract.idempotency.supported
    assert [m.kind.value for m in contract.lookups] == ["retrieve"]
    assert contract.replay_deadline(datetime.now(UTC)) is None


class Coupons:
    """A Stripe-like coupon endpoint over real HTTP (FakeStripe serves none): a deleted coupon is a 404 to a GET,
    as for most deletable Stripe objects (products, plans, webhook endpoints, subscription items...)."""

    def __init__(self, coupon: str = "co_1") -> None:
        self.live = {coupon: {"id": coupon, "object": "coupon", "percent_off": 10}}
        self.deletes = 0

    def __call__(self, request: FakeRequest) -> FakeResponse:
        coupon = request.path.rstrip("/").split("/")[-1]
        if not request.path.startswith("/v1/coupons/") or coupon not in self.live:
            error = {
                "type": "invalid_request_error",
                "code": "resource_missing",
                "message": f"No such coupon: {coupon}",
            }
            return FakeResponse.json(404, {"error": error})
        if request.method == "DELETE":
            self.deletes += 1
            del self.live[coupon]
            return FakeResponse.json(200, {"id": coupon, "object": "coupon", "deleted": True}, committed=True)
        return FakeResponse.json(200, self.live[coupon])


# "summer": an id the caller chose, letters only, once taken for an action name (coupons.summer.delete, and the
# ledger's answer a StripeObject of object "summer")
@pytest.mark.parametrize("coupon", ["co_1", "summer"])
def test_a_confirmed_delete_of_an_object_gone_for_a_get_is_answered_from_the_ledger(
    store_url: str, coupon: str
) -> None:
    coupons = Coupons(coupon)
    key = "coupon:co_1:delete:v1"
    with FakeHTTPServer(coupons) as server, Ledger.open(store_url) as ledger:
        client = StripeClient(API_KEY, ledger=ledger, base_addresses={"api": server.url})
        first = client.v1.coupons.delete(coupon, options={"idempotency_key": key})

        again = client.v1.coupons.delete(coupon, options={"idempotency_key": key})

        assert (first.deleted, again.deleted, again.id, again.object) == (True, True, coupon, "coupon")
        assert ledger.get(key).operation == "coupons.delete"
        assert type(again) is type(first)  # a stripe.Coupon both times
        receipt = receipt_of(again)
        assert receipt is not None
        assert receipt.from_ledger
        assert coupons.deletes == 1
        assert ledger.get(key).status is EffectStatus.CONFIRMED


def test_a_coupon_keeps_the_id_its_caller_chose_and_is_deleted_by_it(env: Env) -> None:
    """As on Stripe, ``coupons.create`` with an ``id`` makes the coupon under that id; a second create of it is
    refused (``resource_already_exists``), and the delete by the chosen id goes through the ledger once."""
    made = env.client.v1.coupons.create(
        params={"id": "summer", "percent_off": 10.0}, options={"idempotency_key": "coupon:summer:create:v1"}
    )
    with pytest.raises(EffectRejected, match="resource_already_exists"):
        env.client.v1.coupons.create(
            params={"id": "summer", "percent_off": 20.0}, options={"idempotency_key": "coupon:summer:create:v2"}
        )

    gone = env.client.v1.coupons.delete("summer", options={"idempotency_key": "coupon:summer:delete:v1"})

    assert (made.id, gone.id, gone.deleted) == ("summer", "summer", True)
    assert env.fake.objects("coupons") == []
    assert (env.fake.effect_count("coupons.create"), env.fake.effect_count("coupons.delete")) == (1, 1)
    assert env.ledger.get("coupon:summer:create:v2").status is EffectStatus.REJECTED
    assert env.ledger.get("coupon:summer:delete:v1").status is EffectStatus.CONFIRMED
