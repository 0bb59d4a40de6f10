"""The reconciler settles what lookups prove, leaves the rest unknown, paces lookups, and races safely."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
import typer

from safe_effects import (
    CrashPlan,
    CrashPoint,
    EffectRecord,
    EffectRequest,
    EffectUnknown,
    Evidence,
    EvidenceVerdict,
    InvalidInput,
    LeasePolicy,
    Ledger,
    LedgerUnavailable,
    LookupKind,
    LookupMethod,
    LookupResult,
    ProviderContract,
    Reconciler,
    RetryPolicy,
    SimulatedCrash,
)
from safe_effects.cli import _reconcile as reconcile_cli
from safe_effects.testing import FakeClock, FakeFailure, GenericFakeAdapter

if TYPE_CHECKING:
    from conftest import Ops

ADAPTERS = "ops_fake_adapters:adapters"


def test_run_once_confirms_found_and_keeps_inconclusive_unknown(ops: Ops) -> None:
    ops.unknown("invoice:a:collect:v1")
    ops.unknown("invoice:b:collect:v1", happened=False)
    report = Reconciler(ops.ledger, {"fake": ops.adapter}).run_once(limit=10)
    assert report.counts() == {"confirmed": 1, "unknown": 1}
    assert report.settled == 1
    found = ops.ledger.get("invoice:a:collect:v1")
    assert found.status == "confirmed"
    assert found.resolution is not None
    assert found.resolution.method == "lookup:search"
    assert ops.ledger.get("invoice:b:collect:v1").status == "unknown"
    assert len(ops.fake.effects()) == 1  # nothing was redispatched


@pytest.mark.parametrize(
    ("make", "named"),
    [
        (lambda o: Reconciler(o.ledger, None), "adapters must map provider names to adapters, got NoneType"),
        (lambda o: Reconciler(None, {}), r"Reconciler needs ledger=Ledger.open\(store_url\)"),
        (lambda o: Reconciler(o.ledger, {}, max_wait=-5), "max_wait must be 0 or more seconds"),
        (lambda o: Reconciler(o.ledger, {"fake": o.adapter}).run_once(limit=-1), "limit must be an int of 1 or more"),
        (lambda o: Reconciler(o.ledger, {"fake": o.adapter}).run_once(limit="x"), "limit must be an int of 1 or more"),
    ],
    ids=["adapters", "ledger", "max_wait", "negative limit", "limit of the wrong type"],
)
def test_a_reconciler_setting_it_cannot_use_is_refused_and_settles_nothing(ops: Ops, make: Any, named: str) -> None:
    """``run_once(limit=-1)`` swept nothing and reported it as a sweep that found nothing to do."""
    ops.unknown("invoice:a:collect:v1")
    with pytest.raises(InvalidInput, match=named):
        make(ops)
    assert ops.ledger.get("invoice:a:collect:v1").status == "unknown"
    assert len(ops.fake.effects()) == 1


def test_inconclusive_records_do_not_starve_newer_unknowns(ops: Ops) -> None:
    stuck = [ops.unknown(f"invoice:stuck{n}:collect:v1", happened=False).intent_key for n in range(2)]
    found = ops.unknown("invoice:found:collect:v1").intent_key  # newer; a lookup would confirm it
    reconciler = Reconciler(ops.ledger, {"fake": ops.adapter})
    sweeps = [[(i.intent_key, i.outcome) for i in reconciler.run_once(limit=2).items] for _ in range(3)]
    assert sweeps == [
        [(stuck[0], "unknown"), (stuck[1], "unknown")],
        [(found, "confirmed"), (stuck[0], "unknown")],  # continues after the first sweep, then wraps around
        [(stuck[1], "unknown"), (stuck[0], "unknown")],
    ]
    assert ops.ledger.get(found).status == "confirmed"
    assert [ops.ledger.get(key).status for key in stuck] == ["unknown", "unknown"]
    assert len(ops.fake.effects()) == 1  # found's own charge: nothing was redispatched
    fresh = Reconciler(ops.ledger, {"fake": ops.adapter}).run_once(limit=1)  # a new one starts at the oldest
    assert [i.intent_key for i in fresh.items] == [stuck[0]]


def test_a_named_cursor_carries_the_round_robin_to_a_new_reconciler(ops: Ops) -> None:
    """A scheduler that builds a new Reconciler every run (cron) goes round robin through the ledger."""
    stuck = [ops.unknown(f"invoice:stuck{n}:collect:v1", happened=False).intent_key for n in range(2)]
    found = ops.unknown("invoice:found:collect:v1").intent_key

    def run() -> list[tuple[str, str]]:
        reconciler = Reconciler(ops.ledger, {"fake": ops.adapter}, cursor_name="cron")
        return [(i.intent_key, i.outcome) for i in reconciler.run_once(limit=2).items]

    assert [run() for _ in range(3)] == [
        [(stuck[0], "unknown"), (stuck[1], "unknown")],
        [(found, "confirmed"), (stuck[0], "unknown")],
        [(stuck[1], "unknown"), (stuck[0], "unknown")],
    ]
    assert ops.ledger.store.reconciler_cursor("cron/fake") is not None  # one per provider
    assert ops.ledger.get(found).status == "confirmed"
    assert len(ops.fake.effects()) == 1  # found's own charge: nothing was redispatched
    unnamed = Reconciler(ops.ledger, {"fake": ops.adapter}).run_once(limit=1)  # its own, in-memory cursor
    assert [i.intent_key for i in unnamed.items] == [stuck[0]]


class StopsAtLookup(GenericFakeAdapter):
    """Ctrl-C arrives during the lookup of the ``at``-th record (counting from 1), as a stopped sweep's would."""

    def __init__(self, adapter: GenericFakeAdapter, at: int) -> None:
        super().__init__(adapter.fake, contract=adapter.contract)
        self.at, self.lookups = at, 0

    def lookup(self, record: EffectRecord) -> LookupResult:
        self.lookups += 1
        if self.lookups == self.at:
            raise KeyboardInterrupt
        return GenericFakeAdapter.lookup(self, record)


