"""A call that waits for a holder whose lease then runs out reconciles the intent itself.

Worker A charged and died before recording the answer (in flight, lease live). Worker B's job retry finds it
held and waits; while it waits the lease lapses. The holder is lost, not finished, so B takes the record over
(unknown, worker lost) and replays the key within Stripe's window: the one charge, as a receipt, not an
``EffectUnknown`` that sends the job round again.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from safe_effects import CrashPlan, CrashPoint, EffectStatus, LeasePolicy, Ledger, SimulatedCrash
from safe_effects.testing import FakeClock
from stripe_safe import StripeClient
from stripe_safe.testing import FakeStripe

from .conftest import API_KEY, FAST_RETRY, KEY, PI, SHORT_TIMEOUT


def _client(ledger: Ledger, fake: FakeStripe) -> StripeClient:
    return StripeClient(API_KEY, ledger=ledger, base_addresses={"api": fake.url}, timeout=SHORT_TIMEOUT)


def test_a_waiter_whose_holder_lease_lapses_replays_and_gets_the_one_charge(
    fake: FakeStripe, clock: FakeClock, store_url: str
) -> None:
    dying = Ledger.open(store_url, clock=clock, crash_plan=CrashPlan.crash_at(CrashPoint.AFTER_RESPONSE))
    with pytest.raises(SimulatedCrash):
        _client(dying, fake).v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    dying.close()
    [charge] = fake.payment_intents

    polls: list[float] = []

    def poll(seconds: float) -> None:  # each poll of the waiter lets a minute pass on the shared clock
        polls.append(seconds)
        clock.advance(timedelta(minutes=1))

    lease = LeasePolicy(wait_for_other=timedelta(seconds=30), poll_interval=0.01)
    waiter = Ledger.open(store_url, clock=clock, retry=FAST_RETRY, lease=lease, sleep=poll)
    try:
        assert waiter.get(KEY).status is EffectStatus.IN_FLIGHT  # held: the call waits
        intent = _client(waiter, fake).v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # type: ignore[arg-type]
        assert polls  # it did wait for the holder before taking over
        assert intent.id == charge["id"]
        record = waiter.get(KEY)
        assert (record.status, record.provider_result_id, record.attempt_count) == (
            EffectStatus.CONFIRMED, charge["id"], 2,
        )  # fmt: skip
        trail = [(a.from_status, a.to_status) for a in waiter.store.audit_trail("default", KEY)]
        assert ("in_flight", "unknown") in trail  # the lost worker, recorded before the replay
    finally:
        waiter.close()
    assert len(fake.requests("POST", "/v1/payment_intents")) == 2  # the charge and its same-key replay
    assert len(fake.payment_intents) == 1
    assert fake.effect_count("payment_intents.create") == 1
