"""Crash points from the plugin: a worker SIGKILLed by a trap on the fake, an in-process drop, an executor plan."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import requests

from safe_effects import CrashPoint, EffectUnknown, Ledger, SimulatedCrash, open_store
from safe_effects.testing import CrashKit, FakeClock, assert_effect
from stripe_safe.testing import FakeStripe

from ._scenarios import CHARGE, PAYMENT, collect_invoice

WORKER = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from safe_effects import CrashPlan, Ledger
from _scenarios import collect_invoice
collect_invoice(Ledger.open(sys.argv[1], crash_plan=CrashPlan.from_env()), sys.argv[2])
"""
PAST_THE_LEASE = timedelta(minutes=3)


def effects(fake: FakeStripe) -> int:
    return fake.effect_count("payment_intents.create")


@pytest.mark.parametrize("point", [CrashPoint.AFTER_DISPATCH, CrashPoint.AFTER_PROVIDER_ACCEPT])
def test_a_worker_killed_by_a_trap_on_the_fake_is_settled_by_the_next_call_with_one_effect(
    safe_crash: CrashKit,
    fake_stripe: FakeStripe,
    safe_ledger: Ledger,
    safe_store_url: str,
    safe_clock: FakeClock,
    point: CrashPoint,
) -> None:
    workers: list[subprocess.Popen[bytes]] = []
    trap = safe_crash.at(fake_stripe.server, point, pid=lambda: workers[0].pid)
    workers.append(subprocess.Popen([sys.executable, "-c", WORKER, safe_store_url, fake_stripe.url]))
    assert workers[0].wait(timeout=60) == -signal.SIGKILL
    assert trap.fired
    assert_effect(safe_ledger, CHARGE, status="in_flight", provider_effects=effects(fake_stripe))

    safe_clock.advance(PAST_THE_LEASE)
    collect_invoice(safe_ledger, fake_stripe.url)
    assert_effect(safe_ledger, CHARGE, status="confirmed", provider_effects=effects(fake_stripe))


def test_a_worker_killed_by_its_own_crash_plan_before_dispatch_sent_nothing(
    safe_crash: CrashKit, fake_stripe: FakeStripe, safe_ledger: Ledger, safe_store_url: str, safe_clock: FakeClock
) -> None:
    env = safe_crash.worker_env("before_dispatch")
    worker = subprocess.run([sys.executable, "-c", WORKER, safe_store_url, fake_stripe.url], env=env, check=False)
    assert worker.returncode == -signal.SIGKILL
    assert fake_stripe.requests() == []
    safe_clock.advance(PAST_THE_LEASE)
    collect_invoice(safe_ledger, fake_stripe.url)
    assert_effect(safe_ledger, CHARGE, status="confirmed", provider_effects=effects(fake_stripe))


@pytest.mark.parametrize(("point", "acted"), [("after_dispatch", 0), ("after_provider_accept", 1)])
def test_in_process_a_trap_drops_the_connection_at_its_point(
    safe_crash: CrashKit, fake_stripe: FakeStripe, safe_ledger: Ledger, point: str, acted: int
) -> None:
    safe_crash.at(fake_stripe.server, point)
    with pytest.raises(EffectUnknown):
        collect_invoice(safe_ledger, fake_stripe.url)
    assert_effect(safe_ledger, CHARGE, status="unknown", provider_effects=effects(fake_stripe), expected_effects=acted)
    collect_invoice(safe_ledger, fake_stripe.url)
    assert_effect(safe_ledger, CHARGE, status="confirmed", provider_effects=effects(fake_stripe))


def test_an_executor_crash_plan_raises_in_process_and_the_intent_resumes(
    safe_crash: CrashKit, fake_stripe: FakeStripe, safe_store_url: str, safe_clock: FakeClock
) -> None:
    plan = safe_crash.plan("after_response")
    with (
        Ledger(open_store(safe_store_url), clock=safe_clock, crash_plan=plan) as crashing,
        pytest.raises(SimulatedCrash),
    ):
        collect_invoice(crashing, fake_stripe.url)
    with Ledger(open_store(safe_store_url), clock=safe_clock) as ledger:
        safe_clock.advance(PAST_THE_LEASE)
        collect_invoice(ledger, fake_stripe.url)
        assert_effect(ledger, CHARGE, status="confirmed", provider_effects=effects(fake_stripe))


