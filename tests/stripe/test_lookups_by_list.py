"""Writes no search finds, settled after Stripe's 24 h key window by a consistent read: a create by listing its
parent's objects (matched on the stamped metadata, made while the record was sent), an action by retrieving the
object it acted on. The real SDK over HTTP to FakeStripe, the ledger on SQLite and PostgreSQL; each case asserts
what reached the fake (its requests and objects) and the ledger row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import stripe
import stripe.params as sdk
import stripe.params.checkout as sdk_checkout

from safe_effects import EffectStatus, EffectUnknown, LookupKind
from safe_effects.testing import Fault
from stripe_safe import METADATA_INTENT, METADATA_TENANT, contract_for
from stripe_safe._contract import LISTED_BY, STAMPED_CREATES
from stripe_safe.testing import FakeStripe
from stripe_safe.testing._form import decode_query, flat_query
from stripe_safe.testing._objects import LIST_FILTERS

from .conftest import KEY, Env, raw_client

KEY_WINDOW_PASSED = timedelta(hours=25)
PURGED_LONG_AGO = timedelta(days=200)
OTHER_KEY = "invoice:inv_43:collect:v1"
ACCOUNT = "acct_connected_1"

# each list's params in stripe-python 16: the filters a lookup (and the fake) may use
SDK_LIST_PARAMS: dict[str, Any] = {
    "refunds": sdk.RefundListParams,
    "transfers": sdk.TransferListParams,
    "payouts": sdk.PayoutListParams,
    "credit_notes": sdk.CreditNoteListParams,
    "invoiceitems": sdk.InvoiceItemListParams,
    "setup_intents": sdk.SetupIntentListParams,
    "checkout.sessions": sdk_checkout.SessionListParams,
    "payment_intents": sdk.PaymentIntentListParams,
    "charges": sdk.ChargeListParams,
    "customers": sdk.CustomerListParams,
    "invoices": sdk.InvoiceListParams,
    "subscriptions": sdk.SubscriptionListParams,
    "coupons": sdk.CouponListParams,
}


def _sdk_filters(kind: str) -> frozenset[str]:
    params = SDK_LIST_PARAMS[kind]
    return frozenset(params.__required_keys__ | params.__optional_keys__)


def _stamp(intent: str, tenant: str = "default") -> dict[str, str]:
    """Metadata as the wrapper writes it, for an object made with the raw SDK."""
    return {METADATA_INTENT: intent, METADATA_TENANT: tenant}


# -- creates found by a list --------------------------------------------------------------------------------------


def _customer(raw: stripe.StripeClient) -> str:
    return raw.v1.customers.create(params={"email": "a@example.com"}).id


def _transfer(raw: stripe.StripeClient) -> dict[str, Any]:
    return {"amount": 5000, "currency": "eur", "destination": "acct_dest_1", "transfer_group": "order_42"}


def _payout(raw: stripe.StripeClient) -> dict[str, Any]:
    return {"amount": 1100, "currency": "eur"}


def _credit_note(raw: stripe.StripeClient) -> dict[str, Any]:
    invoice = raw.v1.invoices.create(params={"customer": _customer(raw)})
    raw.v1.invoices.finalize_invoice(invoice.id)  # Stripe credits open or paid invoices only
    return {"invoice": invoice.id, "amount": 500}


def _invoice_item(raw: stripe.StripeClient) -> dict[str, Any]:
    customer = _customer(raw)
    invoice = raw.v1.invoices.create(params={"customer": customer})
    return {"customer": customer, "invoice": invoice.id, "amount": 700, "currency": "eur"}


def _setup_intent(raw: stripe.StripeClient) -> dict[str, Any]:
    return {"customer": _customer(raw), "payment_method": "pm_card_visa"}


def _checkout_session(raw: stripe.StripeClient) -> dict[str, Any]:
    return {"customer": _customer(raw), "mode": "setup", "currency": "eur", "success_url": "https://example.com/done"}


@dataclass(frozen=True)
class Listed:
    """A create a list finds: its service, the parents it needs (made with the raw SDK) and the list's filters."""

    kind: str  # FakeStripe's kind, and the list's resource
    path: str  # where it is POSTed and listed
    service: Callable[[Any], Any]  # v1 → the SDK service (``create`` and ``list``)
    params: Callable[[stripe.StripeClient], dict[str, Any]]  # makes the parents, returns the create's params
    filters: tuple[str, ...]  # the params the lookup's list filters by

    def create(self, v1: Any, params: dict[str, Any], **options: str) -> Any:
        return self.service(v1).create(params=params, options=options)


