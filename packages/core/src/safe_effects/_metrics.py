"""Prometheus metrics: store-derived gauges read at scrape time, and executor counters from an Observer.

prometheus-client is an optional extra (``safe-effects[metrics]``), imported only when these are built.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from types import ModuleType
from typing import Any

from ._clock import Clock, system_clock
from ._errors import InvalidInput, MissingDependency
from ._fork import renew_in_children
from ._states import UNSETTLED, EffectStatus
from ._store import Store

# the statuses a scrape counts, in the order they are exported: the few the status index serves cheaply
_COUNTED = tuple(status for status in EffectStatus if status in UNSETTLED)

# what a scrape reads: (tenant, provider, status, count) rows, the oldest unknown's first dispatch by provider,
# and the earliest in-flight lease expiry by provider
_Numbers = tuple[list[tuple[str, str, EffectStatus, int]], dict[str, datetime], dict[str, datetime]]
# event -> (metric attribute, label names); labels an event lacks are exported as ""
_EVENTS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "dispatch": ("dispatches", ("tenant", "provider", "outcome")),
    "reconciliation": ("reconciliations", ("tenant", "provider", "method", "outcome")),
    "intent_conflict": ("intent_conflicts", ("tenant", "provider")),
    "claim_contended": ("claim_contentions", ("tenant", "provider")),
    "compensation": ("compensations", ("tenant", "provider")),
    "contradicting_evidence": ("contradicting_evidence", ("tenant", "provider", "source", "kind")),
    "unrecorded_effect": ("unrecorded_effects", ("tenant", "provider", "source", "status")),
    "unmatched_evidence": ("unmatched_evidence", ("provider", "source")),
    "reconcile_attempt": ("reconciler_records", ("provider", "outcome")),
    "reconciler_run": ("reconciler_runs", ()),
}


def prometheus() -> ModuleType:
    """prometheus_client, or an install hint instead of an ImportError."""
    try:
        import prometheus_client  # noqa: PLC0415  # optional extra
        import prometheus_client.core  # noqa: PLC0415  # idem; makes .core an attribute
    except ImportError as error:
        raise MissingDependency("prometheus-client", "metrics") from error
    return prometheus_client


class _Reader:
    """A collector's store reads, on a thread of their own, so a scrape can stop waiting for a store that does
    not answer (a checkout waiting on a pool, a query on a partitioned network).

    One thread for all reads, as SQLite keeps a connection per thread; a daemon, so a read stuck on a dead
    database does not hold the process at exit. A scrape that comes while a read runs waits for that read
    instead of queueing another: a database that does not answer gets one query at a time from a collector.
    """

    def __init__(self, read: Callable[[], _Numbers]) -> None:
        self._read = read
        self._renew_after_fork()
        renew_in_children(self)

    def _renew_after_fork(self) -> None:
        """A thread of its own (a forked child has none of the parent's threads) and a lock no thread holds."""
        self._changed = threading.Condition()
        self._asked = self._answered = 0
        self._numbers: _Numbers | None = None
        threading.Thread(target=self._serve, name="safe-effects-store-reader", daemon=True).start()

    def numbers(self, timeout: float) -> _Numbers | None:
        """The answer of a read started now (or already running), or None if it failed or took over ``timeout``."""
        with self._changed:
            if self._asked == self._answered:
                self._asked += 1
                self._changed.notify_all()
            ticket = self._asked
            if not self._changed.wait_for(lambda: self._answered >= ticket, timeout):
                return None
            return self._numbers

    def _serve(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._asked > self._answered)
                ticket = self._asked
            numbers = None
            with contextlib.suppress(Exception):  # a failed read has no numbers: the store shows as down
                numbers = self._read()
            with self._changed:
                self._numbers, self._answered = numbers, ticket
                self._changed.notify_all()


class StoreCollector:
    """Counts of unsettled effects by status, the age of the oldest unknown and how long the earliest expired
    in-flight lease has been waiting for a taker, read from the store at each scrape.

    Only the unsettled statuses (prepared, in_flight, unknown) are counted: the store's status index serves
    them, and they are what an operator alerts on. Counting confirmed ones would read the whole history at
    every scrape, seconds on a ledger of tens of millions of rows; their rate comes from the counters.

    A scrape waits at most ``timeout`` seconds for the store, then reports ``safe_effects_store_up 0``: a
    scrape slower than Prometheus' ``scrape_timeout`` (10 s by default) fails, and ``store_up`` is never
    seen as 0.
    """

    def __init__(self, store: Store, *, clock: Clock = system_clock, timeout: float = 2.0) -> None:
        self.store = store
        self.clock = clock
        self.timeout = timeout
        self._core = prometheus().core
        self._reader = _Reader(self._query)
        self._groups: set[tuple[str, str]] = set()  # (tenant, provider) seen: their zeros keep the series

    def describe(self) -> Iterator[Any]:
        """Names only, so registering does not query the store."""
        yield from self._families()

    def collect(self) -> Iterator[Any]:
        effects, oldest, abandoned, up = self._families()
        numbers = self._reader.numbers(self.timeout)
        if numbers is None:  # an unreachable store must show as store_up 0, not as a failed scrape
            up.add_metric([], 0)
            yield up
            return
        counts, oldest_unknown, lease_expiry = numbers
        found = {(tenant, provider, status): count for tenant, provider, status, count in counts}
        # a new set, swapped in whole: two scrapes at once never iterate a set the other is changing
        self._groups = groups = self._groups | {(tenant, provider) for tenant, provider, _, _ in counts}
        for tenant, provider in sorted(groups):
            for status in _COUNTED:  # zeros too, so a series does not vanish when its last record settles
                effects.add_metric([tenant, provider, status.value], found.get((tenant, provider, status), 0))
        now = self.clock()
        for provider, sent_at in oldest_unknown.items():
            oldest.add_metric([provider], max(0.0, (now - sent_at).total_seconds()))
        for provider, expiry in lease_expiry.items():
            abandoned.add_metric([provider], max(0.0, (now - expiry).total_seconds()))
        up.add_metric([], 1)
        yield from (effects, oldest, abandoned, up)

    def _query(self) -> _Numbers:
        store = self.store
        return (
            store.status_counts(_COUNTED),
            store.oldest_dispatched(EffectStatus.UNKNOWN),
            store.earliest_lease_expiry(),
        )

    def _families(self) -> tuple[Any, Any, Any, Any]:
        gauge = self._core.GaugeMetricFamily
        return (
            gauge(
                "safe_effects_effects",
                "Unsettled effect records (prepared, in_flight, unknown) by tenant, provider and status, read from "
                "the ledger store",
                labels=["tenant", "provider", "status"],
            ),
            gauge(
                "safe_effects_oldest_unknown_age_seconds",
                "Seconds since the oldest unknown record of each provider was first sent: how long it has been in "
                "doubt (a replay or a lease expiry since does not shorten it)",
                labels=["provider"],
            ),
            gauge(
                "safe_effects_expired_lease_age_seconds",
                "Seconds since the earliest in_flight lease of each provider expired (0 while every lease is live): "
                "a worker died mid-call and no caller retry or reconciler has taken the record over since",
                labels=["provider"],
            ),
            _store_up(self._core),
        )


def _store_up(core: Any) -> Any:
    return core.GaugeMetricFamily("safe_effects_store_up", "1 when the last scrape could read the ledger store")


class StoreNotOpened:
    """The gauges of a store that could not be opened yet: ``safe_effects_store_up 0`` alone. An exporter
    started while its database is down serves this until it opens the store, so Prometheus sees the store
    down (SafeEffectsStoreUnreachable), not the exporter (SafeEffectsExporterDown)."""

    def __init__(self) -> None:
        self._core = prometheus().core

    def describe(self) -> Iterator[Any]:
        yield _store_up(self._core)

    def collect(self) -> Iterator[Any]:
        up = _store_up(self._core)
        up.add_metric([], 0)
        yield up


class PrometheusObserver:
    """An :class:`~safe_effects.Observer` that counts executor and reconciler events (one per registry).

    ``tenant_label=False`` counts every tenant under ``tenant=""``: a series per tenant, label set and worker
    process adds up with thousands of tenants (10,000 tenants on 4 workers made a 3 MB, one-second scrape), and
    dropping the label by relabelling afterwards would collide series.
    """

    def __init__(self, registry: Any = None, *, tenant_label: bool = True) -> None:
        client = prometheus()
        self.registry = registry = client.REGISTRY if registry is None else registry
        self.tenant_label = tenant_label

        def counter(name: str, doc: str, labels: tuple[str, ...]) -> Any:
            return client.Counter(name, doc, labels, registry=registry)

        self.dispatches = counter(
            "safe_effects_dispatches",
            "Provider calls by the outcome the executor recorded: confirmed, rejected, unknown, or prepared when "
            "retryable refusals ran out",
            _EVENTS["dispatch"][1],
        )
        self.reconciliations = counter(
            "safe_effects_reconciliations",
            "Reconciliation steps by method (lookup:<kind>, evidence:<source>, key_replay, operator) and outcome",
            _EVENTS["reconciliation"][1],
        )
        self.intent_conflicts = counter(
            "safe_effects_intent_conflicts", "Same intent key with another request digest", ("tenant", "provider")
        )
        self.claim_contentions = counter(
            "safe_effects_claim_contentions",
            "Calls that found their intent held by another worker",
            ("tenant", "provider"),
        )
        self.compensations = counter(
            "safe_effects_compensations", "Confirmed effects marked compensated", ("tenant", "provider")
        )
        self.contradicting_evidence = counter(
            "safe_effects_contradicting_evidence",
            "Provider events saying a confirmed effect was not carried out (a drop, a rendering failure)",
            _EVENTS["contradicting_evidence"][1],
        )
        self.unrecorded_effects = counter(
            "safe_effects_unrecorded_effects",
            "Provider answers or events showing an effect the record does not: a rejected intent the provider "
            "took, a late answer naming a second object beside the confirmed one (a possible duplicate), or two "
            "compensations of one effect",
            _EVENTS["unrecorded_effect"][1],
        )
        self.unmatched_evidence = counter(
            "safe_effects_unmatched_evidence",
            "Provider events naming an intent this ledger has no record of (another ledger's or a tenant it does "
            "not serve; after a restore from a backup, an intent whose record was lost): not stored",
            _EVENTS["unmatched_evidence"][1],
        )
        self.reconciler_records = counter(
            "safe_effects_reconciler_records", "Records a reconciler sweep handled, by outcome", ("provider", "outcome")
        )
        self.reconciler_runs = counter("safe_effects_reconciler_runs", "Completed reconciler sweeps", ())
        self.reconciler_last_run = client.Gauge(
            "safe_effects_reconciler_last_run_timestamp_seconds",
            "Unix time of the last completed reconciler sweep in this process (of any process, in "
            "prometheus_client's multiprocess mode)",
            registry=registry,
            # in prometheus_client's multiprocess mode: the newest sweep of any process, one series. The default
            # keeps a series per pid for good, and a dead process's old time kept SafeEffectsReconcilerDown firing
            multiprocess_mode="max",
        )

    def on_event(self, event: str, labels: Mapping[str, str]) -> None:
        """Count the event; unknown events are ignored so the executor can add new ones freely."""
        spec = _EVENTS.get(event)
        if spec is None:
            return
        attribute, names = spec
        metric = getattr(self, attribute)
        values = (labels.get(name, "") if self.tenant_label or name != "tenant" else "" for name in names)
        (metric.labels(*values) if names else metric).inc()
        if event == "reconciler_run":
            self.reconciler_last_run.set(time.time())


def store_registry(store: Store, *, clock: Clock = system_clock) -> Any:
    """A fresh registry holding only the store's gauges."""
    registry = prometheus().CollectorRegistry(auto_describe=True)
    registry.register(StoreCollector(store, clock=clock))
    return registry


def serve(registry: Any, *, port: int, addr: str = "0.0.0.0") -> Any:
    """Serve ``registry`` on ``addr:port`` from a daemon thread; returns the server."""
    try:
        return prometheus().start_http_server(port, addr=addr, registry=registry)
    except OSError as refused:  # a name that resolves to nothing, a port in use or not this user's to bind
        raise InvalidInput(f"cannot serve metrics on {addr}:{port}: {refused.strerror or refused}") from refused
