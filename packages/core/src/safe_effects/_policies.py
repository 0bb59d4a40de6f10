"""Small frozen policy values for the executor: how long to retry, how long to wait for another worker.

Each checks itself when made, so a wrong value (a lease of 0 s, a poll interval of 0 that would spin on the
database, an int where a timedelta belongs) is an :class:`InvalidInput` at start-up, not a misbehaving
executor at the first call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

from ._errors import InvalidInput


def _seconds(policy: str, name: str, value: object, *, positive: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput(f"{policy}.{name} must be a finite number of seconds, got {value!r}")
    if value < 0 or (positive and value == 0):
        bound = "more than 0" if positive else "0 or more"
        raise InvalidInput(f"{policy}.{name} must be {bound} seconds, got {value!r}")


def _count(policy: str, name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"{policy}.{name} must be an int of 1 or more, got {value!r}")


def _span(policy: str, name: str, value: object, *, positive: bool) -> None:
    if not isinstance(value, timedelta):
        raise InvalidInput(f"{policy}.{name} must be a datetime.timedelta, got {value!r}")
    _seconds(policy, name, value.total_seconds(), positive=positive)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounds for retrying definitive-retryable refusals (429, refused connection) inside the boundary."""

    max_attempts: int = 4
    max_total_seconds: float = 30.0
    initial_wait: float = 0.2
    max_wait: float = 5.0  # longest wait between attempts; a longer Retry-After defers the call instead

    def __post_init__(self) -> None:
        _count("RetryPolicy", "max_attempts", self.max_attempts)
        for name in ("max_total_seconds", "initial_wait", "max_wait"):
            _seconds("RetryPolicy", name, getattr(self, name), positive=False)


@dataclass(frozen=True, slots=True)
class LeasePolicy:
    """A claim's lease must outlast one provider call (its timeouts); a stale lease means worker lost. Retries
    of refusals stop when it lapses, so a lease shorter than the retry policy's window defers the call sooner."""

    duration: timedelta = timedelta(seconds=120)
    wait_for_other: timedelta = timedelta(seconds=15)  # bound on waiting for a concurrent holder
    poll_interval: float = 0.05

    def __post_init__(self) -> None:
        _span("LeasePolicy", "duration", self.duration, positive=True)
        _span("LeasePolicy", "wait_for_other", self.wait_for_other, positive=False)
        _seconds("LeasePolicy", "poll_interval", self.poll_interval, positive=True)


DEFAULT_RETRY = RetryPolicy()
DEFAULT_LEASE = LeasePolicy()
