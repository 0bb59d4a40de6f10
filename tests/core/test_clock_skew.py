"""A worker whose clock disagrees with the ledger database's writes and sends nothing (ClockSkewed).

Reproduced before the guard, with the real stripe SDK on FakeStripe: a claimer 40 min fast and a retrier 30 min
slow replayed a key 24 h 05 min after the send, which Stripe had forgotten, and charged twice; a worker 3 min
fast took over a live call. Here the generic fake provider counts the effects; the ledgers are real.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from safe_effects import (
    DEFAULT_MAX_CLOCK_SKEW,
    ClockSkewed,
    CrashPlan,
    CrashPoint,
    EffectRequest,
    EffectStatus,
    Evidence,
    EvidenceVerdict,
    IntentNotFound,
    InvalidInput,
    LeasePolicy,
    Ledger,
    LedgerUnavailable,
    Reconciler,
    Resolution,
    SimulatedCrash,
    open_store,
    system_clock,
)
from safe_effects._clock_skew import RECHECK_AFTER, RECHECK_REFUSED_AFTER, ClockSkewGuard
from safe_effects._store import Store
from safe_effects.testing import GenericFakeAdapter, GenericFakeProvider, generic_contract

KEY = "invoice:inv_42:collect:v1"
CHARGE = EffectRequest(operation="charge", params={"amount": 2000, "currency": "eur"})


class ShiftedClock:
    """The system clock moved by ``offset``: a host whose time sync failed (the offset can change, as NTP steps)."""

    def __init__(self, offset: timedelta) -> None:
        self.offset = offset

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset


class Monotonic:
    """A monotonic clock a test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fake(tmp_path: Path) -> GenericFakeProvider:
    return GenericFakeProvider(tmp_path / "fake.db", dedupe=False)


@pytest.fixture
def ledgers(store_url: str) -> Iterator[list[Ledger]]:
    opened: list[Ledger] = []
    yield opened
    for ledger in opened:
        ledger.close()