def test_a_sweep_stopped_part_way_is_taken_up_where_it_stopped(ops: Ops) -> None:
    """The records a stopped sweep had not finished come first in the next one, not a whole round later."""
    stuck = [ops.unknown(f"invoice:stuck{n}:collect:v1", happened=False).intent_key for n in range(5)]
    with pytest.raises(KeyboardInterrupt):
        Reconciler(ops.ledger, {"fake": StopsAtLookup(ops.adapter, at=3)}, cursor_name="cron").run_once(limit=5)
    after = Reconciler(ops.ledger, {"fake": ops.adapter}, cursor_name="cron").run_once(limit=3)
    assert [(i.intent_key, i.outcome) for i in after.items] == [
        (stuck[2], "unknown"),  # the one the stop interrupted: looked up again
        (stuck[3], "unknown"),
        (stuck[4], "unknown"),
    ]
    assert [ops.ledger.get(key).status for key in stuck] == ["unknown"] * 5
    assert ops.fake.effects() == []  # never at the provider, and nothing was redispatched


def test_cli_one_shot_runs_reach_newer_unknowns_behind_inconclusive_ones(ops: Ops) -> None:
    for n in range(2):
        ops.unknown(f"invoice:stuck{n}:collect:v1", happened=False)
    found = ops.unknown("invoice:found:collect:v1").intent_key
    first = ops.cli_json("reconcile", "--limit", "2", "--adapters", ADAPTERS)
    assert first["counts"] == {"unknown": 2}
    assert ops.ledger.get(found).status == "unknown"
    second = ops.cli_json("reconcile", "--limit", "2", "--adapters", ADAPTERS)  # a new process, as cron runs it
    assert second["counts"] == {"confirmed": 1, "unknown": 1}
    assert ops.ledger.get(found).status == "confirmed"
    assert ops.ledger.store.reconciler_cursor("reconcile:fake/fake") is not None  # per set of adapters, per provider
    again = ops.cli_json("reconcile", "--limit", "2", "--adapters", ADAPTERS, "--cursor", "")
    assert [item["intent_key"] for item in again["items"]] == ["invoice:stuck0:collect:v1", "invoice:stuck1:collect:v1"]
    assert len(ops.fake.effects()) == 1


