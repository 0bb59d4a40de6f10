"""Answers that arrive late, and decisions whose safety expires: none may resend an effect or hide one.

A worker's late response after its lease was taken over, a lookup's "absent" acted on after the provider's key
window closed, a retry policy's time bound. Each test checks the generic fake's effects and the ledger row, on
SQLite and PostgreSQL.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, timedelta, timezone, tzinfo
from pathlib import Path

import pytest

from safe_effects import (
    EffectDeferred,
    EffectRecord,
    EffectRequest,
    EffectStatus,
    EffectUnknown,
    Evidence,
    EvidenceVerdict,
    LeaseLost,
    Ledger,
    LookupResult,
    LookupStatus,
    Operator,
    Receipt,
    RetryPolicy,
)
from safe_effects.testing import (
    FakeClock,
    FakeDeclined,
    FakeFailure,
    GenericFakeAdapter,
    GenericFakeProvider,
    generic_contract,
)

CHARGE = EffectRequest(operation="charge", params={"amount": 2000})
OpenLedger = Callable[..., Ledger]  # the open_ledger fixture: Ledger.open on this test's store, closed after
NO_WAIT = RetryPolicy(initial_wait=0.0, max_wait=0.05)


def test_one_workers_late_responses_on_two_intents_are_both_kept(open_ledger: OpenLedger, tmp_path: Path) -> None:
    """Late-response evidence is named per intent: the second one is not dropped as a duplicate of the first."""
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", dedupe=False, clock=clock)
    contract = generic_contract(dedupe=False)
    plain = GenericFakeAdapter(fake, contract, lookups_enabled=False)
    slow_worker = open_ledger(clock=clock, retry=NO_WAIT, worker_id="worker-a")
    taker = open_ledger(clock=clock, retry=NO_WAIT, worker_id="worker-b")

    class AnswersAfterTakeover(GenericFakeAdapter):
        """The provider acts, but the answer arrives after the lease ran out and another worker took over."""

        def dispatch(self, request: EffectRequest, provider_key: str) -> str:
            result = super().dispatch(request, provider_key)
            clock.advance(timedelta(minutes=5))
            with pytest.raises(EffectUnknown):
                taker.execute(plain, request, intent_key=provider_key.split("/", 1)[1])
            return result

    keys = ("invoice:inv_1:collect:v1", "invoice:inv_2:collect:v1")
    receipts = [
        slow_worker.execute(AnswersAfterTakeover(fake, contract, lookups_enabled=False), CHARGE, intent_key=key)
        for key in keys
    ]

    # each late answer, kept as evidence, settled its unknown intent: the slow worker's caller gets it as on time
    assert [(r.record.status, r.record.provider_result_id) for r in receipts] == [
        (EffectStatus.CONFIRMED, effect.result_id) for effect in fake.effects()
    ]
    assert len(fake.effects()) == 2
    for key in keys:
        evidence = slow_worker.store.evidence_for("default", key)
        assert [(e.source, e.verdict) for e in evidence] == [("late_response", EvidenceVerdict.CONFIRMS)]
        assert slow_worker.get(key).status is EffectStatus.CONFIRMED


def test_a_superseded_attempts_late_decline_does_not_reject_a_later_send(
    open_ledger: OpenLedger, tmp_path: Path
) -> None:
    """No keys, lookups that prove absence: B resends after A's lease ran out; A's decline is about A's request."""
    key = "order:o_1:notify:v1"
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", dedupe=False, clock=clock)
    contract = generic_contract(dedupe=False, lookup_proves_absence=True)
    plain = GenericFakeAdapter(fake, contract)
    worker_a = open_ledger(clock=clock, retry=NO_WAIT, worker_id="a")
    worker_b = open_ledger(clock=clock, retry=NO_WAIT, worker_id="b")
    fake.fail_next(FakeFailure.DECLINED, FakeFailure.LOST_AFTER_COMMIT)

    class DeclinesLate(GenericFakeAdapter):
        def dispatch(self, request: EffectRequest, provider_key: str) -> str:
            try:
                return super().dispatch(request, provider_key)
            except FakeDeclined:
                clock.advance(timedelta(minutes=5))  # A's answer is late: its lease ran out meanwhile
                with pytest.raises(EffectUnknown):  # B: lost worker -> absent -> resend -> answer lost
                    worker_b.execute(plain, CHARGE, intent_key=key)
                raise

    with pytest.raises(LeaseLost):
        worker_a.execute(DeclinesLate(fake, contract), CHARGE, intent_key=key)

    assert len(fake.effects()) == 1  # B's message went out
    record = worker_a.get(key)
    assert (record.status, record.attempt_count) == (EffectStatus.UNKNOWN, 2)
    assert [e.verdict for e in worker_a.store.evidence_for("default", key)] == [EvidenceVerdict.INFORMATIONAL]


