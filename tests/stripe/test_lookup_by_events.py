"""Creates and updates settled after Stripe's 24 h key window by the events they made: Stripe logs an
``<object>.created`` or ``.updated`` event naming the API request that caused it, with that request's
idempotency key, so the reconciler reads the events of the sends' hours and settles the write whose key is the
record's: an update at once, a create by retrieving the object it made. For a searchable create this backs a
search that lags. The real SDK over HTTP to FakeStripe, the ledger on SQLite and PostgreSQL; each case asserts
what reached the fake (its requests, objects and events) and the ledger row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import stripe
import stripe.params as sdk

from safe_effects import EffectRecord, EffectStatus, EffectUnknown, LookupKind, request_digest
from safe_effects.testing import Fault
from stripe_safe import contract_for
from stripe_safe._contract import event_types, made_by
from stripe_safe.testing import FakeStripe
from stripe_safe.testing._form import decode_query

from .conftest import KEY, PI, Env, raw_client

KEY_WINDOW_PASSED = timedelta(hours=25)
ACCOUNT = "acct_connected_1"


@dataclass(frozen=True)
class Updated:
    kind: str  # FakeStripe's kind, and the path's resource
    prepare: Callable[[stripe.StripeClient, dict[str, str]], str]  # makes the object (on an account), its id
    update: Callable[[Any], Any]  # v1 → the service whose ``update`` the caller uses
    params: dict[str, Any]


def _customer(raw: stripe.StripeClient, options: dict[str, str]) -> str:
    return raw.v1.customers.create(params={"email": "a@example.com"}, options=options).id  # type: ignore[arg-type]


def _subscription(raw: stripe.StripeClient, options: dict[str, str]) -> str:
    customer = _customer(raw, options)
    return raw.v1.subscriptions.create(params={"customer": customer}, options=options).id  # type: ignore[arg-type]


def _payment_intent(raw: stripe.StripeClient, options: dict[str, str]) -> str:
    return raw.v1.payment_intents.create(params={"amount": 900, "currency": "eur"}, options=options).id  # type: ignore[arg-type]


UPDATED = {
    "customers.update": Updated("customers", _customer, lambda v1: v1.customers, {"email": "b@example.com"}),
    "subscriptions.update": Updated(  # logged as customer.subscription.updated
        "subscriptions", _subscription, lambda v1: v1.subscriptions, {"description": "gold plan"}
    ),
}
UPDATED_AS = {"customers": "customer.updated", "subscriptions": "customer.subscription.updated"}


def _reconciled(env: Env, *, after: timedelta = KEY_WINDOW_PASSED) -> EffectRecord:
    """The reconciler's settling of KEY ``after`` the send (by default once the key window has passed)."""
    env.clock.advance(after)
    return env.reconciled()


def _updated_lost(env: Env, case: Updated, fault: Callable[..., Fault], **options: str) -> str:
    """The wrapped update under KEY of a new object, its answer lost to ``fault``; the object's id."""
    oid = case.prepare(raw_client(env.fake.url), options)
    env.fake.inject(fault(path_prefix=f"/v1/{case.kind}/{oid}"))
    with pytest.raises(EffectUnknown):
        case.update(env.client.v1).update(oid, params=case.params, options={"idempotency_key": KEY, **options})
    assert env.record().status is EffectStatus.UNKNOWN
    return oid


def _settled(record: EffectRecord, status: EffectStatus, result_id: str) -> None:
    """The record as the events lookup left it: its status, the object it names, and how it was settled."""
    assert (record.status, record.provider_result_id) == (status, result_id)
    assert record.resolution is not None
    assert record.resolution.method == "lookup:events"


def _reads(fake: FakeStripe) -> list[str]:
    """The paths of every GET FakeStripe received, in order: what the lookup read."""
    return [r.path for r in fake.requests("GET")]


@pytest.mark.parametrize("operation", sorted(UPDATED))
def test_a_lost_update_is_confirmed_after_the_window_by_its_event(env: Env, operation: str) -> None:
    case = UPDATED[operation]
    oid = _updated_lost(env, case, Fault.drop_after_commit)

    record = _reconciled(env)

    [updated] = [o for o in env.fake.objects(case.kind) if o["id"] == oid]
    assert all(updated[name] == value for name, value in case.params.items())
    assert env.fake.effect_count(operation) == 1
    assert len(env.fake.requests("POST", f"/v1/{case.kind}/{oid}")) == 1  # never sent again
    [read] = env.fake.requests("GET")
    assert (read.path, decode_query(read.query)["types"]) == ("/v1/events", [UPDATED_AS[case.kind]])
    [event] = [e for e in env.fake.events if e["type"].endswith(".updated")]
    assert event["request"]["idempotency_key"] == record.provider_key
    assert contract_for(operation).lookups[-1].kind is LookupKind.EVENT_STREAM
    _settled(record, EffectStatus.CONFIRMED, oid)


