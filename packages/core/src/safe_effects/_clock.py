"""Time, injectable: the executor, stores and fakes all ask a clock, so tests can jump past a window."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def system_clock() -> datetime:
    """Timezone-aware UTC now."""
    return datetime.now(UTC)


def system_sleep(seconds: float) -> None:
    """``time.sleep``, looked up at each call: a ledger built before gevent's ``monkey.patch_all()`` (gunicorn's
    ``--preload``) still waits cooperatively, where a default of ``time.sleep`` itself kept the blocking one
    and a wait for another holder of a key froze every greenlet (the gevent review)."""
    time.sleep(seconds)
