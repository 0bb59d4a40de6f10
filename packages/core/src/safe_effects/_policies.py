"""Small frozen policy values for the executor: how long to retry, how long to wait for another worker."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounds for retrying definitive-retryable refusals (429, refused connection) inside the boundary."""

    max_attempts: int = 4
    max_total_seconds: float = 30.0
    initial_wait: float = 0.2
    max_wait: float = 5.0  # longest wait between attempts; a longer Retry-After defers the call instead


@dataclass(frozen=True, slots=True)
class LeasePolicy:
    """A claim's lease must outlast the provider call (timeouts x attempts); a stale lease means worker lost."""

    duration: timedelta = timedelta(seconds=120)
    wait_for_other: timedelta = timedelta(seconds=15)  # bound on waiting for a concurrent holder
    poll_interval: float = 0.05


DEFAULT_RETRY = RetryPolicy()
DEFAULT_LEASE = LeasePolicy()