LISTED = {
    "transfers.create": Listed(
        "transfers", "/v1/transfers", lambda v1: v1.transfers, _transfer, ("destination", "transfer_group")
    ),
    "payouts.create": Listed("payouts", "/v1/payouts", lambda v1: v1.payouts, _payout, ()),
    "credit_notes.create": Listed(
        "credit_notes", "/v1/credit_notes", lambda v1: v1.credit_notes, _credit_note, ("invoice",)
    ),
    "invoiceitems.create": Listed(
        "invoiceitems", "/v1/invoiceitems", lambda v1: v1.invoice_items, _invoice_item, ("invoice", "customer")
    ),
    "setup_intents.create": Listed(
        "setup_intents", "/v1/setup_intents", lambda v1: v1.setup_intents, _setup_intent, ("customer",)
    ),
    "checkout.sessions": Listed(
        "checkout.sessions", "/v1/checkout/sessions", lambda v1: v1.checkout.sessions, _checkout_session, ("customer",)
    ),
}


def _lost(env: Env, case: Listed, params: dict[str, Any], fault: Fault, **options: str) -> None:
    """The wrapped create under KEY, its answer lost to ``fault``."""
    env.fake.inject(fault)
    with pytest.raises(EffectUnknown):
        case.create(env.client.v1, params, idempotency_key=KEY, **options)
    assert env.record().status is EffectStatus.UNKNOWN


def test_every_list_lookup_uses_filters_the_sdk_and_the_fake_have() -> None:
    for operation, (path, filters) in LISTED_BY.items():
        kind = path.removeprefix("/v1/").replace("/", ".")
        assert {*filters, "created", "limit"} <= _sdk_filters(kind), operation
        assert set(filters) <= LIST_FILTERS[kind], operation
        assert operation in STAMPED_CREATES
        assert [m.kind for m in contract_for(operation).lookups] == [LookupKind.KEY_REPLAY, LookupKind.RETRIEVE]
    assert LISTED.keys() | {"refunds.create"} == LISTED_BY.keys()
    for kind, served in LIST_FILTERS.items():  # the fake filters only as Stripe can
        assert served <= _sdk_filters(kind), kind


def test_the_fake_refuses_a_list_filter_stripe_does_not_have(fake: FakeStripe) -> None:
    raw = raw_client(fake.url)
    with pytest.raises(stripe.InvalidRequestError, match="Received unknown parameter: customer"):
        raw.v1.transfers.list(params={"customer": "cus_1"})  # type: ignore[typeddict-unknown-key]
    with pytest.raises(stripe.InvalidRequestError, match=r"Received unknown parameter: created\[after\]"):
        raw.v1.payouts.list(params={"created": {"after": 1}})  # type: ignore[typeddict-unknown-key]
    assert [r.path for r in fake.requests("GET")] == ["/v1/transfers", "/v1/payouts"]


@pytest.mark.parametrize("operation", sorted(LISTED))
def test_a_lost_create_is_found_after_the_window_by_listing_its_parent(env: Env, operation: str) -> None:
    case = LISTED[operation]
    params = case.params(raw_client(env.fake.url))
    _lost(env, case, params, Fault.drop_after_commit(path_prefix=case.path))
    env.clock.advance(KEY_WINDOW_PASSED)

    record = env.reconciled()

    [made] = env.fake.objects(case.kind)
    assert made["metadata"] == _stamp(KEY)
    assert env.fake.effect_count(operation) == 1
    assert len(env.fake.requests("POST", case.path)) == 1  # the reconciler never writes
    [listing] = env.fake.requests("GET", case.path)
    query = flat_query(listing.query)
    assert {name: query[name] for name in case.filters} == {name: str(params[name]) for name in case.filters}
    assert int(query["created[gte]"]) <= made["created"] <= int(query["created[lte]"])
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, made["id"])
    assert record.resolution is not None
    assert record.resolution.method == "lookup:list"


