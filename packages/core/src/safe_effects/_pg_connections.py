"""The PostgreSQL store's connections: how each is configured, handed out alive, swept after a restart, and
how psycopg's errors on them become the ledger's typed ones (:class:`LedgerUnavailable`, :class:`LedgerClosed`,
:class:`LedgerCorrupt`, :class:`StorePermissionDenied`).

``_postgres.py`` composes the statements and runs them on what :class:`Checkout` hands out.
"""

from __future__ import annotations

import atexit
import logging
import os
import select
import threading
import time
import weakref
from functools import lru_cache, partial
from typing import TYPE_CHECKING, Any, Protocol, cast

from ._errors import InvalidInput, LedgerClosed, LedgerCorrupt, LedgerUnavailable, StorePermissionDenied
from ._numbers import check_seconds
from ._passwords import masked
from ._pg_pooling import TRANSACTION_POOLING, check_pooling, connection_options, refused_by_pooler
from ._pg_refusals import tables_refused

if TYPE_CHECKING:
    from psycopg import Connection, Cursor, Error
    from psycopg.rows import TupleRow
    from psycopg_pool import ConnectionPool

_log = logging.getLogger("safe_effects")
_PING_AFTER_IDLE = 5.0  # seconds a pooled connection may sit unused before it is checked on checkout
_CHECKOUT_ROUNDS = 3  # dead connections met in a row on checkout before taking the pool's next as it is
# every pool a store opened: the process that opened it (a forked child inherits its parent's) and the schema
_pools_opened: weakref.WeakKeyDictionary[ConnectionPool[Any], tuple[int, str]] = weakref.WeakKeyDictionary()


def close_at_exit(pool: ConnectionPool[Any], schema: str) -> None:
    """Have ``pool`` closed when this process exits, if nothing closed it before (see ``_close_pools_left_open``)."""
    _pools_opened[pool] = (os.getpid(), schema)


@atexit.register
def _close_pools_left_open() -> None:
    """Close, at exit, the pools of stores this process opened and never closed: a script that ends without
    ``ledger.close()`` otherwise waits 5 s per pool thread on Python 3.13 (psycopg_pool's ``__del__`` cannot
    join its threads once the interpreter is finalizing; 3.14 raises there). A parent's pools, inherited by a
    fork, are the parent's to close: closing one ends the parent's server sessions."""
    for pool, (opened_by, schema) in list(_pools_opened.items()):
        if opened_by == os.getpid() and not pool.closed:
            _log.debug("closing the pool of the PostgreSQL ledger (schema %s) left open at exit", schema)
            pool.close()


class PoolSweep:
    """``pool.check()`` on a thread of its own, one at a time: every idle connection pinged, the dead replaced.

    After a restart or failover every idle connection is dead. Found one by one by the pool's ``check``, each
    cost a growing backoff (1, 2, 4, 8 s...) and a grown pool's next call timed out; swept in the caller's
    thread, a silent network path made the caller wait out one ping per idle connection. Here a caller that
    met a dead connection waits for the sweep only as long as its own checkout may take.
    """

    def __init__(self, pool: ConnectionPool[Connection[TupleRow]]) -> None:
        self._pool = pool
        self._lock = threading.Lock()
        self._done: threading.Event | None = None  # the running sweep's, None when none runs

    def wait(self, timeout: float) -> None:
        """Start a sweep unless one runs, and wait for it at most ``timeout`` seconds."""
        with self._lock:
            if self._done is None:
                self._done = threading.Event()
                threading.Thread(target=self._run, args=(self._done,), name="safe-effects-sweep", daemon=True).start()
            done = self._done
        done.wait(timeout)

    def _run(self, done: threading.Event) -> None:
        try:
            self._pool.check()
        except Exception as error:  # a pool closed meanwhile: nothing left to sweep
            _log.debug("pool sweep ended early: %s", error)
        finally:
            with self._lock:
                self._done = None
            done.set()


