"""A request that outlives its worker's lease while another worker reopens the intent (a lookup proved absence).

The earlier attempt may still land and act. Whatever it answers, and whenever, that answer must stop a resend,
settle the intent, and keep a refused compensation from being replaced by a second one. Each test checks the
generic fake's effects and the ledger rows, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from safe_effects import (
    EffectDeferred,
    EffectOutcome,
    EffectRecord,
    EffectRejected,
    EffectRequest,
    EffectStatus,
    EffectUnknown,
    Evidence,
    EvidenceVerdict,
    IllegalTransition,
    IntentConflict,
    LeaseLost,
    Ledger,
    LedgerUnavailable,
    LookupResult,
    Operator,
    Reconciler,
    RetryPolicy,
)
from safe_effects.testing import (
    FakeClock,
    FakeFailure,
    GenericFakeAdapter,
    GenericFakeProvider,
    RecordingObserver,
    generic_contract,
)

from ._slow_requests import LandsAfterItsTimeout

KEY = "invoice:inv_42:collect:v1"
R1, R2 = "invoice:inv_42:refund:v1", "invoice:inv_42:refund:v2"
CHARGE = EffectRequest(operation="charge", params={"amount": 2000})
REFUND = EffectRequest(operation="refund", params={"charge": "fx_1"})
NO_WAIT = RetryPolicy(initial_wait=0.0, max_wait=0.05)
OpenLedger = Callable[..., Ledger]  # the open_ledger fixture


@dataclass
class HeldOnTheWire(GenericFakeAdapter):
    """The first request of ``operation`` waits on the wire until released: its worker's lease runs out."""

    operation: str = "charge"
    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def dispatch(self, request: EffectRequest, provider_key: str) -> str:
        if request.operation == self.operation and not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(10)
        return super().dispatch(request, provider_key)


def in_background(call: Callable[[], object]) -> tuple[threading.Thread, list[BaseException]]:
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except Exception as error:  # the test asserts what the late worker got
            raised.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, raised


@pytest.mark.parametrize("dedupe", [False, True], ids=["no-keys", "keys"])
def test_a_late_confirmation_settles_a_reopened_intent_without_a_caller(
    open_ledger: OpenLedger, tmp_path: Path, dedupe: bool
) -> None:
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", clock=clock, dedupe=dedupe)
    adapter = HeldOnTheWire(fake, generic_contract(dedupe=dedupe, lookup_proves_absence=True))
    late, other = open_ledger(clock=clock, retry=NO_WAIT), open_ledger(clock=clock, retry=NO_WAIT)
    thread, raised = in_background(lambda: late.execute(adapter, CHARGE, intent_key=KEY))
    assert adapter.entered.wait(10)
    clock.advance(late.lease.duration * 2)
    assert other.reconcile(adapter, intent_key=KEY).status is EffectStatus.PREPARED  # not at the provider yet

    adapter.release.set()  # it lands, acts, and answers after its lease
    thread.join(10)

    assert raised == []  # its answer, kept as evidence, settled the intent: the late caller got a receipt
    record = other.get(KEY)
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, "fx_1")
    assert record.resolution is not None
    assert record.resolution.method == "evidence:late_response"
    assert len(fake.effects()) == 1


