"""The reconciler's adapter from the environment: settles a lost create by search, and never writes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from safe_effects import (
    EffectRequest,
    EffectStatus,
    EffectUnknown,
    IntentNotFound,
    InvalidInput,
    Operator,
    SafeEffectsError,
)
from safe_effects.testing import Fault
from stripe_safe import StripeCall, adapter_from_env

from .conftest import KEY, PI, Env

CUSTOMER_CREATE = EffectRequest(
    operation="customers.create", params={}, payload=StripeCall("post", "/v1/customers", {}, {}, "api", None)
)


def test_lookup_only_adapter_confirms_a_lost_create_without_posting(env: Env) -> None:
    env.fake.inject(Fault.drop_after_commit(path_prefix="/v1/payment_intents"))
    with pytest.raises(EffectUnknown):
        env.client.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    adapter = adapter_from_env({"STRIPE_API_KEY": "sk_test_reconciler", "STRIPE_API_BASE": env.fake.url})

    record = env.ledger.reconcile(adapter, intent_key=KEY)

    assert record.status is EffectStatus.CONFIRMED
    assert record.provider_result_id == env.fake.payment_intents[0]["id"]
    assert record.resolution is not None
    assert record.resolution.method.startswith("lookup:")
    assert env.posts() == 1
    assert env.fake.effect_count("payment_intents.create") == 1


def test_lookup_only_adapter_refuses_to_write(env: Env) -> None:
    adapter = adapter_from_env({"STRIPE_API_KEY": "sk_test_reconciler", "STRIPE_API_BASE": env.fake.url})
    with pytest.raises(SafeEffectsError, match="only looks effects up"):
        adapter.dispatch(CUSTOMER_CREATE, "invoice:inv_1:collect:v1")
    assert env.posts() == 0


def test_the_cli_reconciler_finds_the_registered_stripe_adapter(env: Env) -> None:
    env.fake.inject(Fault.drop_after_commit(path_prefix="/v1/payment_intents"))
    with pytest.raises(EffectUnknown):
        env.client.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    environment = {**os.environ, "STRIPE_API_KEY": "sk_test_reconciler", "STRIPE_API_BASE": env.fake.url}

    done = subprocess.run(
        [sys.executable, "-m", "safe_effects.cli", "reconcile", "--store", env.store_url, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=environment,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    record = env.record()
    assert record.status is EffectStatus.CONFIRMED
    assert record.provider_result_id == env.fake.payment_intents[0]["id"]
    assert env.posts() == 1


def test_a_refund_through_the_lookup_only_adapter_is_refused_before_anything_is_recorded(env: Env) -> None:
    """``safe-effects compensate`` builds the registered adapter from the environment: it cannot send, so the
    refund is refused before the ledger records it. Nothing names it on the original, and the application's
    own refund under the same key goes through afterwards (a recorded rejection would have held that key)."""
    pi = env.client.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    confirmed = env.record()
    adapter = adapter_from_env({"STRIPE_API_KEY": "sk_test_operator", "STRIPE_API_BASE": env.fake.url})
    refund = "invoice:inv_42:refund:v1"
    with pytest.raises(InvalidInput, match=r"only looks effects up.*nothing was recorded"):
        Operator(env.ledger).compensate(
            adapter, original_key=KEY, compensating_key=refund, operation="refunds.create",
            params={"payment_intent": pi.id}, operator="alice", reason="cancelled",
            expect_version=confirmed.version,
        )  # fmt: skip
    assert env.posts("/v1/refunds") == 0
    assert env.fake.effect_count("refunds.create") == 0
    with pytest.raises(IntentNotFound):
        env.ledger.get(refund)
    assert env.record() == confirmed  # not even named: same status, version and compensated_by
    made = env.client.compensating(KEY).v1.refunds.create(
        params={"payment_intent": pi.id}, options={"idempotency_key": refund}
    )  # type: ignore[arg-type]
    assert made.id == env.fake.refunds[0]["id"]
    assert env.fake.effect_count("refunds.create") == 1
    assert env.record(refund).status is EffectStatus.CONFIRMED
    assert env.record().status is EffectStatus.COMPENSATED


def test_a_refund_in_doubt_stays_unknown_when_the_lookup_only_adapter_refuses_its_replay(env: Env) -> None:
    """The app's refund reached Stripe, its answer was lost. An operator runs the same compensation with the
    environment's adapter: its refusal of the replay says nothing about the first attempt, so the refund stays
    unknown (never rejected), and no second refund under another key can go out."""
    pi = env.client.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    refund, params = "invoice:inv_42:refund:v1", {"payment_intent": pi.id, "amount": 500}
    env.fake.inject(Fault.drop_after_commit(path_prefix="/v1/refunds"))
    with pytest.raises(EffectUnknown):
        env.client.compensating(KEY).v1.refunds.create(params=params, options={"idempotency_key": refund})  # type: ignore[arg-type]
    operator, adapter = (
        Operator(env.ledger),
        adapter_from_env({"STRIPE_API_KEY": "sk_op", "STRIPE_API_BASE": env.fake.url}),
    )
    with pytest.raises(EffectUnknown):
        operator.compensate(
            adapter, original_key=KEY, compensating_key=refund, operation="refunds.create",
            params={"path": "/v1/refunds", "params": params}, operator="alice", reason="push it through",
            expect_version=env.record().version,
        )  # fmt: skip
    assert env.record(refund).status is EffectStatus.UNKNOWN
    with pytest.raises(InvalidInput, match=r"only looks effects up.*nothing was recorded"):
        operator.compensate(
            adapter, original_key=KEY, compensating_key="invoice:inv_42:refund:v2", operation="refunds.create",
            params={"path": "/v1/refunds", "params": params}, operator="alice", reason="again",
            expect_version=env.record().version,
        )  # fmt: skip
    assert len(env.fake.refunds) == 1
    assert env.fake.effect_count("refunds.create") == 1
