"""A small token bucket: paces one process's lookups to a provider's documented rate limit."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(slots=True)
class TokenBucket:
    """``per_minute`` calls a minute, bursting at most one second's worth (never less than one call).

    Per process: two reconciler processes each get the full rate, so size the limit (or run one) accordingly.
    """

    per_minute: float
    monotonic: Callable[[], float] = time.monotonic
    tokens: float = field(init=False)
    _last: float = field(init=False)

    def __post_init__(self) -> None:
        self.tokens = self.capacity
        self._last = self.monotonic()

    @property
    def capacity(self) -> float:
        return max(1.0, self.per_minute / 60.0)

    def wait_time(self) -> float:
        """Seconds until a token is available (0 when one is there now)."""
        now = self.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self._last) * self.per_minute / 60.0)
        self._last = now
        return 0.0 if self.tokens >= 1.0 else (1.0 - self.tokens) * 60.0 / self.per_minute

    def take(self) -> None:
        """Spend a token the caller has just seen (or waited for) with :meth:`wait_time`."""
        self.wait_time()
        self.tokens -= 1.0