def test_a_late_timeout_landing_during_the_reopen_still_stops_a_resend(open_ledger: OpenLedger, tmp_path: Path) -> None:
    """A's late timeout arrives while the record still says unknown (before the reopen is written): it is
    kept all the same, so the caller's retry looks again instead of sending a second message."""
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", clock=clock, dedupe=False)
    contract = generic_contract(dedupe=False, lookup_proves_absence=True)
    held = HeldOnTheWire(fake, contract)
    late, other = open_ledger(clock=clock, retry=NO_WAIT), open_ledger(clock=clock, retry=NO_WAIT)
    fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)  # A's request acts; its answer is a timeout
    thread, raised = in_background(lambda: late.execute(held, CHARGE, intent_key=KEY))

    class LookupThenTheLateOneLands(GenericFakeAdapter):
        def lookup(self, record: EffectRecord) -> LookupResult:
            found = super().lookup(record)  # absent: A's request is not there yet
            held.release.set()
            thread.join(10)  # A lands, acts, times out and records its outcome
            return found

    assert held.entered.wait(10)
    clock.advance(late.lease.duration * 2)
    other.reconcile(LookupThenTheLateOneLands(fake, contract), intent_key=KEY)
    assert [type(error) for error in raised] == [LeaseLost]
    assert [e.source for e in other.store.evidence_for("default", KEY)] == ["late_response"]

    receipt = other.execute(GenericFakeAdapter(fake, contract), CHARGE, intent_key=KEY)  # the caller retries

    assert receipt.record.status is EffectStatus.CONFIRMED  # a fresh lookup now finds it
    assert len(fake.effects()) == 1


@pytest.mark.parametrize("worker_id", [None, "billing"], ids=["ids of their own", "one worker id"])
def test_a_late_timeout_whose_write_first_failed_is_kept_and_stops_a_resend_after_the_reopen(
    open_ledger: OpenLedger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, worker_id: str | None
) -> None:
    """A's request times out; the database does not answer A's write of that (its first try), and meanwhile
    another worker finds A's lease run out and records the intent unknown. A's next try finds the record moved
    by that worker, not by itself: its timeout is kept as a late answer. A sweep's lookup then reopens the intent
    (the request has not landed yet), the request lands and acts, and the caller's retry looks again instead
    of resending. Mutant: ``_written_by_me`` ignoring the writer takes the other worker's write for A's own, the
    late answer is lost, and the retry sends the reopened intent a second time. With one worker id for both
    (given before a fork) the writer's id cannot tell them apart: the write's time and columns do (before
    2026-11-30 they were not compared: two effects)."""
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", clock=clock, dedupe=False)
    contract = generic_contract(dedupe=False, lookup_proves_absence=True)
    wire = LandsAfterItsTimeout(fake, contract)
    late = open_ledger(clock=clock, retry=NO_WAIT, worker_id=worker_id)
    other = open_ledger(clock=clock, retry=NO_WAIT, worker_id=worker_id)
    write = late.store.transition

    def down_while_the_lease_runs_out(record: EffectRecord, to: EffectStatus, **changes: Any) -> EffectRecord:
        monkeypatch.setattr(late.store, "transition", write)  # the next try reaches the database
        clock.advance(late.lease.duration * 2)
        no_lookups = GenericFakeAdapter(fake, contract, lookups_enabled=False)
        assert other.reconcile(no_lookups, intent_key=KEY).status is EffectStatus.UNKNOWN  # the lease expired
        raise LedgerUnavailable("the database did not answer")

    monkeypatch.setattr(late.store, "transition", down_while_the_lease_runs_out)
    with pytest.raises(LeaseLost):
        late.execute(wire, CHARGE, intent_key=KEY)
    [kept] = other.store.evidence_for("default", KEY)
    assert (kept.source, kept.kind, kept.verdict) == ("late_response", "unknown", EvidenceVerdict.INFORMATIONAL)

    assert other.reconcile(GenericFakeAdapter(fake, contract), intent_key=KEY).status is EffectStatus.PREPARED
    assert wire.land() == "fx_1"  # A's request reaches the provider only now, and acts

    receipt = other.execute(GenericFakeAdapter(fake, contract), CHARGE, intent_key=KEY)  # the caller's retry

    assert (receipt.record.status, receipt.record.provider_result_id) == (EffectStatus.CONFIRMED, "fx_1")
    assert receipt.from_ledger  # found by a fresh lookup, not sent
    assert [outcome for _, outcome in fake.requests()] == ["ok"]
    assert [e.result_id for e in fake.effects()] == ["fx_1"]


