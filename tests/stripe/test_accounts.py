"""Connect: the account a write acts on (Stripe-Account, Stripe-Context) is part of the intent, is recorded,
and every read back (the ledger's answer, the reconciler's lookups) is made on that account.

The fake scopes objects and idempotency keys by (API key, account) as Stripe does, so a read on the wrong
account answers 404 and one key on two accounts runs twice.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import stripe

from safe_effects import EffectStatus, EffectUnknown, IntentConflict, MissingIntentKey
from safe_effects.testing import Fault
from stripe_safe import StripeClient, receipt_of
from stripe_safe.testing import FakeStripe

from .conftest import API_KEY, KEY, PI, Env, raw_client

ACCOUNT = "acct_connected_1"
OTHER = "acct_connected_2"
KEY_WINDOW_PASSED = timedelta(hours=25)


def create(env: Env, account: str, key: str = KEY) -> stripe.PaymentIntent:
    options = {"idempotency_key": key, "stripe_account": account}
    return env.client.v1.payment_intents.create(params=PI, options=options)  # type: ignore[arg-type]


def test_the_fake_scopes_objects_and_keys_by_account(fake: FakeStripe) -> None:
    raw = raw_client(fake.url)
    on_a = raw.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY, "stripe_account": ACCOUNT})  # type: ignore[arg-type]
    on_b = raw.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY, "stripe_account": OTHER})  # type: ignore[arg-type]
    assert on_a.id != on_b.id  # one key, two accounts: two requests, as on Stripe
    assert (fake.account_of(on_a.id), fake.account_of(on_b.id)) == (ACCOUNT, OTHER)
    with pytest.raises(stripe.InvalidRequestError, match="No such payment_intent"):
        raw.v1.payment_intents.retrieve(on_a.id)  # the platform does not see a connected account's object
    assert raw.v1.payment_intents.retrieve(on_a.id, options={"stripe_account": ACCOUNT}).id == on_a.id


def test_a_connected_account_write_is_answered_from_the_ledger_by_a_read_on_that_account(env: Env) -> None:
    first = create(env, ACCOUNT)
    again = create(env, ACCOUNT)

    receipt = receipt_of(again)
    assert receipt is not None
    assert receipt.from_ledger
    assert again.id == first.id
    assert again.stripe_account == ACCOUNT  # later calls on the object act on the same account
    post = env.fake.requests("POST")
    assert [p.header("stripe-account") for p in post] == [ACCOUNT]
    reads = env.fake.requests("GET", f"/v1/payment_intents/{first.id}")
    assert [r.header("stripe-account") for r in reads] == [ACCOUNT]
    assert env.fake.account_of(first.id) == ACCOUNT
    assert env.fake.effect_count("payment_intents.create") == 1
    record = env.record()
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, first.id)
    assert record.summary["stripe_account"] == ACCOUNT


def test_the_reconciler_looks_a_connected_account_write_up_on_that_account(env: Env) -> None:
    env.fake.inject(Fault.drop_after_commit(path_prefix="/v1/payment_intents"))
    with pytest.raises(EffectUnknown):
        create(env, ACCOUNT)
    env.clock.advance(KEY_WINDOW_PASSED)

    record = env.reconciled()  # the record only

    searches = env.fake.requests("GET", "/v1/payment_intents/search")
    assert [s.header("stripe-account") for s in searches] == [ACCOUNT]
    assert env.posts() == 1
    [created] = env.fake.payment_intents
    assert env.fake.account_of(created["id"]) == ACCOUNT
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, created["id"])
    assert record.resolution is not None
    assert record.resolution.method == "lookup:search"


def test_one_intent_on_another_account_is_refused_before_anything_is_sent(env: Env) -> None:
    env.fake.inject(Fault.drop_after_commit(path_prefix="/v1/payment_intents"))
    with pytest.raises(EffectUnknown):
        create(env, ACCOUNT)

    with pytest.raises(IntentConflict):  # a same-key replay on OTHER would be a new key there: a second charge
        create(env, OTHER)

    posts = env.fake.requests("POST")
    assert [(p.header("stripe-account"), p.header("idempotency-key")) for p in posts] == [(ACCOUNT, KEY)]
    assert env.fake.effect_count("payment_intents.create") == 1
    record = env.record()
    assert (record.status, record.summary["stripe_account"]) == (EffectStatus.UNKNOWN, ACCOUNT)


def test_the_clients_own_account_is_part_of_the_intent_too(env: Env) -> None:
    on_account = StripeClient(API_KEY, ledger=env.ledger, stripe_account=ACCOUNT, base_addresses={"api": env.fake.url})
    on_account.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # type: ignore[arg-type]

    with pytest.raises(IntentConflict):
        create(env, OTHER)
    same = create(env, ACCOUNT)  # the per-call option naming the client's account is the same intent

    assert [p.header("stripe-account") for p in env.fake.requests("POST")] == [ACCOUNT]
    assert env.fake.effect_count("payment_intents.create") == 1
    record = env.record()
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, same.id)
    assert record.summary["stripe_account"] == ACCOUNT


@pytest.mark.parametrize("chain", [("ctx_A",), ("ctx_A", None), (None,)], ids=["set", "set-then-cleared", "cleared"])
def test_with_stripe_context_sends_what_the_sdk_sends_and_stays_guarded(
    env: Env, chain: tuple[str | None, ...]
) -> None:
    plain: stripe.StripeClient = stripe.StripeClient(
        API_KEY, stripe_account=ACCOUNT, base_addresses={"api": env.fake.url}, max_network_retries=0
    )
    safe = StripeClient(API_KEY, ledger=env.ledger, stripe_account=ACCOUNT, base_addresses={"api": env.fake.url})
    for context in chain:
        plain, safe = plain.with_stripe_context(context), safe.with_stripe_context(context)
    assert isinstance(safe, StripeClient)

    plain.v1.customers.create(params={})
    with pytest.raises(MissingIntentKey):
        safe.v1.customers.create(params={})
    safe.v1.customers.create(params={}, options={"idempotency_key": KEY})

    sdk, ours = env.fake.requests("POST")
    scope = ("stripe-account", "stripe-context")
    assert [ours.header(h) for h in scope] == [sdk.header(h) for h in scope]
    assert ours.header("stripe-account") is None  # the SDK's with_stripe_context drops stripe_account
    assert ours.header("idempotency-key") == KEY
    record = env.record()
    assert record.status is EffectStatus.CONFIRMED
    assert record.summary.get("stripe_context") == ours.header("stripe-context")
    assert "stripe_account" not in record.summary
