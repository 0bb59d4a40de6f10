"""The drop-in client against the fake, ledger on SQLite and PostgreSQL: both sides asserted every time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any

import pytest
import stripe

from safe_effects import (
    EffectDeferred,
    EffectRejected,
    EffectStatus,
    EffectUnknown,
    IntentConflict,
    InvalidInput,
    InvalidIntentKey,
    MissingIntentKey,
    request_digest,
)
from safe_effects._purge import purge_settled
from safe_effects.testing import Fault
from stripe_safe import MAX_METADATA_KEYS, METADATA_INTENT, METADATA_TENANT, StripeClient, receipt_of
from stripe_safe.testing import rate_limit_fault, server_error_fault

from .conftest import API_KEY, KEY, PI, Env, raw_client

KEY_WINDOW_PASSED = timedelta(hours=25)


def create(env: Env, params: dict[str, object] = PI, key: str = KEY) -> stripe.PaymentIntent:
    return env.client.v1.payment_intents.create(params=params, options={"idempotency_key": key})  # type: ignore[arg-type]


def read_then_close(env: Env, read: Coroutine[Any, Any, stripe.PaymentIntent]) -> stripe.PaymentIntent:
    """An async read, its httpx pool closed with the event loop it belongs to, as any async SDK user must."""
    transport = env.client._requestor._client
    assert transport is not None

    async def run() -> stripe.PaymentIntent:
        try:
            return await read
        finally:
            await transport.close_async()

    return asyncio.run(run())


def unsettled_past_the_key_window(env: Env, fault: Fault) -> None:
    """A create lost to ``fault``, then retried past Stripe's key window: its lookup settles nothing."""
    env.fake.inject(fault)
    with pytest.raises(EffectUnknown):
        create(env)
    env.clock.advance(KEY_WINDOW_PASSED)
    with pytest.raises(EffectUnknown, match="no lookup could settle it"):
        create(env)


def test_create_is_confirmed_stamped_and_answered_from_the_ledger_by_a_read(env: Env) -> None:
    first = create(env)
    again = create(env)
    first_receipt, again_receipt = receipt_of(first), receipt_of(again)
    assert first_receipt is not None
    assert again_receipt is not None
    assert (first_receipt.from_ledger, again_receipt.from_ledger) == (False, True)
    assert "_safe_effects_receipt" not in again  # not a field of the Stripe object
    assert isinstance(again, stripe.PaymentIntent)
    assert again.id == first.id
    assert again.status == "succeeded"
    assert env.posts() == 1
    assert env.fake.effect_count("payment_intents.create") == 1
    assert len(env.fake.requests("GET", f"/v1/payment_intents/{first.id}")) == 1
    stored = env.fake.payment_intents[0]
    assert stored["metadata"] == {METADATA_INTENT: KEY, METADATA_TENANT: "default"}
    assert env.fake.requests("POST")[0].header("idempotency-key") == KEY
    record = env.record()
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, first.id)
    assert record.resolution is not None
    assert record.resolution.method == "provider_response"


def test_metadata_stamping_leaves_the_digest_of_the_callers_params(env: Env) -> None:
    params = {**PI, "metadata": {"order": "o_1"}}
    create(env, params)
    assert env.fake.payment_intents[0]["metadata"] == {"order": "o_1", METADATA_INTENT: KEY, METADATA_TENANT: "default"}
    expected = {"path": "/v1/payment_intents", "params": params}
    digest = request_digest({"provider": "stripe", "operation": "payment_intents.create", "params": expected})
    assert env.record().request_digest == digest


def test_metadata_with_no_room_for_the_intent_is_refused_before_anything_is_recorded(env: Env) -> None:
    full = {f"k{n}": "v" for n in range(MAX_METADATA_KEYS - 1)}
    with pytest.raises(InvalidInput, match=r"metadata has 49 keys.*keep the caller's to 48 or fewer"):
        create(env, {**PI, "metadata": full})
    assert env.fake.requests() == []
    assert env.ledger.store.list_by_status(list(EffectStatus)) == []

    fits = {f"k{n}": "v" for n in range(MAX_METADATA_KEYS - 2)}
    create(env, {**PI, "metadata": fits})
    assert len(env.fake.payment_intents[0]["metadata"]) == MAX_METADATA_KEYS
    assert (env.record().status, env.fake.effect_count("payment_intents.create")) == (EffectStatus.CONFIRMED, 1)


