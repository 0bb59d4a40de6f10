"""Events the executor reports for metrics; core stays free of prometheus unless asked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class Observer(Protocol):
    """Receives one call per notable event. Labels are low-cardinality strings.

    From the executor: ``intent_conflict``, ``claim_contended``, ``compensation`` (provider, tenant),
    ``dispatch`` (provider, tenant, outcome — one per provider call whose outcome was recorded) and
    ``reconciliation`` (provider, tenant, method, outcome — one per settlement or inconclusive lookup),
    ``contradicting_evidence`` (provider, tenant, source, kind — a confirmed effect the provider says it did not
    carry out) and ``unrecorded_effect`` (provider, tenant, source, status — an effect the record does not
    show). From the reconciler: ``reconcile_attempt`` (provider, outcome) and ``reconciler_run`` (one per sweep).
    """

    def on_event(self, event: str, labels: Mapping[str, str]) -> None: ...


class NullObserver:
    """The default: observe nothing."""

    def on_event(self, event: str, labels: Mapping[str, str]) -> None:
        """Drop the event."""