@pytest.mark.parametrize(("answers_attempt", "settled"), [(1, EffectStatus.UNKNOWN), (2, EffectStatus.REJECTED)])
def test_a_late_refusal_settles_only_the_attempt_it_answers(
    open_ledger: OpenLedger, tmp_path: Path, answers_attempt: int, settled: EffectStatus
) -> None:
    """A late worker reads the record (attempt 1) and files its refusal, but the intent was sent again between
    its read and its write: the refusal names attempt 1 and settles nothing, since attempt 2 may have acted."""
    key = "order:o_1:notify:v1"
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", dedupe=False, clock=clock)
    contract = generic_contract(dedupe=False, lookup_proves_absence=True)
    adapter = GenericFakeAdapter(fake, contract)
    ledger = open_ledger(clock=clock, retry=NO_WAIT)
    fake.fail_next(FakeFailure.LOST_BEFORE_COMMIT, FakeFailure.LOST_AFTER_COMMIT)
    for _ in range(2):  # attempt 1 lost before the provider acted; the retry proves it absent, attempt 2 acts
        with pytest.raises(EffectUnknown):
            ledger.execute(adapter, CHARGE, intent_key=key)
        clock.advance(contract.normal_response_window)  # past it, a lookup's "absent" is proof
    assert (ledger.get(key).status, ledger.get(key).attempt_count, len(fake.effects())) == (EffectStatus.UNKNOWN, 2, 1)

    late = Evidence(
        tenant="default",
        intent_key=key,
        provider="fake",
        source="late_response",  # what a late worker files
        event_id=f"worker-a:default:{key}:2",
        kind="rejected",
        verdict=EvidenceVerdict.REJECTS,
        received_at=clock(),
        detail={"worker": "worker-a", "attempt": answers_attempt},
    )
    assert ledger.record_evidence(late)

    assert ledger.get(key).status is settled
    assert len(fake.effects()) == 1
    if settled is EffectStatus.UNKNOWN:  # nor does it stand in the way of an operator who saw attempt 2 act
        record = ledger.get(key)
        confirmed = Operator(ledger).resolve(
            key, to=EffectStatus.CONFIRMED, operator="alice", reason="the dashboard shows it",
            expect_version=record.version, provider_result_id=fake.effects()[0].result_id, evidence="dashboard",
        )  # fmt: skip
        assert confirmed.record.status is EffectStatus.CONFIRMED


class LaggingSearch(GenericFakeAdapter):
    """A search index that has not caught up: the contract trusts its "absent", it is just late."""

    def lookup(self, record: EffectRecord) -> LookupResult:
        return LookupResult(LookupStatus.ABSENT, "search")


@dataclass
class Reopened:
    """A charge that happened, lost its answer, and was reopened by a lagging "absent" 2 h later."""

    ledger: Ledger
    fake: GenericFakeProvider
    adapter: LaggingSearch
    clock: FakeClock
    key: str = "invoice:inv_42:collect:v1"


@pytest.fixture
def reopened(open_ledger: OpenLedger, tmp_path: Path) -> Reopened:
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", dedupe=True, retention=timedelta(hours=24), clock=clock)
    env = Reopened(
        open_ledger(clock=clock, retry=NO_WAIT),
        fake,
        LaggingSearch(fake, generic_contract(dedupe=True, lookup_proves_absence=True)),
        clock,
    )
    fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)  # the charge happened, the answer was lost
    with pytest.raises(EffectUnknown):
        env.ledger.execute(env.adapter, CHARGE, intent_key=env.key)
    clock.advance(timedelta(hours=2))
    assert env.ledger.reconcile(env.adapter, intent_key=env.key).status is EffectStatus.PREPARED  # a sweep
    return env