@pytest.mark.parametrize(
    ("metadata", "refused"),
    [
        ({f"k{n}": "v" for n in range(MAX_METADATA_KEYS + 1)}, "metadata has 51 keys; Stripe allows 50"),
        ({"k" * 41: "v"}, "a metadata key is 41 characters"),
        ({"note": "x" * 501}, r"metadata\['note'\] is 501 characters; Stripe allows 500"),
    ],
    ids=["51 keys", "key of 41", "value of 501"],
)
def test_metadata_beyond_stripes_limits_is_refused_before_anything_is_recorded(
    env: Env, metadata: dict[str, str], refused: str
) -> None:
    """Sent, Stripe's 400 would end the intent rejected, and the corrected call would need a new key."""
    update = {"metadata": metadata}
    for call in (
        lambda: create(env, {**PI, "metadata": metadata}),
        lambda: env.client.v1.customers.update(
            "cus_1",
            params=update,
            options={"idempotency_key": "customer:cus_1:tag:v1"},  # type: ignore[arg-type]
        ),
    ):
        with pytest.raises(InvalidInput, match=refused):
            call()
    assert env.fake.requests() == []
    assert env.ledger.store.list_by_status(list(EffectStatus)) == []
    with pytest.raises(stripe.InvalidRequestError):  # the fake holds Stripe's limits too
        raw_client(env.fake.url).v1.payment_intents.create(params={**PI, "metadata": metadata})  # type: ignore[arg-type]
    assert env.fake.effect_count("payment_intents.create") == 0
    create(env, {**PI, "metadata": {"k" * 40: "x" * 500}})  # at the limits: taken
    assert (env.record().status, env.fake.effect_count("payment_intents.create")) == (EffectStatus.CONFIRMED, 1)


def test_the_same_intent_key_with_another_accounts_per_call_api_key_is_a_conflict_not_a_repeat(env: Env) -> None:
    """One client serving many Stripe accounts by a per-call api_key (the SDK's way): answered from the
    ledger as a repeat of the first account's charge, the second account was never charged (a lost effect)."""
    first = env.client.v1.payment_intents.create(
        params=PI,  # type: ignore[arg-type]
        options={"idempotency_key": KEY, "api_key": "sk_test_acme"},
    )
    with pytest.raises(IntentConflict, match="reached the provider"):
        env.client.v1.payment_intents.create(
            params=PI,  # type: ignore[arg-type]
            options={"idempotency_key": KEY, "api_key": "sk_test_globex"},
        )
    again = env.client.v1.payment_intents.create(
        params=PI,  # type: ignore[arg-type]
        options={"idempotency_key": KEY, "api_key": "sk_test_acme"},
    )
    assert again.id == first.id  # the same account's repeat is still answered from the ledger
    assert env.fake.effect_count("payment_intents.create") == 1
    assert env.record().status is EffectStatus.CONFIRMED
    assert "sk_test_acme" not in repr(env.ledger.store.audit_trail("default", KEY)) + repr(env.record())


def test_a_per_call_api_key_an_object_carries_is_in_the_digest_like_one_given_per_call(env: Env) -> None:
    """The SDK keeps a call's ``api_key`` in the objects it returns: a write on one went out under that key
    with no fingerprint, so the client's own account calling the same intent was answered from the ledger as
    done (its coupon "deleted") while only the other account's was."""
    key = "coupon:summer:retire:v1"
    plain = env.client.without_ledger(reason="test set-up")
    plain.v1.coupons.create(params={"id": "summer", "percent_off": 10, "duration": "forever"})
    theirs = env.client.v1.coupons.retrieve("summer", options={"api_key": "sk_test_acme"})
    theirs.delete(idempotency_key=key)
    with pytest.raises(IntentConflict, match="reached the provider"):
        env.client.v1.coupons.delete("summer", options={"idempotency_key": key})
    deletes = env.fake.requests("DELETE", "/v1/coupons/summer")
    assert [d.header("authorization") for d in deletes] == ["Bearer sk_test_acme"]
    assert env.record(key).status is EffectStatus.CONFIRMED
    assert env.client.v1.coupons.delete(  # the same account's repeat, per call, is the same intent
        "summer", options={"idempotency_key": key, "api_key": "sk_test_acme"}
    ).deleted
    assert len(env.fake.requests("DELETE")) == 1