@pytest.mark.parametrize("operation", sorted(LISTED))
def test_a_list_that_misses_leaves_it_unknown_and_nothing_is_sent_again(env: Env, operation: str) -> None:
    case = LISTED[operation]
    params = case.params(raw_client(env.fake.url))
    _lost(env, case, params, Fault.drop_before_commit(path_prefix=case.path))  # it never reached Stripe
    env.clock.advance(KEY_WINDOW_PASSED)

    reconciled = env.reconciled()
    with pytest.raises(EffectUnknown, match="no lookup could settle it"):  # the caller's retry: a lookup, no POST
        case.create(env.client.v1, params, idempotency_key=KEY)

    assert env.fake.objects(case.kind) == []
    assert env.fake.effect_count(operation) == 0
    assert len(env.fake.requests("POST", case.path)) == 1
    assert len(env.fake.requests("GET", case.path)) == 2
    record = env.record()
    assert (reconciled.status, record.status, record.provider_result_id) == (
        EffectStatus.UNKNOWN,
        EffectStatus.UNKNOWN,
        None,
    )
    assert record.attempt_count == 1


@pytest.mark.parametrize("operation", sorted(LISTED))
def test_a_listed_object_of_another_intent_tenant_or_an_earlier_record_is_not_taken(env: Env, operation: str) -> None:
    """Same parent, each stamped almost like this intent: another intent, another tenant, or this intent's key
    on an object made long before the record (a purged record's). None settles it."""
    case = LISTED[operation]
    raw = raw_client(env.fake.url)
    params = case.params(raw)
    earlier = case.create(raw.v1, {**params, "metadata": _stamp(KEY)})
    env.clock.advance(PURGED_LONG_AGO)
    _lost(env, case, params, Fault.drop_before_commit(path_prefix=case.path))
    others = [case.create(raw.v1, {**params, "metadata": _stamp(*stamp)}) for stamp in ((OTHER_KEY,), (KEY, "acme"))]
    env.clock.advance(KEY_WINDOW_PASSED)

    record = env.reconciled()

    [listing] = env.fake.requests("GET", case.path)
    listed = case.service(raw.v1).list(params=decode_query(listing.query))
    assert sorted(o.id for o in listed.data) == sorted(o.id for o in others)  # listed, and refused on the stamp
    assert earlier.id in {o["id"] for o in env.fake.objects(case.kind)}  # still at Stripe, outside the bound
    assert env.fake.effect_count(operation) == 3
    assert len(env.fake.requests("POST", case.path)) == 4
    assert (record.status, record.provider_result_id) == (EffectStatus.UNKNOWN, None)


def test_a_lost_payout_on_a_connected_account_is_listed_on_that_account(env: Env) -> None:
    case = LISTED["payouts.create"]
    _lost(env, case, _payout(raw_client(env.fake.url)), Fault.drop_after_commit(), stripe_account=ACCOUNT)
    env.clock.advance(KEY_WINDOW_PASSED)

    record = env.reconciled()

    [listing] = env.fake.requests("GET", "/v1/payouts")
    assert listing.header("stripe-account") == ACCOUNT
    [payout] = env.fake.objects("payouts")
    assert env.fake.account_of(payout["id"]) == ACCOUNT
    assert env.fake.effect_count("payouts.create") == 1
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, payout["id"])
    assert record.summary["stripe_account"] == ACCOUNT