def test_cli_reconcile_loop_reaches_newer_unknowns_behind_inconclusive_ones(
    ops: Ops, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(2):
        ops.unknown(f"invoice:stuck{n}:collect:v1", happened=False)
    found = ops.unknown("invoice:found:collect:v1").intent_key
    sleeps: list[float] = []

    class Stop(Exception):
        pass

    def sleep(seconds: float) -> None:  # the loop's pause between sweeps: stop after the second sweep
        sleeps.append(seconds)
        if len(sleeps) == 2:
            raise Stop("enough sweeps")

    monkeypatch.setattr(reconcile_cli, "time", SimpleNamespace(sleep=sleep))
    looped = ops.cli("reconcile", "--loop", "--interval", "5", "--limit", "2", "--adapters", ADAPTERS, "--json")
    assert "enough sweeps" in looped.stderr, looped.output
    assert sleeps == [5.0, 5.0]
    assert ops.ledger.get(found).status == "confirmed"
    assert len(ops.fake.effects()) == 1


def test_expired_in_flight_is_reconciled_and_live_one_left_alone(ops: Ops) -> None:
    clock = FakeClock()
    lease = LeasePolicy(duration=timedelta(seconds=60))
    ledger = Ledger(ops.ledger.store, clock=clock, lease=lease, worker_id="worker-1")
    request = EffectRequest(operation="charge", params={"n": 1})
    lost = ledger.prepare(ops.adapter, request, intent_key="invoice:lost:collect:v1")
    ops.ledger.store.transition(lost, "in_flight", now=clock(), actor="worker-1", changes={
        "lease_owner": "worker-1", "lease_expires_at": clock() + timedelta(seconds=60)})  # fmt: skip
    clock.advance(timedelta(seconds=61))
    live = ledger.prepare(
        ops.adapter, EffectRequest(operation="charge", params={"n": 2}), intent_key="invoice:live:collect:v1"
    )
    ops.ledger.store.transition(live, "in_flight", now=clock(), actor="worker-2", changes={
        "lease_owner": "worker-2", "lease_expires_at": clock() + timedelta(seconds=60)})  # fmt: skip
    report = Reconciler(ledger, {"fake": ops.adapter}).run_once()
    assert [(i.intent_key, i.before, i.outcome) for i in report.items] == [
        ("invoice:lost:collect:v1", "in_flight", "unknown")
    ]
    assert ledger.get("invoice:live:collect:v1").status == "in_flight"


def test_lookups_are_paced_by_the_contract_rate_limit(ops: Ops) -> None:
    for n in range(4):
        ops.unknown(f"invoice:r{n}:collect:v1")
    slow = GenericFakeAdapter(ops.fake)
    search = LookupMethod(kind=LookupKind.SEARCH, description="6 a minute", rate_limit_per_minute=6)
    slow.contract = slow.contract.model_copy(update={"lookups": (search,)})
    now = [0.0]
    slept: list[float] = []
    reconciler = Reconciler(ops.ledger, {"fake": slow}, max_wait=1.0, monotonic=lambda: now[0], sleep=slept.append)
    first = reconciler.run_once()
    assert first.counts() == {"confirmed": 1, "deferred": 3}  # one token; the next is 10 s away
    now[0] += 9.5  # 0.5 s short of a token: it waits that long, then defers the rest
    second = reconciler.run_once()
    assert second.counts() == {"confirmed": 1, "deferred": 2}
    assert slept == [pytest.approx(0.5)]
    now[0] += 600  # a long pause refills only one token (burst of one at 6/min)
    assert reconciler.run_once().counts() == {"confirmed": 1, "deferred": 1}


def paced(adapter: GenericFakeAdapter) -> GenericFakeAdapter:
    """The adapter with SendGrid's Email Activity rate: 6 lookups a minute, one token at a time."""
    search = LookupMethod(kind=LookupKind.SEARCH, description="6 a minute", rate_limit_per_minute=6)
    return replace(adapter, contract=adapter.contract.model_copy(update={"lookups": (search,)}))


def test_a_rate_limited_providers_unknowns_each_get_their_turn(ops: Ops) -> None:
    """One lookup a sweep: were the records deferred behind it passed over, every sweep would look the oldest
    up again (it never settles) and the others, which a lookup would confirm, never."""
    stuck = ops.unknown("invoice:stuck:collect:v1", happened=False).intent_key
    found = [ops.unknown(f"invoice:r{n}:collect:v1").intent_key for n in range(3)]
    slow = paced(ops.adapter)
    now = [0.0]

    def sweep() -> list[tuple[str, str]]:  # a new reconciler each time, as cron runs it: the cursor is stored
        reconciler = Reconciler(ops.ledger, {"fake": slow}, monotonic=lambda: now[0], cursor_name="cron")
        now[0] += 60
        return [(i.intent_key, i.outcome) for i in reconciler.run_once().items if i.outcome != "deferred"]

    assert [sweep() for _ in range(4)] == [
        [(stuck, "unknown")],
        [(found[0], "confirmed")],
        [(found[1], "confirmed")],
        [(found[2], "confirmed")],
    ]
    assert [ops.ledger.get(key).status for key in found] == ["confirmed"] * 3
    assert ops.ledger.get(stuck).status == "unknown"
    assert len(ops.fake.effects()) == 3  # their own sends: nothing was redispatched


def test_a_deferred_record_a_lost_worker_left_in_flight_is_taken_over_without_a_lookup(ops: Ops) -> None:
    """Turning an expired lease into unknown needs no lookup: done at once, so the record shows as in doubt (the
    aging alerts) rather than as abandoned while it waits for the provider's rate limit."""
    clock = FakeClock(datetime.now(UTC))
    dying = Ledger(ops.ledger.store, clock=clock, crash_plan=CrashPlan.crash_at(CrashPoint.AFTER_RESPONSE))
    keys = [f"invoice:lost{n}:collect:v1" for n in range(2)]
    for n, key in enumerate(keys):
        with pytest.raises(SimulatedCrash):
            dying.execute(ops.adapter, EffectRequest(operation="charge", params={"n": n}), intent_key=key)
    clock.advance(timedelta(hours=1))  # both leases ran out: their workers are gone
    reconciler = Reconciler(Ledger(ops.ledger.store, clock=clock), {"fake": paced(ops.adapter)})
    report = reconciler.run_once()
    assert [(i.intent_key, i.before, i.outcome) for i in report.items] == [
        (keys[0], "in_flight", "confirmed"),
        (keys[1], "in_flight", "deferred"),
    ]
    later = ops.ledger.get(keys[1])
    assert (later.status, later.lease_owner, later.last_error_class) == ("unknown", None, "LeaseExpired")
    assert len(ops.fake.effects()) == 2  # both sent once by the lost workers; nothing sent again


def test_evidence_on_file_settles_without_waiting_for_a_lookup_token(ops: Ops) -> None:
    """A SendGrid-like provider allows 6 lookups a minute, one at a time: unknowns whose acceptance events are
    on file, their rejection window passed, need no lookup, so one sweep settles them all (a helper saw one
    settled per sweep, the rest deferred behind the rate limit)."""
    clock = FakeClock(datetime.now(UTC))
    ledger = Ledger(ops.ledger.store, clock=clock, retry=RetryPolicy(initial_wait=0.0, max_wait=0.05))
    keys = [f"invoice:ev{n}:collect:v1" for n in range(5)]
    for n, key in enumerate(keys):
        ops.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
        with pytest.raises(EffectUnknown):
            ledger.execute(ops.adapter, EffectRequest(operation="charge", params={"n": n}), intent_key=key)
        accepted = Evidence(
            tenant="default",
            intent_key=key,
            provider="fake",
            source="events",
            event_id=f"processed-{n}",
            kind="processed",
            verdict=EvidenceVerdict.ACCEPTS,
            provider_result_id=f"fx_{n + 1}",
            received_at=clock(),
        )
        assert ledger.record_evidence(accepted)
    stuck = ops.unknown("invoice:stuck:collect:v1", happened=False).intent_key  # needs a lookup
    clock.advance(timedelta(minutes=16))  # past the 15-minute rejection window
    report = Reconciler(ledger, {"fake": paced(ops.adapter)}).run_once()
    outcomes = {i.intent_key: (i.outcome, i.method) for i in report.items}
    assert outcomes == {**dict.fromkeys(keys, ("confirmed", "evidence:events")), stuck: ("unknown", None)}
    assert [ledger.get(key).provider_result_id for key in keys] == [f"fx_{n + 1}" for n in range(5)]
    assert ledger.store.audit_trail("default", keys[0])[-1].detail == {
        "method": "evidence:events",
        "evidence": "events:processed-0",
        "provider_result_id": "fx_1",
    }
    assert len(ops.fake.effects()) == 5  # each sent once; nothing sent again


def test_a_deferred_record_another_process_moved_first_still_keeps_the_cursor_before_the_rest(ops: Ops) -> None:
    """The provider's first deferred record was an abandoned in-flight one that a job's retry took over during
    the sweep: moving its lease fails (contended), and the records deferred after it must not be passed over."""
    clock = FakeClock(datetime.now(UTC))
    ledger = Ledger(ops.ledger.store, clock=clock, retry=RetryPolicy(initial_wait=0.0, max_wait=0.05))
    dying = Ledger(ops.ledger.store, clock=clock, crash_plan=CrashPlan.crash_at(CrashPoint.AFTER_RESPONSE))
    keys = [f"invoice:r{n}:collect:v1" for n in range(3)]
    for n, key in enumerate(keys):
        clock.advance(timedelta(seconds=1))
        request = EffectRequest(operation="charge", params={"n": n})
        if n == 1:  # a worker died after the provider acted
            with pytest.raises(SimulatedCrash):
                dying.execute(ops.adapter, request, intent_key=key)
            continue
        ops.fake.fail_next(FakeFailure.LOST_BEFORE_COMMIT)  # never at the provider: lookups stay inconclusive
        with pytest.raises(EffectUnknown):
            ledger.execute(ops.adapter, request, intent_key=key)
    clock.advance(timedelta(hours=1))  # r1's lease ran out

    job = Ledger(ops.ledger.store, clock=clock)  # another worker than the reconciler's

    class JobRetriesDuringTheSweep(Reconciler):
        def candidates(self, limit: int) -> list[EffectRecord]:
            chosen = Reconciler.candidates(self, limit)
            job.execute(ops.adapter, EffectRequest(operation="charge", params={"n": 1}), intent_key=keys[1])
            return chosen

    slow = paced(ops.adapter)
    first = JobRetriesDuringTheSweep(ledger, {"fake": slow}, cursor_name="cron").run_once()
    assert [(i.intent_key, i.outcome) for i in first.items] == [
        (keys[0], "unknown"),
        (keys[1], "contended"),
        (keys[2], "deferred"),
    ]
    second = Reconciler(ledger, {"fake": slow}, cursor_name="cron").run_once()
    assert (second.items[0].intent_key, second.items[0].outcome) == (keys[2], "unknown")  # its turn: not skipped
    assert len(ops.fake.effects()) == 1  # r1's one charge, found by the job's retry


def test_an_abandoned_lease_behind_a_backlog_is_taken_over_in_the_first_sweep(ops: Ops) -> None:
    """The round robin reaches a record behind a rate-limited backlog many sweeps later; turning its expired
    lease unknown needs no lookup, so each sweep does it for every such record of the providers it serves."""
    clock = FakeClock(datetime.now(UTC))
    ledger = Ledger(ops.ledger.store, clock=clock, retry=RetryPolicy(initial_wait=0.0, max_wait=0.05))
    for n in range(2):  # a backlog of records no lookup settles
        ops.fake.fail_next(FakeFailure.LOST_BEFORE_COMMIT)
        with pytest.raises(EffectUnknown):
            ledger.execute(ops.adapter, EffectRequest(operation="charge", params={"n": n}), intent_key=f"b:{n}:x:v1")
    clock.advance(timedelta(seconds=1))
    dying = Ledger(ops.ledger.store, clock=clock, crash_plan=CrashPlan.crash_at(CrashPoint.AFTER_RESPONSE))
    with pytest.raises(SimulatedCrash):
        dying.execute(ops.adapter, EffectRequest(operation="charge", params={}), intent_key="invoice:lost:collect:v1")
    clock.advance(timedelta(hours=1))

    report = Reconciler(ledger, {"fake": paced(ops.adapter)}).run_once(limit=1)

    assert [(i.intent_key, i.outcome) for i in report.items] == [("b:0:x:v1", "unknown")]
    lost = ops.ledger.get("invoice:lost:collect:v1")
    assert (lost.status, lost.lease_owner, lost.last_error_class) == ("unknown", None, "LeaseExpired")
    assert len(ops.fake.effects()) == 1  # the lost worker's charge, not sent again


def test_one_providers_backlog_does_not_hold_back_anothers(ops: Ops) -> None:
    """Each provider goes round robin on its own, up to ``limit`` records a sweep, the providers taking turns:
    a rate-limited provider's deferred backlog (or its paced lookups) does not hold back another's unknowns."""
    other = replace(ops.adapter, provider="other")
    backlog = [ops.unknown(f"invoice:b{n}:collect:v1").intent_key for n in range(3)]
    request = EffectRequest(operation="charge", params={"n": "other"})
    ops.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
    with pytest.raises(EffectUnknown):
        ops.ledger.execute(other, request, intent_key="invoice:o:collect:v1")
    reconciler = Reconciler(ops.ledger, {"fake": paced(ops.adapter), "other": other})
    report = reconciler.run_once(limit=3)
    assert [(i.intent_key, i.outcome) for i in report.items] == [
        (backlog[0], "confirmed"),
        ("invoice:o:collect:v1", "confirmed"),
        (backlog[1], "deferred"),
        (backlog[2], "deferred"),
    ]
    assert ops.ledger.get("invoice:o:collect:v1").status == "confirmed"
    assert len(ops.fake.effects()) == 4


@pytest.mark.parametrize("rate", [0, -6, float("nan"), float("inf")])
def test_a_lookup_rate_that_would_switch_pacing_off_is_refused(rate: float) -> None:
    with pytest.raises(ValueError, match="rate_limit_per_minute"):
        LookupMethod(kind=LookupKind.SEARCH, description="6 a minute", rate_limit_per_minute=rate)


def test_a_cursor_name_with_no_room_for_the_provider_is_refused_up_front(ops: Ops) -> None:
    with pytest.raises(InvalidInput, match="at most 135 characters: each provider's cursor is stored as NAME/provider"):
        Reconciler(ops.ledger, {"fake": ops.adapter}, cursor_name="n" * 136)
    assert Reconciler(ops.ledger, {"fake": ops.adapter}, cursor_name="n" * 135).run_once().items == ()


def test_long_provider_names_fit_the_stored_cursor_names(ops: Ops) -> None:
    """A provider's name longer than its part of a cursor name is shortened, and so is a default name listing
    many: neither may make every sweep fail on the store's limit."""
    long = replace(ops.adapter, provider="acme-payments-" + "x" * 60)
    ops.fake.fail_next(FakeFailure.LOST_BEFORE_COMMIT)
    with pytest.raises(EffectUnknown):
        ops.ledger.execute(long, EffectRequest(operation="charge", params={}), intent_key="invoice:1:collect:v1")
    report = Reconciler(ops.ledger, {long.provider: long}, cursor_name="n" * 135).run_once()
    assert report.counts() == {"unknown": 1}
    many = {f"{'p' * 40}{n}": ops.adapter for n in range(4)}
    name = reconcile_cli._default_cursor(many)
    assert name == reconcile_cli._default_cursor(dict(reversed(many.items())))  # one name per set
    assert len(name) <= 135
    assert Reconciler(ops.ledger, many, cursor_name=name).run_once().counts() == {"skipped": 1}


def test_records_without_an_adapter_are_skipped(ops: Ops) -> None:
    ops.unknown("invoice:a:collect:v1")
    report = Reconciler(ops.ledger, {}).run_once()
    assert report.counts() == {"skipped": 1}
    assert ops.ledger.get("invoice:a:collect:v1").status == "unknown"


def test_cli_reconcile_says_on_stderr_which_providers_it_skipped(ops: Ops) -> None:
    """Skipping is no error (one reconciler per set of providers skips the others'), but never silent."""
    ops.unknown("invoice:a:collect:v1")
    result = ops.cli("reconcile")  # no --adapters, and no registered adapter for the generic fake
    assert result.exit_code == 0, result.output
    assert "reconciled: skipped=1" in result.stdout
    assert "skipped records of fake: no adapter here" in result.stderr
    assert "--adapters module:callable" in result.stderr
    assert ops.ledger.get("invoice:a:collect:v1").status == "unknown"


def test_cli_reconcile_reports_json(ops: Ops) -> None:
    ops.unknown("invoice:a:collect:v1")
    ops.unknown("invoice:b:collect:v1", happened=False)
    report = ops.cli_json("reconcile", "--adapters", ADAPTERS)
    assert report["counts"] == {"confirmed": 1, "unknown": 1}
    by_key = {i["intent_key"]: (i["outcome"], i["provider_result_id"], i["version"]) for i in report["items"]}
    confirmed = ops.ledger.get("invoice:a:collect:v1")
    assert by_key == {  # what a script needs next: the object found, and the version to resolve the rest at
        "invoice:a:collect:v1": ("confirmed", confirmed.provider_result_id, confirmed.version),
        "invoice:b:collect:v1": ("unknown", None, 2),
    }
    assert confirmed.provider_result_id is not None
    table = ops.cli("reconcile", "--adapters", ADAPTERS)
    assert "reconciled: unknown=1" in table.stdout


def test_cli_one_shot_reconcile_exits_1_when_a_record_fails(ops: Ops) -> None:
    """A one-shot sweep run by cron or a script must fail visibly when records could not be looked up (a
    missing API key, a provider down): the table alone is read by nobody at 3 a.m."""
    ops.unknown("invoice:a:collect:v1")
    ops.unknown("invoice:b:collect:v1", happened=False)
    for extra in ([], ["--json"]):
        result = ops.cli("reconcile", "--adapters", "ops_fake_adapters:misconfigured", *extra)
        assert result.exit_code == 1, result.output
        assert "2 record(s) could not be reconciled" in result.stderr
        assert ("error" in json.loads(result.stdout)["counts"]) if extra else ("reconciled: error=2" in result.stdout)
    assert {ops.ledger.get(k).status for k in ("invoice:a:collect:v1", "invoice:b:collect:v1")} == {"unknown"}
    assert len(ops.fake.effects()) == 1  # nothing redispatched
    assert ops.cli("reconcile", "--adapters", ADAPTERS).exit_code == 0  # a sweep without errors still exits 0


def test_cli_one_shot_reconcile_exits_1_when_lookups_fail(ops: Ops) -> None:
    """A revoked key or a provider down makes every lookup fail: an error for cron and the alert, not the
    "not found yet" of a lookup that ran."""
    ops.unknown("invoice:a:collect:v1")
    result = ops.cli("reconcile", "--adapters", "ops_fake_adapters:lookups_refused", "--json")
    assert result.exit_code == 1, result.output
    assert "1 record(s) could not be reconciled" in result.stderr
    [item] = json.loads(result.stdout)["items"]
    assert (item["outcome"], item["method"]) == ("error", "lookup:lookup_error")
    assert item["version"] == ops.ledger.get("invoice:a:collect:v1").version  # what an operator resolves it at
    assert "401: the API key was revoked" in item["note"]
    assert ops.ledger.get("invoice:a:collect:v1").status == "unknown"
    assert len(ops.fake.effects()) == 1  # nothing redispatched


def test_two_reconciler_processes_settle_each_record_exactly_once(ops: Ops) -> None:
    keys = [f"invoice:p{n}:collect:v1" for n in range(16)]
    for key in keys:
        ops.unknown(key)
    env = {
        **os.environ,
        **ops.env,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
        "SAFE_EFFECTS_OPS_LOOKUP_DELAY": "0.05",
    }
    command = [sys.executable, "-m", "safe_effects.cli", "reconcile", "--adapters", ADAPTERS, "--json"]
    workers = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in "ab"
    ]
    reports = []
    for worker in workers:
        out, err = worker.communicate(timeout=60)
        assert worker.returncode == 0, err
        reports.append(json.loads(out))
    for key in keys:
        settled = [a for a in ops.ledger.store.audit_trail("default", key) if a.to_status == "confirmed"]
        assert len(settled) == 1, (key, settled)
        assert ops.ledger.get(key).status == "confirmed"
    outcomes = Counter(i["outcome"] for r in reports for i in r["items"])
    assert outcomes["confirmed"] == len(keys)  # each record counted as settled by exactly one process
    assert set(outcomes) <= {"confirmed", "contended"}


