"""Per-effect cost of the executor's ledger writes (claim + confirm) against the raw minimum.

Raw minimum: one INSERT commit plus one UPDATE commit on the same table (see _raw_commits.py). Executor:
``Ledger.execute`` with an adapter that answers instantly, so only the ledger's work is measured. Both run on
SQLite (file, WAL, synchronous=FULL) and PostgreSQL, with 1 and 8 worker processes on distinct keys; then 8
workers on one key (one must dispatch, seven wait and answer from the ledger).

    .venv/bin/python bench/ledger_overhead.py [--effects 300] [--pg postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import tempfile
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from datetime import timedelta
from pathlib import Path

from _raw_commits import median_ms, raw_pair, timed

from safe_effects import (
    EffectRecord,
    EffectRequest,
    IntentKey,
    LeasePolicy,
    Ledger,
    LookupResult,
    LookupStatus,
    ProviderContract,
    Verdict,
    open_store,
)
from safe_effects.testing import generic_contract

CONTRACT = generic_contract()
REQUEST = EffectRequest(operation="charge", params={"amount": 4200, "currency": "eur", "customer": "cus_1"})


class InstantAdapter:
    """Answers at once: what remains is the executor's own cost."""

    provider = "bench"

    def contract_for(self, operation: str) -> ProviderContract:
        return CONTRACT

    def provider_key(self, tenant: str, intent_key: IntentKey) -> str:
        return str(intent_key)

    def dispatch(self, request: EffectRequest, provider_key: str) -> str:
        return "res_" + hashlib.sha1(provider_key.encode()).hexdigest()[:12]

    def classify(self, error: BaseException) -> Verdict:
        raise AssertionError("never fails")

    def result_id(self, response: str) -> str:
        return response

    def response_digest(self, response: str) -> str:
        return response

    def lookup(self, record: EffectRecord) -> LookupResult:
        return LookupResult(LookupStatus.INCONCLUSIVE, "none")


def _run(mode: str, url: str, count: int, shared_key: str | None) -> list[float]:
    if mode == "raw":
        with raw_pair(url) as one:
            timed(one, 5)
            return timed(one, count)
    adapter = InstantAdapter()
    lease = LeasePolicy(poll_interval=0.002, wait_for_other=timedelta(seconds=60))
    with Ledger.open(url, lease=lease) as ledger:
        def one(key: str) -> None:
            ledger.execute(adapter, REQUEST, intent_key=shared_key or key)

        timed(one, 0 if shared_key else 5)
        return timed(one, count)


def measure(mode: str, url: str, workers: int, count: int, shared_key: str | None = None) -> tuple[float, float]:
    """Median per-effect milliseconds and effects per second over ``workers`` processes."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        pool.submit(time.sleep, 0).result()  # start the workers before the clock
        start = time.perf_counter()
        parts = list(pool.map(_run, [mode] * workers, [url] * workers, [count] * workers, [shared_key] * workers))
        elapsed = time.perf_counter() - start
    samples = [s for part in parts for s in part]
    return median_ms(samples), len(samples) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--effects", type=int, default=300, help="effects per worker per run")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="se-bench-"))
    schema = f"se_bench_{uuid.uuid4().hex[:8]}"
    stores = {"sqlite": f"sqlite:///{workdir / 'ledger.db'}", "postgres": f"{args.pg}?schema={schema}"}
    print(f"{'store':9} {'workers':>7} {'raw ms':>8} {'exec ms':>8} {'ratio':>6} {'raw/s':>8} {'exec/s':>8}")
    try:
        for name, url in stores.items():
            store = open_store(url)
            store.migrate()
            store.close()
            for workers in (1, 8):
                raw_ms, raw_rate = measure("raw", url, workers, args.effects)
                exec_ms, exec_rate = measure("executor", url, workers, args.effects)
                print(f"{name:9} {workers:>7} {raw_ms:>8.2f} {exec_ms:>8.2f} {exec_ms / raw_ms:>6.2f} "
                      f"{raw_rate:>8.0f} {exec_rate:>8.0f}")
            key = f"bench:{uuid.uuid4().hex}:one-key:v1"
            one_ms, _ = measure("executor", url, 8, 1, shared_key=key)
            with Ledger.open(url) as ledger:
                attempts = ledger.get(key).attempt_count
            print(f"{name:9} 8 on one key: median {one_ms:.2f} ms per call, provider dispatches: {attempts}")
    finally:
        if "postgres" in stores:
            import psycopg

            with psycopg.connect(args.pg, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    main()
