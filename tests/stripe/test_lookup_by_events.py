"""Updates settled after Stripe's 24 h key window by the events they made: Stripe logs an ``<object>.updated``
event naming the API request that caused it, with that request's idempotency key, so the reconciler reads the
events of the send's minutes and confirms the update whose key is the record's. The real SDK over HTTP to
FakeStripe, the ledger on SQLite and PostgreSQL; each case asserts what reached the fake (its requests, objects
and events) and the ledger row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import stripe
import stripe.params as sdk

from safe_effects import EffectRecord, EffectStatus, EffectUnknown, LookupKind
from safe_effects.testing import Fault
from stripe_safe import contract_for
from stripe_safe._contract import updated_by, updated_event_type
from stripe_safe.testing import FakeStripe

from .conftest import KEY, Env, raw_client

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


def _payment_intent(raw: stripe.StripeClient, options: dict[str, str]) -> str:
    return raw.v1.payment_intents.create(params={"amount": 900, "currency": "eur"}, options=options).id  # type: ignore[arg-type]


UPDATED = {
    "customers.update": Updated("customers", _customer, lambda v1: v1.customers, {"email": "b@example.com"}),
    "payment_intents.update": Updated(
        "payment_intents", _payment_intent, lambda v1: v1.payment_intents, {"description": "order 42"}
    ),
}


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


def _event_reads(fake: FakeStripe) -> list[str]:
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
    assert (read.path, read.query["type"]) == ("/v1/events", [f"{case.kind.removesuffix('s')}.updated"])
    [event] = [e for e in env.fake.events if e["type"].endswith(".updated")]
    assert event["request"]["idempotency_key"] == record.provider_key
    assert contract_for(operation).lookups[-1].kind is LookupKind.EVENT_STREAM
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, oid)
    assert record.resolution is not None
    assert record.resolution.method == "lookup:events"


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
    assert _event_reads(env.fake) == ["/v1/events"]
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


def test_only_an_updated_event_of_the_object_under_the_key_counts() -> None:
    event = {"type": "customer.updated", "data": {"object": {"id": "cus_1"}}, "request": {"idempotency_key": "k"}}
    assert updated_by(event, "k", "cus_1")
    assert not updated_by({**event, "type": "customer.created"}, "k", "cus_1")
    assert not updated_by(event, "another key", "cus_1")
    keyless = {**event, "request": {"id": "req_1", "idempotency_key": None}}  # a request sent without a key
    assert not updated_by(keyless, None, "cus_1")  # ...is not the update of a record never sent
    assert not updated_by(event, "k", "cus_2")
    assert not updated_by({**event, "request": None}, "k", "cus_1")  # an automatic event (Stripe's own)


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
    assert updated_event_type("customers") == "customer.updated"
    assert updated_event_type("subscriptions") == "customer.subscription.updated"
    assert updated_event_type("issuing.cards") is None  # read unfiltered: namespaced names follow no one rule