def _retried_after_the_key_window_and_not_resent(
    ledger: Ledger, fake: GenericFakeProvider, adapter: GenericFakeAdapter, key: str
) -> None:
    """The caller's retry once the provider forgot the key: reconciled again, never sent a second time."""
    with pytest.raises(EffectUnknown, match="it was not resent"):
        ledger.execute(adapter, CHARGE, intent_key=key)

    assert len(fake.effects()) == 1
    assert len(fake.requests()) == 1
    record = ledger.get(key)
    assert (record.status, record.attempt_count) == (EffectStatus.UNKNOWN, 1)
    reasons = [entry.reason or "" for entry in ledger.store.audit_trail("default", key)]
    assert any("key window closed" in reason for reason in reasons)


def test_an_intent_reopened_inside_the_key_window_is_not_resent_after_it(reopened: Reopened) -> None:
    ledger, fake, adapter, clock, key = reopened.ledger, reopened.fake, reopened.adapter, reopened.clock, reopened.key
    clock.advance(timedelta(hours=28))  # the caller retries the next day: the provider has forgotten the key
    _retried_after_the_key_window_and_not_resent(ledger, fake, adapter, key)


def test_an_intent_reopened_inside_the_key_window_is_resent_inside_it(reopened: Reopened) -> None:
    """The counterpart: inside the window the same-key resend is deduped by the provider, one effect."""
    receipt = reopened.ledger.execute(reopened.adapter, CHARGE, intent_key=reopened.key)

    assert receipt.record.status is EffectStatus.CONFIRMED
    assert len(reopened.fake.effects()) == 1
    assert len(reopened.fake.requests()) == 2


def test_a_reopened_intent_whose_send_a_slower_clock_stamped_is_not_resent_after_the_key_window(
    open_ledger: OpenLedger, tmp_path: Path
) -> None:
    """The app prepares the intent on a host 20 s ahead (clocks may be a minute apart within the skew bound); a
    worker on time sends it at once, the charge happens and its answer is lost, and a lagging "absent" reopens
    it. The ``unknown`` row of that send is stamped before the record's creation: it is still this record's, the
    intent was sent and may have acted, so a retry after the key window reconciles instead of resending.
    Mutant: rows older than the record's creation all taken for a purged record's (no clock allowance); the
    retry resends after the provider forgot the key and charges the customer a second time."""
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", dedupe=True, retention=timedelta(hours=24), clock=clock)
    adapter = LaggingSearch(fake, generic_contract(dedupe=True, lookup_proves_absence=True))
    key = "invoice:inv_42:collect:v1"
    ahead = open_ledger(clock=lambda: clock() + timedelta(seconds=20), retry=NO_WAIT)
    worker = open_ledger(clock=clock, retry=NO_WAIT)
    created_at = ahead.prepare(adapter, CHARGE, intent_key=key).created_at
    fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
    with pytest.raises(EffectUnknown):
        worker.execute(adapter, CHARGE, intent_key=key)
    claim, sent = worker.store.audit_trail("default", key)
    assert (claim.to_status, sent.to_status) == (EffectStatus.IN_FLIGHT, EffectStatus.UNKNOWN)
    assert sent.at < created_at  # by the clocks, written before the record was
    clock.advance(timedelta(hours=2))
    assert worker.reconcile(adapter, intent_key=key).status is EffectStatus.PREPARED  # a sweep, inside the window
    clock.advance(timedelta(hours=28))  # the provider has forgotten the key

    _retried_after_the_key_window_and_not_resent(worker, fake, adapter, key)


