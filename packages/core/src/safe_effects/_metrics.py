"""Prometheus metrics: store-derived gauges read at scrape time, and executor counters from an Observer.

prometheus-client is an optional extra (``safe-effects[metrics]``), imported only when these are built.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import Any

from ._clock import Clock, system_clock
from ._errors import MissingDependency
from ._states import EffectStatus
from ._store import Store

# event -> (metric attribute, label names); labels an event lacks are exported as ""
_EVENTS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "reconciliation": ("reconciliations", ("tenant", "provider", "method", "outcome")),
    "intent_conflict": ("intent_conflicts", ("tenant", "provider")),
    "claim_contended": ("claim_contentions", ("tenant", "provider")),
    "compensation": ("compensations", ("tenant", "provider")),
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


class StoreCollector:
    """Effect counts by status and the age of the oldest unknown, read from the store at each scrape."""

    def __init__(self, store: Store, *, clock: Clock = system_clock) -> None:
        self.store = store
        self.clock = clock
        self._core = prometheus().core

    def describe(self) -> Iterator[Any]:
        """Names only, so registering does not query the store."""
        yield from self._families()

    def collect(self) -> Iterator[Any]:
        effects, oldest, up = self._families()
        try:
            counts = self.store.status_counts()
            oldest_unknown = self.store.oldest_updated(EffectStatus.UNKNOWN)
        except Exception:  # an unreachable store must show as store_up 0, not as a failed scrape
            up.add_metric([], 0)
            yield up
            return
        by_group: dict[tuple[str, str], dict[EffectStatus, int]] = {}
        for tenant, provider, status, count in counts:
            by_group.setdefault((tenant, provider), {})[status] = count
        for (tenant, provider), statuses in by_group.items():
            for status in EffectStatus:  # zeros too, so a series does not vanish when its last record settles
                effects.add_metric([tenant, provider, status.value], statuses.get(status, 0))
        now = self.clock()
        for provider, updated_at in oldest_unknown.items():
            oldest.add_metric([provider], max(0.0, (now - updated_at).total_seconds()))
        up.add_metric([], 1)
        yield from (effects, oldest, up)

    def _families(self) -> tuple[Any, Any, Any]:
        gauge = self._core.GaugeMetricFamily
        return (
            gauge(
                "safe_effects_effects",
                "Effect records by tenant, provider and status (read from the ledger store)",
                labels=["tenant", "provider", "status"],
            ),
            gauge(
                "safe_effects_oldest_unknown_age_seconds",
                "Seconds since the least recently updated unknown record of each provider was last touched",
                labels=["provider"],
            ),
            gauge("safe_effects_store_up", "1 when the last scrape could read the ledger store"),
        )


class PrometheusObserver:
    """An :class:`~safe_effects.Observer` that counts executor and reconciler events (one per registry)."""

    def __init__(self, registry: Any = None) -> None:
        client = prometheus()
        self.registry = registry = client.REGISTRY if registry is None else registry

        def counter(name: str, doc: str, labels: tuple[str, ...]) -> Any:
            return client.Counter(name, doc, labels, registry=registry)

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
        self.reconciler_records = counter(
            "safe_effects_reconciler_records", "Records a reconciler sweep handled, by outcome", ("provider", "outcome")
        )
        self.reconciler_runs = counter("safe_effects_reconciler_runs", "Completed reconciler sweeps", ())
        self.reconciler_last_run = client.Gauge(
            "safe_effects_reconciler_last_run_timestamp_seconds",
            "Unix time of the last completed reconciler sweep in this process",
            registry=registry,
        )

    def on_event(self, event: str, labels: Mapping[str, str]) -> None:
        """Count the event; unknown events are ignored so the executor can add new ones freely."""
        spec = _EVENTS.get(event)
        if spec is None:
            return
        attribute, names = spec
        metric = getattr(self, attribute)
        (metric.labels(*(labels.get(name, "") for name in names)) if names else metric).inc()
        if event == "reconciler_run":
            self.reconciler_last_run.set(time.time())


def store_registry(store: Store, *, clock: Clock = system_clock) -> Any:
    """A fresh registry holding only the store's gauges."""
    registry = prometheus().CollectorRegistry(auto_describe=True)
    registry.register(StoreCollector(store, clock=clock))
    return registry


def serve(registry: Any, *, port: int, addr: str = "0.0.0.0") -> Any:
    """Serve ``registry`` on ``addr:port`` from a daemon thread; returns the server."""
    return prometheus().start_http_server(port, addr=addr, registry=registry)
