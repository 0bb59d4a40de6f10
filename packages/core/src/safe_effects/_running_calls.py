"""The ledger's calls in progress, counted so that ``close()`` lets each write the answer it already received.

A service that closes its ledger on shutdown while request threads are still inside a call (an async app's
``to_thread`` calls, a thread pool) would otherwise close the store under them: the provider acted, and the
answer in hand is never written.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from ._errors import LedgerClosed

P = ParamSpec("P")
T = TypeVar("T")

CLOSED = "the ledger is closed: this call was refused before anything was read, written or sent; open a new Ledger"
PATCHED_SINCE = (
    "the threading module was patched (gevent's or eventlet's monkey patching) after this ledger was opened: its "
    "locks and thread-locals, and a PostgreSQL pool's threads, are the unpatched ones, so a call waiting on one "
    "blocks every greenlet and close() cannot count them; open the ledger after patching (gunicorn: as the worker "
    "loads the app or in post_worker_init, not in post_fork or with --preload; docs/adopting.md step 10)"
)
_log = logging.getLogger("safe_effects")


class RunningCalls:
    """Calls in progress, across threads. Once closing, a new call is refused; a call a running one makes on
    its own thread (``compensate`` running ``execute``) goes on, or the running call would break halfway."""

    __slots__ = ("_closing", "_condition", "_depth", "_made_with", "_running", "_warned")

    def __init__(self, *, closing: bool = False) -> None:
        self._condition = threading.Condition()
        self._running = 0
        self._closing = closing
        self._depth = threading.local()  # this thread's nesting: only its outermost call counts
        self._made_with = threading.local  # patched since (gevent), none of this ledger's primitives fit
        self._warned = False

    @property
    def closing(self) -> bool:
        return self._closing

    def renewed(self) -> RunningCalls:
        """For a forked child: none of the parent's calls run there; a closed ledger stays closed."""
        return RunningCalls(closing=self._closing)

    def enter(self) -> None:
        if threading.local is not self._made_with and not self._warned:
            self._warned = True
            _log.warning(PATCHED_SINCE)
        depth: int = getattr(self._depth, "n", 0)
        if depth == 0:
            with self._condition:
                if self._closing:
                    raise LedgerClosed(CLOSED)
                self._running += 1
        self._depth.n = depth + 1

    def leave(self) -> None:
        depth: int = self._depth.n - 1
        self._depth.n = depth
        if depth == 0:
            with self._condition:
                self._running -= 1
                if self._running == 0:
                    self._condition.notify_all()

    def close(self, wait: float) -> int:
        """Refuse new calls, then wait up to ``wait`` seconds for the running ones (but this thread's own, when
        a call closes its own ledger); how many other calls still run."""
        own = 1 if getattr(self._depth, "n", 0) else 0
        with self._condition:
            self._closing = True
            self._condition.wait_for(lambda: self._running <= own, timeout=max(0.0, wait))
            return self._running - own


class _HasRunningCalls(Protocol):
    _calls: RunningCalls


H = TypeVar("H", bound=_HasRunningCalls)


def counted(method: Callable[Concatenate[H, P], T]) -> Callable[Concatenate[H, P], T]:
    """Run ``method`` as one of its object's running calls (refused with :class:`LedgerClosed` once closing)."""

    @functools.wraps(method)
    def running(self: H, /, *args: P.args, **kwargs: P.kwargs) -> T:
        self._calls.enter()
        try:
            return method(self, *args, **kwargs)
        finally:
            self._calls.leave()

    return running