def test_missing_key_raises_before_anything_is_sent(env: Env) -> None:
    with pytest.raises(MissingIntentKey, match="idempotency_key"):
        env.client.v1.payment_intents.create(params=PI)  # type: ignore[arg-type]
    assert env.fake.requests() == []
    assert env.ledger.store.list_by_status(list(EffectStatus)) == []


def test_an_intent_named_up_front_needs_no_idempotency_key(env: Env) -> None:
    view = env.client.for_intent(KEY)
    first = view.v1.payment_intents.create(params=PI)  # type: ignore[arg-type]
    again = view.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # type: ignore[arg-type]

    assert again.id == first.id
    first_receipt, again_receipt = receipt_of(first), receipt_of(again)
    assert first_receipt is not None
    assert again_receipt is not None
    assert (first_receipt.from_ledger, again_receipt.from_ledger) == (False, True)
    posts = env.fake.requests("POST")
    assert [p.header("idempotency-key") for p in posts] == [KEY]
    assert len(env.fake.payment_intents) == 1
    assert env.record().status is EffectStatus.CONFIRMED


def test_an_intent_named_twice_differently_is_refused_before_anything_is_recorded(env: Env) -> None:
    view = env.client.for_intent(KEY)
    with pytest.raises(InvalidInput, match="name the intent once"):
        view.v1.payment_intents.create(params=PI, options={"idempotency_key": "invoice:inv_43:collect:v1"})  # type: ignore[arg-type]
    with pytest.raises(InvalidIntentKey):
        env.client.for_intent("attempt-7")
    assert env.fake.requests() == []
    assert env.ledger.store.list_by_status(list(EffectStatus)) == []


def test_objects_from_a_view_are_not_bound_to_its_intent(env: Env) -> None:
    view = env.client.for_intent(KEY)
    created = view.v1.payment_intents.create(params={**PI, "confirm": False})  # type: ignore[arg-type]
    read = view.v1.payment_intents.retrieve(created.id)
    read_async = read_then_close(env, view.v1.payment_intents.retrieve_async(created.id))
    for obj in (created, read, read_async):
        # a later write on the object names its own intent, as anywhere else, and the hint says how: an
        # instance method takes idempotency_key=..., where options={...} would be sent as a parameter
        with pytest.raises(MissingIntentKey, match=r"an object's own method, such as pi\.cancel\(idempotency_key="):
            obj.cancel()
    assert env.posts() == 1
    assert env.fake.payment_intents[0]["status"] != "canceled"
    assert env.record().status is EffectStatus.CONFIRMED


def test_an_object_read_async_through_a_compensating_view_does_not_compensate_with_its_own_writes(env: Env) -> None:
    """Read async through ``compensating(A)``, another PaymentIntent B kept the view's link: B's cancel was
    recorded as A's compensation and A marked compensated, its money never refunded."""
    paid = create(env)
    held = create(env, {**PI, "capture_method": "manual"}, key="invoice:inv_43:collect:v1")
    other = read_then_close(env, env.client.compensating(KEY).v1.payment_intents.retrieve_async(held.id))
    other.cancel(idempotency_key="invoice:inv_43:release:v1")

    assert env.record("invoice:inv_43:release:v1").compensates is None
    assert env.record().status is EffectStatus.CONFIRMED
    assert env.fake.effect_count("payment_intents.cancel") == 1
    assert [p["status"] for p in env.fake.payment_intents if p["id"] == paid.id] == ["succeeded"]


def test_invalid_key_explains_how_to_build_one(env: Env) -> None:
    with pytest.raises(InvalidIntentKey, match=r"IntentKey\.build\('invoice', 'inv_42', 'collect'\)"):
        create(env, key="3f2c9a1e-random-uuid")
    assert env.fake.requests() == []


