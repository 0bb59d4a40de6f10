"""One contract suite for every Store: each test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import queue as queue_module
import re
import sqlite3
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from safe_effects import (
    Approval,
    ApprovalState,
    EffectRecord,
    EffectStatus,
    Evidence,
    EvidenceVerdict,
    IllegalTransition,
    IntentKey,
    InvalidInput,
    InvalidTenant,
    LedgerUnavailable,
    MissingDependency,
    PostgresStore,
    Resolution,
    SQLiteStore,
    StaleRecord,
    Store,
    open_store,
)
from safe_effects._migrations import MIGRATIONS, ONE_UNSETTLED_VERSION

S = EffectStatus
T0 = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
KEY = "invoice:inv_1:collect:v1"
DIGEST = "sha256:" + "0" * 64
TIMEOUT = 60


def make(
    key: str = KEY, *, tenant: str = "default", status: S = S.PREPARED, at: datetime = T0, **fields: Any
) -> EffectRecord:
    fields = {"provider": "fake", "operation": "charge", "request_digest": DIGEST, **fields}
    return EffectRecord(
        tenant=tenant, intent_key=IntentKey.parse(key), status=status, created_at=at, updated_at=at, **fields
    )


def snapshot(store: Store, record: EffectRecord) -> tuple[Any, ...]:
    """Everything a failed write must leave untouched."""
    return (
        store.get(record.tenant, record.intent_key),
        store.audit_trail(record.tenant, record.intent_key),
        store.status_counts(list(S)),
    )


# --- child processes (spawn: module-level functions, results through a queue) ---


def _child(queue: Any, barrier: Any, job: Callable[[], Any]) -> None:
    try:
        barrier.wait(timeout=TIMEOUT)
        queue.put(("ok", job()))
    except StaleRecord as error:
        queue.put(("stale", str(error)))
    except Exception as error:  # reported to the parent, which fails the test with it
        queue.put(("error", repr(error)))


def migrate_worker(queue: Any, barrier: Any, url: str) -> None:
    store = open_store(url)
    _child(queue, barrier, store.migrate)
    store.close()


def insert_worker(queue: Any, barrier: Any, url: str, owner: str) -> None:
    store = open_store(url)

    def job() -> tuple[bool, str]:
        record, created = store.insert_if_absent(make(lease_owner=owner))
        return created, record.model_dump_json()

    _child(queue, barrier, job)
    store.close()


def transition_worker(queue: Any, barrier: Any, url: str, owner: str) -> None:
    store = open_store(url)
    record = store.get("default", KEY)
    assert record is not None

    def job() -> str:
        moved = store.transition(
            record, S.IN_FLIGHT, now=T0 + timedelta(seconds=1), actor=owner, changes={"lease_owner": owner}
        )
        return str(moved.lease_owner)

    _child(queue, barrier, job)
    store.close()


Runner = Callable[..., list[tuple[str, Any]]]


@pytest.fixture
def run_together(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Runner:
    """Start one spawned process per args tuple, release them at once through a barrier, collect results."""
    # spawned children unpickle workers by module name (tests.core...), importable from the rootdir
    monkeypatch.syspath_prepend(str(request.config.rootpath))

    def run(target: Callable[..., None], *args_per_process: tuple[Any, ...]) -> list[tuple[str, Any]]:
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        barrier = ctx.Barrier(len(args_per_process))
        processes = [ctx.Process(target=target, args=(queue, barrier, *args)) for args in args_per_process]
        for process in processes:
            process.start()
        results: list[tuple[str, Any]] = []
        deadline = time.monotonic() + TIMEOUT
        try:
            while len(results) < len(processes) and time.monotonic() < deadline:
                with contextlib.suppress(queue_module.Empty):
                    results.append(queue.get(timeout=0.1))
                if len(results) < len(processes) and any(p.exitcode not in (None, 0) for p in processes):
                    break  # a child died before reporting
        finally:
            for process in processes:
                process.join(timeout=TIMEOUT)
                if process.is_alive():
                    process.kill()
        assert [p.exitcode for p in processes] == [0] * len(processes)
        assert [r for r in results if r[0] == "error"] == []
        assert len(results) == len(processes)
        return results

    return run


# --- records ---


def test_insert_get_roundtrip_keeps_every_field(store: Store) -> None:
    plus_two = timezone(timedelta(hours=2))
    record = make(
        status=S.CONFIRMED,
        version=4,
        workflow_id="wf_1",
        step_id="collect",
        provider_key="default:invoice:inv_1:collect:v1",
        attempt_count=3,
        lease_owner="worker-1",
        lease_expires_at=datetime(2024, 5, 1, 14, 0, 30, 5, tzinfo=plus_two),
        lease_token="3f2a9c1e.7",
        updated_by="worker-1",
        dispatched_by="worker-0",
        provider_result_id="pi_123",
        response_digest="sha256:" + "1" * 64,
        last_error_class="Timeout",
        last_error_code="timeout",
        summary={"amount": "2000", "currency": "eur", "note": "naïve ✓"},
        first_dispatched_at=T0 + timedelta(seconds=1),
        dispatched_at=T0 + timedelta(seconds=2),
        resolved_at=T0 + timedelta(seconds=3),
        resolution=Resolution(method="operator", operator="alice", evidence="T-1", reason="seen", approved_by="bob"),
        compensates="invoice:inv_0:collect:v1",
        compensated_by="invoice:inv_1:refund:v1",
    )
    stored, created = store.insert_if_absent(record)
    assert created
    got = store.get("default", KEY)
    assert got == stored == record
    for value in (got.created_at, got.updated_at, got.lease_expires_at, got.resolved_at):
        assert value is not None
        assert value.tzinfo is not None
        assert value.utcoffset() == timedelta(0)
    assert got.lease_expires_at == datetime(2024, 5, 1, 12, 0, 30, 5, tzinfo=UTC)
    assert store.audit_trail("default", KEY) == []  # a creation is told by the record alone
    assert store.get("default", "invoice:inv_2:collect:v1") is None
    assert store.get("other", KEY) is None


def test_a_key_an_earlier_release_allowed_is_read_back_as_written(store: Store) -> None:
    """Keys with a leading-zero version (``v01``) are refused for new intents since 2026-12-02; a record an
    earlier release wrote under one must still be read, listed and settled, not fail every read."""
    legacy = make("invoice:inv_1:collect:v1").model_copy(
        update={"intent_key": IntentKey.stored("invoice:inv_1:collect:v01")}
    )
    store.insert_if_absent(legacy)
    assert store.get("default", "invoice:inv_1:collect:v01") == legacy
    assert store.list_by_status([S.PREPARED]) == [legacy]
    moved = store.transition(legacy, S.UNKNOWN, now=T0 + timedelta(seconds=1), actor="ops")
    assert store.get("default", "invoice:inv_1:collect:v01") == moved


def test_insert_if_absent_twice_returns_the_existing_row_unchanged(store: Store) -> None:
    first, created = store.insert_if_absent(make())
    again, created_again = store.insert_if_absent(make(request_digest="sha256:" + "f" * 64, lease_owner="b"))
    assert (created, created_again) == (True, False)
    assert again == first == store.get("default", KEY)
    assert store.audit_trail("default", KEY) == []


def test_naive_datetimes_are_refused(store: Store) -> None:
    with pytest.raises(InvalidInput, match="timezone-aware"):
        store.insert_if_absent(make(at=datetime(2024, 1, 1)))
    assert store.status_counts(list(S)) == []


# --- transitions ---


def test_transition_bumps_version_and_appends_one_audit_row(store: Store) -> None:
    record, _ = store.insert_if_absent(make())
    later = T0 + timedelta(minutes=1)
    moved = store.transition(
        record,
        S.IN_FLIGHT,
        now=later,
        actor="worker-1",
        reason="claim",
        changes={"lease_owner": "worker-1", "lease_expires_at": later + timedelta(seconds=30), "attempt_count": 1},
        detail={"attempt": 1},
    )
    assert (moved.status, moved.version, moved.updated_at, moved.lease_owner) == (S.IN_FLIGHT, 2, later, "worker-1")
    assert (moved.created_at, moved.updated_by) == (T0, "worker-1")
    assert store.get("default", KEY) == moved
    [audit] = store.audit_trail("default", KEY)
    assert audit.model_dump() == {
        "tenant": "default",
        "intent_key": KEY,
        "at": later,
        "from_status": S.PREPARED,
        "to_status": S.IN_FLIGHT,
        "version": 2,
        "actor": "worker-1",
        "reason": "claim",
        "detail": {"attempt": 1},
    }


def test_an_unaudited_transition_is_told_by_the_record_alone(store: Store) -> None:
    claimed = store.transition(store.insert_if_absent(make())[0], S.IN_FLIGHT, now=T0, actor="worker-1")
    later = T0 + timedelta(seconds=2)
    answered = store.transition(
        claimed, S.CONFIRMED, now=later, actor="worker-2", reason="provider_response", audited=False
    )
    assert store.get("default", KEY) == answered
    assert (answered.status, answered.version, answered.updated_at, answered.updated_by) == (
        S.CONFIRMED,
        3,
        later,
        "worker-2",
    )
    assert [(a.to_status, a.version) for a in store.audit_trail("default", KEY)] == [(S.IN_FLIGHT, 2)]
    with pytest.raises(StaleRecord):  # still conditional on the version it read
        store.transition(claimed, S.CONFIRMED, now=later, actor="worker-3", audited=False)
    store.transition(answered, S.COMPENSATED, now=later, actor="operator")  # the next audited change appends
    assert [(a.to_status, a.version) for a in store.audit_trail("default", KEY)] == [
        (S.IN_FLIGHT, 2),
        (S.COMPENSATED, 4),
    ]


def test_stale_version_raises_and_changes_nothing(store: Store) -> None:
    record, _ = store.insert_if_absent(make())
    moved = store.transition(record, S.IN_FLIGHT, now=T0, actor="w1")
    before = snapshot(store, record)
    with pytest.raises(StaleRecord) as caught:
        store.transition(record, S.IN_FLIGHT, now=T0, actor="w2", changes={"lease_owner": "w2"})
    message = str(caught.value)
    assert "default" in message
    assert KEY in message
    assert "prepared v1" in message
    assert "in_flight v2" in message
    assert snapshot(store, record) == before
    assert store.get("default", KEY) == moved


def test_transition_of_a_missing_record_is_stale(store: Store) -> None:
    with pytest.raises(StaleRecord, match="no record"):
        store.transition(make(), S.IN_FLIGHT, now=T0, actor="w")
    assert store.audit_trail("default", KEY) == []


def test_illegal_transition_raises_before_any_write(store: Store) -> None:
    record, _ = store.insert_if_absent(make())
    before = snapshot(store, record)
    with pytest.raises(IllegalTransition):
        store.transition(record, S.CONFIRMED, now=T0, actor="w")
    assert snapshot(store, record) == before


@pytest.mark.parametrize(
    "changes",
    [
        {"status = 'confirmed', version": 1},
        {"no_such_field": 1},
        {"version": 9},
        {"tenant": "other"},
        {"intent_key": "invoice:inv_9:collect:v1"},
        {"attempt_count": "many"},
    ],
    ids=["injection", "unknown", "version", "tenant", "intent_key", "bad-value"],
)
def test_invalid_changes_are_refused(store: Store, changes: dict[str, Any]) -> None:
    record, _ = store.insert_if_absent(make())
    before = snapshot(store, record)
    with pytest.raises(InvalidInput):
        store.transition(record, S.IN_FLIGHT, now=T0, actor="w", changes=changes)
    assert snapshot(store, record) == before


def test_before_commit_failure_rolls_back(store: Store) -> None:
    record, _ = store.insert_if_absent(make())
    before = snapshot(store, record)
    seen: list[EffectRecord | None] = []

    def crash() -> None:
        with ThreadPoolExecutor(1) as pool:  # another thread, so another connection: sees only commits
            seen.append(pool.submit(store.get, "default", KEY).result(timeout=TIMEOUT))
        raise RuntimeError("crash point")

    with pytest.raises(RuntimeError, match="crash point"):
        store.transition(record, S.IN_FLIGHT, now=T0, actor="w", before_commit=crash)
    assert seen == [record]
    assert snapshot(store, record) == before
    calls: list[int] = []
    store.transition(record, S.IN_FLIGHT, now=T0, actor="w", before_commit=lambda: calls.append(1))
    assert calls == [1]
    assert store.get("default", KEY).status is S.IN_FLIGHT


# --- a transition that applies an approval (two-person rule) ---

RESOLVED = {"resolved_at": T0, "resolution": Resolution(method="operator", operator="alice", approved_by="bob")}


def asked_about(store: Store) -> tuple[EffectRecord, Approval]:
    """An unknown record and alice's pending request to confirm it."""
    record, _ = store.insert_if_absent(make(status=S.UNKNOWN))
    approval, created = store.add_approval(
        Approval(
            tenant="default",
            intent_key=record.intent_key,
            expected_version=record.version,
            to_status=S.CONFIRMED,
            requested_by="alice",
            reason="seen",
            created_at=T0,
        )
    )
    assert created
    return record, approval


