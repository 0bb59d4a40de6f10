"""What a test set up to fire (faults on fakes, crash traps, cassette faults), so teardown can tell what never did."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence


class FaultWatch:
    """Sources of pending faults by name; one pending object reported once even if two sources list it."""

    def __init__(self) -> None:
        self._sources: list[tuple[str, Callable[[], Sequence[object]]]] = []
        self._lock = threading.Lock()

    def watch(self, name: str, pending: Callable[[], Sequence[object]]) -> None:
        """``pending()`` lists what has not fired yet (``FakeHTTPServer.pending_faults``, say)."""
        with self._lock:
            self._sources.append((name, pending))

    def unfired(self) -> list[str]:
        with self._lock:
            sources = list(self._sources)
        seen: set[int] = set()
        lines = []
        for name, pending in sources:
            for item in pending():
                if id(item) not in seen:
                    seen.add(id(item))
                    lines.append(f"{name}: {item if isinstance(item, str) else repr(item)}")
        return lines
