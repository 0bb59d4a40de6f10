"""An Observer that keeps what the ledger told it, so a test can assert an alarm was (or was not) raised."""

from __future__ import annotations

import threading
from collections.abc import Mapping


class RecordingObserver:
    """``ledger.observer = seen = RecordingObserver()``; then ``seen.named("unrecorded_effect")``."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, str]]] = []
        self._lock = threading.Lock()  # workers on threads report concurrently

    def on_event(self, event: str, labels: Mapping[str, str]) -> None:
        with self._lock:
            self.events.append((event, dict(labels)))

    def named(self, event: str) -> list[dict[str, str]]:
        """The labels of every ``event`` reported, in order."""
        with self._lock:
            return [labels for name, labels in self.events if name == event]