def test_a_key_no_http_header_can_carry_is_refused_before_anything_is_recorded(env: Env) -> None:
    """requests writes header values as Latin-1: a key with '€' failed inside the SDK after the claim, and the
    intent went unknown although nothing was sent. It is refused up front, in both ways of naming it."""
    key = "order:o_€1:collect:v1"
    with pytest.raises(InvalidIntentKey, match="characters an HTTP header cannot carry"):
        create(env, key=key)
    with pytest.raises(InvalidIntentKey, match="characters an HTTP header cannot carry"):
        env.client.for_intent(key)
    assert env.fake.requests() == []
    assert env.ledger.store.list_by_status(list(EffectStatus)) == []
    latin = create(env, key="order:o_ü1:collect:v1")  # Latin-1 still goes, as it did
    assert env.record("order:o_ü1:collect:v1").provider_result_id == latin.id


def test_parameter_mismatch_is_refused_before_sending(env: Env) -> None:
    create(env)
    with pytest.raises(IntentConflict):
        create(env, {**PI, "amount": 2001})
    assert env.posts() == 1
    assert len(env.fake.payment_intents) == 1
    assert env.record().status is EffectStatus.CONFIRMED


def test_a_declined_charge_whose_answer_was_lost_is_rejected_by_its_lookup_not_confirmed(env: Env) -> None:
    """Stripe keeps the declined charge (status "failed"); found by the search, it proves no money moved."""
    declined = {"amount": 300, "currency": "eur", "source": "tok_chargeDeclined"}
    env.fake.inject(Fault.drop_after_commit(path_prefix="/v1/charges"))
    with pytest.raises(EffectUnknown):
        env.client.v1.charges.create(params=declined, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    env.clock.advance(KEY_WINDOW_PASSED)  # no replay now: only the lookup can settle it

    with pytest.raises(EffectRejected):
        env.client.v1.charges.create(params=declined, options={"idempotency_key": KEY})  # type: ignore[arg-type]

    [charge] = env.fake.charges
    assert (charge["status"], charge["captured"]) == ("failed", False)
    assert env.posts() == 1
    record = env.record()
    assert (record.status, record.provider_result_id) == (EffectStatus.REJECTED, charge["id"])


def test_lost_response_is_unknown_then_a_same_key_replay_confirms_one_payment_intent(env: Env) -> None:
    env.fake.inject(Fault.drop_after_commit(path_prefix="/v1/payment_intents"))
    with pytest.raises(EffectUnknown):
        create(env)
    record = env.record()
    assert record.status is EffectStatus.UNKNOWN
    assert record.last_error_code == "after_send"
    assert env.fake.effect_count("payment_intents.create") == 1

    replayed = create(env)
    posts = env.fake.requests("POST")
    assert len(posts) == 2
    assert {p.header("idempotency-key") for p in posts} == {KEY}
    assert env.fake.effect_count("payment_intents.create") == 1
    assert len(env.fake.payment_intents) == 1
    assert [e.committed for e in env.fake.server.exchanges if e.request.method == "POST"] == [True, False]
    record = env.record()
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, replayed.id)
    assert record.resolution is not None
    assert record.resolution.method == "key_replay"


def test_after_the_key_window_the_metadata_search_finds_it_without_a_second_create(env: Env) -> None:
    env.fake.inject(Fault.drop_after_commit())
    with pytest.raises(EffectUnknown):
        create(env)
    env.clock.advance(KEY_WINDOW_PASSED)
    found = create(env)
    assert env.posts() == 1
    assert len(env.fake.payment_intents) == 1
    assert len(env.fake.requests("GET", "/v1/payment_intents/search")) == 1
    record = env.record()
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, found.id)
    assert record.resolution is not None
    assert record.resolution.method == "lookup:search"
    assert record.response_digest == request_digest(env.fake.payment_intents[0])  # the object the search found


def test_after_the_window_a_lagging_search_with_no_event_left_stays_unknown_and_sends_nothing(env: Env) -> None:
    """A search that lags is backed by the create's event (tests/stripe/test_lookup_by_events.py), but Stripe
    lists only 30 days of events: past them a search that still lags proves nothing."""
    env.fake.search_lag = timedelta(days=60)
    env.fake.inject(Fault.drop_after_commit())
    with pytest.raises(EffectUnknown):
        create(env)
    env.clock.advance(timedelta(days=31))
    with pytest.raises(EffectUnknown, match="no lookup could settle it"):
        create(env)
    assert [r.path for r in env.fake.requests("GET")] == ["/v1/payment_intents/search", "/v1/events"]
    assert env.posts() == 1
    assert len(env.fake.payment_intents) == 1
    record = env.record()
    assert (record.status, record.provider_result_id) == (EffectStatus.UNKNOWN, None)