class Checkout:
    """``pool.connection()`` for this store's autocommit connections, as a plain class.

    The pool's own context manager is a generator that also commits on exit; every statement here commits
    itself (or runs in an explicit ``conn.transaction()``), and ``putconn`` rolls back whatever is left open
    and discards a broken connection. Two checkouts per effect made the difference measurable.

    A database that does not answer or refuses writes for now (see :func:`unavailable`: connection lost,
    server restarting, statement cancelled, pool timeout or closed, a read-only standby) becomes
    :class:`LedgerUnavailable`, one typed error for callers of either store. A role refused a table (granted
    DML before an upgrade made a table, say) is :class:`StorePermissionDenied`, naming the grant to ask for.
    """

    __slots__ = ("_conn", "_down", "_pool", "_schema", "_sweep")

    def __init__(
        self,
        pool: ConnectionPool[Connection[TupleRow]],
        sweep: PoolSweep,
        down: tuple[type[Exception], ...],
        schema: str,
    ) -> None:
        self._pool, self._sweep, self._down, self._schema = pool, sweep, down, schema

    def __enter__(self) -> Connection[TupleRow]:
        if self._pool.closed:  # not an outage to wait out: a psycopg PoolClosed would read as one
            raise self._closed()
        try:
            self._conn = self._live_connection()
        except self._down as error:
            if self._pool.closed:  # closed while this call waited for a connection
                raise self._closed() from error
            raise LedgerUnavailable(f"the PostgreSQL ledger gave no connection: {error}") from error
        return self._conn

    def _closed(self) -> LedgerClosed:
        return LedgerClosed(f"the PostgreSQL ledger (schema {self._schema}) is closed")

    def _live_connection(self) -> Connection[TupleRow]:
        """A pooled connection that answered its ping if it was suspect (see :func:`_ping_if_suspect`), within
        the pool's ``timeout`` in all; a dead one starts a sweep of the pool (:class:`PoolSweep`)."""
        deadline = time.monotonic() + self._pool.timeout
        for _ in range(_CHECKOUT_ROUNDS):
            conn = self._pool.getconn(timeout=self._left(deadline))
            try:
                _ping_if_suspect(conn)
            except self._down:
                self._pool.putconn(conn)  # broken: the pool discards it and connects anew
                self._sweep.wait(self._left(deadline))
                continue
            except BaseException:  # a job's time limit, an interrupt: the connection goes back, not astray
                self._pool.putconn(conn)
                raise
            return conn
        return self._pool.getconn(timeout=self._left(deadline))  # a dead one fails its statement, typed

    def _left(self, deadline: float) -> float:
        """Seconds the checkout may still take; none left is :class:`LedgerUnavailable`."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise LedgerUnavailable(
                f"the PostgreSQL ledger gave no live connection within {self._pool.timeout:g} s: the ones it had "
                "were lost (a restart, a failover, a network that stopped answering) and none came back in time"
            )
        return left

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, _: object) -> None:
        refused = None
        if error is not None:
            refused = refused_by_pooler(error) or _refused(error, self._conn, self._schema)
        cast("Pooled", self._conn).returned_at = time.monotonic()
        self._pool.putconn(self._conn)
        if refused is not None:
            raise refused from error
        if isinstance(error, self._down):
            raise LedgerUnavailable(f"the PostgreSQL ledger did not answer: {error}") from error
        if isinstance(error, _corrupted()):
            raise LedgerCorrupt(
                f"the PostgreSQL ledger (schema {self._schema}) holds damaged data ({primary(error)}): nothing was "
                "written; stop its workers and restore it from a backup (docs/operations.md, Backups and restores)"
            ) from error


def _refused(error: BaseException, conn: Connection[Any], schema: str) -> StorePermissionDenied | None:
    """``error`` as :class:`StorePermissionDenied` if the server refused the role a privilege, else None."""
    if not isinstance(error, denied()):
        return None
    return tables_refused(primary(error), conn.info.user, schema)


def _ping_if_suspect(conn: Connection[Any]) -> None:
    """Ping a connection that may have lost its server before it is used.

    Suspect are one with input waiting while idle (a terminated backend or a restarting server sends its
    FATAL notice and closes the socket: one ``select``, no round trip) and one idle for a while (a silent
    network drop). A connection in steady use is handed out as it is.
    """
    idle = time.monotonic() - cast("Pooled", conn).returned_at > _PING_AFTER_IDLE
    if idle or _input_waiting(conn.pgconn.socket):
        conn.execute("")


def _input_waiting(fd: int) -> bool:
    """Whether ``fd`` has input to read, now. ``poll`` where there is one: ``select`` refuses an fd >= 1024,
    which a busy process's sockets reach."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([fd], [], [], 0)[0])


