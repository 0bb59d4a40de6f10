"""psycopg_pool's ``ConnectionPool``, but a wait for a connection that is cut short gives its place up.

psycopg_pool (3.2 and 3.3) lets an exception that is not an ``Exception`` out of a caller's wait for a
connection, yet leaves the caller queued: gevent's ``Timeout`` (a Celery gevent worker's time limit), a killed
greenlet, Dramatiq's time limit, ``KeyboardInterrupt``. The next connection given back goes to that caller,
who is gone, and is lost with it. Each such interruption took one connection from the pool for good; once
all were gone, every call of the process waited out its timeout as :class:`LedgerUnavailable`.

The pool queues each waiting caller in its private ``_waiting`` deque; the subclass here swaps that deque
for one that also tells the caller's context which waiter it queued, and on an interruption takes that waiter
out of the queue, or gives back the connection it was handed meanwhile. Should a later psycopg_pool queue
its callers otherwise, nothing is learnt, and the pool behaves as psycopg_pool's own.
"""

from __future__ import annotations

import contextlib
from collections import deque
from contextvars import ContextVar
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg.rows import TupleRow
    from psycopg_pool import ConnectionPool

# the waiter the pool queued for this context's call (greenlets have a context each, as threads do)
_queued: ContextVar[Any] = ContextVar("safe_effects_pg_queued_waiter", default=None)


class _Waiters(deque[Any]):
    """The pool's queue of waiting callers, noting in the caller's context the waiter it queued."""

    def append(self, waiter: Any) -> None:
        _queued.set(waiter)
        super().append(waiter)


@lru_cache(maxsize=1)
def interrupt_safe_pool() -> type[ConnectionPool[Connection[TupleRow]]]:
    """The pool class, made on first use (psycopg_pool is an optional dependency)."""
    from psycopg_pool import ConnectionPool, PoolTimeout  # noqa: PLC0415  # optional extra

    class InterruptSafePool(ConnectionPool["Connection[TupleRow]"]):
        def __init__(self, *args: Any, open: bool = True, **kwargs: Any) -> None:  # psycopg's name
            super().__init__(*args, open=False, **kwargs)
            self._waiting = _Waiters()  # before any caller can queue
            if open:
                self.open()

        def _getconn_unchecked(self, timeout: float) -> Connection[TupleRow]:
            token = _queued.set(None)
            try:
                return super()._getconn_unchecked(timeout)
            except Exception:
                raise  # psycopg_pool's own handling: the waiter was told
            except BaseException:
                self._give_up(_queued.get())
                raise
            finally:
                _queued.reset(token)

        def _give_up(self, waiter: Any) -> None:
            """Take an interrupted caller's ``waiter`` out of the queue; a connection already handed to it
            goes back to the pool."""
            if waiter is None:  # never queued: a connection was ready, or the pool refused first
                return
            with self._lock, contextlib.suppress(ValueError):  # ValueError: taken off by a connection given back
                self._waiting.remove(waiter)
            if waiter.fail(PoolTimeout("the wait for a connection was interrupted")) or waiter.conn is None:
                return  # nothing was handed to it, and from now on nothing will be
            waiter.conn._pool = self  # as getconn marks what it hands out: putconn takes back only its own
            self.putconn(waiter.conn)

    return InterruptSafePool
