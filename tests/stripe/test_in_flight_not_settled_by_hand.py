"""An intent still in flight is settled by no one but its worker or, once its lease runs out, a reconciliation.

A worker charged and died before it wrote the answer (killed between Stripe's 200 and the confirm): the record
is in flight under a live lease, and the PaymentIntent exists. An operator (or a caller's tooling through
``Ledger.settle``) who sees no charge yet and settles the intent as rejected sends its job on to ``:v2``, which
charges a second time. So neither path may move an in-flight record: the operator is told to reconcile once the
lease expires, and the retry after that finds the one charge.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from safe_effects import (
    CrashPlan,
    CrashPoint,
    EffectStatus,
    IllegalTransition,
    InvalidInput,
    LeasePolicy,
    Ledger,
    Operator,
    Resolution,
    SimulatedCrash,
)
from safe_effects.testing import FakeClock
from stripe_safe import StripeClient
from stripe_safe.testing import FakeStripe

from .conftest import API_KEY, FAST_RETRY, KEY, PI, SHORT_TIMEOUT


@pytest.fixture
def crashed(fake: FakeStripe, clock: FakeClock, store_url: str) -> Iterator[tuple[Ledger, StripeClient]]:
    """A charge Stripe made whose worker died before recording it: the record is in flight, its lease live."""
    dying = Ledger.open(
        store_url, clock=clock, retry=FAST_RETRY, crash_plan=CrashPlan.crash_at(CrashPoint.AFTER_RESPONSE)
    )
    client = StripeClient(API_KEY, ledger=dying, base_addresses={"api": fake.url}, timeout=SHORT_TIMEOUT)
    with pytest.raises(SimulatedCrash):
        client.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    dying.close()
    ledger = Ledger.open(store_url, clock=clock, retry=FAST_RETRY, lease=LeasePolicy(poll_interval=0.01))
    yield ledger, StripeClient(API_KEY, ledger=ledger, base_addresses={"api": fake.url}, timeout=SHORT_TIMEOUT)
    ledger.close()


def test_an_in_flight_intent_cannot_be_resolved_or_settled_by_hand(
    fake: FakeStripe, clock: FakeClock, crashed: tuple[Ledger, StripeClient]
) -> None:
    ledger, client = crashed
    record = ledger.get(KEY)
    assert record.status is EffectStatus.IN_FLIGHT
    assert not record.lease_expired(clock())
    [charge] = fake.payment_intents  # Stripe acted; the ledger has not heard
    trail = ledger.store.audit_trail("default", KEY)

    with pytest.raises(InvalidInput, match="is in_flight: only an unknown intent can be resolved"):
        Operator(ledger).resolve(
            KEY, to=EffectStatus.REJECTED, operator="ops@example.com", reason="no charge in the dashboard",
            expect_version=record.version,
        )  # fmt: skip
    with pytest.raises(InvalidInput, match="is in_flight"):
        Operator(ledger).resolve(
            KEY, to=EffectStatus.CONFIRMED, operator="ops@example.com", reason="seen", expect_version=record.version,
            provider_result_id="pi_elsewhere", evidence="dashboard",
        )  # fmt: skip
    for to in (EffectStatus.REJECTED, EffectStatus.CONFIRMED):
        with pytest.raises(IllegalTransition):
            ledger.settle(record, to, resolution=Resolution(method="tooling", reason="batch fix"), actor="cron")

    # nothing moved: the ledger, its trail, and what Stripe was asked
    assert ledger.get(KEY) == record
    assert ledger.store.audit_trail("default", KEY) == trail
    assert len(fake.requests("POST", "/v1/payment_intents")) == 1

    # once the lease runs out, the job's retry replays the key and gets the one charge
    clock.advance(timedelta(minutes=3))
    intent = client.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    assert intent.id == charge["id"]
    assert len(fake.payment_intents) == 1
    assert fake.effect_count("payment_intents.create") == 1
    settled = ledger.get(KEY)
    assert (settled.status, settled.provider_result_id) == (EffectStatus.CONFIRMED, charge["id"])