_MAX_TIMEOUT = (2**31 - 1) / 1000  # seconds: PostgreSQL's largest statement_timeout


class Configure:
    """What every new pool connection is set to before its first use."""

    __slots__ = ("pool_mode", "statement_timeout")

    def __init__(self, statement_timeout: float | None, pool_mode: str) -> None:
        if statement_timeout is not None:
            # PostgreSQL counts whole milliseconds up to a 32-bit int: 0 would turn the timeout off, more is refused
            # at every connection
            seconds = check_seconds("statement_timeout", statement_timeout, positive=True, at_most=_MAX_TIMEOUT)
            if seconds < 0.001:
                raise InvalidInput(
                    f"statement_timeout must be at least 0.001 seconds (1 ms), got {statement_timeout!r}"
                )
        self.statement_timeout = None if statement_timeout is None else f"{round(statement_timeout * 1000)}ms"
        self.pool_mode = pool_mode

    def __call__(self, conn: Connection[Any]) -> None:
        if self.pool_mode == TRANSACTION_POOLING:
            return  # a setting would land on a server session other clients share: see _pg_pooling
        # the conditional writes rely on READ COMMITTED re-checks, whatever the database's or role's default
        # (under SERIALIZABLE, two racing claims end in a serialization failure, not a wait)
        conn.execute("SET default_transaction_isolation TO 'read committed'")
        # psycopg reads timestamps only in ISO style: a database or role set to German or SQL style would make
        # every record unreadable (its writes would still work)
        conn.execute("SET DateStyle TO 'ISO'")
        if self.statement_timeout is not None:
            # a statement stuck behind someone else's lock ends as LedgerUnavailable instead of holding the
            # worker forever; a timeout the URL's options, PGOPTIONS, the role or the database set is kept
            conn.execute(
                "SELECT set_config('statement_timeout', %s, false) WHERE current_setting('statement_timeout') = '0'",
                (self.statement_timeout,),
            )


class Pooled(Protocol):
    """What ``store_connection``'s class adds to a psycopg connection."""

    writer: Cursor[Any] | None
    returned_at: float


@lru_cache(maxsize=1)
def store_connection() -> type[Connection[TupleRow]]:
    """The pool's connection class, made on first use (psycopg is an optional dependency)."""
    import psycopg  # noqa: PLC0415  # optional extra: imported only when a PostgresStore is made
    from psycopg.rows import TupleRow  # noqa: PLC0415  # idem

    class StoreConnection(psycopg.Connection[TupleRow]):
        """A pool connection that keeps one cursor for the claim and confirm statements (``_writer``)."""

        writer: psycopg.Cursor[TupleRow] | None = None
        returned_at: float = 0.0  # monotonic time of its last return to the pool (0: never used, pinged)

    return StoreConnection


# libpq settings that end a connection whose network path went silent (a dropped route, a failover that left
# no one to answer): unacknowledged data for 30 s, or an idle socket unanswered for 30 + 3 x 10 s. Without them
# a call hangs for the kernel's ~15 minutes, past every bound the store sets (statement_timeout is the
# server's, and a silent server never sees the statement). A conninfo that names one keeps its own.
_SILENT_PATH_BOUNDS: dict[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,  # milliseconds; where the system has TCP_USER_TIMEOUT (Linux)
}


