"""One string names a store, so a CLI, a worker process and a test can all open the same ledger."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ._errors import InvalidInput
from ._postgres import PostgresStore
from ._sqlite import SQLiteStore
from ._store import Store

SQLITE_PREFIX = "sqlite:///"


def open_store(url: str) -> Store:
    """``sqlite:///relative.db``, ``sqlite:////abs/path.db`` or ``postgresql://...[?schema=name]``."""
    scheme = url.partition("://")[0] if "://" in url else ""
    if scheme == "sqlite":
        if not url.startswith(SQLITE_PREFIX) or len(url) == len(SQLITE_PREFIX):
            raise InvalidInput(f"a SQLite store URL looks like sqlite:///path.db, got {url!r}")
        return SQLiteStore(url[len(SQLITE_PREFIX) :])
    if scheme in ("postgresql", "postgres"):
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        schemas = [value for name, value in query if name == "schema"]
        # libpq would refuse the unknown "schema" parameter, so it is taken out before connecting
        conninfo = urlunsplit(parts._replace(query=urlencode([(n, v) for n, v in query if n != "schema"])))
        if schemas:
            return PostgresStore(conninfo, schema=schemas[-1])
        return PostgresStore(conninfo)
    raise InvalidInput(f"unknown store URL scheme {scheme!r}: use sqlite:/// or postgresql://")