def _open(ledgers: list[Ledger], url: str, clock: ShiftedClock, **options: object) -> Ledger:
    ledgers.append(Ledger.open(url, clock=clock, max_clock_skew=timedelta(seconds=30), **options))  # type: ignore[arg-type]
    return ledgers[-1]


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("minutes", [10, -10])
def test_a_worker_whose_clock_is_off_writes_and_sends_nothing(
    store_url: str, fake: GenericFakeProvider, ledgers: list[Ledger], minutes: int
) -> None:
    adapter = GenericFakeAdapter(fake, generic_contract(dedupe=False))
    skewed = _open(ledgers, store_url, ShiftedClock(timedelta(minutes=minutes)))
    sound = _open(ledgers, store_url, ShiftedClock(timedelta(seconds=2)))
    calls: dict[str, Callable[[], object]] = {
        "execute": lambda: skewed.execute(adapter, CHARGE, intent_key=KEY),
        "prepare": lambda: skewed.prepare(adapter, CHARGE, intent_key=KEY),
        "record_evidence": lambda: skewed.record_evidence(
            Evidence(
                tenant="default",
                intent_key=KEY,
                provider=adapter.provider,
                source="webhook",
                event_id="evt_1",
                kind="delivered",
                verdict=EvidenceVerdict.CONFIRMS,
                received_at=skewed.clock(),
            )
        ),
    }
    for name, call in calls.items():
        with pytest.raises(ClockSkewed, match=r"clock is [+-]\d+\.\d s off the ledger database's") as refused:
            call()
        assert isinstance(refused.value, LedgerUnavailable), name  # what callers already retry later
        assert refused.value.offset == pytest.approx(minutes * 60, abs=5), name
    assert fake.effects() == []
    with pytest.raises(IntentNotFound):
        sound.get(KEY)
    assert sound.store.evidence_for("default", KEY) == []

    unknown = sound.prepare(adapter, CHARGE, intent_key=KEY)  # a record the skewed worker might settle or look up
    with pytest.raises(ClockSkewed):
        skewed.reconcile(adapter, intent_key=KEY)
    with pytest.raises(ClockSkewed):
        skewed.settle(unknown, EffectStatus.CONFIRMED, resolution=Resolution(method="operator"), actor="bob")
    assert sound.get(KEY) == unknown
    receipt = sound.execute(adapter, CHARGE, intent_key=KEY)  # a worker within the bound goes on as ever
    assert receipt.record.status is EffectStatus.CONFIRMED
    assert len(fake.effects()) == 1


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_reconciler_whose_clock_is_fast_sweeps_nothing_and_takes_no_live_call_over(
    store_url: str, fake: GenericFakeProvider, ledgers: list[Ledger]
) -> None:
    """The QA review: the sweep judged leases by its own clock outside the guarded calls, so a reconciler 10 min
    fast turned a live call unknown, and with lookups that prove absence a sound worker's retry sent it twice."""
    adapter = GenericFakeAdapter(fake, generic_contract(dedupe=False, lookup_proves_absence=True))
    worker = _open(
        ledgers, store_url, ShiftedClock(timedelta(0)), crash_plan=CrashPlan.crash_at(CrashPoint.AFTER_RESPONSE)
    )
    with pytest.raises(SimulatedCrash):  # its call is still live: the lease runs for two minutes
        worker.execute(adapter, CHARGE, intent_key=KEY)
    live = worker.get(KEY)
    fast = _open(ledgers, store_url, ShiftedClock(timedelta(minutes=10)))
    with pytest.raises(ClockSkewed):
        Reconciler(fast, {"fake": adapter}).run_once()
    with pytest.raises(ClockSkewed):
        fast._expire_lease(live)
    assert worker.get(KEY) == live  # still the live worker's
    assert len(fake.effects()) == 1


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_the_clock_is_measured_again_after_a_minute_and_a_fixed_clock_is_let_through(store_url: str) -> None:
    """A clock that steps off between two measurements is caught at the next one; once fixed, a refused
    worker writes again within seconds."""
    store, clock, monotonic = open_store(store_url), ShiftedClock(timedelta(0)), Monotonic()
    try:
        guard = ClockSkewGuard(store, clock, timedelta(seconds=30), monotonic=monotonic)
        guard.check()
        clock.offset = timedelta(hours=2)
        guard.check()  # measured less than a minute ago
        monotonic.now += RECHECK_AFTER
        with pytest.raises(ClockSkewed):
            guard.check()
        clock.offset = timedelta(seconds=-20)  # within the bound
        with pytest.raises(ClockSkewed):
            guard.check()  # the refusal stands until the next measurement
        monotonic.now += RECHECK_REFUSED_AFTER
        guard.check()
        clock.offset = timedelta(seconds=-40)
        monotonic.now += RECHECK_AFTER
        with pytest.raises(ClockSkewed, match=r"-40\.\d s off"):
            guard.check()
    finally:
        store.close()


