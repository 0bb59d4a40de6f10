"""Events the executor reports for metrics; core stays free of prometheus unless asked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class Observer(Protocol):
    """Receives one call per notable event: ``intent_conflict``, ``claim_contended``, ``reconciliation``,
    ``compensation``. Labels are low-cardinality strings (provider, tenant, method, outcome)."""

    def on_event(self, event: str, labels: Mapping[str, str]) -> None: ...


class NullObserver:
    """The default: observe nothing."""

    def on_event(self, event: str, labels: Mapping[str, str]) -> None:
        """Drop the event."""
