"""A lookup's "refused" or "absent" proves nothing while the last request may still be running at the provider
(``_response_window.may_still_run``): for the caller's retry, the reconciler, an operator's resolution and a
compensation's replacement; counted from the latest attempt, a retry inside the call or a lost worker's lease
included. Each test checks the generic fake's effects and the ledger rows, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from safe_effects import (
    EffectRecord,
    EffectRejected,
    EffectRequest,
    EffectStatus,
    EffectUnknown,
    IllegalTransition,
    InvalidInput,
    Ledger,
    LookupResult,
    LookupStatus,
    Operator,
    Reconciler,
    RetryPolicy,
)
from safe_effects.testing import FakeClock, GenericFakeAdapter, GenericFakeProvider, generic_contract

from ._slow_requests import LandsAfterItsTimeout, RateLimitedFirst, RateLimitedThenHeld, RefusesUntilFound

KEY, KEY_V2 = "invoice:inv_42:collect:v1", "invoice:inv_42:collect:v2"
R1, R2 = "invoice:inv_42:refund:v1", "invoice:inv_42:refund:v2"
CHARGE = EffectRequest(operation="charge", params={"amount": 2000})
REFUND = EffectRequest(operation="refund", params={"charge": "fx_1"})
NO_WAIT = RetryPolicy(initial_wait=0.0, max_wait=0.05)
OpenLedger = Callable[..., Ledger]  # the open_ledger fixture
CONTRACT = generic_contract(dedupe=False, lookup_proves_absence=True)
WINDOW = CONTRACT.normal_response_window  # 5 s


def advancing(clock: FakeClock) -> Callable[[float], None]:
    """A retry's back-off that moves the fake clock instead of sleeping."""
    return lambda seconds: clock.advance(timedelta(seconds=seconds))


def _lost_before_acting(
    open_ledger: OpenLedger, tmp_path: Path, looks_up: type[GenericFakeAdapter] = GenericFakeAdapter
) -> tuple[GenericFakeProvider, LandsAfterItsTimeout, GenericFakeAdapter, Ledger, FakeClock]:
    """A charge whose answer was lost at t=0 before the provider acted (it may run until t=5): the provider,
    the request on the wire (``land`` acts), an adapter whose lookups are ``looks_up``'s, the ledger, the clock."""
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", clock=clock, dedupe=False)
    wire, lookup = LandsAfterItsTimeout(fake, CONTRACT), looks_up(fake, CONTRACT)
    ledger = open_ledger(clock=clock, retry=NO_WAIT)
    with pytest.raises(EffectUnknown):
        ledger.execute(wire, CHARGE, intent_key=KEY)
    return fake, wire, lookup, ledger, clock


@pytest.mark.parametrize("looks_up", [GenericFakeAdapter, RefusesUntilFound], ids=["absent", "refused"])
def test_a_lookup_right_after_a_lost_answer_settles_nothing_while_the_provider_may_still_run_the_request(
    open_ledger: OpenLedger, tmp_path: Path, looks_up: type[GenericFakeAdapter]
) -> None:
    """The client gives up before the provider acts (a read timeout shorter than the provider's work) and the
    caller retries at once. The lookup sees the state before the request: nothing yet ("absent"), or an earlier
    decline ("refused"). Inside the contract's normal response window neither is proof, so the intent stays
    unknown and nothing is sent; the request lands, and a retry after the window finds it. Mutant:
    ``may_still_run`` returning None resends (absent: two effects) or rejects what then acts (refused: the
    caller, told it failed, charges again under a new key)."""
    fake, wire, lookup, ledger, clock = _lost_before_acting(open_ledger, tmp_path, looks_up)
    clock.advance(WINDOW / 2)

    with pytest.raises(EffectUnknown, match="may still be running at the provider until"):
        ledger.execute(lookup, CHARGE, intent_key=KEY)
    [swept] = Reconciler(ledger, {"fake": lookup}).run_once().items
    assert (swept.outcome, swept.method) == ("unknown", "lookup:search")
    assert swept.note is not None
    assert swept.note.startswith("not yet: the last attempt, sent at ")
    assert (fake.requests(), ledger.get(KEY).attempt_count) == ([], 1)  # nothing landed yet, nothing sent again

    assert wire.land() == "fx_1"  # the provider finishes the first request
    clock.advance(WINDOW)
    receipt = ledger.execute(lookup, CHARGE, intent_key=KEY)

    assert (receipt.record.status, receipt.record.provider_result_id) == (EffectStatus.CONFIRMED, "fx_1")
    assert receipt.record.resolution is not None
    assert receipt.record.resolution.method == "lookup:search"
    assert [e.result_id for e in fake.effects()] == ["fx_1"]
    assert len(fake.requests()) == 1