def test_no_retry_starts_after_max_total_seconds(open_ledger: OpenLedger, tmp_path: Path) -> None:
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", clock=clock)
    starts: list[float] = []

    class Timed(GenericFakeAdapter):
        def dispatch(self, request: EffectRequest, provider_key: str) -> str:
            starts.append(time.monotonic())
            return super().dispatch(request, provider_key)

    policy = RetryPolicy(max_attempts=10, max_total_seconds=0.3, initial_wait=0.25, max_wait=0.25)
    ledger = open_ledger(clock=clock, retry=policy)
    fake.fail_next(*[FakeFailure.REFUSED] * 10)

    with pytest.raises(EffectDeferred):
        ledger.execute(Timed(fake, generic_contract()), CHARGE, intent_key="invoice:inv_42:collect:v1")

    assert len(starts) == 2  # at 0 and about 0.25 s; a third would start at about 0.5 s, past the bound
    assert starts[-1] - starts[0] <= policy.max_total_seconds
    assert fake.effects() == []
    assert ledger.get("invoice:inv_42:collect:v1").status is EffectStatus.PREPARED


@pytest.mark.parametrize(
    "order", [("accepts", "rejects"), ("rejects", "accepts")], ids=["accept-first", "reject-first"]
)
def test_an_acceptance_then_a_rejection_rejects_in_either_order(
    open_ledger: OpenLedger, tmp_path: Path, order: tuple[str, str]
) -> None:
    """SES publishes Send, then Reject (a virus found after acceptance): a queue may deliver them either way."""
    key = "order:o_1:receipt:v1"
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", dedupe=False, clock=clock)
    adapter = GenericFakeAdapter(fake, generic_contract(dedupe=False), lookups_enabled=False)
    ledger = open_ledger(clock=clock, retry=NO_WAIT)
    fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
    with pytest.raises(EffectUnknown):
        ledger.execute(adapter, CHARGE, intent_key=key)

    for n, verdict in enumerate(order):
        ledger.record_evidence(event(key, f"e{n}", EvidenceVerdict(verdict), clock))
        clock.advance(timedelta(minutes=1))

    assert ledger.get(key).status is EffectStatus.REJECTED
    assert ledger.reconcile(adapter, intent_key=key).status is EffectStatus.REJECTED
    assert len(fake.requests()) == 1


def test_an_acceptance_alone_confirms_once_the_rejection_window_has_passed(
    open_ledger: OpenLedger, tmp_path: Path
) -> None:
    key = "order:o_1:receipt:v1"
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", dedupe=False, clock=clock)
    contract = generic_contract(dedupe=False)
    adapter = GenericFakeAdapter(fake, contract, lookups_enabled=False)
    ledger = open_ledger(clock=clock, retry=NO_WAIT)
    fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
    with pytest.raises(EffectUnknown):
        ledger.execute(adapter, CHARGE, intent_key=key)

    ledger.record_evidence(event(key, "send-1", EvidenceVerdict.ACCEPTS, clock))
    assert ledger.get(key).status is EffectStatus.UNKNOWN  # a rejection may still follow
    clock.advance(contract.rejection_window - timedelta(seconds=1))
    assert ledger.reconcile(adapter, intent_key=key).status is EffectStatus.UNKNOWN
    clock.advance(timedelta(seconds=1))

    record = ledger.reconcile(adapter, intent_key=key)

    assert (record.status, record.provider_result_id) == (EffectStatus.CONFIRMED, "fx_1")
    assert record.resolution is not None
    assert record.resolution.evidence == "events:send-1"
    assert len(fake.requests()) == 1


def event(key: str, event_id: str, verdict: EvidenceVerdict, clock: FakeClock) -> Evidence:
    return Evidence(
        tenant="default",
        intent_key=key,
        provider="fake",
        source="events",
        event_id=event_id,
        kind=verdict.value,
        verdict=verdict,
        provider_result_id="fx_1",
        received_at=clock(),
    )


@dataclass
class HeldOnTheWire(GenericFakeAdapter):
    """The first request waits on the wire until released: its worker's lease runs out meanwhile."""

    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def dispatch(self, request: EffectRequest, provider_key: str) -> str:
        if not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(10)
        return super().dispatch(request, provider_key)


