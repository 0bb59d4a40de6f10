"""What the ledger adds to a SendGrid send: wrapped vs raw SDK against the fake, on SQLite and PostgreSQL.

Per backend, in one interleaved loop: a raw ``sendgrid.SendGridAPIClient.send``, a wrapped
``sendgrid_safe.SendGridAPIClient.send`` (new intent each), and the raw two-commit floor of the same store
(one INSERT commit + one UPDATE commit on effect_intents, see _raw_commits.py). Reports medians, the time
the wrapper adds per call, and that added time divided by the two-commit floor (target <= 1.5).

    .venv/bin/python bench/sendgrid_overhead.py [--sends 150] [--pg postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sendgrid
from _raw_commits import median_ms, raw_pair

from safe_effects import Ledger, open_store
from sendgrid_safe import SendGridAPIClient
from sendgrid_safe.testing import FakeSendGrid

MESSAGE = {
    "personalizations": [{"to": [{"email": "customer@example.com"}]}],
    "from": {"email": "billing@example.com"},
    "subject": "Your invoice INV-42",
    "content": [{"type": "text/plain", "value": "Thanks for your order. Your invoice is attached."}],
}
BUDGET_SECONDS = 50.0


@contextmanager
def store_urls(pg: str | None) -> Iterator[list[tuple[str, str]]]:
    """A fresh SQLite file, and a fresh PostgreSQL schema when one is reachable (dropped afterwards)."""
    with tempfile.TemporaryDirectory() as tmp:
        urls = [("sqlite", f"sqlite:///{Path(tmp) / 'bench.db'}")]
        schema = f"bench_sg_{uuid.uuid4().hex[:8]}"
        if pg is not None:
            try:
                import psycopg

                psycopg.connect(pg, connect_timeout=3).close()
                urls.append(("postgres", f"{pg}{'&' if '?' in pg else '?'}schema={schema}"))
            except Exception as error:  # no server: report SQLite only
                print(f"postgres skipped: {error}")
        try:
            yield urls
        finally:
            if len(urls) > 1:
                import psycopg
                from psycopg import sql

                with psycopg.connect(pg or "", autocommit=True) as conn:
                    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def measure(name: str, url: str, fake: FakeSendGrid, sends: int, deadline: float) -> None:
    store = open_store(url)
    store.migrate()
    ledger = Ledger(store)
    wrapped = SendGridAPIClient(fake.api_key, host=fake.url, ledger=ledger)
    raw = sendgrid.SendGridAPIClient(fake.api_key, host=fake.url)
    raw.client.timeout = 10
    samples: dict[str, list[float]] = {"raw": [], "wrapped": [], "commits": []}
    with raw_pair(url) as commit_pair:
        for i in range(sends + 10):  # 10 warm-up rounds are discarded
            if time.monotonic() > deadline:
                break
            started = time.perf_counter()
            raw.send(MESSAGE)
            raw_done = time.perf_counter()
            wrapped.send(MESSAGE, intent_key=f"bench:{uuid.uuid4().hex}:email:v1")
            wrapped_done = time.perf_counter()
            commit_pair(f"bench:{uuid.uuid4().hex}:raw:v1")
            commits_done = time.perf_counter()
            if i >= 10:
                samples["raw"].append(raw_done - started)
                samples["wrapped"].append(wrapped_done - raw_done)
                samples["commits"].append(commits_done - wrapped_done)
    ledger.close()
    raw_ms, wrapped_ms, floor_ms = (median_ms(samples[k]) for k in ("raw", "wrapped", "commits"))
    added = wrapped_ms - raw_ms
    print(
        f"{name:9} n={len(samples['raw']):4}  raw send {raw_ms:7.3f} ms  wrapped {wrapped_ms:7.3f} ms  "
        f"added {added:7.3f} ms  two-commit floor {floor_ms:7.3f} ms  added/floor {added / floor_ms:5.2f}"
        f"  {'ok' if added / floor_ms <= 1.5 else 'ABOVE 1.5'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=150)
    parser.add_argument(
        "--pg", default=os.environ.get("SAFE_EFFECTS_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
    )
    args = parser.parse_args()
    deadline = time.monotonic() + BUDGET_SECONDS
    with FakeSendGrid() as fake, store_urls(args.pg) as urls:
        for name, url in urls:
            measure(name, url, fake, args.sends, deadline)


if __name__ == "__main__":
    main()
