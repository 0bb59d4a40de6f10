"""PostgreSQL behind a connection pooler: what ``pool_mode`` changes, and how a wrong one is caught.

A transaction-pooling pooler (PgBouncer's ``pool_mode = transaction``, RDS Proxy, Supavisor) hands each
transaction whichever server session is free, shared with other clients. Two things the store does by default
then break:

- server-side prepared statements: psycopg prepares a statement after a few runs and later runs it by name,
  on a session that may not have it, or has another statement under that name (PostgreSQL then runs the wrong
  statement if the parameter counts agree);
- session settings (``SET DateStyle`` and the rest, see ``_pg_connections.Configure``): they land on one server
  session, stay there for other clients, and are missing from the sessions this client gets next.

``pool_mode="transaction"`` makes no prepared statements and no session settings, and checks once, at open,
that the server's own defaults are what the ledger needs. The session mode checks that no pooler shares
sessions between clients, so a missing ``?pool_mode=transaction`` is refused at open instead of failing (or
worse) on the first prepared statement.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._errors import InvalidInput, StoreNotReady

if TYPE_CHECKING:
    from psycopg import Connection

SESSION_POOLING = "session"  # a direct connection, or a pooler that gives each client a session of its own
TRANSACTION_POOLING = "transaction"
POOL_MODES = (SESSION_POOLING, TRANSACTION_POOLING)
_HOW_TO_SET = "pool_mode=transaction among the store URL's parameters, or PostgresStore(..., pool_mode='transaction')"

_log = logging.getLogger("safe_effects")


def checked_pool_mode(pool_mode: object) -> str:
    """``pool_mode`` if the store supports it, else :class:`InvalidInput` before anything is connected."""
    if pool_mode not in POOL_MODES:
        raise InvalidInput(
            f"pool_mode must be 'session' (a direct connection, or a pooler in session mode) or 'transaction' "
            f"(a pooler in transaction mode, such as PgBouncer's pool_mode = transaction), got {pool_mode!r}; "
            "statement pooling cannot hold the store's multi-statement transactions"
        )
    return str(pool_mode)


def connection_options(pool_mode: str) -> dict[str, Any]:
    """psycopg connection options for ``pool_mode``: no server-side prepared statements behind a pooler."""
    return {"prepare_threshold": None} if pool_mode == TRANSACTION_POOLING else {}


def check_pooling(
    first: Connection[Any], connect: Callable[[], Connection[Any]], pool_mode: str, statement_timeout: str | None
) -> None:
    """Refuse a store whose ``pool_mode`` does not match the path to the server (see the module docstring).

    ``first`` is an open autocommit connection, closed here; ``connect()`` opens another like it.
    """
    with first:
        if pool_mode == TRANSACTION_POOLING:
            _check_server_defaults(first, statement_timeout)
            return
        marker = uuid.uuid4().hex
        first.execute("SELECT set_config('safe_effects.pool_probe', %s, false)", (marker,))
    if _seen_from(connect, marker):
        raise StoreNotReady(
            "a connection pooler hands the session one client left to the next without resetting it (a setting "
            "made on one connection was seen from the next): PgBouncer in transaction mode, or in session mode with "
            "an empty server_reset_query. The store's prepared statements and session settings would meet other "
            f"clients' sessions; open the store with {_HOW_TO_SET}"
        )


def _seen_from(connect: Callable[[], Connection[Any]], marker: str) -> bool:
    """Whether a session setting the connection just closed made shows on the next one.

    Directly, or through a session pooler (which resets a session its client left), it never does. A
    transaction pooler hands the next client the session the last one used (PgBouncer reuses the most recently
    used), setting and all; so does a session pooler whose reset is turned off, where psycopg's prepared
    statements would meet the last client's of the same name. A pooler that hands out another session, or
    resets each one (``server_reset_query_always``), passes this check; then :func:`refused_by_pooler` names
    the cause at the first statement that meets it. One connection at a time, so a pooler with a single server
    session, or a server one connection short of its limit, opens as well.
    """
    with connect() as second, second.transaction():  # one transaction: one server session, even pooled
        row = second.execute("SELECT current_setting('safe_effects.pool_probe', true)").fetchone()
        second.execute("RESET safe_effects.pool_probe")  # where it was seen, others share the session: clear it
    return row is not None and row[0] == marker


def _check_server_defaults(conn: Connection[Any], statement_timeout: str | None) -> None:
    """Behind a transaction pooler the store sets nothing per session: the server's defaults must do."""
    row = conn.execute(
        "SELECT current_setting('default_transaction_isolation'), current_setting('DateStyle'), "
        "current_setting('statement_timeout'), current_user"
    ).fetchone()
    assert row is not None
    isolation, date_style, server_timeout, role = row
    if isolation != "read committed":
        # the conditional writes rely on READ COMMITTED's re-check of a conflicting row
        raise StoreNotReady(
            f"default_transaction_isolation is {isolation!r} and, behind a transaction pooler, the store cannot set "
            f"it per session: run ALTER ROLE {_quoted(role)} SET default_transaction_isolation = 'read committed'"
        )
    if not date_style.startswith("ISO"):
        raise StoreNotReady(  # psycopg reads timestamps in ISO style only
            f"DateStyle is {date_style!r} and, behind a transaction pooler, the store cannot set it per session: "
            f"run ALTER ROLE {_quoted(role)} SET DateStyle = 'ISO, MDY'"
        )
    if statement_timeout is not None and server_timeout == "0":
        _warn_no_statement_timeout(role, statement_timeout)


@functools.cache
def _warn_no_statement_timeout(role: str, statement_timeout: str) -> None:
    """Once per process and role: every store a worker or CLI command opens would say it again."""
    _log.warning(
        "behind a transaction pooler the store cannot set statement_timeout per session, and the server sets "
        "none: a write stuck on a lock would hold its worker; run ALTER ROLE %s SET statement_timeout = '%s' "
        "(or set the pooler's query_timeout)",
        _quoted(role), statement_timeout,
    )  # fmt: skip


def _quoted(role: str) -> str:
    """``role`` as SQL names it in a command to copy: double-quoted, as any role name may be."""
    return '"' + role.replace('"', '""') + '"'


def refused_by_pooler(error: BaseException) -> StoreNotReady | None:
    """``error`` as :class:`StoreNotReady` if it is a prepared statement missing or replaced under this
    connection (a transaction pooler the open-time check did not see), else None."""
    import psycopg  # noqa: PLC0415  # optional extra, present once a PostgresStore is made

    errors = psycopg.errors
    replaced = isinstance(error, errors.ProtocolViolation) and "prepared statement" in str(error)
    if not (replaced or isinstance(error, errors.InvalidSqlStatementName | errors.DuplicatePreparedStatement)):
        return None
    return StoreNotReady(
        f"a prepared statement of this connection was missing or another one on the server ({error}): a "
        f"connection pooler in transaction mode sits between this store and PostgreSQL; open the store with "
        f"{_HOW_TO_SET}"
    )