def test_a_search_hit_counts_only_with_this_intents_exact_stamp(env: Env) -> None:
    """Were Stripe's ':' to ignore case, another intent's PaymentIntent must not confirm this one."""
    env.fake.search_folds_case = True
    create(env, key="invoice:INV_42:collect:v1")  # another intent, confirmed: its object is in the search index
    unsettled_past_the_key_window(env, Fault.drop_before_commit())  # this intent's create never happened
    assert len(env.fake.requests("GET", "/v1/payment_intents/search")) == 1
    assert env.fake.effect_count("payment_intents.create") == 1
    record = env.record()
    assert (record.status, record.provider_result_id) == (EffectStatus.UNKNOWN, None)


def test_a_saved_500_is_replayed_as_500_and_settled_by_search_after_the_window(env: Env) -> None:
    env.fake.fail_next_write(after_commit=True)  # Stripe saved the 500 after the endpoint acted
    for _ in range(2):  # the first call, then a same-key replay that gets the saved 500 back
        with pytest.raises(EffectUnknown):
            create(env)
    assert env.fake.requests("POST")[1].header("idempotency-key") == KEY
    assert env.record().status is EffectStatus.UNKNOWN
    env.clock.advance(KEY_WINDOW_PASSED)

    found = create(env)

    assert env.posts() == 2
    assert len(env.fake.payment_intents) == 1
    record = env.record()
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, found.id)
    assert record.resolution is not None
    assert record.resolution.method == "lookup:search"


def test_a_saved_500_before_anything_happened_stays_unknown_for_an_operator(env: Env) -> None:
    env.fake.fail_next_write(after_commit=False)
    with pytest.raises(EffectUnknown):
        create(env)
    env.clock.advance(KEY_WINDOW_PASSED)
    with pytest.raises(EffectUnknown, match="no lookup could settle it"):
        create(env)  # the search finds nothing, which proves nothing: no second create
    assert env.posts() == 1
    assert env.fake.payment_intents == []
    assert [r.intent_key for r in env.ledger.store.list_by_status([EffectStatus.UNKNOWN])] == [KEY]


def test_declined_card_is_rejected_with_the_payment_intent_id(env: Env) -> None:
    with pytest.raises(EffectRejected) as caught:
        create(env, {**PI, "payment_method": "pm_card_chargeDeclined"})
    assert isinstance(caught.value.provider_error, stripe.CardError)
    declined = env.fake.payment_intents
    assert len(declined) == 1
    assert declined[0]["status"] == "requires_payment_method"
    record = env.record()
    assert (record.status, record.provider_result_id) == (EffectStatus.REJECTED, declined[0]["id"])
    assert (record.last_error_class, record.last_error_code) == ("CardError", "card_declined")
    with pytest.raises(EffectRejected):
        create(env, {**PI, "payment_method": "pm_card_chargeDeclined"})
    assert env.posts() == 1


def test_a_confirm_with_another_card_is_not_rejected_by_the_earlier_cards_decline(env: Env) -> None:
    """Found by a Stripe audit: a confirm with a new card whose answer was lost (Stripe still running it) was
    looked up at once, the PaymentIntent still showing the earlier card's decline, and settled rejected; Stripe
    then charged the new card, and the caller, told it failed, charged again under a new key."""
    with pytest.raises(EffectRejected):
        create(env, {**PI, "payment_method": "pm_card_chargeDeclined"})
    (pi,) = env.fake.payment_intents
    env.fake.processing_seconds = 2.5  # past the client's 1 s read timeout
    confirm_key = "order:o_1:confirm:v1"
    with pytest.raises(EffectUnknown):
        env.client.v1.payment_intents.confirm(
            pi["id"], params={"payment_method": "pm_card_visa"}, options={"idempotency_key": confirm_key}
        )
    looked = env.ledger.reconcile(env.client.adapter, intent_key=confirm_key)  # Stripe is still running it
    assert looked.status is EffectStatus.UNKNOWN  # the decline on file is the other card's
    env.fake.processing_seconds = 0
    time.sleep(2.0)  # the fake finishes the confirm it was running
    settled = env.ledger.reconcile(env.client.adapter, intent_key=confirm_key)
    assert (settled.status, settled.provider_result_id) == (EffectStatus.CONFIRMED, pi["id"])
    assert [c["status"] for c in env.fake.objects("charges")] == ["succeeded"]


