"""One string names a store, so a CLI, a worker process and a test can all open the same ledger."""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit, urlunsplit

from ._errors import InvalidInput
from ._postgres import PostgresStore
from ._sqlite import SQLiteStore
from ._store import Store

SQLITE_PREFIX = "sqlite:///"


def split_schema(url: str) -> tuple[str, str | None]:
    """A PostgreSQL URL without its ``schema`` parameter (libpq refuses it), and the last schema named.

    Every other parameter is kept byte for byte: re-encoding them would turn ``%20`` into ``+``, which libpq
    (percent-decoding only) would pass on as a plus sign. The schema is percent-decoded as libpq would.
    """
    parts = urlsplit(url)
    kept: list[str] = []
    schemas: list[str] = []
    for item in parts.query.split("&") if parts.query else []:
        name, _, value = item.partition("=")
        if unquote(name) == "schema":
            schemas.append(unquote(value))
        else:
            kept.append(item)
    return urlunsplit(parts._replace(query="&".join(kept))), schemas[-1] if schemas else None


def open_store(url: str) -> Store:
    """``sqlite:///relative.db``, ``sqlite:////abs/path.db`` or ``postgresql://...[?schema=name]``."""
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
        conninfo, schema = split_schema(url)
        return PostgresStore(conninfo) if schema is None else PostgresStore(conninfo, schema=schema)
    raise InvalidInput(f"unknown store URL scheme {scheme!r}: use sqlite:/// or postgresql://")


_PASSWORD_PARAM = re.compile(r"(password=)[^&\s]*", re.IGNORECASE)


def redacted(url: str) -> str:
    """``url`` fit for a message or a log: a password in it (``user:secret@``, ``password=``) shown as ``***``."""
    parts = urlsplit(url)
    if parts.password is not None:
        user = parts.username or ""
        host = parts.netloc.rpartition("@")[2]
        url = urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
    return _PASSWORD_PARAM.sub(r"\1***", url)