def test_an_update_stripe_logs_no_event_for_waits_for_an_operator(env: Env) -> None:
    """Stripe has no payment_intent.updated: there is nothing to read, so nothing is read."""
    oid = _payment_intent(raw_client(env.fake.url), {})
    env.fake.inject(Fault.drop_after_commit(path_prefix=f"/v1/payment_intents/{oid}"))
    with pytest.raises(EffectUnknown):
        env.client.v1.payment_intents.update(oid, params={"description": "x"}, options={"idempotency_key": KEY})

    record = _reconciled(env)

    assert env.fake.effect_count("payment_intents.update") == 1  # it happened...
    assert [e["type"] for e in env.fake.events] == ["payment_intent.created"]  # ...and, as on Stripe, unlogged
    assert _reads(env.fake) == []
    assert [lookup.kind for lookup in contract_for("payment_intents.update").lookups] == [LookupKind.KEY_REPLAY]
    assert (record.status, record.provider_result_id) == (EffectStatus.UNKNOWN, None)


def test_an_update_that_never_ran_stays_unknown_and_is_not_sent_again(env: Env) -> None:
    case = UPDATED["customers.update"]
    oid = _updated_lost(env, case, Fault.drop_before_commit)
    raw = raw_client(env.fake.url)
    raw.v1.customers.update(oid, params={"name": "Ada"}, options={"idempotency_key": "someone-else"})  # not ours
    raw.v1.customers.update(_customer(raw, {}), params={"name": "Bob"})  # another customer, no key

    record = _reconciled(env)

    [customer] = [o for o in env.fake.objects("customers") if o["id"] == oid]
    assert customer["email"] == "a@example.com"  # our update never ran
    assert env.fake.effect_count("customers.update") == 2  # the other two
    assert len([e for e in env.fake.events if e["type"] == "customer.updated"]) == 2
    assert len(env.fake.requests("POST", f"/v1/customers/{oid}")) == 2  # ours once, the other caller's once
    assert _reads(env.fake) == ["/v1/events"]
    assert (record.status, record.provider_result_id) == (EffectStatus.UNKNOWN, None)


def test_an_event_of_another_object_under_the_same_key_is_not_taken(env: Env) -> None:
    oid = _updated_lost(env, UPDATED["customers.update"], Fault.drop_before_commit)
    raw = raw_client(env.fake.url)
    other = _customer(raw, {})
    # another caller (another environment sharing the account, say) sends our key for another customer
    raw.v1.customers.update(other, params={"name": "Eve"}, options={"idempotency_key": env.record().provider_key})

    record = _reconciled(env)

    [event] = [e for e in env.fake.events if e["type"] == "customer.updated"]
    assert event["data"]["object"]["id"] == other
    assert env.fake.effect_count("customers.update") == 1  # the other customer's, not ours
    assert len(env.fake.requests("POST", f"/v1/customers/{oid}")) == 1
    assert (record.status, record.provider_result_id) == (EffectStatus.UNKNOWN, None)


def test_only_the_change_of_the_object_under_the_key_counts() -> None:
    event = {"type": "customer.updated", "data": {"object": {"id": "cus_1"}}, "request": {"idempotency_key": "k"}}
    assert made_by(event, "k", "customers", "update", "cus_1")
    assert made_by({**event, "type": "customer.created"}, "k", "customers", "create")  # any object it made
    assert not made_by({**event, "type": "customer.created"}, "k", "customers", "update", "cus_1")
    assert not made_by(event, "another key", "customers", "update", "cus_1")
    keyless = {**event, "request": {"id": "req_1", "idempotency_key": None}}  # a request sent without a key
    assert not made_by(keyless, None, "customers", "update", "cus_1")  # ...is not the write of a record never sent
    assert not made_by(event, "k", "customers", "update", "cus_2")
    assert not made_by({**event, "request": None}, "k", "customers", "update", "cus_1")  # Stripe's own event
    assert not made_by({**event, "data": {"object": {}}}, "k", "customers", "update")  # no object, nothing made
    charged = {**event, "type": "charge.failed", "data": {"object": {"id": "ch_1"}}}  # no charge.created exists
    assert made_by(charged, "k", "charges", "create")
    assert not made_by({**charged, "type": "charge.refunded"}, "k", "charges", "create")
    namespaced = {**event, "type": "issuing_card.updated", "data": {"object": {"id": "ic_1"}}}
    assert made_by(namespaced, "k", "issuing.cards", "update", "ic_1")  # read unfiltered, matched by suffix


