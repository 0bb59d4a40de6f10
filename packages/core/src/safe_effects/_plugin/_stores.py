"""A migrated store for one test: a SQLite file in the test's directory, or a PostgreSQL schema dropped after."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from safe_effects._errors import MissingDependency
from safe_effects._store_url import open_store

PG_URL_ENV = "SAFE_EFFECTS_TEST_PG_URL"


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
    drop_from = pg_url if kind == "postgres" else None
    if kind == "sqlite":
        url = f"sqlite:///{directory / f'{name}.db'}"
    elif pg_url:
        url = f"{pg_url}{'&' if '?' in pg_url else '?'}schema={name}"
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
        if drop_from:
            _drop_schema(drop_from, name)