def approvals_of(store: Store) -> list[tuple[ApprovalState, str | None]]:
    return [(a.state, a.decided_by) for a in store.approvals()]


def test_a_transition_writes_the_approval_it_applies_in_its_own_commit(store: Store) -> None:
    record, approval = asked_about(store)
    applied = approval.decided(ApprovalState.APPLIED, by="bob", reason="checked", at=T0 + timedelta(seconds=1))
    seen: list[tuple[Any, ...]] = []

    def look() -> None:  # from another connection, just before COMMIT: nothing of the two is visible yet
        with ThreadPoolExecutor(1) as pool:
            seen.append(pool.submit(lambda: (store.get("default", KEY), approvals_of(store))).result(TIMEOUT))

    store.transition(
        record, S.CONFIRMED, now=T0, actor="operator:bob", changes=RESOLVED, approval=applied, before_commit=look
    )

    assert seen == [(record, [(ApprovalState.PENDING, None)])]
    assert store.get("default", KEY).status is S.CONFIRMED
    assert approvals_of(store) == [(ApprovalState.APPLIED, "bob")]
    assert store.approvals()[0].resolved_at == T0 + timedelta(seconds=1)


def test_a_crash_before_the_commit_keeps_the_approval_pending_and_the_record_unknown(store: Store) -> None:
    record, approval = asked_about(store)
    before = snapshot(store, record)
    applied = approval.decided(ApprovalState.APPLIED, by="bob", reason=None, at=T0)

    def crash() -> None:
        raise RuntimeError("crash point")

    with pytest.raises(RuntimeError, match="crash point"):
        store.transition(
            record, S.CONFIRMED, now=T0, actor="operator:bob", changes=RESOLVED, approval=applied, before_commit=crash
        )
    assert snapshot(store, record) == before
    assert approvals_of(store) == [(ApprovalState.PENDING, None)]