def test_the_lookup_reads_past_the_first_page_of_a_busy_accounts_events(env: Env) -> None:
    oid = _updated_lost(env, UPDATED["customers.update"], Fault.drop_after_commit)
    raw = raw_client(env.fake.url)
    others = [_customer(raw, {}) for _ in range(3)]
    for index in range(120):  # newer updates of other customers fill the first page
        raw.v1.customers.update(others[index % 3], params={"description": f"note {index}"})

    record = _reconciled(env)

    newest_first = [e["id"] for e in reversed(env.fake.events) if e["type"] == "customer.updated"]
    reads = [r for r in env.fake.requests("GET") if r.path == "/v1/events"]
    assert len(reads) == 2  # ours is the 121st newest: on the second page
    assert reads[1].query["starting_after"] == [newest_first[99]]
    assert env.fake.effect_count("customers.update") == 121
    assert len(env.fake.requests("POST", f"/v1/customers/{oid}")) == 1
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, oid)


def test_an_update_on_a_connected_account_is_found_in_that_accounts_events(env: Env) -> None:
    oid = _updated_lost(env, UPDATED["customers.update"], Fault.drop_after_commit, stripe_account=ACCOUNT)

    record = _reconciled(env)

    assert env.fake.account_of(oid) == ACCOUNT
    [read] = [r for r in env.fake.requests("GET") if r.path == "/v1/events"]
    assert read.header("Stripe-Account") == ACCOUNT
    assert len(env.fake.requests("POST", f"/v1/customers/{oid}")) == 1
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, oid)


def test_an_update_older_than_the_events_stripe_keeps_waits_for_an_operator(env: Env) -> None:
    oid = _updated_lost(env, UPDATED["customers.update"], Fault.drop_after_commit)

    record = _reconciled(env, after=timedelta(days=31))  # Stripe lists the last 30 days of events

    assert env.fake.effect_count("customers.update") == 1  # it did happen...
    assert len(env.fake.requests("POST", f"/v1/customers/{oid}")) == 1
    assert (record.status, record.provider_result_id) == (EffectStatus.UNKNOWN, None)  # ...but no event says so


def test_the_events_lookup_uses_only_parameters_the_sdk_and_the_fake_have(fake: FakeStripe) -> None:
    sdk_params = sdk.EventListParams.__required_keys__ | sdk.EventListParams.__optional_keys__
    assert {"created", "limit", "type", "starting_after"} <= sdk_params
    raw = raw_client(fake.url)
    with pytest.raises(stripe.InvalidRequestError, match="unknown parameter: delivery_success"):
        raw.v1.events.list(params={"delivery_success": True})
    assert event_types("customers", "update") == ("customer.updated",)
    assert event_types("coupons", "create") == ("coupon.created",)
    assert event_types("subscriptions", "update") == ("customer.subscription.updated",)
    assert event_types("charges", "create") == ("charge.succeeded", "charge.failed", "charge.pending")
    assert event_types("issuing.cards", "update") is None  # read unfiltered: namespaced names follow no one rule


# -- creates ---------------------------------------------------------------------------------------------------


def test_a_lost_create_with_no_other_lookup_is_found_by_its_event(env: Env) -> None:
    env.fake.inject(Fault.drop_after_commit(path_prefix="/v1/coupons"))
    with pytest.raises(EffectUnknown):
        env.client.v1.coupons.create(params={"percent_off": 10.0}, options={"idempotency_key": KEY})

    record = _reconciled(env)

    [coupon] = env.fake.objects("coupons")
    assert env.fake.effect_count("coupons.create") == 1
    assert len(env.fake.requests("POST", "/v1/coupons")) == 1  # never sent again
    assert _reads(env.fake) == ["/v1/events", f"/v1/coupons/{coupon['id']}"]  # found, then retrieved
    assert decode_query(env.fake.requests("GET")[0].query)["types"] == ["coupon.created"]
    assert [lookup.kind for lookup in contract_for("coupons.create").lookups] == [
        LookupKind.KEY_REPLAY,
        LookupKind.EVENT_STREAM,
    ]
    _settled(record, EffectStatus.CONFIRMED, coupon["id"])