@pytest.mark.parametrize(
    ("blip", "line"),
    [
        (LedgerUnavailable("the ledger did not answer: server restarting"), "error [ledger_unavailable]: the ledger"),
        (OSError("disk I/O error"), "error: OSError: disk I/O error"),
    ],
    ids=["typed", "untyped"],
)
def test_cli_reconcile_loop_reports_a_failed_sweep_and_keeps_sweeping(
    ops: Ops, monkeypatch: pytest.MonkeyPatch, blip: Exception, line: str
) -> None:
    key = ops.unknown("invoice:a:collect:v1").intent_key
    store_class = type(ops.ledger.store)  # the CLI opens its own store of the same class from the URL
    real = store_class.list_by_status
    calls = itertools.count(1)

    def flaky(self: Any, *args: Any, **kwargs: Any) -> Any:  # a PostgreSQL restart under the first sweep
        if next(calls) == 1:
            raise blip
        return real(self, *args, **kwargs)

    monkeypatch.setattr(store_class, "list_by_status", flaky)
    pauses = pause_then_stop(monkeypatch, sweeps=2)
    looped = ops.cli("reconcile", "--loop", "--interval", "5", "--adapters", ADAPTERS, "--json")
    assert looped.exit_code == 0, looped.output
    assert pauses == [5.0, 5.0]  # the loop went on after the failed sweep
    assert len(looped.stderr.splitlines()) == 1, looped.stderr
    assert looped.stderr.startswith(line)
    assert json.loads(looped.stdout)["counts"] == {"confirmed": 1}  # the second sweep's report
    assert ops.ledger.get(key).status == "confirmed"
    assert len(ops.fake.effects()) == 1  # settled by lookup, nothing sent again