class _AnswersAfter:
    """The real store, whose time query comes back ``trip`` after it was asked (a database under load): the
    worker's clock reads that much later once it returns."""

    def __init__(self, store: Store, clock: ShiftedClock, trip: timedelta) -> None:
        self.store, self.clock, self.trip = store, clock, trip

    def database_time(self) -> datetime | None:
        answered = self.store.database_time()
        self.clock.offset += self.trip
        return answered


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize(("ahead", "refused"), [(25, False), (45, True)])
def test_a_slow_time_query_counts_half_its_round_trip_in_the_workers_favour(
    store_url: str, ahead: int, refused: bool
) -> None:
    """The database read its clock somewhere within a 20 s round trip: the offset is taken at the midpoint and
    the other 10 s are doubt, counted for the worker. A clock ``ahead`` s of the database's as the query left is
    25 to 45 s off: refused only if it is off by more than 30 s beyond doubt, reported at the midpoint estimate.
    Mutants: the offset read after the answer (a worker wrongly refused, or reported 10 s off), or the doubt
    counted against the worker (a sound worker refused, a ledger down while its database is slow)."""
    store, clock = open_store(store_url), ShiftedClock(timedelta(seconds=ahead))
    try:
        guard = ClockSkewGuard(_AnswersAfter(store, clock, timedelta(seconds=20)), clock, timedelta(seconds=30))  # type: ignore[arg-type]
        if not refused:
            guard.check()
            return
        with pytest.raises(ClockSkewed) as skewed:
            guard.check()
        assert skewed.value.offset == pytest.approx(ahead + 10, abs=2)
    finally:
        store.close()


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_refused_clock_is_logged_once_a_minute_and_its_recovery_once(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A refused worker measures again every few seconds: an error each time flooded the log (the logging
    review: three lines in twelve seconds per process), and nothing said when it could write again."""
    caplog.set_level(logging.INFO, logger="safe_effects")
    store, clock, monotonic = open_store(store_url), ShiftedClock(timedelta(hours=1)), Monotonic()
    try:
        guard = ClockSkewGuard(store, clock, timedelta(seconds=30), monotonic=monotonic)
        for _ in range(int(RECHECK_AFTER / RECHECK_REFUSED_AFTER)):  # measured again and refused for a minute
            with pytest.raises(ClockSkewed):
                guard.check()
            monotonic.now += RECHECK_REFUSED_AFTER
        with pytest.raises(ClockSkewed):
            guard.check()  # a minute after the first refusal: said again
        clock.offset = timedelta(0)
        monotonic.now += RECHECK_REFUSED_AFTER
        guard.check()
        guard.check()
    finally:
        store.close()
    logged = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "safe_effects"]
    assert [level for level, _ in logged] == ["ERROR", "ERROR", "INFO"]
    assert all("off the ledger database's" in message for _, message in logged[:2])
    assert logged[2][1].startswith("this worker's clock is within 30 s of the ledger database's again (")


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_sqlite_has_no_second_clock_to_disagree_with(
    store_url: str, fake: GenericFakeProvider, ledgers: list[Ledger]
) -> None:
    ledger = _open(ledgers, store_url, ShiftedClock(timedelta(hours=3)))
    receipt = ledger.execute(GenericFakeAdapter(fake, generic_contract(dedupe=False)), CHARGE, intent_key=KEY)
    assert receipt.record.status is EffectStatus.CONFIRMED
    assert len(fake.effects()) == 1


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_lease_must_outlast_the_response_window_and_the_skew_two_workers_may_have(
    store_url: str, fake: GenericFakeProvider, ledgers: list[Ledger]
) -> None:
    """Without keys, and with lookups whose "absent" sends again, a worker 60 s ahead of another (each 30 s
    off the database) judges the other's lease a minute early."""
    adapter = GenericFakeAdapter(fake, generic_contract(dedupe=False, lookup_proves_absence=True))  # 5 s window
    short = _open(ledgers, store_url, ShiftedClock(timedelta(0)), lease=LeasePolicy(duration=timedelta(seconds=60)))
    with pytest.raises(InvalidInput, match=r"response window \(5 s\) plus twice the allowed clock skew \(60 s\)"):
        short.execute(adapter, CHARGE, intent_key=KEY)
    assert fake.effects() == []
    with pytest.raises(IntentNotFound):
        short.get(KEY)
    long_enough = _open(
        ledgers, store_url, ShiftedClock(timedelta(0)), lease=LeasePolicy(duration=timedelta(seconds=66))
    )
    assert long_enough.execute(adapter, CHARGE, intent_key=KEY).record.status is EffectStatus.CONFIRMED
    assert len(fake.effects()) == 1


def test_auto_checks_the_system_clock_and_leaves_an_injected_one_to_its_test() -> None:
    from safe_effects._ledger import _max_clock_skew

    assert _max_clock_skew("auto", system_clock) == DEFAULT_MAX_CLOCK_SKEW == timedelta(seconds=30)
    assert _max_clock_skew("auto", ShiftedClock(timedelta(0))) is None
    assert _max_clock_skew(timedelta(seconds=5), ShiftedClock(timedelta(0))) == timedelta(seconds=5)
    assert _max_clock_skew(None, system_clock) is None


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize("given", [timedelta(0), timedelta(seconds=-1), "always", 30])
def test_a_bad_bound_is_refused_by_name(store_url: str, given: object) -> None:
    store = open_store(store_url)
    try:
        with pytest.raises(InvalidInput, match="max_clock_skew must be a positive timedelta, None or 'auto'"):
            Ledger(store, max_clock_skew=given)  # type: ignore[arg-type]
    finally:
        store.close()


def test_a_first_send_later_than_now_is_never_replayed() -> None:
    """The replay window is counted from the sender's clock: a reader behind it cannot tell how far."""
    contract = generic_contract(dedupe=True)
    now = datetime.now(UTC)
    assert contract.can_replay(now - timedelta(minutes=5), now)
    assert not contract.can_replay(now + timedelta(minutes=5), now)
    assert not contract.can_replay(None, now)