def test_a_created_object_deleted_since_is_judged_by_the_events_copy(env: Env) -> None:
    env.fake.inject(Fault.drop_after_commit(path_prefix="/v1/coupons"))
    with pytest.raises(EffectUnknown):
        env.client.v1.coupons.create(params={"amount_off": 500, "currency": "eur"}, options={"idempotency_key": KEY})
    [coupon] = env.fake.objects("coupons")
    raw_client(env.fake.url).v1.coupons.delete(coupon["id"])  # someone retired it meanwhile

    record = _reconciled(env)

    assert env.fake.objects("coupons") == []
    assert env.fake.effect_count("coupons.create") == 1
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, coupon["id"])
    assert record.response_digest == request_digest(coupon)  # the object as its event copied it


def test_a_search_that_lags_is_backed_by_the_creates_event(env: Env) -> None:
    env.fake.search_lag = KEY_WINDOW_PASSED * 2  # the search index has not caught up, in an incident
    env.fake.inject(Fault.drop_after_commit(path_prefix="/v1/payment_intents"))
    with pytest.raises(EffectUnknown):
        env.client.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # type: ignore[arg-type]

    record = _reconciled(env)

    [payment_intent] = env.fake.payment_intents
    assert env.fake.effect_count("payment_intents.create") == 1
    assert env.posts("/v1/payment_intents") == 1
    assert _reads(env.fake) == [
        "/v1/payment_intents/search",  # nothing yet
        "/v1/events",  # the create's event
        f"/v1/payment_intents/{payment_intent['id']}",  # the object, for its state
    ]
    _settled(record, EffectStatus.CONFIRMED, payment_intent["id"])


DECLINED = {
    "payment_intents": {**PI, "payment_method": "pm_card_chargeDeclined"},  # the PaymentIntent stays, unpaid
    "charges": {"amount": 300, "currency": "eur", "source": "tok_chargeDeclined"},  # a Charge stays, "failed"
}
LOGGED_AS = {"payment_intents": "payment_intent.created", "charges": "charge.failed"}  # Stripe has no charge.created


@pytest.mark.parametrize("kind", sorted(DECLINED))
def test_a_declined_payment_found_by_its_event_is_rejected_not_confirmed(env: Env, kind: str) -> None:
    env.fake.search_lag = KEY_WINDOW_PASSED * 2
    env.fake.inject(Fault.drop_after_commit(path_prefix=f"/v1/{kind}"))
    service = getattr(env.client.v1, kind)
    with pytest.raises(EffectUnknown):
        service.create(params=DECLINED[kind], options={"idempotency_key": KEY})

    record = _reconciled(env)

    [kept] = env.fake.objects(kind)
    assert kept.get("status") == "failed" or kept["last_payment_error"]["code"] == "card_declined"
    assert env.posts(f"/v1/{kind}") == 1
    assert [e["type"] for e in env.fake.events if e["data"]["object"]["id"] == kept["id"]] == [LOGGED_AS[kind]]
    assert _reads(env.fake)[1:] == ["/v1/events", f"/v1/{kind}/{kept['id']}"]
    _settled(record, EffectStatus.REJECTED, kept["id"])


def test_a_create_that_never_ran_is_found_by_neither_and_stays_unknown(env: Env) -> None:
    env.fake.inject(Fault.drop_before_commit(path_prefix="/v1/payment_intents"))
    with pytest.raises(EffectUnknown):
        env.client.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    raw_client(env.fake.url).v1.payment_intents.create(params=PI, options={"idempotency_key": "another-caller"})  # type: ignore[arg-type]

    record = _reconciled(env)

    assert env.fake.effect_count("payment_intents.create") == 1  # the other caller's
    assert _reads(env.fake) == ["/v1/payment_intents/search", "/v1/events"]
    assert env.posts("/v1/payment_intents") == 2  # ours once, the other caller's once: nothing sent again
    assert (record.status, record.provider_result_id) == (EffectStatus.UNKNOWN, None)