def test_a_lookups_refusal_after_the_response_window_rejects(open_ledger: OpenLedger, tmp_path: Path) -> None:
    """The window only delays a refusal: once the request can no longer be running, it settles the intent."""
    fake, _, lookup, ledger, clock = _lost_before_acting(open_ledger, tmp_path, RefusesUntilFound)  # never lands
    clock.advance(WINDOW)

    with pytest.raises(EffectRejected, match=r"rejected by fake, as a lookup \(lookup:search\) found: the earlier"):
        ledger.execute(lookup, CHARGE, intent_key=KEY)

    record = ledger.get(KEY)
    assert (record.status, record.attempt_count) == (EffectStatus.REJECTED, 1)
    assert record.resolution is not None
    assert record.resolution.method == "lookup:search"
    assert (fake.requests(), fake.effects()) == ([], [])


def _lost_after_a_retry(open_ledger: OpenLedger, tmp_path: Path, *, dedupe: bool) -> tuple[
    GenericFakeProvider, RateLimitedFirst, Ledger, FakeClock
]:  # fmt: skip
    """Claimed at t=0; attempt 1 is a 429 asking for 20 s; the retry goes out at t=20, and its answer is lost
    before the provider acts (it may run until t=25)."""
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", clock=clock, dedupe=dedupe)
    wire = RateLimitedFirst(fake, generic_contract(dedupe=dedupe, lookup_proves_absence=True), retry_after=20.0)
    retry = RetryPolicy(max_attempts=2, max_total_seconds=60, initial_wait=0.0, max_wait=30.0)
    ledger = open_ledger(clock=clock, retry=retry, sleep=advancing(clock))
    claimed = clock()
    with pytest.raises(EffectUnknown):
        ledger.execute(wire, CHARGE, intent_key=KEY)
    record = ledger.get(KEY)
    assert (wire.attempts, record.status) == (2, EffectStatus.UNKNOWN)
    assert record.dispatched_at == claimed + timedelta(seconds=20)  # the retry's start, not the claim's
    clock.advance(timedelta(seconds=1))
    return fake, wire, ledger, clock


def test_a_caller_retry_waits_out_the_window_of_a_retry_made_inside_the_call(
    open_ledger: OpenLedger, tmp_path: Path
) -> None:
    """No keys, lookups that prove absence: at t=21 the retried attempt may still be running. Counted from the
    claim (t=0, as before 2026-12-02), "absent" was taken as proof, the intent was sent again and the retried
    attempt landed as well: two effects. Found by an audit of the window."""
    fake, wire, ledger, _ = _lost_after_a_retry(open_ledger, tmp_path, dedupe=False)

    with pytest.raises(EffectUnknown, match="may still be running"):
        ledger.execute(GenericFakeAdapter(fake, wire.contract), CHARGE, intent_key=KEY)
    wire.land()  # the retried attempt reaches the provider inside its window, and acts

    record = ledger.get(KEY)
    assert (record.status, record.attempt_count) == (EffectStatus.UNKNOWN, 1)
    assert [e.result_id for e in fake.effects()] == ["fx_1"]
    assert len(fake.requests()) == 1