def test_a_retry_of_the_same_card_is_not_rejected_by_its_earlier_decline_while_stripe_runs_it(env: Env) -> None:
    """The card was declined (insufficient funds), the customer topped up, and the confirm retries the same card.
    Its answer is lost while Stripe still runs it; a lookup at once reads the PaymentIntent's earlier decline,
    which names this very card. Inside Stripe's normal response window that proves nothing, so the intent stays
    unknown (it was rejected before, and the caller charged again); once Stripe finishes, it is confirmed."""
    card = "pm_card_chargeDeclinedInsufficientFunds"
    with pytest.raises(EffectRejected):
        create(env, {**PI, "payment_method": card})
    (pi,) = env.fake.payment_intents
    env.fake.world.declines.pop(card)  # the customer topped up: the same card passes now
    env.fake.processing_seconds = 2.5  # past the client's 1 s read timeout
    confirm_key = "order:o_1:confirm:v1"
    with pytest.raises(EffectUnknown):
        env.client.v1.payment_intents.confirm(
            pi["id"], params={"payment_method": card}, options={"idempotency_key": confirm_key}
        )
    looked = env.ledger.reconcile(env.client.adapter, intent_key=confirm_key)  # Stripe is still running it
    assert looked.status is EffectStatus.UNKNOWN  # the decline on file names this card, but may be the old one
    assert env.fake.objects("charges") == []  # not charged yet
    env.fake.processing_seconds = 0
    time.sleep(2.0)  # the fake finishes the confirm it was running

    settled = env.ledger.reconcile(env.client.adapter, intent_key=confirm_key)
    assert (settled.status, settled.provider_result_id) == (EffectStatus.CONFIRMED, pi["id"])
    assert [c["status"] for c in env.fake.objects("charges")] == ["succeeded"]  # one charge, none to repeat


def test_the_payment_intent_inside_a_decline_is_bound_to_the_guarded_client(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stripe, "api_base", env.fake.url)  # a codebase that also set the SDK's globals: an
    monkeypatch.setattr(stripe, "api_key", API_KEY)  # object left on the global requestor would write unguarded
    options = {"idempotency_key": KEY, "stripe_account": "acct_connected_1"}
    with pytest.raises(EffectRejected) as caught:
        env.client.v1.payment_intents.create(params={**PI, "payment_method": "pm_card_chargeDeclined"}, options=options)  # type: ignore[arg-type]
    error = caught.value.provider_error
    assert isinstance(error, stripe.CardError)
    assert error.error is not None
    declined = error.error.payment_intent
    assert declined is not None

    with pytest.raises(MissingIntentKey):  # a write on it names its intent, like any other
        declined.cancel()
    cancel_key = "invoice:inv_42:cancel:v1"
    declined.cancel(idempotency_key=cancel_key)

    cancels = env.fake.requests("POST", f"/v1/payment_intents/{declined.id}/cancel")
    assert [(c.header("idempotency-key"), c.header("stripe-account")) for c in cancels] == [
        (cancel_key, "acct_connected_1")
    ]
    assert env.fake.payment_intents[0]["status"] == "canceled"
    assert env.fake.effect_count("payment_intents.cancel") == 1
    assert env.record().status is EffectStatus.REJECTED
    cancel = env.record(cancel_key)
    assert (cancel.status, cancel.operation, cancel.provider_result_id) == (
        EffectStatus.CONFIRMED,
        "payment_intents.cancel",
        declined.id,
    )


def test_rate_limit_is_retried_with_the_same_key_honouring_retry_after(env: Env) -> None:
    env.fake.inject(rate_limit_fault(retry_after=0.25))
    intent = create(env)
    posts = env.fake.requests("POST")
    assert len(posts) == 2
    assert {p.header("idempotency-key") for p in posts} == {KEY}
    assert env.sleeps == [0.25]  # the provider's Retry-After, waited out before the second attempt
    assert len(env.fake.payment_intents) == 1
    record = env.record()
    assert (record.status, record.provider_result_id, record.attempt_count) == (EffectStatus.CONFIRMED, intent.id, 1)