def test_the_callers_retry_after_the_window_is_answered_from_the_list(env: Env) -> None:
    case = LISTED["transfers.create"]
    params = _transfer(raw_client(env.fake.url))
    _lost(env, case, params, Fault.drop_after_commit())
    env.clock.advance(KEY_WINDOW_PASSED)

    transfer = case.create(env.client.v1, params, idempotency_key=KEY)

    [made] = env.fake.objects("transfers")
    assert transfer.id == made["id"]
    assert len(env.fake.requests("POST", "/v1/transfers")) == 1
    assert [r.path for r in env.fake.requests("GET", "/v1/transfers")] == [
        "/v1/transfers",
        f"/v1/transfers/{made['id']}",
    ]
    record = env.record()
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, made["id"])
    assert record.resolution is not None
    assert record.resolution.method == "lookup:list"


# -- actions settled by retrieving the object ---------------------------------------------------------------------


def _draft_invoice(raw: stripe.StripeClient) -> str:
    return raw.v1.invoices.create(params={"customer": _customer(raw)}).id


def _unconfirmed_setup_intent(raw: stripe.StripeClient) -> str:
    return raw.v1.setup_intents.create(params={"customer": _customer(raw), "payment_method": "pm_card_visa"}).id


@dataclass(frozen=True)
class Acted:
    """An action on an object: the object it needs, the SDK call, and the object's status before and after."""

    kind: str
    prepare: Callable[[stripe.StripeClient], str]  # makes the object with the raw SDK, returns its id
    act: Callable[[Any], Callable[..., Any]]  # v1 → the SDK method taking the id
    action: str  # the path's last segment
    before: str
    after: str

    def path(self, oid: str) -> str:
        return f"/v1/{self.kind}/{oid}/{self.action}"


ACTED = {
    "invoices.finalize": Acted(
        "invoices", _draft_invoice, lambda v1: v1.invoices.finalize_invoice, "finalize", "draft", "open"
    ),
    "setup_intents.confirm": Acted(
        "setup_intents",
        _unconfirmed_setup_intent,
        lambda v1: v1.setup_intents.confirm,
        "confirm",
        "requires_confirmation",
        "succeeded",
    ),
}


def _acted_lost(env: Env, case: Acted, fault: Callable[..., Fault]) -> str:
    """The wrapped action under KEY on a new object, its answer lost to ``fault``; the object's id."""
    oid = case.prepare(raw_client(env.fake.url))
    env.fake.inject(fault(path_prefix=case.path(oid)))
    with pytest.raises(EffectUnknown):
        case.act(env.client.v1)(oid, options={"idempotency_key": KEY})
    assert env.record().status is EffectStatus.UNKNOWN
    env.clock.advance(KEY_WINDOW_PASSED)
    return oid


@pytest.mark.parametrize("operation", sorted(ACTED))
def test_a_lost_action_is_confirmed_after_the_window_by_the_objects_status(env: Env, operation: str) -> None:
    case = ACTED[operation]
    oid = _acted_lost(env, case, Fault.drop_after_commit)

    record = env.reconciled()

    [acted_on] = [o for o in env.fake.objects(case.kind) if o["id"] == oid]
    assert acted_on["status"] == case.after
    assert env.fake.effect_count(operation) == 1
    assert len(env.fake.requests("POST", case.path(oid))) == 1
    assert [r.path for r in env.fake.requests("GET")] == [f"/v1/{case.kind}/{oid}"]
    assert contract_for(operation).lookups[-1].kind is LookupKind.RETRIEVE
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, oid)
    assert record.resolution is not None
    assert record.resolution.method == "lookup:retrieve"


@pytest.mark.parametrize("operation", sorted(ACTED))
def test_an_action_the_object_does_not_show_stays_unknown(env: Env, operation: str) -> None:
    case = ACTED[operation]
    oid = _acted_lost(env, case, Fault.drop_before_commit)

    record = env.reconciled()

    [untouched] = [o for o in env.fake.objects(case.kind) if o["id"] == oid]
    assert untouched["status"] == case.before
    assert env.fake.effect_count(operation) == 0
    assert len(env.fake.requests("POST", case.path(oid))) == 1
    assert [r.path for r in env.fake.requests("GET")] == [f"/v1/{case.kind}/{oid}"]
    assert (record.status, record.provider_result_id) == (EffectStatus.UNKNOWN, None)
