"""Holding each worker's clock to the ledger database's, so decisions that compare clocks stay sound.

Workers on several hosts share one PostgreSQL ledger and each stamps times by its own clock. A lease's end, a
key's replay window (counted from the first send, by the claimer's clock) and an event's rejection window are
judged by another process's clock than the one that wrote them. Measured on 2026-11-30: a claimer 40 minutes
fast and a retrier 30 minutes slow replayed a Stripe key 24 h 05 min after the send, past Stripe's 24 h, and
charged twice; a worker 3 minutes fast took over a live call. So a worker measures its clock against the
database's, now and then, and refuses to write while the two differ by more than a bound: every worker within
``max_skew`` of the database is within twice that of every other, far inside the 1 h replay margin and (see
``_admission.refuse_short_lease``) inside the lease.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta

from ._clock import Clock
from ._errors import ClockSkewed
from ._store import Store

_log = logging.getLogger("safe_effects")

DEFAULT_MAX_CLOCK_SKEW = timedelta(seconds=30)
RECHECK_AFTER = 60.0  # seconds between measurements while the clocks agree: one query a minute per worker
RECHECK_REFUSED_AFTER = 5.0  # while they do not: a refused worker learns within seconds that its clock is fixed


class ClockSkewGuard:
    """Measures ``clock`` against ``store.database_time()`` at most once per recheck interval (monotonic time,
    which a clock step does not move) and raises :class:`ClockSkewed` while they disagree beyond ``max_skew``.

    A store without a clock of its own (SQLite: one host) is never measured. The offset counts half the query's
    round trip in the worker's favour, so a slow database is not mistaken for a wrong clock.
    """

    def __init__(
        self, store: Store, clock: Clock, max_skew: timedelta | None, *, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._store, self._clock, self._max_skew, self._monotonic = store, clock, max_skew, monotonic
        self._next_check = float("-inf")
        self._refusal: ClockSkewed | None = None
        self._logged_at = float("-inf")  # when a refusal was last logged: once a minute while it lasts
        self._lock = threading.Lock()

    @property
    def max_skew(self) -> timedelta | None:
        """The bound, or None when nothing is checked (turned off, or a store that shares this host's clock)."""
        return self._max_skew

    def check(self) -> None:
        """Return while this worker's clock agrees with the database's; else :class:`ClockSkewed`."""
        if self._max_skew is None:
            return
        if self._monotonic() >= self._next_check:
            with self._lock:
                if self._monotonic() >= self._next_check:  # another thread may have measured meanwhile
                    self.measure()
        if (refusal := self._refusal) is not None:
            raise ClockSkewed(str(refusal), offset=refusal.offset)

    def measure(self) -> None:
        """Measure now and keep the verdict for :meth:`check` (the ledger does it once as it opens, so that its
        first call does not wait for the query); a refusal is logged, not raised."""
        max_skew = self._max_skew
        if max_skew is None:
            return
        before = self._clock()
        database = self._store.database_time()
        after = self._clock()
        if database is None:
            self._max_skew = None
            return
        half_trip = (after - before) / 2
        offset = (before + half_trip - database).total_seconds()
        beyond_doubt = abs(offset) - abs(half_trip.total_seconds())
        if beyond_doubt <= max_skew.total_seconds():
            if self._refusal is not None:
                _log.info(
                    "this worker's clock is within %g s of the ledger database's again (%+.1f s): it writes and "
                    "sends again", max_skew.total_seconds(), offset,
                )  # fmt: skip
            self._refusal, self._next_check = None, self._monotonic() + RECHECK_AFTER
            return
        was_refused = self._refusal is not None
        self._refusal = ClockSkewed(
            f"this worker's clock is {offset:+.1f} s off the ledger database's (at most "
            f"{max_skew.total_seconds():g} s allowed): leases, key replay windows and event windows compare times "
            "that different workers wrote, so this worker writes and sends nothing until its clock is right again "
            "(check the host's time sync: chrony, ntpd, systemd-timesyncd)",
            offset=offset,
        )
        now = self._monotonic()
        self._next_check = now + RECHECK_REFUSED_AFTER
        if not was_refused or now - self._logged_at >= RECHECK_AFTER:  # measured every 5 s: said once a minute
            self._logged_at = now
            _log.error("%s", self._refusal)
