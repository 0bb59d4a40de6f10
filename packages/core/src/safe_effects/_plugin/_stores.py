"""A migrated store for one test: a SQLite file in the test's directory, or a PostgreSQL schema dropped after."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from safe_effects._errors import MissingDependency
from safe_effects._store_url import open_store

PG_URL_ENV = "SAFE_EFFECTS_TEST_PG_URL"


def on_ci() -> bool:
    """``CI`` set to true (GitHub Actions, GitLab, most others): PostgreSQL tests must run, never skip."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def without_schema(pg_url: str) -> str:
    """``pg_url`` minus any ``schema=`` parameter: a store URL may carry one, libpq refuses it."""
    parts = urlsplit(pg_url)
    query = [(name, value) for name, value in parse_qsl(parts.query, keep_blank_values=True) if name != "schema"]
    return urlunsplit(parts._replace(query=urlencode(query)))


def _drop_schema(pg_url: str, schema: str) -> None:
    try:
        import psycopg  # noqa: PLC0415  # optional extra, only for PostgreSQL stores
        from psycopg import sql  # noqa: PLC0415  # idem
    except ImportError as error:
        raise MissingDependency("psycopg", "postgres") from error
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@contextmanager
def temporary_store_url(kind: Literal["sqlite", "postgres"], directory: Path, pg_url: str | None) -> Iterator[str]:
    """Yield the URL of a fresh, migrated store; a PostgreSQL schema of its own is dropped afterwards."""
    name = f"se_plugin_{uuid.uuid4().hex[:12]}"
    base = without_schema(pg_url) if kind == "postgres" and pg_url else None  # the test's schema replaces any
    if kind == "sqlite":
        url = f"sqlite:///{directory / f'{name}.db'}"
    elif base:
        url = f"{base}{'&' if '?' in base else '?'}schema={name}"
    else:
        raise ValueError(f"a PostgreSQL store needs {PG_URL_ENV}")
    try:
        store = open_store(url)
        try:
            store.migrate()
        finally:
            store.close()
        yield url
    finally:
        if base:
            _drop_schema(base, name)  # connects without schema=, which libpq would refuse