def test_an_approval_decided_meanwhile_stops_the_transition(store: Store) -> None:
    record, approval = asked_about(store)
    before = snapshot(store, record)
    assert store.decide_approval(approval, state=ApprovalState.DECLINED, decided_by="carol", reason="no", now=T0)
    applied = approval.decided(ApprovalState.APPLIED, by="bob", reason=None, at=T0)

    with pytest.raises(StaleRecord, match="the pending request for 'invoice:inv_1:collect:v1' was decided meanwhile"):
        store.transition(record, S.CONFIRMED, now=T0, actor="operator:bob", changes=RESOLVED, approval=applied)
    assert snapshot(store, record) == before
    assert approvals_of(store) == [(ApprovalState.DECLINED, "carol")]


def test_a_record_that_moved_on_leaves_the_approval_pending(store: Store) -> None:
    record, approval = asked_about(store)
    moved = store.transition(record, S.REJECTED, now=T0, actor="reconciler", changes=RESOLVED)
    before = snapshot(store, moved)
    applied = approval.decided(ApprovalState.APPLIED, by="bob", reason=None, at=T0)

    with pytest.raises(StaleRecord):
        store.transition(record, S.CONFIRMED, now=T0, actor="operator:bob", changes=RESOLVED, approval=applied)
    assert snapshot(store, moved) == before
    assert approvals_of(store) == [(ApprovalState.PENDING, None)]


def test_an_approval_not_decided_is_refused_and_nothing_is_written(store: Store) -> None:
    record, approval = asked_about(store)
    before = snapshot(store, record)
    with pytest.raises(InvalidInput, match="is not decided: nothing to write"):
        store.transition(record, S.CONFIRMED, now=T0, actor="operator:bob", changes=RESOLVED, approval=approval)
    assert snapshot(store, record) == before
    assert approvals_of(store) == [(ApprovalState.PENDING, None)]


# --- queries ---


def seed_listing(store: Store) -> None:
    minute = timedelta(minutes=1)
    plus_five = timezone(timedelta(hours=5))
    rows = [
        make("a:1:x:v1", status=S.UNKNOWN, at=T0 + 3 * minute),
        make("a:2:x:v1", status=S.UNKNOWN, at=(T0 + minute).astimezone(plus_five), provider="other"),
        make("a:3:x:v1", status=S.UNKNOWN, at=T0 + 2 * minute, tenant="acme"),
        make("a:4:x:v1", status=S.IN_FLIGHT, at=T0 + 4 * minute),
        make("a:5:x:v1", status=S.CONFIRMED, at=T0),
    ]
    for row in rows:
        store.insert_if_absent(row)


def keys(records: list[EffectRecord]) -> list[str]:
    return [r.intent_key for r in records]


@pytest.mark.parametrize(
    ("read", "named"),
    [
        (lambda st: st.get("default", "invoice:inv\x00_1:collect:v1"), "intent_key holds a lone surrogate or NUL"),
        (lambda st: st.get("default", 5), "intent_key must be a str, got int"),
        (lambda st: st.find_by_provider_key("fake", "k\x00"), "provider_key holds a lone surrogate or NUL"),
        (lambda st: st.audit_trail("default", None), "intent_key must be a str, got NoneType"),
        (lambda st: st.evidence_for("default", KEY, verdicts=["bogus"]), "verdicts 'bogus' is not one of"),
        (lambda st: st.list_by_status([S.UNKNOWN], provider=5), "provider must be a str, got int"),
        (lambda st: st.list_by_status([S.UNKNOWN], limit=1.5), "limit must be an int of 0 or more, got 1.5"),
        (lambda st: st.list_by_status([S.UNKNOWN], limit=-1), "limit must be an int of 0 or more, got -1"),
        (lambda st: st.list_by_status([S.UNKNOWN], limit=2**70), "limit must be an int of at most 2147483647"),
        (lambda st: st.list_by_status("unknown"), "statuses must be a collection of EffectStatus"),
        (lambda st: st.list_by_status(["bogus"]), "statuses 'bogus' is not one of: prepared"),
        (lambda st: st.list_by_status([S.UNKNOWN], after=(T0,)), r"a list position must be a tuple"),
        (lambda st: st.status_counts(["bogus"]), "statuses 'bogus' is not one of"),
        (lambda st: st.oldest_dispatched("bogus"), "status 'bogus' is not one of"),
        (lambda st: st.approvals(state="bogus"), "state 'bogus' is not one of"),
        (lambda st: st.approvals(limit=-1), "limit must be an int of 0 or more"),
        (lambda st: st.approvals(intent_key="a\x00"), "intent_key holds a lone surrogate or NUL"),
        (lambda st: st.save_reconciler_cursor("c", (T0, "default", "a\x00")), "intent key holds a lone surrogate"),
    ],
)
def test_a_read_given_what_no_row_can_hold_is_refused_alike_on_both_stores(store: Store, read: Any, named: str) -> None:
    """Such reads answered None or [] on SQLite and raised the driver's error on PostgreSQL, or a raw ValueError
    (a status by a wrong name), IndexError or OverflowError on both."""
    store.insert_if_absent(make(KEY))
    with pytest.raises(InvalidInput, match=named):
        read(store)
    assert [r.intent_key for r in store.list_by_status(list(S))] == [KEY]


