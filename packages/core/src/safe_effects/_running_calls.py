"""The ledger's calls in progress, counted so that ``close()`` lets each write the answer it already received.

A service that closes its ledger on shutdown while request threads are still inside a call (an async app's
``to_thread`` calls, a thread pool) would otherwise close the store under them: the provider acted, and the
answer in hand is never written.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from ._clock import system_sleep
from ._errors import LedgerClosed

P = ParamSpec("P")
T = TypeVar("T")

CLOSED = "the ledger is closed: this call was refused before anything was read, written or sent; open a new Ledger"
PATCHED_SINCE = (
    "the threading module was patched (gevent's or eventlet's monkey patching) after this ledger was opened: its "
    "thread-locals and a PostgreSQL pool's threads and locks are the unpatched ones, so a call waiting on one "
    "blocks every greenlet; open the ledger after patching (gunicorn: as the worker loads the app or in "
    "post_worker_init, not in post_fork or with --preload; docs/adopting.md step 10)"
)
_log = logging.getLogger("safe_effects")
_POLL = 0.01  # seconds between two looks at the running calls while close() waits for them


class RunningCalls:
    """Calls in progress, across threads. Once closing, a new call is refused; a call a running one makes on
    its own thread (``compensate`` running ``execute``) goes on, or the running call would break halfway.

    Each thread's (or greenlet's) nesting is kept under one plain lock, whose acquire and release are C code:
    an exception raised into a thread asynchronously (Dramatiq's time limit, a signal handler) cannot leave it
    held, as it could a ``threading.Condition``, whose ``__enter__`` and ``__exit__`` are Python (every other
    call of the ledger then waited for good: the interruption review). ``close()`` polls instead of waiting on
    a condition, with a sleep looked up at each call, so it also waits cooperatively under gevent.
    """

    __slots__ = ("_closing", "_depths", "_lock", "_made_with", "_sending", "_warned")

    def __init__(self, *, closing: bool = False) -> None:
        self._lock = threading.Lock()
        self._depths: dict[int, int] = {}  # a running thread's (or greenlet's) id -> its nesting
        self._sending: dict[int, tuple[str, str]] = {}  # a running thread's id -> (tenant, intent) it sends
        self._closing = closing
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
        me = threading.get_ident()
        with self._lock:
            depth = self._depths.get(me, 0)
            if depth == 0 and self._closing:
                raise LedgerClosed(CLOSED)
            self._depths[me] = depth + 1

    def sending(self, tenant: str, intent_key: str) -> None:
        """Note the intent this thread's call sends now: :meth:`close` names it if the call is still running
        when the wait ends. One dict store, no lock: it is on every effect's path."""
        self._sending[threading.get_ident()] = (tenant, intent_key)

    def leave(self) -> None:
        """Undo this thread's :meth:`enter`; nothing for a thread that is not counted (its enter was refused,
        or cut short before it counted)."""
        me = threading.get_ident()
        with self._lock:
            depth = self._depths.pop(me, 0) - 1
            if depth > 0:
                self._depths[me] = depth
            else:
                self._sending.pop(me, None)

    def close(self, wait: float) -> list[tuple[str, str] | None]:
        """Refuse new calls, then wait up to ``wait`` seconds for the running ones (but this thread's own, when
        a call closes its own ledger); one entry per other thread still in a call: the (tenant, intent key)
        it is sending, or None for a call that sends nothing now (a wait for another's claim, a read)."""
        me = threading.get_ident()
        deadline = time.monotonic() + max(0.0, wait)
        with self._lock:
            self._closing = True
        while True:
            with self._lock:
                others = [self._sending.get(thread) for thread in self._depths if thread != me]
            left = deadline - time.monotonic()
            if not others or left <= 0:
                return others
            system_sleep(min(_POLL, left))


class _HasRunningCalls(Protocol):
    _calls: RunningCalls


H = TypeVar("H", bound=_HasRunningCalls)


def counted(method: Callable[Concatenate[H, P], T]) -> Callable[Concatenate[H, P], T]:
    """Run ``method`` as one of its object's running calls (refused with :class:`LedgerClosed` once closing)."""

    @functools.wraps(method)
    def running(self: H, /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:  # enter inside: an interruption just after it counted still leaves
            self._calls.enter()
            return method(self, *args, **kwargs)
        finally:
            self._calls.leave()

    return running