@pytest.mark.parametrize(
    ("late", "settled_by", "creator_ahead", "a_zone"),
    [
        (None, "evidence:late_response", timedelta(0), UTC),
        (FakeFailure.LOST_AFTER_COMMIT, "lookup:search", timedelta(0), UTC),
        (None, "evidence:late_response", timedelta(minutes=10), UTC),
        (None, "evidence:late_response", timedelta(0), timezone(timedelta(hours=-5))),
    ],
    ids=["late-confirmation", "late-timeout-after-acting", "creator-clock-10-min-ahead", "a-clock-in-utc-5"],
)
def test_a_late_answer_while_reopened_is_reconciled_not_resent(
    open_ledger: OpenLedger,
    tmp_path: Path,
    late: FakeFailure | None,
    settled_by: str,
    creator_ahead: timedelta,
    a_zone: tzinfo,
) -> None:
    """No keys, lookups that prove absence: B reopens the intent while A's request is still on the wire; A's
    answer (a confirmation, or a timeout after the provider acted) then arrives as evidence. The caller's retry
    must reconcile (from the evidence, or a fresh lookup that now finds it), not send a second message. Also when
    the record was made by a process whose clock runs ahead: A's answer, stamped by A's clock, is then dated
    before the record's creation, and still counts; and when A's clock tells the same instants in another zone."""
    key = "welcome:user_1:email:v1"
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", clock=clock, dedupe=False)
    adapter = HeldOnTheWire(fake, generic_contract(dedupe=False, lookup_proves_absence=True))
    worker_a = open_ledger(clock=lambda: clock().astimezone(a_zone), retry=NO_WAIT)
    worker_b = open_ledger(clock=clock, retry=NO_WAIT)
    if creator_ahead:
        open_ledger(clock=lambda: clock() + creator_ahead).prepare(adapter, CHARGE, intent_key=key)
    if late is not None:
        fake.fail_next(late)
    outcome: list[Receipt | LeaseLost] = []

    def a_sends() -> None:
        try:
            outcome.append(worker_a.execute(adapter, CHARGE, intent_key=key))
        except LeaseLost as lost:
            outcome.append(lost)

    thread = threading.Thread(target=a_sends)
    thread.start()
    assert adapter.entered.wait(10)
    clock.advance(worker_a.lease.duration * 2)
    assert worker_b.reconcile(adapter, intent_key=key).status is EffectStatus.PREPARED  # not at the provider yet
    adapter.release.set()
    thread.join(10)
    # A's answer came after its lease, and was kept as evidence: a confirmation settles the reopened intent
    # (A's caller gets it as on time); a timeout says nothing, and A's caller learns the lease was lost
    [a_got] = outcome
    if late is None:
        assert isinstance(a_got, Receipt)
        assert a_got.record.status is EffectStatus.CONFIRMED
    else:
        assert isinstance(a_got, LeaseLost)
        assert a_got.record.status is EffectStatus.UNKNOWN

    receipt = worker_b.execute(adapter, CHARGE, intent_key=key)  # the caller retries

    assert receipt.record.status is EffectStatus.CONFIRMED
    assert receipt.record.resolution is not None
    assert receipt.record.resolution.method == settled_by
    assert len(fake.effects()) == 1


def test_an_acceptance_on_record_forbids_a_resend_on_a_lookups_absent(open_ledger: OpenLedger, tmp_path: Path) -> None:
    """Inside the rejection window an acceptance does not confirm yet, but it is proof enough that a lookup's
    "absent" is lag: the intent stays unknown, nothing is sent again."""
    key = "welcome:user_1:email:v1"
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "fake.db", clock=clock, dedupe=False)
    adapter = GenericFakeAdapter(fake, generic_contract(dedupe=False, lookup_proves_absence=True))
    ledger = open_ledger(clock=clock, retry=NO_WAIT)
    fake.fail_next(FakeFailure.LOST_BEFORE_COMMIT)  # the ledger cannot tell what happened: unknown
    with pytest.raises(EffectUnknown):
        ledger.execute(adapter, CHARGE, intent_key=key)
    ledger.record_evidence(event(key, "accepted-1", EvidenceVerdict.ACCEPTS, clock))

    with pytest.raises(EffectUnknown):
        ledger.execute(adapter, CHARGE, intent_key=key)  # the caller retries inside the window

    assert fake.requests() == [(f"default/{key}", "lost_before_commit")]
    assert ledger.get(key).status is EffectStatus.UNKNOWN
