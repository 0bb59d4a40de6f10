"""One string names a store, so a CLI, a worker process and a test can all open the same ledger."""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import unquote, urlsplit, urlunsplit

from ._errors import InvalidInput
from ._pg_pooling import SESSION_POOLING
from ._postgres import DEFAULT_SCHEMA, PostgresStore
from ._sqlite import SQLiteStore
from ._store import Store

SQLITE_PREFIX = "sqlite:///"


class PostgresUrl(NamedTuple):
    """A PostgreSQL store URL read apart: the conninfo for libpq, and the store's own parameters."""

    conninfo: str  # the URL without the store's parameters (libpq refuses them)
    schema: str | None  # ``schema=``: the last one named, percent-decoded as libpq would
    pool_mode: str | None  # ``pool_mode=``: ``transaction`` behind a transaction-pooling pooler (PgBouncer)


_STORE_PARAMS = ("schema", "pool_mode")


def parse_postgres_url(url: str) -> PostgresUrl:
    """Take the store's own parameters (``schema``, ``pool_mode``) out of a PostgreSQL URL.

    Every other parameter is kept byte for byte: re-encoding them would turn ``%20`` into ``+``, which libpq
    (percent-decoding only) would pass on as a plus sign.
    """
    try:
        parts = urlsplit(url)
    except ValueError as bad:  # "Invalid IPv6 URL": said without the URL, which may hold a password
        raise InvalidInput(f"not a PostgreSQL URL: {bad}") from None
    kept: list[str] = []
    found: dict[str, str] = {}
    for item in parts.query.split("&") if parts.query else []:
        name, _, value = item.partition("=")
        if unquote(name) in _STORE_PARAMS:
            found[unquote(name)] = unquote(value)
        else:
            kept.append(item)
    conninfo = urlunsplit(parts._replace(query="&".join(kept)))
    return PostgresUrl(conninfo, found.get("schema"), found.get("pool_mode"))


def open_store(url: str) -> Store:
    """``sqlite:///relative.db``, ``sqlite:////abs/path.db`` or
    ``postgresql://...[?schema=name][&pool_mode=transaction]``."""
    if not isinstance(url, str):
        raise InvalidInput(f"a store URL must be a str, got {type(url).__name__}")
    if "\x00" in url:
        raise InvalidInput("a store URL holds a NUL character")
    scheme = url.partition("://")[0] if "://" in url else ""
    if scheme == "sqlite":
        if not url.startswith(SQLITE_PREFIX) or len(url) == len(SQLITE_PREFIX):
            raise InvalidInput(f"a SQLite store URL looks like sqlite:///path.db, got {url!r}")
        if "?" in url:  # it would be part of the file name, and the setting silently ignored
            raise InvalidInput(
                f"a SQLite store URL takes no parameters, got {url!r}: for a busy timeout build "
                "SQLiteStore(path, busy_timeout=...), migrate it and pass it to Ledger(store)"
            )
        return SQLiteStore(url[len(SQLITE_PREFIX) :])
    if scheme in ("postgresql", "postgres"):
        conninfo, schema, pool_mode = parse_postgres_url(url)
        return PostgresStore(
            conninfo,
            schema=DEFAULT_SCHEMA if schema is None else schema,
            pool_mode=SESSION_POOLING if pool_mode is None else pool_mode,
        )
    raise InvalidInput(f"unknown store URL scheme {scheme!r}: use sqlite:/// or postgresql://")
