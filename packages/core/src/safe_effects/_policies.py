"""Small frozen policy values for the executor: how long to retry, how long to wait for another worker.

Each checks itself when made, so a wrong value (a lease of 0 s, a poll interval of 0 that would spin on the
database, an int where a timedelta belongs) is an :class:`InvalidInput` at start-up, not a misbehaving
executor at the first call.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from ._errors import InvalidInput
from ._numbers import check_count, check_seconds


def _span(policy: str, name: str, value: object, *, positive: bool) -> None:
    if not isinstance(value, timedelta):
        raise InvalidInput(f"{policy}.{name} must be a datetime.timedelta, got {value!r}")
    check_seconds(f"{policy}.{name}", value.total_seconds(), positive=positive)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounds for retrying definitive-retryable refusals (429, refused connection) inside the boundary."""

    max_attempts: int = 4
    max_total_seconds: float = 30.0
    initial_wait: float = 0.2
    max_wait: float = 5.0  # longest wait between attempts; a longer Retry-After defers the call instead

    def __post_init__(self) -> None:
        check_count("RetryPolicy.max_attempts", self.max_attempts)
        for name in ("max_total_seconds", "initial_wait", "max_wait"):
            check_seconds(f"RetryPolicy.{name}", getattr(self, name), positive=False)


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
        check_seconds("LeasePolicy.poll_interval", self.poll_interval, positive=True)


DEFAULT_RETRY = RetryPolicy()
DEFAULT_LEASE = LeasePolicy()