@pytest.mark.parametrize("dedupe", [False, True], ids=["no keys", "keys"])
def test_a_sweep_does_not_reject_a_retry_made_inside_the_call_while_it_may_run(
    open_ledger: OpenLedger, tmp_path: Path, dedupe: bool
) -> None:
    """At t=21 a sweep's lookup reads an earlier decline while the retried attempt may still run: it stays
    unknown, and once the attempt lands the next sweep confirms it (rejected before, the caller paid again)."""
    fake, wire, ledger, clock = _lost_after_a_retry(open_ledger, tmp_path, dedupe=dedupe)
    lookup = RefusesUntilFound(fake, wire.contract)

    [swept] = Reconciler(ledger, {"fake": lookup}).run_once().items
    assert (swept.outcome, ledger.get(KEY).status) == ("unknown", EffectStatus.UNKNOWN)
    wire.land()
    clock.advance(WINDOW)
    [settled] = Reconciler(ledger, {"fake": lookup}).run_once().items

    assert (settled.outcome, ledger.get(KEY).provider_result_id) == ("confirmed", "fx_1")
    assert [e.result_id for e in fake.effects()] == ["fx_1"]


def test_a_takeover_waits_out_the_window_of_a_retry_started_just_before_the_lease_ran_out(
    open_ledger: OpenLedger, tmp_path: Path
) -> None:
    """Keys (answer_margin 0: a retry may start until the lease's last instant). A claims at t=0 with a 120 s
    lease; attempt 1 is a 429 asking for 118 s; attempt 2 goes out at t=118 and is slow. At t=121 a sweep finds
    the lease lapsed: A wrote nothing of its retry, so the window counts from the lease's end (t=120), and the
    earlier decline a lookup reads rejects nothing. Attempt 2 then acts; its late answer confirms the intent.
    Counted from the claim (as before 2026-12-02), the sweep rejected it, and attempt 2 charged."""
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", clock=clock, dedupe=True)
    contract = generic_contract(dedupe=True, lookup_proves_absence=True)
    held = RateLimitedThenHeld(fake, contract, retry_after=118.0)
    retry = RetryPolicy(max_attempts=2, max_total_seconds=300, initial_wait=0.0, max_wait=200.0)
    worker_a = open_ledger(clock=clock, retry=retry, sleep=advancing(clock))
    sweeper = open_ledger(clock=clock, retry=NO_WAIT)
    raised: list[BaseException] = []

    def run() -> None:
        try:
            worker_a.execute(held, CHARGE, intent_key=KEY)
        except Exception as error:
            raised.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    assert held.entered.wait(10)
    clock.advance(timedelta(seconds=3))  # t=121
    [swept] = Reconciler(sweeper, {"fake": RefusesUntilFound(fake, contract)}).run_once().items
    assert (swept.outcome, sweeper.get(KEY).status) == ("unknown", EffectStatus.UNKNOWN)
    held.release.set()
    thread.join(10)

    record = sweeper.get(KEY)
    assert raised == []  # A's answer, kept as evidence, settled the intent: A got a receipt
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, "fx_1")
    assert record.resolution is not None
    assert record.resolution.method == "evidence:late_response"
    assert [e.result_id for e in fake.effects()] == ["fx_1"]