def test_a_late_timeout_is_kept_when_a_ledger_sharing_its_worker_id_sent_the_intent_again_meanwhile(
    open_ledger: OpenLedger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two ledgers with one worker id (a ``worker_id`` given before a fork). A's write of its timeout first fails;
    meanwhile B takes the lapsed lease over, a lookup reopens the intent and B sends it again, which times out
    too. The record is unknown and last written by that worker id, but at a later version than A's write would
    have made: A's timeout is kept as a late answer, and once A's request lands the retry finds it instead of
    resending. Mutant: ``_written_by_me`` ignoring the version takes B's write for A's own; the late answer is
    lost and the retry sends a second time."""
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", clock=clock, dedupe=False)
    contract = generic_contract(dedupe=False, lookup_proves_absence=True)
    wire, exact = LandsAfterItsTimeout(fake, contract), GenericFakeAdapter(fake, contract)
    late = open_ledger(clock=clock, retry=NO_WAIT, worker_id="billing")
    other = open_ledger(clock=clock, retry=NO_WAIT, worker_id="billing")
    write = late.store.transition

    def down_while_another_sends_it(record: EffectRecord, to: EffectStatus, **changes: Any) -> EffectRecord:
        monkeypatch.setattr(late.store, "transition", write)  # the next try reaches the database
        clock.advance(late.lease.duration * 2)
        assert other.reconcile(exact, intent_key=KEY).status is EffectStatus.PREPARED  # not landed: absent
        fake.fail_next(FakeFailure.LOST_BEFORE_COMMIT)
        with pytest.raises(EffectUnknown):
            other.execute(exact, CHARGE, intent_key=KEY)  # sent again; it times out before acting
        raise LedgerUnavailable("the database did not answer")

    monkeypatch.setattr(late.store, "transition", down_while_another_sends_it)
    with pytest.raises(LeaseLost):
        late.execute(wire, CHARGE, intent_key=KEY)
    [kept] = other.store.evidence_for("default", KEY)
    assert (kept.source, kept.kind, kept.detail["attempt"]) == ("late_response", "unknown", 1)

    clock.advance(contract.normal_response_window)  # B's send can no longer be running: its "absent" is proof
    assert other.reconcile(exact, intent_key=KEY).status is EffectStatus.PREPARED
    assert wire.land() == "fx_1"  # A's request reaches the provider only now, and acts

    receipt = other.execute(exact, CHARGE, intent_key=KEY)  # the caller's retry

    assert (receipt.record.status, receipt.record.provider_result_id) == (EffectStatus.CONFIRMED, "fx_1")
    assert [outcome for _, outcome in fake.requests()] == ["lost_before_commit", "ok"]  # B's send, A's landing
    assert [e.result_id for e in fake.effects()] == ["fx_1"]


def refund_reopened_while_on_the_wire(
    open_ledger: OpenLedger, tmp_path: Path, *, dedupe: bool
) -> tuple[GenericFakeProvider, HeldOnTheWire, Ledger, threading.Thread, list[BaseException]]:
    """A charge, then its refund R1 held on the wire past its worker's lease, reopened by another worker."""
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", clock=clock, dedupe=dedupe)
    adapter = HeldOnTheWire(fake, generic_contract(dedupe=dedupe, lookup_proves_absence=True), operation="refund")
    late, other = open_ledger(clock=clock, retry=NO_WAIT), open_ledger(clock=clock, retry=NO_WAIT)
    other.execute(adapter, CHARGE, intent_key=KEY)
    thread, raised = in_background(lambda: late.compensate(adapter, REFUND, original_key=KEY, compensating_key=R1))
    assert adapter.entered.wait(10)
    clock.advance(late.lease.duration * 2)
    assert other.reconcile(adapter, intent_key=R1).status is EffectStatus.PREPARED
    return fake, adapter, other, thread, raised


def test_a_refund_that_acted_while_reopened_marks_its_original(open_ledger: OpenLedger, tmp_path: Path) -> None:
    fake, adapter, other, thread, raised = refund_reopened_while_on_the_wire(open_ledger, tmp_path, dedupe=True)

    adapter.release.set()
    thread.join(10)

    assert raised == []  # the late refund's own answer settled R1: its caller got a receipt
    assert [e.key for e in fake.effects() if "refund" in e.key] == [f"default/{R1}"]
    assert other.get(R1).status is EffectStatus.CONFIRMED
    original = other.get(KEY)
    assert (original.status, original.compensated_by) == (EffectStatus.COMPENSATED, R1)
    Reconciler(other, {"fake": adapter}).run_once()  # nothing left for a sweep to do
    assert other.get(KEY).status is EffectStatus.COMPENSATED


def refund_rejected_then_landing(
    open_ledger: OpenLedger, tmp_path: Path
) -> tuple[GenericFakeProvider, HeldOnTheWire, Ledger, list[BaseException]]:
    """No keys: R1 reopened while on the wire, its rerun declined (R1 rejected), then the first request lands."""
    fake, adapter, other, thread, raised = refund_reopened_while_on_the_wire(open_ledger, tmp_path, dedupe=False)
    fake.fail_next(FakeFailure.DECLINED)
    with pytest.raises(EffectRejected):
        other.compensate(adapter, REFUND, original_key=KEY, compensating_key=R1)
    adapter.release.set()
    thread.join(10)
    return fake, adapter, other, raised


def test_a_rejected_refund_a_late_answer_contradicts_is_not_replaced(open_ledger: OpenLedger, tmp_path: Path) -> None:
    """No keys: A's refund R1 outlives its lease; B reopens R1 and the rerun is declined (R1 rejected); then
    A's request lands and acts. R1's rejection is contradicted, so R2 may not take over: one refund."""
    fake, adapter, other, raised = refund_rejected_then_landing(open_ledger, tmp_path)
    assert [e.verdict for e in other.store.evidence_for("default", R1)] == [EvidenceVerdict.CONFIRMS]

    with pytest.raises(IllegalTransition, match="a late answer says an earlier attempt may have acted"):
        other.compensate(adapter, REFUND, original_key=KEY, compensating_key=R2)

    assert [e.key for e in fake.effects() if "refund" in e.key] == [f"default/{R1}"]
    [lost] = raised  # an outcome like any other, carrying the intent as it stands
    assert isinstance(lost, LeaseLost)
    assert isinstance(lost, EffectOutcome)
    assert (lost.intent_key, lost.record.status) == (R1, EffectStatus.REJECTED)


def test_rerunning_a_rejected_or_conflicting_compensation_writes_nothing(
    open_ledger: OpenLedger, tmp_path: Path
) -> None:
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", clock=clock)
    adapter = GenericFakeAdapter(fake, generic_contract())
    ledger = open_ledger(clock=clock, retry=NO_WAIT)
    ledger.execute(adapter, CHARGE, intent_key=KEY)
    fake.fail_next(FakeFailure.DECLINED, FakeFailure.DECLINED)
    for key in (R1, R2):
        with pytest.raises(EffectRejected):
            ledger.compensate(adapter, REFUND, original_key=KEY, compensating_key=key)
    before = ledger.get(KEY)
    assert before.compensated_by == R2

    with pytest.raises(IntentConflict):  # R1 again, other params
        ledger.compensate(
            adapter, EffectRequest(operation="refund", params={"charge": "fx_9"}), original_key=KEY, compensating_key=R1
        )
    with pytest.raises(EffectRejected):  # R1 again, as it was: its answer
        ledger.compensate(adapter, REFUND, original_key=KEY, compensating_key=R1)

    after = ledger.get(KEY)
    assert (after.version, after.compensated_by) == (before.version, R2)
    assert [e.key for e in fake.effects() if "refund" in e.key] == []


class SettlePausedAfterEvidence:
    """A worker's store whose first write after filing evidence (the settle) waits until ``go``: the moment a
    reopen by another worker can slip in between, as a scheduler or the SQLite write lock may arrange."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.filed = inner, False
        self.at_settle, self.go = threading.Event(), threading.Event()

    def add_evidence(self, evidence: Any) -> bool:
        self.filed = True
        return bool(self.inner.add_evidence(evidence))

    def transition(self, *args: Any, **kwargs: Any) -> EffectRecord:
        if self.filed and not self.go.is_set():
            self.at_settle.set()
            assert self.go.wait(10)
        return self.inner.transition(*args, **kwargs)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_late_confirmation_that_loses_its_settle_to_a_reopen_settles_it_after_all(
    open_ledger: OpenLedger, tmp_path: Path
) -> None:
    """No keys, lookups that prove absence: the reconciler's lookup says "absent" an instant before A's request
    lands; A files its confirmation and goes to settle the unknown intent, but the reopen (to prepared) is
    written first. The confirmation must still settle it: a prepared record says nothing was sent."""
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", clock=clock, dedupe=False)
    contract = generic_contract(dedupe=False, lookup_proves_absence=True)
    held = HeldOnTheWire(fake, contract)
    worker_a, other = open_ledger(clock=clock, retry=NO_WAIT), open_ledger(clock=clock, retry=NO_WAIT)
    paused = SettlePausedAfterEvidence(worker_a.store)
    worker_a.store = paused
    thread, raised = in_background(lambda: worker_a.execute(held, CHARGE, intent_key=KEY))

    class LookupJustBeforeLanding(GenericFakeAdapter):
        def lookup(self, record: EffectRecord) -> LookupResult:
            found = super().lookup(record)  # absent: A's request has not landed yet
            held.release.set()  # now it lands and acts; A files its late answer and goes to settle it
            assert paused.at_settle.wait(10)
            return found

    assert held.entered.wait(10)
    clock.advance(worker_a.lease.duration * 2)
    assert other.reconcile(LookupJustBeforeLanding(fake, contract), intent_key=KEY).status is EffectStatus.PREPARED
    paused.go.set()
    thread.join(10)

    assert raised == []  # A's answer settled the intent after all: A's caller got a receipt
    record = other.get(KEY)
    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, "fx_1")
    assert [(e.source, e.verdict) for e in other.store.evidence_for("default", KEY)] == [
        ("late_response", EvidenceVerdict.CONFIRMS)
    ]
    assert [e.result_id for e in fake.effects()] == ["fx_1"]


def test_an_operator_corrects_a_rejected_refund_the_provider_did_make_and_its_original_is_compensated(
    open_ledger: OpenLedger, tmp_path: Path
) -> None:
    """As above: R1 rejected, then A's late answer says R1 refunded. On that evidence an operator corrects R1 to
    confirmed, and the charge it refunds is marked compensated: no second refund needed, none possible."""
    fake, adapter, other, _ = refund_rejected_then_landing(open_ledger, tmp_path)
    rejected = other.get(R1)
    assert rejected.status is EffectStatus.REJECTED
    [refund] = [e.result_id for e in fake.effects() if "refund" in e.key]

    decision = Operator(other).resolve(
        R1, to=EffectStatus.CONFIRMED, operator="alice", reason="the late answer shows the refund",
        expect_version=rejected.version, provider_result_id=refund, evidence="late_response",
    )  # fmt: skip

    assert (decision.record.status, decision.record.provider_result_id) == (EffectStatus.CONFIRMED, refund)
    trail = other.store.audit_trail("default", R1)
    assert (trail[-1].from_status, trail[-1].to_status, trail[-1].actor) == (
        EffectStatus.REJECTED,
        EffectStatus.CONFIRMED,
        "operator:alice",
    )
    original = other.get(KEY)
    assert (original.status, original.compensated_by) == (EffectStatus.COMPENSATED, R1)
    assert [e.key for e in fake.effects() if "refund" in e.key] == [f"default/{R1}"]
    with pytest.raises(IllegalTransition):
        other.compensate(adapter, REFUND, original_key=KEY, compensating_key=R2)
    assert [e.key for e in fake.effects() if "refund" in e.key] == [f"default/{R1}"]


@pytest.mark.parametrize(("second", "settled"), [("declined", EffectStatus.REJECTED), ("acts", EffectStatus.CONFIRMED)])
def test_a_late_answer_filed_while_another_attempt_is_in_flight_is_raised_when_that_attempt_settles(
    open_ledger: OpenLedger, tmp_path: Path, second: str, settled: EffectStatus
) -> None:
    """No keys, lookups that prove absence: A is held on the wire past its lease; B proves the intent absent
    and sends it again; while B is on the wire, A's request lands and acts, and its late answer is filed. When
    B's attempt then settles (declined: rejected; or acting too: a second object), the record shows one
    outcome where the provider holds A's effect too: raised, not left to be found."""
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", clock=clock, dedupe=False)
    contract = generic_contract(dedupe=False, lookup_proves_absence=True)
    held = HeldOnTheWire(fake, contract)
    worker_a, worker_b = open_ledger(clock=clock, retry=NO_WAIT), open_ledger(clock=clock, retry=NO_WAIT)
    seen = RecordingObserver()
    worker_b.observer = seen
    thread, raised = in_background(lambda: worker_a.execute(held, CHARGE, intent_key=KEY))
    assert held.entered.wait(10)
    clock.advance(worker_a.lease.duration * 2)

    class LetsTheFirstLandFirst(GenericFakeAdapter):
        def dispatch(self, request: EffectRequest, provider_key: str) -> str:
            held.release.set()
            thread.join(10)  # A's request lands, acts and answers late, while B's is on the wire
            if second == "declined":
                fake.fail_next(FakeFailure.DECLINED)
            return super().dispatch(request, provider_key)

    if second == "declined":
        with pytest.raises(EffectRejected):
            worker_b.execute(LetsTheFirstLandFirst(fake, contract), CHARGE, intent_key=KEY)
    else:
        worker_b.execute(LetsTheFirstLandFirst(fake, contract), CHARGE, intent_key=KEY)

    assert [type(error) for error in raised] == [LeaseLost]
    record = worker_b.get(KEY)
    assert (record.status, record.attempt_count) == (settled, 2)
    assert len(fake.effects()) == (1 if second == "declined" else 2)
    assert [labels["status"] for labels in seen.named("unrecorded_effect")] == [settled.value]


@pytest.mark.parametrize(
    ("second", "left"),
    [(FakeFailure.RATE_LIMITED, EffectStatus.PREPARED), (FakeFailure.DECLINED, EffectStatus.REJECTED)],
    ids=["other-deferred", "other-declined"],
)
def test_a_compensation_corrected_to_confirmed_takes_the_name_from_one_that_has_not_acted(
    open_ledger: OpenLedger, tmp_path: Path, second: FakeFailure, left: EffectStatus
) -> None:
    """R1 declined (rejected); R2 takes the name and is deferred (prepared: nothing happened) or declined too;
    then R1's provider says it refunded after all. Corrected, R1 marks the charge compensated, and any further
    refund (R2's retry, or a new R3) is refused: one refund."""
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", clock=clock, dedupe=False)
    adapter = GenericFakeAdapter(fake, generic_contract(dedupe=False))
    ledger = open_ledger(clock=clock, retry=RetryPolicy(max_attempts=1, initial_wait=0.0, max_wait=0.05))
    ledger.execute(adapter, CHARGE, intent_key=KEY)
    fake.fail_next(FakeFailure.DECLINED)
    with pytest.raises(EffectRejected):
        ledger.compensate(adapter, REFUND, original_key=KEY, compensating_key=R1)
    fake.fail_next(second)
    with pytest.raises((EffectDeferred, EffectRejected)):
        ledger.compensate(adapter, REFUND, original_key=KEY, compensating_key=R2)
    assert (ledger.get(R2).status, ledger.get(KEY).compensated_by) == (left, R2)
    refunded = Evidence(
        tenant="default", intent_key=R1, provider="fake", source="events", event_id="ev-r1", kind="refunded",
        verdict=EvidenceVerdict.CONFIRMS, provider_result_id="re_1", received_at=clock(),
    )  # fmt: skip
    assert ledger.record_evidence(refunded)

    Operator(ledger).resolve(
        R1, to=EffectStatus.CONFIRMED, operator="alice", reason="the provider's event shows the refund",
        expect_version=ledger.get(R1).version, provider_result_id="re_1", evidence="ev-r1",
    )  # fmt: skip

    original = ledger.get(KEY)
    assert (original.status, original.compensated_by) == (EffectStatus.COMPENSATED, R1)
    for another in (R2, "invoice:inv_42:refund:v3"):
        with pytest.raises(IllegalTransition, match="already compensated by"):
            ledger.compensate(adapter, REFUND, original_key=KEY, compensating_key=another)
    assert [e.key for e in fake.effects() if "refund" in e.key] == []  # R1's refund is the provider's word only


class CorrectsBeforeItsClaim:
    """A store through which R2's retry runs: just before R2 is claimed, an operator elsewhere corrects R1."""

    def __init__(self, inner: Any, correct: Callable[[], None]) -> None:
        self.inner, self.correct = inner, correct

    def transition(self, record: EffectRecord, to: EffectStatus, **write: Any) -> EffectRecord:
        if record.intent_key == R2 and to is EffectStatus.IN_FLIGHT:
            self.correct()
        return self.inner.transition(record, to, **write)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_compensation_sent_while_another_was_corrected_to_confirmed_is_raised(
    open_ledger: OpenLedger, tmp_path: Path
) -> None:
    """R2 (prepared) is being retried, and has passed its name check, when an operator corrects R1 and takes
    the name: R2 is sent all the same. Nothing can undo a refund: the second is raised, not left silent."""
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", clock=clock, dedupe=False)
    adapter = GenericFakeAdapter(fake, generic_contract(dedupe=False))
    ledger = open_ledger(clock=clock, retry=RetryPolicy(max_attempts=1, initial_wait=0.0, max_wait=0.05))
    operator_side = open_ledger(clock=clock)
    ledger.execute(adapter, CHARGE, intent_key=KEY)
    fake.fail_next(FakeFailure.DECLINED)
    with pytest.raises(EffectRejected):
        ledger.compensate(adapter, REFUND, original_key=KEY, compensating_key=R1)
    fake.fail_next(FakeFailure.RATE_LIMITED)
    with pytest.raises(EffectDeferred):
        ledger.compensate(adapter, REFUND, original_key=KEY, compensating_key=R2)
    refunded = Evidence(
        tenant="default", intent_key=R1, provider="fake", source="events", event_id="ev-r1", kind="refunded",
        verdict=EvidenceVerdict.CONFIRMS, provider_result_id="re_1", received_at=clock(),
    )  # fmt: skip
    assert ledger.record_evidence(refunded)

    def correct() -> None:
        Operator(operator_side).resolve(
            R1, to=EffectStatus.CONFIRMED, operator="alice", reason="the provider's event shows the refund",
            expect_version=operator_side.get(R1).version, provider_result_id="re_1", evidence="ev-r1",
        )  # fmt: skip

    ledger.store = CorrectsBeforeItsClaim(ledger.store, correct)
    seen = RecordingObserver()
    ledger.observer = seen
    assert ledger.compensate(adapter, REFUND, original_key=KEY, compensating_key=R2).record.status is (
        EffectStatus.CONFIRMED
    )

    assert [e.key for e in fake.effects() if "refund" in e.key] == [f"default/{R2}"]
    assert (ledger.get(KEY).status, ledger.get(KEY).compensated_by) == (EffectStatus.COMPENSATED, R1)
    assert [labels["source"] for labels in seen.named("unrecorded_effect")] == ["compensation"]