def test_executor_points_are_refused_on_a_fake_and_so_is_the_test_process(
    safe_crash: CrashKit, fake_stripe: FakeStripe
) -> None:
    with pytest.raises(ValueError, match=r"use plan\('before_dispatch'\)"):
        safe_crash.at(fake_stripe.server, "before_dispatch")
    with pytest.raises(ValueError, match="test process itself"):
        safe_crash.at(fake_stripe.server, "after_dispatch", pid=os.getpid())


@pytest.mark.safe_effects(crash_at=["before_dispatch"])
def test_the_marker_makes_safe_ledger_crash_at_an_executor_point(safe_ledger: Ledger, fake_stripe: FakeStripe) -> None:
    with pytest.raises(SimulatedCrash):
        collect_invoice(safe_ledger, fake_stripe.url)
    assert fake_stripe.requests() == []
    assert_effect(safe_ledger, CHARGE, status="in_flight", provider_effects=effects(fake_stripe), expected_effects=0)


def test_an_in_process_accept_trap_passes_a_request_the_provider_refused_and_drops_the_next_commit(
    safe_crash: CrashKit, fake_stripe: FakeStripe, safe_ledger: Ledger
) -> None:
    trap = safe_crash.at(fake_stripe.server, "after_provider_accept")
    refused = requests.post(
        f"{fake_stripe.url}/v1/payment_intents",
        data=PAYMENT,
        headers={"Authorization": "Bearer sk_live_wrong", "Idempotency-Key": "other"},
        timeout=5,
    )
    assert refused.status_code == 401  # answered: nothing committed, so nothing to crash after
    assert not trap.fired
    with pytest.raises(EffectUnknown):
        collect_invoice(safe_ledger, fake_stripe.url)
    assert trap.fired
    assert [e.committed for e in fake_stripe.server.exchanges] == [False, True]
    collect_invoice(safe_ledger, fake_stripe.url)
    assert_effect(safe_ledger, CHARGE, status="confirmed", provider_effects=effects(fake_stripe))


def test_a_drop_trap_cleared_from_the_fake_has_not_fired(fake_stripe: FakeStripe) -> None:
    kit = CrashKit()
    trap = kit.at(fake_stripe.server, "after_provider_accept")
    fake_stripe.server.reset()  # a long-lived fake forgets its faults between tests
    assert not trap.fired
    assert kit.pending() == [trap.fault]
    kit.disarm()


def test_disarming_takes_a_drop_trap_off_the_fake(fake_stripe: FakeStripe, safe_ledger: Ledger) -> None:
    kit = CrashKit()
    trap = kit.at(fake_stripe.server, "after_provider_accept")
    kit.disarm()
    assert fake_stripe.server.pending_faults() == []
    collect_invoice(safe_ledger, fake_stripe.url)  # answered: the disarmed trap drops nothing
    assert not trap.fired
    assert_effect(safe_ledger, CHARGE, status="confirmed", provider_effects=effects(fake_stripe))


def test_a_plan_for_the_test_process_refuses_sigkill(safe_crash: CrashKit) -> None:
    with pytest.raises(ValueError, match=r"refusing action='sigkill'.*would end the test run.*worker_env"):
        safe_crash.plan("before_dispatch", action="sigkill")


@pytest.mark.parametrize("point", ["after_dispatch", "after_provider_accept"])
def test_a_point_only_a_fake_sees_is_refused_for_a_ledgers_plan(safe_crash: CrashKit, point: str) -> None:
    """A ledger never reaches these points: a plan or worker environment naming one would never fire."""
    with pytest.raises(ValueError, match=rf"{point} happens at the provider.*safe_crash\.at\(fake\.server"):
        safe_crash.plan(point)
    with pytest.raises(ValueError, match=rf"{point} happens at the provider"):
        safe_crash.worker_env("before_dispatch", point)
