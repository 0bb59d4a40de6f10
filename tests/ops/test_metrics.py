"""Metrics mirror the store at scrape time; executor events become counters."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql

from safe_effects import (
    CrashPlan,
    CrashPoint,
    EffectRejected,
    EffectRequest,
    EffectStatus,
    EffectUnknown,
    IntentConflict,
    Ledger,
    LedgerUnavailable,
    PostgresStore,
    PrometheusObserver,
    Reconciler,
    SimulatedCrash,
    StoreCollector,
)
from safe_effects.testing import FakeClock, FakeFailure, GenericFakeAdapter, GenericFakeProvider

if TYPE_CHECKING:
    from conftest import DatabaseProxy, Ops


KEY_A = "invoice:a:collect:v1"


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


KEY = "invoice:lost:collect:v1"
UNSETTLED = (EffectStatus.PREPARED, EffectStatus.IN_FLIGHT, EffectStatus.UNKNOWN)


def expected(ops: Ops) -> dict[tuple[tuple[str, str], ...], float]:
    """The gauge's samples, from the store's own counts: every group with unsettled records, zeros included."""
    counts = {(t, p, s): c for t, p, s, c in ops.ledger.store.status_counts(UNSETTLED)}
    return {
        (("provider", p), ("status", s.value), ("tenant", t)): float(counts.get((t, p, s), 0))
        for t, p in {(t, p) for t, p, _ in counts}
        for s in UNSETTLED
    }


def seed(ops: Ops) -> None:
    ops.unknown("invoice:a:collect:v1")
    ops.unknown("invoice:b:collect:v1", happened=False)
    ops.confirmed("invoice:c:collect:v1")


def test_collector_matches_status_counts(ops: Ops) -> None:
    seed(ops)
    registry = CollectorRegistry()
    registry.register(StoreCollector(ops.ledger.store))
    assert (
        registry.get_sample_value(
            "safe_effects_effects", {"tenant": "default", "provider": "fake", "status": "unknown"}
        )
        == 2
    )
    assert samples(generate_latest(registry).decode(), "safe_effects_effects") == expected(ops)
    age = registry.get_sample_value("safe_effects_oldest_unknown_age_seconds", {"provider": "fake"})
    assert age is not None
    assert 0 <= age < 60
    assert registry.get_sample_value("safe_effects_store_up") == 1


def test_settled_records_are_not_counted_and_a_settled_group_keeps_its_zeros(ops: Ops) -> None:
    """The gauge counts what an operator alerts on (prepared, in_flight, unknown), never the history: a group
    whose last unknown settles reports 0, not a series that vanishes from graphs and alerts."""
    ops.unknown("invoice:a:collect:v1")
    ops.confirmed("invoice:c:collect:v1")
    registry = CollectorRegistry()
    registry.register(StoreCollector(ops.ledger.store))
    before = samples(generate_latest(registry).decode(), "safe_effects_effects")
    assert {dict(labels)["status"] for labels in before} == {"prepared", "in_flight", "unknown"}
    unknown = (("provider", "fake"), ("status", "unknown"), ("tenant", "default"))
    assert before[unknown] == 1
    settled = Reconciler(ops.ledger, {"fake": ops.adapter}).run_once()
    assert settled.counts() == {"confirmed": 1}
    assert ops.ledger.get("invoice:a:collect:v1").status == "confirmed"
    after = samples(generate_latest(registry).decode(), "safe_effects_effects")
    assert after == dict.fromkeys(before, 0.0)  # still there, at zero
    assert len(ops.fake.effects()) == 2  # the two charges, none resent by the reconciler


def test_a_record_abandoned_mid_call_shows_how_long_its_lease_has_been_expired(ops: Ops) -> None:
    """A worker killed mid-call leaves an in_flight record; once its lease runs out only a caller's retry or a
    reconciler with the provider's adapter takes it over. The gauge shows how long it has waited for one, so an
    alert catches the record no reconciler handles (none runs, or none has that provider's adapter)."""
    clock = FakeClock(datetime.now(UTC))
    dying = Ledger(ops.ledger.store, clock=clock, crash_plan=CrashPlan.crash_at(CrashPoint.AFTER_RESPONSE))
    with pytest.raises(SimulatedCrash):
        dying.execute(ops.adapter, EffectRequest(operation="charge", params={"amount": 1}), intent_key=KEY)
    record = ops.ledger.get(KEY)
    assert record.status is EffectStatus.IN_FLIGHT
    assert record.lease_expires_at is not None
    assert len(ops.fake.effects()) == 1  # the provider acted; the ledger does not know yet
    registry = CollectorRegistry()
    registry.register(StoreCollector(ops.ledger.store, clock=clock))
    name = "safe_effects_expired_lease_age_seconds"
    assert registry.get_sample_value(name, {"provider": "fake"}) == 0  # the lease is live: the worker may answer
    clock.advance(record.lease_expires_at - clock() + timedelta(seconds=90))
    assert registry.get_sample_value(name, {"provider": "fake"}) == 90
    skipped = Reconciler(Ledger(ops.ledger.store, clock=clock), {}).run_once()  # no adapter for "fake"
    assert skipped.counts() == {"skipped": 1}
    assert registry.get_sample_value(name, {"provider": "fake"}) == 90  # still waiting: this is what alerts
    settled = Reconciler(Ledger(ops.ledger.store, clock=clock), {"fake": ops.adapter}).run_once()
    assert settled.counts() == {"confirmed": 1}
    assert ops.ledger.get(KEY).status is EffectStatus.CONFIRMED
    assert len(ops.fake.effects()) == 1  # found at the provider, not sent again
    assert registry.get_sample_value(name, {"provider": "fake"}) is None  # no in-flight record left


def test_unreachable_store_reports_down_instead_of_failing(ops: Ops) -> None:
    registry = CollectorRegistry()
    store = ops.ledger.store
    registry.register(StoreCollector(store))

    def broken(statuses: object) -> list[tuple[str, str, EffectStatus, int]]:
        raise OSError("connection refused")

    store.status_counts = broken  # type: ignore[method-assign]
    assert registry.get_sample_value("safe_effects_store_up") == 0


def test_a_store_that_does_not_answer_shows_as_down_within_the_timeout(ops: Ops) -> None:
    seed(ops)
    registry = CollectorRegistry()
    store = ops.ledger.store
    registry.register(StoreCollector(store, timeout=0.3))
    release, reads = threading.Event(), itertools.count(1)
    real = store.status_counts

    def hanging(statuses: Any) -> list[tuple[str, str, EffectStatus, int]]:  # a partitioned network, say
        next(reads)
        release.wait(30)
        return real(statuses)

    store.status_counts = hanging  # type: ignore[method-assign]
    for _ in range(3):
        started = time.monotonic()
        assert registry.get_sample_value("safe_effects_store_up") == 0
        assert time.monotonic() - started < 2
    assert next(reads) == 2  # the scrapes waited on the one read still running, none queued another
    release.set()
    assert registry.get_sample_value("safe_effects_store_up") == 1  # back once the store answers
    text = generate_latest(registry).decode()
    assert samples(text, "safe_effects_effects") == expected(ops)


@pytest.mark.postgres
def test_postgres_going_away_shows_as_down_at_every_scrape_within_seconds(
    pg_url: str, database_proxy: DatabaseProxy
) -> None:
    proxy = database_proxy
    through_proxy = proxy.conninfo(pg_url)
    schema = f"se_test_{uuid.uuid4().hex[:12]}"
    store = PostgresStore(through_proxy, schema=schema)  # checkouts wait up to the pool's default 30 s
    impatient = PostgresStore(through_proxy, schema=schema, timeout=1)
    try:
        store.migrate()
        registry = CollectorRegistry()
        registry.register(StoreCollector(store))  # the default timeout, as `safe-effects metrics` uses
        assert registry.get_sample_value("safe_effects_store_up") == 1
        proxy.cut()
        for _ in range(3):  # Prometheus scrapes again and again (scrape_timeout: 10 s by default)
            started = time.monotonic()
            assert registry.get_sample_value("safe_effects_store_up") == 0
            assert time.monotonic() - started < 5
        started = time.monotonic()
        with pytest.raises(LedgerUnavailable):  # the store's own bound on a checkout
            impatient.pending_migrations()
        assert time.monotonic() - started < 5
    finally:
        proxy.cut()
        store.close()
        impatient.close()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_an_observer_without_the_tenant_label_counts_every_tenant_under_one_series(ops: Ops) -> None:
    """Thousands of tenants made a series each per label set and worker; the label can be left out whole."""
    registry = CollectorRegistry()
    ledger = Ledger(ops.ledger.store, observer=PrometheusObserver(registry, tenant_label=False))
    for tenant in ("acme", "globex"):
        ledger.execute(
            ops.adapter, EffectRequest(operation="charge", params={"t": tenant}), intent_key=KEY_A, tenant=tenant
        )
    names = {sample.labels.get("tenant") for metric in registry.collect() for sample in metric.samples}
    assert names <= {None, ""}  # no tenant named anywhere
    labels = {"tenant": "", "provider": "fake", "outcome": "confirmed"}
    assert registry.get_sample_value("safe_effects_dispatches_total", labels) == 2
    assert len(ops.fake.effects()) == 2


def test_observer_counts_conflicts_reconciliations_and_compensations(ops: Ops) -> None:
    registry = CollectorRegistry()
    ledger = Ledger(ops.ledger.store, observer=PrometheusObserver(registry))
    ops.unknown("invoice:a:collect:v1")
    with pytest.raises(IntentConflict):
        ledger.execute(
            ops.adapter, EffectRequest(operation="charge", params={"x": 1}), intent_key="invoice:a:collect:v1"
        )
    Reconciler(ledger, {"fake": ops.adapter}).run_once()
    ops.confirmed("invoice:c:collect:v1")
    ledger.compensate(
        ops.adapter,
        EffectRequest(operation="refund", params={}),
        original_key="invoice:c:collect:v1",
        compensating_key="invoice:c:refund:v1",
    )
    labels = {"tenant": "default", "provider": "fake"}
    assert registry.get_sample_value("safe_effects_intent_conflicts_total", labels) == 1
    assert registry.get_sample_value("safe_effects_compensations_total", labels) == 1
    assert (
        registry.get_sample_value(
            "safe_effects_reconciliations_total", {**labels, "method": "lookup:search", "outcome": "confirmed"}
        )
        == 1
    )
    assert (
        registry.get_sample_value("safe_effects_reconciler_records_total", {"provider": "fake", "outcome": "confirmed"})
        == 1
    )
    assert registry.get_sample_value("safe_effects_reconciler_runs_total") == 1
    last = registry.get_sample_value("safe_effects_reconciler_last_run_timestamp_seconds")
    assert last is not None
    assert abs(last - time.time()) < 60


def test_a_lookup_held_back_by_the_response_window_is_counted_apart_from_one_that_cannot_tell(ops: Ops) -> None:
    """An alert on lookups that settle nothing must not fire for a request the provider may still be running."""
    registry = CollectorRegistry()
    ledger = Ledger(ops.ledger.store, observer=PrometheusObserver(registry))
    ops.unknown("invoice:fresh:collect:v1", happened=False)
    ops.unknown("invoice:old:collect:v1", happened=False, sent_ago=timedelta(hours=1))
    trusted = ops.adapter.contract.lookups[0].model_copy(update={"proves_absence": True})
    ops.adapter.contract = ops.adapter.contract.model_copy(
        update={"lookups": (trusted,), "redispatch_when_proven_absent": True}
    )
    report = Reconciler(ledger, {"fake": ops.adapter}).run_once()

    def reconciled(outcome: str) -> float | None:
        labels = {"tenant": "default", "provider": "fake", "method": "lookup:search", "outcome": outcome}
        return registry.get_sample_value("safe_effects_reconciliations_total", labels)

    assert (reconciled("held_back"), reconciled("inconclusive"), reconciled("prepared")) == (1, None, 1)
    assert ops.fake.effects() == []
    statuses = {k: ledger.get(f"invoice:{k}:collect:v1").status for k in ("fresh", "old")}
    assert statuses == {"fresh": EffectStatus.UNKNOWN, "old": EffectStatus.PREPARED}
    assert report.counts() == {"unknown": 1, "prepared": 1}


def test_observer_counts_each_provider_call_by_the_outcome_it_recorded(ops: Ops) -> None:
    """The rate of confirmed, rejected and unknown calls comes from a counter, not from counting the history."""
    registry = CollectorRegistry()
    ledger = Ledger(ops.ledger.store, observer=PrometheusObserver(registry))
    ops.fake.fail_next(FakeFailure.DECLINED)
    with pytest.raises(EffectRejected):
        ledger.execute(
            ops.adapter, EffectRequest(operation="charge", params={"n": 1}), intent_key="invoice:r:collect:v1"
        )
    ops.fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
    with pytest.raises(EffectUnknown):
        ledger.execute(
            ops.adapter, EffectRequest(operation="charge", params={"n": 2}), intent_key="invoice:u:collect:v1"
        )
    for n in range(2):
        ledger.execute(
            ops.adapter, EffectRequest(operation="charge", params={"n": n}), intent_key=f"invoice:c{n}:collect:v1"
        )
    ledger.execute(ops.adapter, EffectRequest(operation="charge", params={"n": 0}), intent_key="invoice:c0:collect:v1")

    def dispatched(outcome: str) -> float | None:
        labels = {"tenant": "default", "provider": "fake", "outcome": outcome}
        return registry.get_sample_value("safe_effects_dispatches_total", labels)

    assert (dispatched("confirmed"), dispatched("rejected"), dispatched("unknown")) == (
        2,
        1,
        1,
    )  # a repeat is not a call
    assert len(ops.fake.effects()) == 3  # two confirmed and the one whose answer was lost
    statuses = {k: ledger.get(f"invoice:{k}:collect:v1").status for k in ("r", "u", "c0", "c1")}
    assert statuses == {"r": "rejected", "u": "unknown", "c0": "confirmed", "c1": "confirmed"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def exporter(port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``safe-effects metrics`` serving on ``port``, in a process of its own."""
    return subprocess.Popen(
        [sys.executable, "-m", "safe_effects.cli", "metrics", "--port", str(port), "--addr", "127.0.0.1"],
        env={**os.environ, **env},
        stderr=subprocess.PIPE,
    )


def scrape(server: subprocess.Popen[bytes], port: int, *, until: Callable[[str], bool] = bool) -> str:
    """The exporter's exposition once it serves one that ``until`` accepts (20 s at most)."""
    deadline = time.monotonic() + 20
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
                scraped: str = answer.read().decode()
            if until(scraped):
                return scraped
        except OSError:
            assert server.poll() is None, server.communicate()[1]
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_cli_prints_and_serves_the_same_numbers(ops: Ops) -> None:
    seed(ops)
    printed = ops.cli("metrics", "--print")
    assert printed.exit_code == 0, printed.output
    assert samples(printed.stdout, "safe_effects_effects") == expected(ops)
    port = free_port()
    server = exporter(port, ops.env)
    try:
        assert samples(scrape(server, port), "safe_effects_effects") == expected(ops)
    finally:
        server.terminate()
        server.communicate(timeout=10)


@pytest.mark.postgres
def test_an_exporter_started_while_postgres_is_down_serves_store_up_0_until_it_answers(
    pg_url: str, database_back_on: Callable[[int], DatabaseProxy], tmp_path: Path
) -> None:
    """It exited at start instead: Prometheus then raised "exporter down", whose runbook row (restart it)
    failed the same way, and never "store unreachable"."""
    schema = f"se_test_{uuid.uuid4().hex[:12]}"
    store = PostgresStore(pg_url, schema=schema)
    store.migrate()
    ledger = Ledger(store)
    fake = GenericFakeProvider(tmp_path / "fake.db")
    fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
    with pytest.raises(EffectUnknown):
        ledger.execute(GenericFakeAdapter(fake), EffectRequest(operation="charge", params={}), intent_key=KEY_A)
    database_port, port = free_port(), free_port()  # nothing listens on the database's port yet: it is down
    parts = urlsplit(pg_url)
    user = f"{parts.username}@" if parts.username else ""
    database = urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{database_port}", query=f"schema={schema}"))
    server = exporter(port, {"SAFE_EFFECTS_STORE": database})
    try:
        down = scrape(server, port)
        assert samples(down, "safe_effects_store_up") == {(): 0.0}
        assert samples(down, "safe_effects_effects") == {}
        database_back_on(database_port)
        up = scrape(server, port, until=lambda text: samples(text, "safe_effects_store_up") == {(): 1.0})
        labels = (("provider", "fake"), ("status", "unknown"), ("tenant", "default"))
        assert samples(up, "safe_effects_effects")[labels] == 1
        assert ledger.get(KEY_A).status is EffectStatus.UNKNOWN  # the exporter only reads
        assert len(fake.effects()) == 1
    finally:
        server.terminate()
        stderr = server.communicate(timeout=10)[1].decode()
        ledger.close()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    assert "serving safe_effects_store_up 0, opening it again in 5 s" in stderr
