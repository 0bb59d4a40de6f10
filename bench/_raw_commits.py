"""The raw minimum every ledger benchmark divides by: one INSERT commit plus one UPDATE commit.

Same table, same indexes, same durability settings as the store (SQLite WAL + synchronous=FULL; PostgreSQL
defaults), on the ledger the benchmark uses, under a tenant of its own.
"""

from __future__ import annotations

import sqlite3
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

_COLUMNS = (
    "tenant_id, intent_key, provider, operation, request_digest, status, version, attempt_count, summary, "
    "created_at, updated_at"
)
_NOW = "2026-01-01T00:00:00.000000Z"


def _sqlite_pair(path: str) -> Iterator[Callable[[str], None]]:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA busy_timeout = 30000")

    def one(key: str) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            f"INSERT INTO effect_intents ({_COLUMNS}) "
            "VALUES ('bench-raw', ?, 'raw', 'op', 'd', 'in_flight', 1, 1, '{}', ?, ?)",
            (key, _NOW, _NOW),
        )
        conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "UPDATE effect_intents SET status = 'confirmed', version = version + 1, updated_at = ? "
            "WHERE tenant_id = 'bench-raw' AND intent_key = ? AND status = 'in_flight' AND version = 1",
            (_NOW, key),
        )
        conn.execute("COMMIT")

    try:
        yield one
    finally:
        conn.close()


def _postgres_pair(url: str) -> Iterator[Callable[[str], None]]:
    import psycopg
    from psycopg import sql

    parts = urlsplit(url)
    query = parse_qsl(parts.query)
    schema = next((v for n, v in query if n == "schema"), "safe_effects")
    conninfo = urlunsplit(parts._replace(query=urlencode([(n, v) for n, v in query if n != "schema"])))
    table = sql.Identifier(schema, "effect_intents")
    insert = sql.SQL(
        "INSERT INTO {} (" + _COLUMNS + ") "
        "VALUES ('bench-raw', %s, 'raw', 'op', 'd', 'in_flight', 1, 1, '{{}}', now(), now())"
    ).format(table)
    update = sql.SQL(
        "UPDATE {} SET status = 'confirmed', version = version + 1, updated_at = now() "
        "WHERE tenant_id = 'bench-raw' AND intent_key = %s AND status = 'in_flight' AND version = 1"
    ).format(table)
    conn = psycopg.connect(conninfo, autocommit=True)

    def one(key: str) -> None:
        conn.execute(insert, (key,))
        conn.execute(update, (key,))

    try:
        yield one
    finally:
        conn.close()


@contextmanager
def raw_pair(store_url: str) -> Iterator[Callable[[str], None]]:
    """A callable doing the raw INSERT commit + UPDATE commit for one new key on ``store_url``'s table."""
    if store_url.startswith("sqlite:///"):
        yield from _sqlite_pair(store_url[len("sqlite:///") :])
    else:
        yield from _postgres_pair(store_url)


def timed(fn: Callable[[str], object], count: int) -> list[float]:
    """Per-call seconds for ``count`` calls of ``fn`` on fresh keys."""
    samples = []
    for _ in range(count):
        key = f"bench:{uuid.uuid4().hex}:raw:v1"
        start = time.perf_counter()
        fn(key)
        samples.append(time.perf_counter() - start)
    return samples


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000