def test_a_retry_after_beyond_max_wait_defers_with_the_hint_and_sends_once(env: Env) -> None:
    env.fake.inject(rate_limit_fault(retry_after=30))  # FAST_RETRY allows 1 s between attempts
    with pytest.raises(EffectDeferred) as deferred:
        create(env)
    assert deferred.value.retry_after == 30
    assert env.sleeps == []  # no attempt sooner than Stripe asked
    assert env.posts() == 1
    assert env.fake.payment_intents == []
    assert env.record().status is EffectStatus.PREPARED


def test_server_error_before_execution_is_unknown_and_the_replay_runs_it_once(env: Env) -> None:
    env.fake.inject(server_error_fault())
    with pytest.raises(EffectUnknown):
        create(env)
    assert env.fake.payment_intents == []
    assert env.record().status is EffectStatus.UNKNOWN
    intent = create(env)
    assert env.posts() == 2
    assert len(env.fake.payment_intents) == 1
    assert env.record().provider_result_id == intent.id


def test_timeout_after_commit_is_unknown(env: Env) -> None:
    env.fake.inject(Fault.delay(1.5))
    with pytest.raises(EffectUnknown):
        create(env)
    assert len(env.fake.payment_intents) == 1
    assert env.record().status is EffectStatus.UNKNOWN


def test_refused_connection_defers_without_any_effect(env: Env, closed_port: int) -> None:
    client = StripeClient(API_KEY, ledger=env.ledger, base_addresses={"api": f"http://127.0.0.1:{closed_port}"})
    with pytest.raises(EffectDeferred):
        client.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    record = env.record()
    assert (record.status, record.last_error_code) == (EffectStatus.PREPARED, "before_send:NewConnectionError")
    assert env.fake.requests() == []
    assert create(env).status == "succeeded"
    assert env.posts() == 1


def test_tenants_get_distinct_provider_keys_and_stamps(env: Env) -> None:
    other = StripeClient(API_KEY, ledger=env.ledger, tenant="acme", base_addresses={"api": env.fake.url})
    create(env)
    other.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    keys = [p.header("idempotency-key") for p in env.fake.requests("POST")]
    assert keys == [KEY, f"{KEY}@acme"]
    assert [pi["metadata"][METADATA_TENANT] for pi in env.fake.payment_intents] == ["default", "acme"]
    assert env.record(tenant="acme").status is EffectStatus.CONFIRMED


def test_reads_pass_through_and_the_opt_out_is_spelled_out(env: Env) -> None:
    raw = env.client.without_ledger(reason="customer creation is deduplicated by email upstream")
    customer = raw.v1.customers.create(params={"email": "a@example.com"})
    assert env.client.v1.customers.retrieve(customer.id).email == "a@example.com"
    assert env.ledger.store.list_by_status(list(EffectStatus)) == []
    with pytest.raises(ValueError, match="reason"):
        env.client.without_ledger(reason=" ")


def test_the_opt_out_keeps_the_clients_oauth_client_id(env: Env) -> None:
    """It was dropped: the plain client's ``oauth.authorize_url()`` raised "No client_id provided"."""
    client = StripeClient(API_KEY, ledger=env.ledger, base_addresses={"api": env.fake.url}, client_id="ca_123")
    url = client.without_ledger(reason="an OAuth link sends nothing").oauth.authorize_url({"scope": "read_write"})
    assert "client_id=ca_123" in url
    assert env.fake.requests() == []


def test_a_purged_intents_payment_intent_does_not_settle_the_key_recorded_again(env: Env) -> None:
    """Stripe's search keeps every object. Once a settled record is purged and its key recorded again, the
    PaymentIntent made for the purged one must not confirm today's, whose create never reached Stripe."""
    old = create(env)
    env.clock.advance(timedelta(days=200))
    assert purge_settled(env.ledger.store, older_than=timedelta(days=180), now=env.clock()).deleted == 1
    unsettled_past_the_key_window(env, Fault.drop_before_commit())  # today's create never reached Stripe
    assert len(env.fake.requests("GET", "/v1/payment_intents/search")) == 1
    assert [pi["id"] for pi in env.fake.payment_intents] == [old.id]  # the old one is there, and found
    assert env.fake.effect_count("payment_intents.create") == 1
    record = env.record()
    assert (record.status, record.provider_result_id) == (EffectStatus.UNKNOWN, None)
