"""Fixtures every test folder shares: a store per backend, and a URL child processes can open."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from safe_effects import Ledger, Store, open_store

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture(scope="session")
def pg_url() -> str:
    """The test PostgreSQL; unreachable fails under CI=true (it is mandatory there), else skips visibly."""
    import psycopg

    url = os.environ.get("SAFE_EFFECTS_TEST_PG_URL", DEFAULT_PG_URL)
    try:
        psycopg.connect(url, connect_timeout=3).close()
    except psycopg.Error as error:
        message = f"PostgreSQL at SAFE_EFFECTS_TEST_PG_URL={url!r} is unreachable: {error}"
        if os.environ.get("CI") == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return url


@pytest.fixture(
    params=[pytest.param("sqlite", id="sqlite"), pytest.param("postgres", id="postgres", marks=pytest.mark.postgres)]
)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def fresh_store_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], str]]:
    """Factory of URLs of new, unmigrated stores on ``backend``; their PostgreSQL schemas are dropped after."""
    schemas: list[str] = []

    def make() -> str:
        if backend == "sqlite":
            return f"sqlite:///{tmp_path / f'store-{uuid.uuid4().hex[:8]}.db'}"
        base: str = request.getfixturevalue("pg_url")
        schemas.append(f"se_test_{uuid.uuid4().hex[:12]}")
        return f"{base}{'&' if '?' in base else '?'}schema={schemas[-1]}"

    yield make
    if schemas:
        import psycopg
        from psycopg import sql

        with psycopg.connect(request.getfixturevalue("pg_url"), autocommit=True) as conn:
            for schema in schemas:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture
def store_url(fresh_store_url: Callable[[], str]) -> str:
    """A migrated store's URL for ``open_store``, e.g. in a child process."""
    url = fresh_store_url()
    store = open_store(url)
    store.migrate()
    store.close()
    return url


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """A migrated store: SQLite on a file in tmp_path, PostgreSQL in a schema of its own."""
    opened = open_store(store_url)
    yield opened
    opened.close()


@pytest.fixture
def open_ledger(store_url: str) -> Iterator[Callable[..., Ledger]]:
    """``Ledger.open(store_url, **options)`` for each worker a test needs; all closed after the test.

    A PostgreSQL pool left to the garbage collector warns (an error here) at a moment no test controls.
    """
    opened: list[Ledger] = []

    def make(**options: Any) -> Ledger:
        opened.append(Ledger.open(store_url, **options))
        return opened[-1]

    yield make
    for ledger in opened:
        ledger.close()
