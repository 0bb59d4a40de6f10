"""What the ledger adds to ``payment_intents.create``, against the raw SDK on the same fake Stripe.

Prints, per store: the median raw SDK call, the median wrapped call, the added time, and that added time
divided by the same store's raw two-commit cost (one INSERT commit + one UPDATE commit on a table shaped
like effect_intents), measured in this run. Target: quotient <= 1.5. Bounded: a few hundred calls.

    .venv/bin/python bench/stripe_overhead.py [--calls 200] [--pg postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import stripe

from safe_effects import Ledger
from stripe_safe import StripeClient
from stripe_safe.testing import FakeStripe

PARAMS = {"amount": 2000, "currency": "eur", "payment_method": "pm_card_visa", "confirm": True}
TABLE = """CREATE TABLE bench_intents (
    tenant_id TEXT NOT NULL, intent_key TEXT NOT NULL, provider TEXT NOT NULL, operation TEXT NOT NULL,
    request_digest TEXT NOT NULL, status TEXT NOT NULL, version INTEGER NOT NULL, provider_key TEXT,
    attempt_count INTEGER NOT NULL, lease_owner TEXT, lease_expires_at TEXT, provider_result_id TEXT,
    response_digest TEXT, summary TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, intent_key))"""
INSERT = (
    "INSERT INTO bench_intents VALUES ('default', {p}, 'stripe', 'payment_intents.create', 'sha256:x', "
    "'in_flight', 1, {p}, 1, 'w', '2026-01-01T00:00:00', NULL, NULL, '{{}}', '2026-01-01', '2026-01-01')"
)
UPDATE = (
    "UPDATE bench_intents SET status = 'confirmed', version = 2, provider_result_id = 'pi_1', "
    "response_digest = 'sha256:y' WHERE tenant_id = 'default' AND intent_key = {p} AND version = 1"
)


def median_ms(run: Callable[[int], object], calls: int, warmup: int = 10) -> float:
    for i in range(warmup):
        run(-1 - i)
    samples = []
    for i in range(calls):
        start = time.perf_counter()
        run(i)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def sqlite_two_commits(path: Path, calls: int) -> float:
    """The store's settings (WAL, synchronous=FULL, autocommit with explicit transactions)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute(TABLE)
    run_id = uuid.uuid4().hex

    def two_commits(i: int) -> None:
        key = f"{run_id}:{i}"
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(INSERT.format(p="?"), (key, key))
        conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(UPDATE.format(p="?"), (key,))
        conn.execute("COMMIT")

    try:
        return median_ms(two_commits, calls)
    finally:
        conn.close()


def pg_two_commits(url: str, calls: int) -> float:
    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        try:
            with psycopg.connect(url, options=f"-c search_path={schema}") as conn:
                conn.execute(TABLE)
                conn.commit()

                def two_commits(i: int) -> None:
                    key = f"k:{i}"
                    conn.execute(INSERT.format(p="%s"), (key, key))
                    conn.commit()
                    conn.execute(UPDATE.format(p="%s"), (key,))
                    conn.commit()

                return median_ms(two_commits, calls)
        finally:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


@contextmanager
def pg_store_url(url: str) -> Iterator[str]:
    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    try:
        yield f"{url}{'&' if '?' in url else '?'}schema={schema}"
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def wrapped_ms(fake: FakeStripe, store_url: str, calls: int) -> float:
    ledger = Ledger.open(store_url)
    client = StripeClient("sk_test_bench", ledger=ledger, base_addresses={"api": fake.url})
    run_id = uuid.uuid4().hex[:8]
    try:
        return median_ms(
            lambda i: client.v1.payment_intents.create(
                params=PARAMS,  # type: ignore[arg-type]
                options={"idempotency_key": f"bench:{run_id}_{i}:collect:v1"},
            ),
            calls,
        )
    finally:
        ledger.close()


def raw_ms(fake: FakeStripe, calls: int) -> float:
    client = stripe.StripeClient(
        "sk_test_bench",
        base_addresses={"api": fake.url},
        max_network_retries=0,
        http_client=stripe.RequestsClient(timeout=(5.0, 30.0)),
    )
    run_id = uuid.uuid4().hex[:8]
    return median_ms(
        lambda i: client.v1.payment_intents.create(
            params=PARAMS,  # type: ignore[arg-type]
            options={"idempotency_key": f"bench:{run_id}_{i}:raw:v1"},
        ),
        calls,
    )


def report(name: str, raw: float, wrapped: float, commits: float) -> None:
    added = wrapped - raw
    print(
        f"{name:<10} raw {raw:7.3f} ms  wrapped {wrapped:7.3f} ms  added {added:7.3f} ms  "
        f"two-commit {commits:7.3f} ms  quotient {added / commits:5.2f} (target <= 1.5)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    with FakeStripe() as fake, tempfile.TemporaryDirectory() as tmp:
        raw = raw_ms(fake, args.calls)
        store = f"sqlite:///{Path(tmp) / 'ledger.db'}"
        report("sqlite", raw, wrapped_ms(fake, store, args.calls), sqlite_two_commits(Path(tmp) / "b.db", args.calls))
        try:
            commits = pg_two_commits(args.pg, args.calls)
        except Exception as error:  # no PostgreSQL here: say so and keep the SQLite figures
            print(f"postgres   skipped: {error}")
            return
        with pg_store_url(args.pg) as url:
            report("postgres", raw, wrapped_ms(fake, url, args.calls), commits)


if __name__ == "__main__":
    main()
