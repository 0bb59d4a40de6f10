"""Named crash points in the effect path, so tests can kill a worker exactly where it hurts.

The executor hits ``before_dispatch``, ``after_response`` and ``during_receipt_persist`` itself. The two in
the middle, ``after_dispatch`` (the provider received the request) and ``after_provider_accept`` (the
provider committed the effect), happen on the provider's side of the wire: fakes hit them.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal


class CrashPoint(StrEnum):
    BEFORE_DISPATCH = "before_dispatch"
    AFTER_DISPATCH = "after_dispatch"
    AFTER_PROVIDER_ACCEPT = "after_provider_accept"
    AFTER_RESPONSE = "after_response"
    DURING_RECEIPT_PERSIST = "during_receipt_persist"


# the two points on the provider's side of the wire: its fake, not the executor, stops the worker there
PROVIDER_SIDE = (CrashPoint.AFTER_DISPATCH, CrashPoint.AFTER_PROVIDER_ACCEPT)


class SimulatedCrash(BaseException):
    """Raised at a crash point in ``raise`` mode; a BaseException so ``except Exception`` cannot swallow it."""

    def __init__(self, point: CrashPoint) -> None:
        self.point = point
        super().__init__(f"simulated crash at {point}")


CrashAction = Literal["raise", "sigkill"]


@dataclass(frozen=True, slots=True)
class CrashPlan:
    """Where to crash and how: raise :class:`SimulatedCrash`, or SIGKILL this very process.

    The plan remembers which of its points were hit, so a test can tell a point that never fired.
    """

    at: frozenset[CrashPoint] = frozenset()
    action: CrashAction = "raise"
    _hits: set[CrashPoint] = field(default_factory=set, init=False, compare=False, repr=False)

    @classmethod
    def crash_at(cls, *points: CrashPoint | str, action: CrashAction = "raise") -> CrashPlan:
        return cls(frozenset(CrashPoint(p) for p in points), action)

    @classmethod
    def from_env(cls) -> CrashPlan:
        """Read ``SAFE_EFFECTS_CRASH_AT`` (comma list) and ``SAFE_EFFECTS_CRASH_ACTION`` for worker processes."""
        points = [p for p in os.environ.get("SAFE_EFFECTS_CRASH_AT", "").split(",") if p]
        action = os.environ.get("SAFE_EFFECTS_CRASH_ACTION", "sigkill")
        if action not in ("raise", "sigkill"):
            raise ValueError(f"SAFE_EFFECTS_CRASH_ACTION must be raise or sigkill, not {action!r}")
        return cls.crash_at(*points, action=action)  # type: ignore[arg-type]

    @property
    def fired(self) -> frozenset[CrashPoint]:
        """The planned points that were hit (a raise or a kill happened there)."""
        return frozenset(self._hits)

    def unfired(self) -> list[CrashPoint]:
        """The planned points never hit, in crash-window order."""
        return [p for p in CrashPoint if p in self.at and p not in self._hits]

    def hit(self, point: CrashPoint) -> None:
        if point not in self.at:
            return
        self._hits.add(point)
        if self.action == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise SimulatedCrash(point)


NO_CRASH = CrashPlan()
