"""Time, injectable: the executor, stores and fakes all ask a clock, so tests can jump past a window."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def system_clock() -> datetime:
    """Timezone-aware UTC now."""
    return datetime.now(UTC)
