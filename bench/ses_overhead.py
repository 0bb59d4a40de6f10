"""What the ledger adds to an SES send: wrapped vs raw boto3 ``send_email`` against a local moto server.

For each store (SQLite file, PostgreSQL if reachable) it prints the median raw send, the median wrapped
send, the added time per call, and that added time divided by the raw cost of two commits on the same
store (one INSERT commit + one UPDATE commit on a table shaped like ``effect_intents``), measured in the
same run. The ledger needs two commits per send (claim, outcome), so a ratio near 1 means it adds little
beyond them; the target is <= 1.5. Bounded: N iterations per series and a wall-clock cap.

    .venv/bin/python bench/ses_overhead.py [--iterations 150] [--pg postgresql://...]
"""

from __future__ import annotations

import argparse
import os
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3

import ses_safe
from safe_effects import Ledger

REGION = "us-east-1"
SENDER = "sender@example.com"
CREDENTIALS = {"aws_access_key_id": "bench", "aws_secret_access_key": "bench"}
EMAIL = {
    "FromEmailAddress": SENDER,
    "Destination": {"ToAddresses": ["customer@example.com"]},
    "Content": {"Simple": {"Subject": {"Data": "Receipt"}, "Body": {"Text": {"Data": "Thanks."}}}},
}
COLUMNS = (
    "tenant_id, intent_key, provider, operation, request_digest, status, version, provider_key, attempt_count, "
    "lease_owner, lease_expires_at, summary, created_at, updated_at"
)
DEADLINE_SECONDS = 50.0


def _table_ddl(text: str, integer: str) -> str:
    """A table shaped like effect_intents (same key, same two indexes), for the raw two-commit baseline."""
    cols = ", ".join(f"{c} {integer if c in ('version', 'attempt_count') else text}" for c in COLUMNS.split(", "))
    return f"CREATE TABLE bench_intents ({cols}, provider_result_id {text}, PRIMARY KEY (tenant_id, intent_key))"


def _row(key: str) -> tuple[Any, ...]:
    now = time.strftime("%Y-%m-%dT%H:%M:%S")
    return (
        "default",
        key,
        "ses",
        "sesv2.send_email",
        "sha256:" + "0" * 64,
        "in_flight",
        1,
        key,
        1,
        "bench",
        now,
        "{}",
        now,
        now,
    )


def sqlite_two_commits(path: Path) -> Callable[[], None]:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute(_table_ddl("TEXT", "INTEGER"))
    conn.execute("CREATE INDEX bench_status ON bench_intents (status, updated_at)")
    conn.execute("CREATE INDEX bench_pkey ON bench_intents (provider, provider_key)")
    marks = ", ".join("?" * len(COLUMNS.split(", ")))

    def once() -> None:
        key = uuid.uuid4().hex
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(f"INSERT INTO bench_intents ({COLUMNS}) VALUES ({marks})", _row(key))
        conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "UPDATE bench_intents SET status = 'confirmed', version = 2, provider_result_id = ? "
            "WHERE tenant_id = 'default' AND intent_key = ? AND version = 1",
            ("m", key),
        )
        conn.execute("COMMIT")

    return once


@contextmanager
def postgres_two_commits(url: str) -> Iterator[Callable[[], None]]:
    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    conn = psycopg.connect(url, autocommit=True)
    conn.execute(f"CREATE SCHEMA {schema}")
    conn.execute(f"SET search_path TO {schema}")
    conn.execute(_table_ddl("text", "integer"))
    conn.execute("CREATE INDEX bench_status ON bench_intents (status, updated_at)")
    conn.execute("CREATE INDEX bench_pkey ON bench_intents (provider, provider_key)")
    marks = ", ".join(["%s"] * len(COLUMNS.split(", ")))

    def once() -> None:
        key = uuid.uuid4().hex
        with conn.transaction():
            conn.execute(f"INSERT INTO bench_intents ({COLUMNS}) VALUES ({marks})", _row(key))
        with conn.transaction():
            conn.execute(
                "UPDATE bench_intents SET status = 'confirmed', version = 2, provider_result_id = %s "
                "WHERE tenant_id = 'default' AND intent_key = %s AND version = 1",
                ("m", key),
            )

    try:
        yield once
    finally:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
        conn.close()