def test_list_by_status_oldest_first_with_filters_and_limit(store: Store) -> None:
    seed_listing(store)
    assert keys(store.list_by_status([S.UNKNOWN])) == ["a:2:x:v1", "a:3:x:v1", "a:1:x:v1"]
    assert keys(store.list_by_status([S.UNKNOWN, S.IN_FLIGHT], limit=10)) == [
        "a:2:x:v1",
        "a:3:x:v1",
        "a:1:x:v1",
        "a:4:x:v1",
    ]
    assert keys(store.list_by_status([S.UNKNOWN], limit=2)) == ["a:2:x:v1", "a:3:x:v1"]
    assert keys(store.list_by_status([S.UNKNOWN], tenant="acme")) == ["a:3:x:v1"]
    assert keys(store.list_by_status([S.UNKNOWN], provider="other")) == ["a:2:x:v1"]
    cutoff = T0 + timedelta(minutes=2)
    assert keys(store.list_by_status([S.UNKNOWN], updated_before=cutoff)) == ["a:2:x:v1"]
    assert store.list_by_status([]) == []
    assert store.list_by_status([S.REJECTED]) == []
    assert keys(store.list_by_status([S.IN_FLIGHT, S.IN_FLIGHT, "in_flight"])) == ["a:4:x:v1"]  # type: ignore[list-item]


def test_listing_by_key_prefix_compares_exactly_case_and_wildcards_included(store: Store) -> None:
    """One invoice's story (every action and version of it) without SQL; ``%`` and ``_`` in a key are plain
    characters and case counts, on both stores (SQLite's LIKE would ignore case)."""
    for key in ("invoice:inv_43:collect:v1", "invoice:inv_43:collect:v2", "invoice:inv_43:refund:v1",
                "invoice:inv_430:collect:v1", "invoice:INV_43:collect:v1", "invoice:inv%43:collect:v1"):  # fmt: skip
        store.insert_if_absent(make(key, status=S.CONFIRMED))
    every = list(S)
    found = keys(store.list_by_status(every, key_prefix="invoice:inv_43:"))
    assert sorted(found) == ["invoice:inv_43:collect:v1", "invoice:inv_43:collect:v2", "invoice:inv_43:refund:v1"]
    assert keys(store.list_by_status(every, key_prefix="invoice:inv%43:")) == ["invoice:inv%43:collect:v1"]
    assert len(store.list_by_status(every, key_prefix="invoice:")) == 6
    assert store.list_by_status([S.UNKNOWN], key_prefix="invoice:inv_43:") == []
    for bad in ("", "x" * 256, "a\x00b", 43):
        with pytest.raises(InvalidInput, match="key prefix"):
            store.list_by_status(every, key_prefix=bad)  # type: ignore[arg-type]