def pool_connection_options(conninfo: str, connect_timeout: int, configure: Configure) -> dict[str, Any]:
    """The pool's connection options, tried once before the pool starts.

    A wrong URL or a database that is down then fails the open at once, as one typed error naming libpq's
    cause, instead of a pool that retries in the background, logging each attempt, until the first call
    times out. A pool mode that does not match the path to the server is refused here too (see
    ``_pg_pooling``).
    """
    import psycopg  # noqa: PLC0415  # optional extra, present once a PostgresStore is made
    from psycopg.conninfo import conninfo_to_dict  # noqa: PLC0415  # idem

    try:
        given = conninfo_to_dict(conninfo)
        defaults = _SILENT_PATH_BOUNDS | {"connect_timeout": connect_timeout}
        if "PGCONNECT_TIMEOUT" in os.environ:
            del defaults["connect_timeout"]
        options: dict[str, Any] = {"autocommit": True} | {k: v for k, v in defaults.items() if k not in given}
        options |= connection_options(configure.pool_mode)
        first = psycopg.connect(conninfo, **options)
    except psycopg.ProgrammingError as error:  # libpq refused the conninfo itself (an unknown option)
        raise InvalidInput(f"invalid PostgreSQL conninfo: {one_line(error, conninfo)}") from _cause(error, conninfo)
    except psycopg.OperationalError as error:
        raise _unreachable(error, conninfo) from _cause(error, conninfo)
    try:
        check_pooling(
            first, partial(psycopg.connect, conninfo, **options), configure.pool_mode, configure.statement_timeout
        )
    except psycopg.OperationalError as error:
        raise _unreachable(error, conninfo) from _cause(error, conninfo)
    return options


def _unreachable(error: Exception, conninfo: str) -> LedgerUnavailable:
    return LedgerUnavailable(f"the PostgreSQL ledger cannot be reached: {one_line(error, conninfo)}")


def _cause(error: Exception, conninfo: str) -> Exception | None:
    """``error`` to chain as the cause, or None where its text quotes the conninfo's password: a traceback
    prints a cause whole, and psycopg quotes what it could not resolve (``failed to resolve host 'pw@db'``)."""
    return error if masked(str(error), conninfo) == str(error) else None


def one_line(error: Exception, conninfo: str = "") -> str:
    """libpq's messages run over several lines (a hint on the next); a log or CLI line needs one. libpq quotes
    a conninfo token it refused verbatim, the password too: any form of ``conninfo``'s password is ``***``."""
    return masked(" ".join(str(error).split()), conninfo)


def primary(error: Error) -> str:
    """The server's own one-line message (``permission denied for table x``), without the statement it quotes."""
    return error.diag.message_primary or one_line(error)


@lru_cache(maxsize=1)
def unavailable() -> tuple[type[Exception], ...]:
    """psycopg's errors that mean the ledger cannot write now: a database that does not answer (pool timeouts
    and closed pools included), or one that refuses writes for now (a failover onto a standby,
    ``default_transaction_read_only``). Made on first use: psycopg is an optional dependency."""
    import psycopg  # noqa: PLC0415  # optional extra, present once a PostgresStore is made

    return (psycopg.OperationalError, psycopg.InterfaceError, psycopg.errors.ReadOnlySqlTransaction)


@lru_cache(maxsize=1)
def denied() -> type[Error]:
    """psycopg's error for a privilege the role lacks. Made on first use: psycopg is an optional dependency."""
    import psycopg  # noqa: PLC0415  # optional extra, present once a PostgresStore is made

    return psycopg.errors.InsufficientPrivilege


@lru_cache(maxsize=1)
def _corrupted() -> tuple[type[Error], ...]:
    """psycopg's errors for data that fails the server's checks (SQLSTATE XX001 and XX002). Made on first use:
    psycopg is an optional dependency."""
    import psycopg  # noqa: PLC0415  # optional extra, present once a PostgresStore is made

    return (psycopg.errors.DataCorrupted, psycopg.errors.IndexCorrupted)