@pytest.mark.parametrize("looks_up", [GenericFakeAdapter, RefusesUntilFound], ids=["absent", "refused"])
def test_an_operator_cannot_reject_by_lookup_while_the_request_may_still_run(
    open_ledger: OpenLedger, tmp_path: Path, looks_up: type[GenericFakeAdapter]
) -> None:
    """The operator's check (``Operator(adapters=...)``, the CLI's default) read the same lookup as proof the
    ledger holds back: the rejection passed, the request then acted and the job's v2 acted too. Refused now;
    after the window the same rejection is taken."""
    fake, _, lookup, ledger, clock = _lost_before_acting(open_ledger, tmp_path, looks_up)
    clock.advance(timedelta(seconds=1))
    operator = Operator(ledger, adapters={"fake": lookup})
    unknown = ledger.get(KEY)

    with pytest.raises(InvalidInput, match="cannot be resolved as rejected yet: the last attempt"):
        operator.resolve(
            KEY, to=EffectStatus.REJECTED, operator="alice", reason="the lookup shows nothing",
            expect_version=unknown.version,
        )  # fmt: skip
    assert ledger.get(KEY) == unknown
    clock.advance(WINDOW)  # it never landed: now the lookup speaks for it
    rejected = operator.resolve(
        KEY, to=EffectStatus.REJECTED, operator="alice", reason="the lookup shows nothing",
        expect_version=unknown.version,
    )  # fmt: skip

    assert rejected.record.status is EffectStatus.REJECTED
    assert (fake.requests(), fake.effects()) == ([], [])


def test_a_compensation_rejected_by_hand_is_not_replaced_while_it_may_still_run(
    open_ledger: OpenLedger, tmp_path: Path
) -> None:
    """Refund R1 loses its answer at t=0 and is rejected by hand (no lookup) at t=1; R2 is asked for at t=2.
    The check that looks R1 up took "absent" for proof while R1 could still run: R2 was sent, R1 landed, two
    refunds. Refused now, naming the window; after it (R1 never landed) R2 goes out."""
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", clock=clock, dedupe=False)
    wire, exact = LandsAfterItsTimeout(fake, CONTRACT, operation="refund"), GenericFakeAdapter(fake, CONTRACT)
    ledger = open_ledger(clock=clock, retry=NO_WAIT)
    ledger.execute(exact, CHARGE, intent_key=KEY)
    with pytest.raises(EffectUnknown):
        ledger.compensate(wire, REFUND, original_key=KEY, compensating_key=R1)
    clock.advance(timedelta(seconds=1))
    Operator(ledger).resolve(
        R1, to=EffectStatus.REJECTED, operator="alice", reason="not in the dashboard",
        expect_version=ledger.get(R1).version,
    )  # fmt: skip
    clock.advance(timedelta(seconds=1))

    with pytest.raises(IllegalTransition, match="may still be running"):
        ledger.compensate(exact, REFUND, original_key=KEY, compensating_key=R2)
    assert [e.key for e in fake.effects()] == [f"default/{KEY}"]  # the charge only
    clock.advance(WINDOW)
    ledger.compensate(exact, REFUND, original_key=KEY, compensating_key=R2)

    assert [e.key for e in fake.effects()] == [f"default/{KEY}", f"default/{R2}"]
    assert ledger.get(KEY).status is EffectStatus.COMPENSATED


def test_an_operator_may_confirm_on_evidence_while_the_lookup_still_reads_an_earlier_refusal(
    open_ledger: OpenLedger, tmp_path: Path
) -> None:
    """The request landed and acted (the operator sees it in the dashboard), but the lookup still reads the
    earlier decline inside the window: that refusal may be the earlier attempt's, so it does not refuse the
    confirmation; after the window it would."""

    class StillReadsTheDecline(GenericFakeAdapter):
        def lookup(self, record: EffectRecord) -> LookupResult:
            return LookupResult(LookupStatus.REFUSED, "search", evidence="the earlier attempt's decline")

    fake, wire, lookup, ledger, clock = _lost_before_acting(open_ledger, tmp_path, StillReadsTheDecline)
    wire.land()
    clock.advance(timedelta(seconds=1))
    operator = Operator(ledger, adapters={"fake": lookup})
    confirmed = operator.resolve(
        KEY, to=EffectStatus.CONFIRMED, operator="alice", reason="the dashboard shows the charge",
        expect_version=ledger.get(KEY).version, provider_result_id="fx_1", evidence="dashboard",
    )  # fmt: skip

    assert (confirmed.record.status, confirmed.record.provider_result_id) == (EffectStatus.CONFIRMED, "fx_1")
    assert [e.result_id for e in fake.effects()] == ["fx_1"]
