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
                    lines.append(f"{name}: {_described(item)}")
        return lines


def _described(item: object) -> str:
    """A pending item for the teardown message; a fault set to fire several times says how often it did."""
    text = item if isinstance(item, str) else repr(item)
    times, fired = getattr(item, "times", None), getattr(item, "times_fired", None)
    if isinstance(times, int) and isinstance(fired, int) and times > 1:
        text += f" (fired {fired} of {times} times)"
    return text
