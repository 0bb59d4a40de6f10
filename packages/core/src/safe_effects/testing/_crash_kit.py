"""Crash points for a test: plans for an in-process ledger, env for worker processes, traps on HTTP fakes.

The executor's own points (before_dispatch, after_response, during_receipt_persist) go in a
:class:`~safe_effects.CrashPlan`. The provider-side points happen inside a fake: ``after_dispatch`` when the
request arrived, ``after_provider_accept`` once it committed. A trap there either SIGKILLs a worker process
(``pid=``) or, for a caller in this process, drops the connection at that point (a hook cannot raise into
the caller's thread; a dropped connection is what a crashed provider looks like from there). Either way an
``after_provider_accept`` trap fires only on a request the provider committed (not on a refusal or a replay).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from safe_effects._crash import PROVIDER_SIDE, CrashAction, CrashPlan, CrashPoint

from ._http_fake import FakeHTTPServer, FakeRequest, Fault


def _executor_side(points: tuple[CrashPoint | str, ...]) -> list[CrashPoint]:
    """``points`` a ledger's CrashPlan can reach; a point only a fake sees would never fire there, so it is
    refused, as :meth:`CrashKit.at` refuses the executor's points."""
    checked = [CrashPoint(point) for point in points]
    for point in checked:
        if point in PROVIDER_SIDE:
            raise ValueError(
                f"{point} happens at the provider, where a ledger's crash plan never fires: use "
                f"safe_crash.at(fake.server, {point.value!r}, pid=...) instead"
            )
    return checked


@dataclass(eq=False)
class Trap:
    """One armed crash point on a fake: fires once, on the first request it matches."""

    point: CrashPoint
    method: str | None
    path_prefix: str
    pid: int | Callable[[], int] | None  # None: drop the connection instead of killing a process
    server: FakeHTTPServer = field(repr=False)
    fault: Fault | None = None  # the drop fault standing for this trap when there is no pid
    _fired: bool = field(default=False, repr=False)
    _armed: bool = field(default=True, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def fired(self) -> bool:
        """Did the trap act on a request? (A drop fault cleared from the fake's queue did not.)"""
        if self.fault is not None:
            return self.fault.times_fired > 0
        return self._fired

    def disarm(self) -> None:
        """After the test: a late request must not kill anything, nor be dropped by this trap's fault."""
        with self._lock:
            self._armed = False
        if self.fault is not None:
            self.server.remove_fault(self.fault)
        else:
            self.server.remove_hook(self._kill)

    def _kill(self, request: FakeRequest) -> None:
        if self.method not in (None, request.method) or not request.path.startswith(self.path_prefix):
            return
        with self._lock:
            if self._fired or not self._armed:
                return
            target = self.pid() if callable(self.pid) else self.pid
            if target is None or target == os.getpid():
                return  # never the test process itself: the trap stays unfired and teardown says so
            self._fired = True
        os.kill(target, signal.SIGKILL)


class CrashKit:
    """Build crash plans and arm traps; every trap is disarmed after the test and checked for having fired."""

    def __init__(self) -> None:
        self._traps: list[Trap] = []

    @staticmethod
    def plan(*points: CrashPoint | str, action: CrashAction = "raise") -> CrashPlan:
        """For ``Ledger(crash_plan=...)`` in this process: ``raise`` only (``sigkill`` would end the test run)."""
        _executor_side(points)
        if action != "raise":
            raise ValueError(
                f"refusing action={action!r} for a plan in the test process (sigkill would end the test run): "
                "use worker_env(...) for a worker process"
            )
        return CrashPlan.crash_at(*points, action=action)

    @staticmethod
    def worker_env(
        *points: CrashPoint | str, action: CrashAction = "sigkill", base: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """Environment for a worker process whose ledger uses ``CrashPlan.from_env()``."""
        names = ",".join(point.value for point in _executor_side(points))
        env = dict(os.environ if base is None else base)
        return {**env, "SAFE_EFFECTS_CRASH_AT": names, "SAFE_EFFECTS_CRASH_ACTION": action}

    def at(
        self,
        server: FakeHTTPServer,
        point: CrashPoint | str,
        *,
        pid: int | Callable[[], int] | None = None,
        method: str | None = "POST",
        path_prefix: str = "/",
    ) -> Trap:
        """Arm ``server`` (a fake's ``.server``) at a provider-side point: SIGKILL ``pid``, or drop the connection."""
        point = CrashPoint(point)
        if point not in PROVIDER_SIDE:
            raise ValueError(f"{point} happens in the executor, not in a fake: use plan({point.value!r}) instead")
        if pid is not None and not callable(pid) and pid == os.getpid():
            raise ValueError("refusing to SIGKILL the test process itself: pass the worker's pid")
        fault = None
        if pid is None:
            drop = Fault.drop_before_commit if point is CrashPoint.AFTER_DISPATCH else Fault.drop_after_commit
            committed_only = point is CrashPoint.AFTER_PROVIDER_ACCEPT  # like the pid form's commit hook
            fault = drop(method=method, path_prefix=path_prefix, committed_only=committed_only)
        trap = Trap(point, method, path_prefix, pid, server, fault)
        if fault is not None:
            server.inject(fault)
        elif point is CrashPoint.AFTER_DISPATCH:
            server.on_received(trap._kill)
        else:
            server.on_committed(trap._kill)
        self._traps.append(trap)
        return trap

    def pending(self) -> list[object]:
        """Traps that never fired; a dropping trap is listed as its fault, so a fake's own check does not repeat it."""
        return [t.fault if t.fault is not None else t for t in self._traps if not t.fired]

    def disarm(self) -> None:
        """Disarm every trap and take their drop faults off the fakes (a long-lived fake serves the next test)."""
        for trap in self._traps:
            trap.disarm()