def _drop_pg_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    """moto in its own process, like a remote SES: its work must not share this process's GIL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(f"{url}/moto-api/data.json", timeout=1).close()
            return server, url
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError("moto server did not start within 10 s")


def measure(series: dict[str, Callable[[], None]], iterations: int, deadline: float) -> dict[str, float]:
    """Run the series interleaved (so drift hits all alike); medians in milliseconds."""
    samples: dict[str, list[float]] = {name: [] for name in series}
    for _ in range(iterations):
        if time.monotonic() > deadline:
            break
        for name, call in series.items():
            start = time.perf_counter()
            call()
            samples[name].append((time.perf_counter() - start) * 1000)
    return {name: statistics.median(values) for name, values in samples.items()}


def report(store: str, medians: dict[str, float]) -> None:
    added = medians["wrapped"] - medians["raw"]
    ratio = added / medians["two_commits"]
    verdict = "ok" if ratio <= 1.5 else "ABOVE TARGET"
    print(
        f"{store:<10} raw {medians['raw']:7.2f} ms  wrapped {medians['wrapped']:7.2f} ms  "
        f"added {added:6.2f} ms  two commits {medians['two_commits']:6.2f} ms  "
        f"added/two-commits {ratio:4.2f} (target <= 1.5: {verdict})"
    )
    print(f"{'':<10} wrapper+ledger without HTTP {medians['no_http']:6.2f} ms per send")


def run_store(
    store: str, *, ledger_url: str, moto_url: str, two_commits: Callable[[], None], iterations: int, deadline: float
) -> None:
    session = boto3.session.Session()
    raw = session.client("sesv2", region_name=REGION, endpoint_url=moto_url, **CREDENTIALS)
    ledger = Ledger.open(ledger_url)
    wrapped = ses_safe.client(
        "sesv2",
        ledger=ledger,
        session=session,
        region_name=REGION,
        endpoint_url=moto_url,
        configuration_set="bench",
        **CREDENTIALS,
    )
    # The same wrapper and ledger over a transport that answers at once: the cost without any HTTP.
    stub = SimpleNamespace(send_email=lambda **_: {"MessageId": uuid.uuid4().hex})
    no_http = ses_safe.SafeSESv2Client(
        raw=None, adapter=ses_safe.SesAdapter(stub), ledger=ledger, tenant="default", configuration_set="bench"
    )
    counter = iter(range(10**9))
    series = {
        "raw": lambda: raw.send_email(**EMAIL),
        "wrapped": lambda: wrapped.send_email(IntentKey=f"bench:{store}_{next(counter)}:send:v1", **EMAIL),
        "no_http": lambda: no_http.send_email(IntentKey=f"bench:{store}_{next(counter)}:send:v1", **EMAIL),
        "two_commits": two_commits,
    }
    measure(series, 10, deadline)  # warm-up: connections, model loading, statement caches
    report(store, measure(series, iterations, deadline))
    ledger.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=150)
    parser.add_argument(
        "--pg", default=os.environ.get("SAFE_EFFECTS_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
    )
    args = parser.parse_args()
    deadline = time.monotonic() + DEADLINE_SECONDS

    server, moto_url = start_moto()
    boto3.client("ses", region_name=REGION, endpoint_url=moto_url, **CREDENTIALS).verify_email_identity(
        EmailAddress=SENDER
    )
    try:
        with tempfile.TemporaryDirectory() as scratch:
            baseline = sqlite_two_commits(Path(scratch) / "baseline.db")
            run_store(
                "sqlite",
                ledger_url=f"sqlite:///{Path(scratch) / 'ledger.db'}",
                moto_url=moto_url,
                two_commits=baseline,
                iterations=args.iterations,
                deadline=deadline,
            )
        try:
            import psycopg

            psycopg.connect(args.pg, connect_timeout=3).close()
        except Exception as error:
            print(f"postgres   skipped: {args.pg} unreachable ({type(error).__name__})")
            return
        schema = f"bench_ledger_{uuid.uuid4().hex[:8]}"
        ledger_url = f"{args.pg}{'&' if '?' in args.pg else '?'}schema={schema}"
        try:
            with postgres_two_commits(args.pg) as baseline:
                run_store(
                    "postgres",
                    ledger_url=ledger_url,
                    moto_url=moto_url,
                    two_commits=baseline,
                    iterations=args.iterations,
                    deadline=deadline,
                )
        finally:
            _drop_pg_schema(args.pg, schema)
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
