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
from typing import TYPE_CHECKING

import psycopg
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql

from safe_effects import (
    EffectRequest,
    EffectStatus,
    IntentConflict,
    Ledger,
    LedgerUnavailable,
    PostgresStore,
    PrometheusObserver,
    Reconciler,
    StoreCollector,
)

if TYPE_CHECKING:
    from conftest import DatabaseProxy, Ops


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def expected(ops: Ops) -> dict[tuple[tuple[str, str], ...], float]:
    groups = {(t, p) for t, p, _, _ in ops.ledger.store.status_counts()}
    counts = {(t, p, s): c for t, p, s, c in ops.ledger.store.status_counts()}
    return {
        (("provider", p), ("status", s.value), ("tenant", t)): float(counts.get((t, p, s), 0))
        for t, p in groups
        for s in EffectStatus
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


def test_unreachable_store_reports_down_instead_of_failing(ops: Ops) -> None:
    registry = CollectorRegistry()
    store = ops.ledger.store
    registry.register(StoreCollector(store))

    def broken() -> list[tuple[str, str, EffectStatus, int]]:
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

    def hanging() -> list[tuple[str, str, EffectStatus, int]]:  # a query on a partitioned network, say
        next(reads)
        release.wait(30)
        return real()

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


def test_cli_prints_and_serves_the_same_numbers(ops: Ops) -> None:
    seed(ops)
    printed = ops.cli("metrics", "--print")
    assert printed.exit_code == 0, printed.output
    assert samples(printed.stdout, "safe_effects_effects") == expected(ops)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "safe_effects.cli", "metrics", "--port", str(port), "--addr", "127.0.0.1"],
        env={**os.environ, **ops.env},
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
                    scraped = answer.read().decode()
                break
            except OSError:
                assert server.poll() is None, server.communicate()[1]
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert samples(scraped, "safe_effects_effects") == expected(ops)
    finally:
        server.terminate()
        server.communicate(timeout=10)