def test_cli_reconcile_loop_still_stops_on_a_refusal_no_retry_heals(ops: Ops, monkeypatch: pytest.MonkeyPatch) -> None:
    key = ops.unknown("invoice:a:collect:v1").intent_key

    def refuse(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise InvalidInput("a refusal the next sweep would repeat")

    monkeypatch.setattr(type(ops.ledger.store), "list_by_status", refuse)
    pauses = pause_then_stop(monkeypatch, sweeps=2)
    looped = ops.cli("reconcile", "--loop", "--interval", "5", "--adapters", ADAPTERS)
    assert looped.exit_code == 1
    assert pauses == []
    assert looped.stderr == "error [invalid_input]: a refusal the next sweep would repeat\n"
    assert ops.ledger.get(key).status == "unknown"


class Misconfigured(GenericFakeAdapter):
    """An adapter that cannot work (a missing API key), as ops_fake_adapters' of the same name."""

    def contract_for(self, operation: str) -> ProviderContract:
        raise RuntimeError("FAKE_API_KEY is not set")


def test_a_record_that_fails_to_reconcile_is_logged_and_the_sweep_goes_on(
    ops: Ops, caplog: pytest.LogCaptureFixture
) -> None:
    key = ops.unknown("invoice:a:collect:v1").intent_key
    caplog.clear()
    report = Reconciler(ops.ledger, {"fake": Misconfigured(ops.fake)}).run_once()
    assert report.counts() == {"error": 1}
    [logged] = [r for r in caplog.records if r.name == "safe_effects"]
    assert (logged.levelname, logged.getMessage()) == (
        "WARNING",
        f"reconciling intent {key!r} (tenant 'default', fake) failed: RuntimeError: FAKE_API_KEY is not set; "
        "left as it was",
    )
    assert logged.exc_info is not None  # not one of the library's typed errors: the traceback says where
    assert ops.ledger.get(key).status == "unknown"
    assert len(ops.fake.effects()) == 1


def test_a_lost_workers_record_that_fails_after_its_lease_was_taken_over_is_reported_as_it_is_now(
    ops: Ops, caplog: pytest.LogCaptureFixture
) -> None:
    """The lease expiry moved it to unknown v2, then the adapter failed, and the report said "left as it was"
    beside `was: in_flight`: an operator resolving at the version seen before got StaleRecord."""
    clock = FakeClock()
    ledger = Ledger(ops.ledger.store, clock=clock, lease=LeasePolicy(duration=timedelta(seconds=60)))
    lost = ledger.prepare(ops.adapter, EffectRequest(operation="charge", params={}), intent_key="invoice:l:collect:v1")
    ops.ledger.store.transition(lost, "in_flight", now=clock(), actor="worker-1", changes={
        "lease_owner": "worker-1", "lease_expires_at": clock() + timedelta(seconds=60)})  # fmt: skip
    clock.advance(timedelta(seconds=61))
    caplog.clear()
    [item] = Reconciler(ledger, {"fake": Misconfigured(ops.fake)}).run_once().items
    now = ledger.get("invoice:l:collect:v1")
    assert (now.status, item.before, item.outcome, item.version) == ("unknown", "in_flight", "error", now.version)
    assert item.note == f"RuntimeError: FAKE_API_KEY is not set; now unknown v{now.version}"
    assert any(r.getMessage().endswith(f"; now unknown v{now.version}") for r in caplog.records)
    assert ops.fake.effects() == []


def test_cli_reconcile_loop_with_nothing_in_doubt_prints_one_line_a_sweep(
    ops: Ops, monkeypatch: pytest.MonkeyPatch
) -> None:
    pause_then_stop(monkeypatch, sweeps=2)
    looped = ops.cli("reconcile", "--loop", "--interval", "5", "--adapters", ADAPTERS)
    assert looped.exit_code == 0, looped.output
    assert looped.stdout == "reconciled: nothing to do\n" * 2


def test_cli_reconcile_loop_json_is_one_line_a_sweep(ops: Ops, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long-running reconciler's output goes to a log pipeline that reads one record per line."""
    found = ops.unknown("invoice:a:collect:v1").intent_key
    stuck = ops.unknown("invoice:b:collect:v1", happened=False).intent_key
    pause_then_stop(monkeypatch, sweeps=2)
    looped = ops.cli("reconcile", "--loop", "--interval", "5", "--adapters", ADAPTERS, "--json")
    assert looped.exit_code == 0, looped.output
    sweeps = [json.loads(line) for line in looped.stdout.splitlines()]
    assert [sweep["counts"] for sweep in sweeps] == [{"confirmed": 1, "unknown": 1}, {"unknown": 1}]
    assert [item["intent_key"] for item in sweeps[1]["items"]] == [stuck]
    assert (ops.ledger.get(found).status, ops.ledger.get(stuck).status) == ("confirmed", "unknown")
    assert len(ops.fake.effects()) == 1  # found's own charge: nothing was redispatched


def pause_then_stop(monkeypatch: pytest.MonkeyPatch, *, sweeps: int) -> list[float]:
    """Replace the loop's pause between sweeps by one that ends the loop (exit 0) at its ``sweeps``-th pause."""
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == sweeps:
            raise typer.Exit(0)

    monkeypatch.setattr(reconcile_cli, "time", SimpleNamespace(sleep=sleep))
    return pauses


def test_cli_reconcile_loop_lists_a_record_again_only_when_its_outcome_changed(
    ops: Ops, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reconciler left running printed every inconclusive record again each interval: forty stuck intents
    were forty log lines a minute, burying the row that changed."""
    found = ops.unknown("invoice:a:collect:v1").intent_key
    stuck = [ops.unknown(f"invoice:stuck{n}:collect:v1", happened=False).intent_key for n in range(2)]
    later: list[str] = []
    pauses = pause_then_stop(monkeypatch, sweeps=3)

    def sleep(seconds: float) -> None:  # after the second sweep, another lost charge turns up
        if len(pauses) == 1:
            later.append(ops.unknown("invoice:late:collect:v1").intent_key)
        stop(seconds)

    stop = reconcile_cli.time.sleep
    monkeypatch.setattr(reconcile_cli, "time", SimpleNamespace(sleep=sleep))
    looped = ops.cli("reconcile", "--loop", "--interval", "5", "--adapters", ADAPTERS, env={"COLUMNS": "200"})

    assert looped.exit_code == 0, looped.output
    assert pauses == [5.0, 5.0, 5.0]
    first, second, third = looped.stdout.split("reconciled: ")[1:]
    titles = [sweep.splitlines()[0].rstrip() for sweep in (first, second, third)]
    assert titles == [
        "confirmed=1, unknown=2",
        "unknown=2 (2 as the last sweep left them, not listed again)",
        "confirmed=1, unknown=2 (2 as the last sweep left them, not listed again)",
    ]
    assert all(key in first for key in (found, *stuck))
    assert second.count("\n") == 1  # one line: nothing changed, no table
    assert later[0] in third
    assert not any(key in third for key in (found, *stuck))
    assert [ops.ledger.get(key).status for key in (found, *later, *stuck)] == ["confirmed"] * 2 + ["unknown"] * 2
    assert len(ops.fake.effects()) == 2  # the two lost charges that happened: nothing was redispatched