def test_listing_several_statuses_pages_through_each_record_once_in_order(store: Store) -> None:
    """Several statuses are read one ordered run each and merged: every page, across statuses and equal
    ``updated_at`` values, continues exactly where the cursor left off."""
    minute = timedelta(minutes=1)
    rows = [
        make(f"p:{i}:x:v1", status=status, at=T0 + (i // 3) * minute, tenant=tenant)
        for i, (status, tenant) in enumerate(
            (status, tenant) for status in (S.UNKNOWN, S.IN_FLIGHT, S.CONFIRMED) for tenant in ("default", "acme")
        )
    ]
    for row in rows:
        store.insert_if_absent(row)
    statuses = [S.CONFIRMED, S.UNKNOWN, S.IN_FLIGHT]
    ordered = sorted(rows, key=lambda r: (r.updated_at, r.tenant, r.intent_key))
    seen: list[EffectRecord] = []
    after: tuple[datetime, str, str] | None = None
    while page := store.list_by_status(statuses, limit=2, after=after):
        assert len(page) <= 2
        seen += page
        after = (page[-1].updated_at, page[-1].tenant, page[-1].intent_key)
    assert [(r.tenant, r.intent_key) for r in seen] == [(r.tenant, r.intent_key) for r in ordered]
    first = store.list_by_status(statuses, limit=3, updated_before=T0 + minute)
    assert [(r.tenant, r.intent_key) for r in first] == [(r.tenant, r.intent_key) for r in ordered[:3]]


def test_find_by_provider_key(store: Store) -> None:
    store.insert_if_absent(make(provider_key="pk_1"))
    store.insert_if_absent(make("a:2:x:v1", provider_key="pk_2", provider="other"))
    store.insert_if_absent(make(tenant="acme", provider_key="pk_1", at=T0 + timedelta(minutes=1)))
    assert [(r.tenant, r.intent_key) for r in store.find_by_provider_key("fake", "pk_1")] == [
        ("default", KEY),
        ("acme", KEY),
    ]
    assert [r.intent_key for r in store.find_by_provider_key("other", "pk_2")] == ["a:2:x:v1"]
    assert store.find_by_provider_key("other", "pk_1") == []
    assert store.find_by_provider_key("fake", "nope") == []


def test_evidence_is_stored_once_per_event(store: Store) -> None:
    evidence = Evidence(
        tenant="default",
        intent_key=KEY,
        provider="fake",
        source="webhook",
        event_id="evt_1",
        kind="delivered",
        verdict=EvidenceVerdict.CONFIRMS,
        provider_result_id="msg_1",
        received_at=T0,
        detail={"raw": {"status": 200}},
    )
    assert store.add_evidence(evidence)
    assert not store.add_evidence(evidence.model_copy(update={"kind": "changed"}))
    later = evidence.model_copy(update={"event_id": "evt_2", "received_at": T0 + timedelta(seconds=1)})
    assert store.add_evidence(later)
    other_source = evidence.model_copy(update={"source": "events"})
    assert store.add_evidence(other_source)  # the same event id from another source is another event
    assert store.evidence_for("default", KEY) == [evidence, other_source, later]
    assert store.evidence_for("other", KEY) == []
    accepted = evidence.model_copy(update={"event_id": "evt_3", "verdict": EvidenceVerdict.ACCEPTS})
    assert store.add_evidence(accepted)
    assert store.evidence_for("default", KEY, verdicts={EvidenceVerdict.ACCEPTS}) == [accepted]
    decisive = {EvidenceVerdict.CONFIRMS, EvidenceVerdict.REJECTS}
    assert store.evidence_for("default", KEY, verdicts=decisive) == [evidence, other_source, later]
    assert store.evidence_for("default", KEY, verdicts=()) == []


def test_status_counts_and_oldest_dispatched(store: Store) -> None:
    seed_listing(store)
    assert store.status_counts(list(S)) == [
        ("acme", "fake", S.UNKNOWN, 1),
        ("default", "fake", S.CONFIRMED, 1),
        ("default", "fake", S.IN_FLIGHT, 1),
        ("default", "fake", S.UNKNOWN, 1),
        ("default", "other", S.UNKNOWN, 1),
    ]
    assert store.status_counts([S.UNKNOWN, S.IN_FLIGHT]) == [
        ("acme", "fake", S.UNKNOWN, 1),
        ("default", "fake", S.IN_FLIGHT, 1),
        ("default", "fake", S.UNKNOWN, 1),
        ("default", "other", S.UNKNOWN, 1),
    ]
    assert store.status_counts([]) == []
    with pytest.raises(ValueError, match="bogus"):
        store.status_counts(["bogus"])  # type: ignore[list-item]
    oldest = store.oldest_dispatched(S.UNKNOWN)  # never dispatched: their update times
    assert oldest == {"fake": T0 + timedelta(minutes=2), "other": T0 + timedelta(minutes=1)}
    assert all(value.utcoffset() == timedelta(0) for value in oldest.values())
    assert store.oldest_dispatched(S.REJECTED) == {}
    # first sent an hour ago, written since (a same-key replay): in doubt for the hour, not since the write
    replayed = make(
        "a:6:x:v1", status=S.UNKNOWN, at=T0 + timedelta(minutes=9), first_dispatched_at=T0 - timedelta(hours=1)
    )
    store.insert_if_absent(replayed)
    assert store.oldest_dispatched(S.UNKNOWN)["fake"] == T0 - timedelta(hours=1)


def test_earliest_lease_expiry_of_in_flight_records_by_provider(store: Store) -> None:
    seed_listing(store)  # its in-flight record has no lease: nothing to report
    assert store.earliest_lease_expiry() == {}
    minute = timedelta(minutes=1)
    leased = [
        make("l:1:x:v1", status=S.IN_FLIGHT, lease_owner="w1", lease_expires_at=T0 + 5 * minute),
        make("l:2:x:v1", status=S.IN_FLIGHT, lease_owner="w2", lease_expires_at=T0 + 2 * minute, tenant="acme"),
        make("l:3:x:v1", status=S.IN_FLIGHT, lease_owner="w3", lease_expires_at=T0 + 9 * minute, provider="other"),
        make("l:4:x:v1", status=S.UNKNOWN, lease_owner="w4", lease_expires_at=T0),  # not in flight
    ]
    for record in leased:
        store.insert_if_absent(record)
    expiries = store.earliest_lease_expiry()
    assert expiries == {"fake": T0 + 2 * minute, "other": T0 + 9 * minute}
    assert all(value.utcoffset() == timedelta(0) for value in expiries.values())


def test_counting_unsettled_statuses_does_not_read_the_history(store: Store) -> None:
    """A metrics scrape counts prepared, in_flight and unknown records at every scrape: the query must be
    served by the status index (or migration v6's index of unsettled versions, which holds only those
    records), not a scan of every confirmed record the ledger has ever kept."""
    statuses = [S.PREPARED, S.IN_FLIGHT, S.UNKNOWN]
    if isinstance(store, SQLiteStore):
        plans = sqlite_plans(
            store, lambda s: (s.status_counts(statuses), s.oldest_dispatched(S.UNKNOWN), s.earliest_lease_expiry())
        )
        assert len(plans) == 3, plans
        for plan in plans.values():
            assert "USING INDEX effect_intents_status_updated" in plan, plan
            assert "SCAN effect_intents" not in plan, plan
    else:
        assert isinstance(store, PostgresStore)
        for query, params in [
            (store._status_counts, ([s.value for s in statuses],)),
            (store._oldest, (S.UNKNOWN.value,)),
            (store._lease_expiry, (S.IN_FLIGHT.value,)),
        ]:
            plan = postgres_plan(store, query, params)
            assert "effect_intents_status_updated" in plan or ONE_UNSETTLED_VERSION in plan, plan
            assert "Seq Scan" not in plan, plan


def test_purge_deletes_only_given_statuses_older_than_the_cutoff(store: Store) -> None:
    for i, status in enumerate([S.UNKNOWN, S.CONFIRMED, S.REJECTED, S.UNKNOWN, S.CONFIRMED]):
        store.insert_if_absent(make(f"p:{i}:x:v1", status=status, at=T0 + timedelta(days=i)))
    first = store.get("default", "p:0:x:v1")
    assert first is not None
    store.transition(first, S.CONFIRMED, now=T0, actor="operator")  # an audited change, kept past the purge
    cutoff = T0 + timedelta(days=3, hours=12)
    assert store.purge(statuses=[S.CONFIRMED, S.REJECTED], updated_before=cutoff, limit=1) == 1
    assert store.get("default", "p:0:x:v1") is None
    assert store.purge(statuses=[S.CONFIRMED, S.REJECTED], updated_before=cutoff) == 2
    left = {r.intent_key for r in store.list_by_status(list(S))}
    assert left == {"p:3:x:v1", "p:4:x:v1"}  # unknown is not purged; the newer confirmed one stays
    assert store.purge(statuses=[], updated_before=cutoff) == 0
    assert len(store.audit_trail("default", "p:0:x:v1")) == 1  # the audit trail is append-only


# --- migrations and concurrency ---


def test_migrate_twice_is_a_no_op(store: Store) -> None:
    store.insert_if_absent(make())
    assert store.migrate() == []  # the fixture migrated it: this call applies nothing
    assert store.migrate() == []
    assert store.get("default", KEY) == make()


def test_migrate_from_two_processes_at_once(fresh_store_url: Callable[[], str], run_together: Runner) -> None:
    url = fresh_store_url()
    results = run_together(migrate_worker, (url,), (url,))
    every = [migration.version for migration in MIGRATIONS]
    assert sorted(applied for _, applied in results) == [[], every]  # each migration applied once, and said so
    store = open_store(url)
    try:
        store.insert_if_absent(make())
        assert store.get("default", KEY) == make()
    finally:
        store.close()


def test_two_processes_inserting_the_same_key(store_url: str, run_together: Runner) -> None:
    results = run_together(insert_worker, (store_url, "w1"), (store_url, "w2"))
    assert sorted(created for _, (created, _) in results) == [False, True]
    rows = {row for _, (_, row) in results}
    assert len(rows) == 1
    store = open_store(store_url)
    try:
        assert store.get("default", KEY) == EffectRecord.model_validate_json(rows.pop())
    finally:
        store.close()


def test_two_processes_racing_the_same_transition(store_url: str, run_together: Runner) -> None:
    store = open_store(store_url)
    try:
        store.insert_if_absent(make())
        results = run_together(transition_worker, (store_url, "w1"), (store_url, "w2"))
        assert sorted(kind for kind, _ in results) == ["ok", "stale"]
        [winner] = [value for kind, value in results if kind == "ok"]
        record = store.get("default", KEY)
        assert (record.status, record.version, record.lease_owner) == (S.IN_FLIGHT, 2, winner)
        assert [a.actor for a in store.audit_trail("default", KEY)] == [winner]
    finally:
        store.close()


# --- the caller's own transaction ---


def callers_connection(store: Store, backend: str, request: pytest.FixtureRequest) -> Any:
    if backend == "sqlite":
        assert isinstance(store, SQLiteStore)
        return sqlite3.connect(store.path)
    import psycopg

    return psycopg.connect(request.getfixturevalue("pg_url"))


def test_prepared_in_a_rolled_back_caller_transaction_leaves_nothing(
    store: Store, backend: str, request: pytest.FixtureRequest
) -> None:
    conn = callers_connection(store, backend, request)
    try:
        record, created = store.insert_if_absent(make(), connection=conn)
        assert created
        assert record == make()
        assert store.get("default", KEY) is None  # not committed: invisible to the store's own connections
        conn.rollback()
        assert store.get("default", KEY) is None
        assert store.audit_trail("default", KEY) == []
        store.insert_if_absent(make(), connection=conn)
        conn.commit()
        assert store.get("default", KEY) == make()
    finally:
        conn.close()


@pytest.mark.postgres
def test_postgres_keeps_no_hold_on_a_callers_connection(pg_url: str) -> None:
    """A connection passed in is the caller's: once they drop it, nothing of the store keeps it (or its backend).
    (PostgreSQL only: the SQLite store keeps no connection of a caller's, and sqlite3 ones take no weakref.)"""
    import psycopg

    schema = f"se_test_{uuid.uuid4().hex[:12]}"
    store = PostgresStore(pg_url, schema=schema)
    try:
        store.migrate()
        conn = psycopg.connect(pg_url)
        store.insert_if_absent(make(), connection=conn)
        conn.commit()
        conn.close()
        dropped = weakref.ref(conn)
        del conn
        gc.collect()
        assert dropped() is None
        assert store.get("default", KEY) == make()
    finally:
        store.close()
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts this process's open files in /proc")
def test_sqlite_closes_the_connections_of_threads_that_ended(tmp_path: Path) -> None:
    """A server with a thread per request opens a connection per thread: those of ended threads must not
    pile up until the process has no file descriptor left (it failed with a raw sqlite3 error)."""
    store = SQLiteStore(tmp_path / "ledger.db")
    store.migrate()
    store.insert_if_absent(make())
    open_files = len(os.listdir("/proc/self/fd"))
    try:
        for _ in range(200):
            worker = threading.Thread(target=lambda: store.get("default", KEY))
            worker.start()
            worker.join()
        assert len(os.listdir("/proc/self/fd")) - open_files < 10  # was 2 per ended thread
        assert store.get("default", KEY) == make()
    finally:
        store.close()


def test_a_relative_sqlite_path_stays_the_file_it_named_when_the_process_changes_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each thread opens its own connection: with the path kept relative, a thread started after an os.chdir
    opened another ledger, where the intent looked never sent (the misuse review: two emails)."""
    first, elsewhere = tmp_path / "app", tmp_path / "elsewhere"
    first.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(first)
    store = SQLiteStore("ledger.db")
    store.migrate()
    other = SQLiteStore(elsewhere / "ledger.db")  # a ledger where the relative path would now lead
    other.migrate()
    monkeypatch.chdir(elsewhere)
    try:
        assert store.path == first / "ledger.db"
        with ThreadPoolExecutor(1) as pool:  # a new thread: a new connection, opened after the chdir
            pool.submit(store.insert_if_absent, make()).result()
            assert pool.submit(store.get, "default", KEY).result() == make()
        assert other.get("default", KEY) is None
    finally:
        store.close()
        other.close()


def test_a_sqlite_file_that_cannot_be_opened_is_ledger_unavailable(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "no-such-directory" / "ledger.db")
    with pytest.raises(LedgerUnavailable, match="could not be opened"):
        store.insert_if_absent(make())
    with pytest.raises(LedgerUnavailable, match="could not be opened"):
        store.get("default", KEY)
    store.close()


def test_a_file_that_is_not_a_sqlite_database_is_refused_by_name_and_left_alone(tmp_path: Path) -> None:
    """A store URL pointing at the wrong file is a mistake to fix, not an outage to wait out."""
    path = tmp_path / "notes.txt"
    path.write_text("not a database at all, just some text that is long enough to be read as a header")
    store = SQLiteStore(path)
    with pytest.raises(InvalidInput, match=r"notes\.txt is not a SQLite database: check the path"):
        store.migrate()
    store.close()
    assert path.read_text().startswith("not a database at all")


def test_a_full_sqlite_file_is_ledger_unavailable_and_keeps_nothing_of_the_write(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "ledger.db")
    store.migrate()
    try:
        conn = store._conn()  # this thread's connection: cap the file at the pages it has now
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")
        big = make(summary={f"k{i}": "x" * 200 for i in range(200)})  # needs new pages
        with pytest.raises(LedgerUnavailable, match="did not answer: database or disk is full"):
            store.insert_if_absent(big)
        assert not conn.in_transaction  # rolled back, not left holding the write lock
        conn.execute(f"PRAGMA max_page_count = {pages * 100}")
        assert store.get("default", KEY) is None  # nothing of the failed write stayed
        written, created = store.insert_if_absent(make())
        assert created
        # an audited change is two statements: the update fits, its large audit row does not
        conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0]}")
        with pytest.raises(LedgerUnavailable, match="database or disk is full"):
            store.transition(written, S.UNKNOWN, now=T0, actor="w", detail={f"k{i}": "x" * 200 for i in range(200)})
        assert not conn.in_transaction
        assert store.get("default", KEY) == written  # the update went back with the audit row
        assert store.audit_trail("default", KEY) == []
    finally:
        store.close()


def test_sqlite_caller_connections(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "ledger.db")
    store.migrate()
    elsewhere = sqlite3.connect(tmp_path / "elsewhere.db")
    autocommit = sqlite3.connect(tmp_path / "ledger.db", isolation_level=None)
    try:
        with pytest.raises(InvalidInput, match="elsewhere"):
            store.insert_if_absent(make(), connection=elsewhere)
        with pytest.raises(InvalidInput, match=r"sqlite3\.Connection"):
            store.insert_if_absent(make(), connection=object())
        # without a transaction of its own nothing of the caller's would end one opened for it: refused
        with pytest.raises(InvalidInput, match="autocommit mode"):
            store.insert_if_absent(make(), connection=autocommit)
        assert not autocommit.in_transaction
        autocommit.execute("BEGIN IMMEDIATE")  # its own: joined, and rolled back with it
        store.insert_if_absent(make(), connection=autocommit)
        autocommit.rollback()
        assert store.get("default", KEY) is None
    finally:
        elsewhere.close()
        autocommit.close()
        store.close()


# --- hostile input ---


@pytest.mark.parametrize(
    "tenant",
    ["x'; DROP TABLE effect_intents; --", 'x"); DELETE FROM effect_audit; --', "", "a" * 65, "t\x00", "t t", "ténant"],
)
def test_malicious_tenants_are_refused_before_any_sql(store: Store, tenant: str) -> None:
    store.insert_if_absent(make())
    before = snapshot(store, make())
    bad = make(tenant=tenant)
    calls: list[Callable[[], object]] = [
        lambda: store.insert_if_absent(bad),
        lambda: store.get(tenant, KEY),
        lambda: store.transition(bad, S.IN_FLIGHT, now=T0, actor="t"),
        lambda: store.audit_trail(tenant, KEY),
        lambda: store.evidence_for(tenant, KEY),
        lambda: store.list_by_status([S.PREPARED], tenant=tenant),
        lambda: store.add_evidence(
            Evidence(
                tenant=tenant,
                intent_key=KEY,
                provider="fake",
                source="s",
                event_id="e",
                kind="k",
                verdict=EvidenceVerdict.INFORMATIONAL,
                received_at=T0,
            )
        ),
    ]
    for call in calls:
        with pytest.raises(InvalidTenant):
            call()
    assert snapshot(store, make()) == before
    assert store.evidence_for("default", KEY) == []


# --- the (status, updated_at) index ---


# SQLite's planner with statistics like a ledger of a million settled records (ANALYZE writes them, and so
# does PRAGMA optimize): without STAT4 it takes each status for a sixth of the table
_BIG_LEDGER_STATS = [
    ("effect_intents", "effect_intents_status_updated", "1000000 166667 1"),
    ("effect_intents", "sqlite_autoindex_effect_intents_1", "1000000 50000 1"),
    ("effect_intents", "effect_intents_provider_key", "1000000 333334 1"),
]


def sqlite_plans(store: SQLiteStore, run: Callable[[SQLiteStore], object]) -> dict[str, str]:
    """Each statement ``run`` makes a fresh store on ``store``'s file execute, with the plan SQLite picks for
    it under big-ledger statistics."""
    with closing(sqlite3.connect(store.path, isolation_level=None)) as conn:
        conn.execute("ANALYZE")
        conn.execute("DELETE FROM sqlite_stat1")
        conn.executemany("INSERT INTO sqlite_stat1 VALUES (?, ?, ?)", _BIG_LEDGER_STATS)
    fresh = SQLiteStore(store.path)  # a new connection loads the statistics
    try:
        ran: list[str] = []
        fresh._conn().set_trace_callback(ran.append)
        run(fresh)
        fresh._conn().set_trace_callback(None)
        statements = [q for q in ran if q.lstrip().upper().startswith(("SELECT", "DELETE"))]
        return {q: " | ".join(row[3] for row in fresh._conn().execute(f"EXPLAIN QUERY PLAN {q}")) for q in statements}
    finally:
        fresh.close()


def postgres_plan(store: PostgresStore, query: bytes, params: Any) -> str:
    """The plan PostgreSQL picks when only an index can serve ``query`` (a small table is cheaper to scan)."""
    with store._checkout() as conn, conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
        conn.execute("SET LOCAL enable_bitmapscan = off")  # an ordered read, or a sort of all that matched
        return " | ".join(row[0] for row in conn.execute(b"EXPLAIN " + query, params))


def test_listing_reads_each_status_in_index_order(store: Store) -> None:
    """A listing (the reconciler's candidates, an operator's ``list``, a purge batch) reads one ordered,
    limited run of the (status, updated_at) index per status: with ``status IN (...)`` it would read and sort
    every record of those statuses, the whole history for a settled one, to return the first page."""
    seed_listing(store)
    statuses = [S.CONFIRMED, S.REJECTED]
    after = (T0, "default", "a:0:x:v1")
    if isinstance(store, SQLiteStore):
        plans = sqlite_plans(store, lambda s: s.list_by_status(statuses, updated_before=T0, limit=10, after=after))
        (plan,) = plans.values()
        assert plan.count("USING INDEX effect_intents_status_updated (status=?") == len(statuses), plan
        assert "SCAN effect_intents" not in plan, plan
        return
    assert isinstance(store, PostgresStore)
    query, params = store._list_query(statuses, tenant=None, provider=None, updated_before=T0, limit=10, after=after)
    plan = postgres_plan(store, query, params)
    assert plan.count("Index Scan using effect_intents_status_updated") == len(statuses), plan


def test_purge_deletes_by_primary_key(store: Store) -> None:
    """A purge batch deletes its keys one primary-key lookup each: on SQLite it holds the write lock the
    executor waits on, and a delete that walked every record below the cutoff held it for half a second."""
    seed_listing(store)
    cutoff = T0 + timedelta(minutes=1)
    if isinstance(store, SQLiteStore):

        def purge(fresh: SQLiteStore) -> None:
            assert fresh.purge(statuses=[S.CONFIRMED], updated_before=cutoff, keys=[("default", "a:5:x:v1")]) == 1
            assert fresh.purge(statuses=[S.UNKNOWN], updated_before=T0 + timedelta(hours=1), limit=2) == 2

        plans = sqlite_plans(store, purge)
        deletes = [plan for query, plan in plans.items() if query.lstrip().upper().startswith("DELETE")]
        assert len(deletes) == 3, plans  # one per key
        for plan in deletes:
            assert "USING INDEX sqlite_autoindex_effect_intents_1 (tenant_id=? AND intent_key=?)" in plan, plan
        assert keys(store.list_by_status([S.UNKNOWN])) == ["a:1:x:v1"]  # the two oldest went
        return
    assert isinstance(store, PostgresStore)
    with store._checkout() as conn:  # a history below the cutoff, analysed: the planner weighs it as a ledger's
        conn.execute(
            f"INSERT INTO {store.schema}.effect_intents (tenant_id, intent_key, provider, operation, request_digest, "
            "status, version, attempt_count, summary, created_at, updated_at) SELECT 'default', 'h:' || g || ':x:v1', "
            "'fake', 'charge', %s, 'confirmed', 2, 1, '{}', %s, %s FROM generate_series(1, 20000) AS g",
            (DIGEST, T0 - timedelta(days=1), T0 - timedelta(days=1)),
        )
        conn.execute(f"ANALYZE {store.schema}.effect_intents")
    values = {"s": ["confirmed"], "cutoff": cutoff, "tenants": ["default"], "keys": ["a:5:x:v1"]}
    plan = postgres_plan(store, store._purge_keys, values)
    assert "effect_intents_pkey" in plan, plan
    assert store.purge(statuses=[S.UNKNOWN], updated_before=T0 + timedelta(hours=1), limit=2) == 2
    assert keys(store.list_by_status([S.UNKNOWN])) == ["a:1:x:v1"]


# --- store URLs ---


def test_a_reconciler_cursor_is_kept_per_name_and_forgotten_on_none(store: Store) -> None:
    assert store.reconciler_cursor("cron") is None
    position = (T0, "acme", KEY)
    store.save_reconciler_cursor("cron", position)
    store.save_reconciler_cursor("other", (T0 + timedelta(hours=1), "default", "invoice:inv_9:collect:v1"))
    assert store.reconciler_cursor("cron") == position  # microseconds and zone survive the round trip
    later = (T0 + timedelta(microseconds=1), "default", "invoice:inv_2:collect:v1")
    store.save_reconciler_cursor("cron", later)
    assert store.reconciler_cursor("cron") == later
    store.save_reconciler_cursor("cron", None)
    assert store.reconciler_cursor("cron") is None
    assert store.reconciler_cursor("other") == (T0 + timedelta(hours=1), "default", "invoice:inv_9:collect:v1")


@pytest.mark.parametrize(
    ("name", "position", "problem"),
    [
        ("", (T0, "default", KEY), "cursor name"),
        ("x" * 201, (T0, "default", KEY), "cursor name"),
        ("cron\x00", (T0, "default", KEY), "cursor name"),
        (7, (T0, "default", KEY), "cursor name"),
        ("cron", (T0.replace(tzinfo=None), "default", KEY), "timezone-aware"),
        ("cron", (T0, "no tenant!", KEY), "tenant"),
        ("cron", (T0, "default", 42), "intent key"),
    ],
    ids=["empty name", "long name", "nul in name", "not a str", "naive time", "bad tenant", "key not a str"],
)
def test_a_bad_cursor_is_refused_and_changes_nothing(
    store: Store, name: Any, position: tuple[Any, ...], problem: str
) -> None:
    kept = (T0, "default", KEY)
    store.save_reconciler_cursor("cron", kept)
    with pytest.raises((InvalidInput, InvalidTenant), match=problem):
        store.save_reconciler_cursor(name, position)  # type: ignore[arg-type]
    assert store.reconciler_cursor("cron") == kept
    if problem == "cursor name":
        with pytest.raises(InvalidInput, match=problem):
            store.reconciler_cursor(name)


def test_open_store_rejects_unknown_schemes() -> None:
    with pytest.raises(InvalidInput, match="'mysql'"):
        open_store("mysql://user:secret@host/db")
    with pytest.raises(InvalidInput):
        open_store("sqlite://relative.db")


@pytest.mark.parametrize(
    ("url", "named"),
    [
        (None, "a store URL must be a str, got NoneType"),
        (b"sqlite:///x.db", "a store URL must be a str, got bytes"),
        ("sqlite:///x\x00y.db", "a store URL holds a NUL character"),
        ("postgresql://postgres:secret@[::1/x", "not a PostgreSQL URL: Invalid IPv6 URL"),
    ],
)
def test_open_store_refuses_what_is_no_store_url_by_name(url: object, named: str) -> None:
    with pytest.raises(InvalidInput, match=f"^{re.escape(named)}$") as refused:
        open_store(url)  # type: ignore[arg-type]
    assert refused.value.__cause__ is None  # nothing chained that could quote the password


def test_a_sqlite_url_with_parameters_is_refused_not_taken_for_a_file_name(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}?busy_timeout=5"
    with pytest.raises(InvalidInput, match=r"takes no parameters.*SQLiteStore\(path, busy_timeout"):
        open_store(url)
    assert list(tmp_path.iterdir()) == []  # no file named 'ledger.db?busy_timeout=5'


def test_open_store_parses_paths_and_schema(tmp_path: Path) -> None:
    relative = open_store("sqlite:///rel/ledger.db")
    absolute = open_store(f"sqlite:///{tmp_path}/ledger.db")
    assert isinstance(relative, SQLiteStore)
    assert relative.path == Path.cwd() / "rel" / "ledger.db"  # relative to where it was opened, for good
    assert isinstance(absolute, SQLiteStore)
    assert absolute.path == tmp_path / "ledger.db"


def test_open_store_strips_the_schema_parameter(store: Store) -> None:
    if isinstance(store, PostgresStore):
        assert store.schema.startswith("se_test_")  # and it connected, so libpq never saw ?schema=


def test_postgres_store_without_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in ("psycopg", "psycopg_pool"):
        monkeypatch.setitem(sys.modules, module, None)  # makes `import psycopg` raise ImportError
    with pytest.raises(MissingDependency, match=r"safe-effects\[postgres\]"):
        PostgresStore("postgresql://nowhere/db")
