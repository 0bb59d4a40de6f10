"""How long one purge batch holds SQLite's write lock, by batch size, on a ledger whose keys do not follow time.

SQLite's workers wait while a purge batch deletes (PostgreSQL's keep writing), so the delete's duration is
what a worker's claim or confirm may wait for. The ledger is filled in one transaction with settled records
spread over a year, random intent keys (real keys come from business ids, not from time), then each batch
size deletes ``--batches`` batches of the oldest, as ``purge_settled`` does: list them, then delete by key.
Prints the median and the longest delete per batch size; docs/operations.md (Purge) quotes them.

    .venv/bin/python bench/purge_batches.py [--records 400000] [--batches 15] [--sizes 1000 200]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from safe_effects import EffectRecord, EffectStatus, IntentKey, SQLiteStore
from safe_effects._sqlite import _RECORD_ROW, _insert_statement
from safe_effects._states import TERMINAL

YEAR = timedelta(days=365)
CUTOFF_AGE = timedelta(days=120)  # the default retention floor: everything older is purgeable


def filled(path: Path, records: int, now: datetime) -> SQLiteStore:
    """A migrated ledger holding ``records`` settled records, the oldest a year old, keys in random order."""
    store = SQLiteStore(path)
    store.migrate()
    rows = []
    for n in range(records):
        at = now - YEAR * (n / records)
        record = EffectRecord(
            tenant=random.choice(("acme", "globex", "initech")),
            intent_key=IntentKey.parse(f"invoice:{uuid.uuid4().hex}:collect:v1"),
            provider="stripe",
            operation="payment_intents.create",
            request_digest="sha256:" + "0" * 64,
            status=random.choice((EffectStatus.CONFIRMED,) * 30 + (EffectStatus.REJECTED,)),
            provider_key=uuid.uuid4().hex,
            created_at=at,
            updated_at=at,
        )
        rows.append(_RECORD_ROW.values(record))
    conn = store._conn()
    conn.execute("BEGIN")
    conn.executemany(_insert_statement((False,) * len(_RECORD_ROW.columns)), rows)  # every column bound, NULLs too
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    return store


def delete_ms(store: SQLiteStore, size: int, batches: int, cutoff: datetime) -> list[float]:
    """Milliseconds each of ``batches`` deletes of ``size`` of the oldest settled records took."""
    took = []
    for _ in range(batches):
        listed = store.list_by_status(TERMINAL, updated_before=cutoff, limit=size)
        keys = [(record.tenant, record.intent_key) for record in listed]
        start = time.perf_counter()
        store.purge(statuses=TERMINAL, updated_before=cutoff, limit=size, keys=keys)
        took.append((time.perf_counter() - start) * 1000)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--batches", type=int, default=15)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 200])
    parser.add_argument("--pg", default="", help="ignored: PostgreSQL's writers do not wait for a purge")
    args = parser.parse_args()
    now = datetime.now(UTC)
    with tempfile.TemporaryDirectory() as folder:
        store = filled(Path(folder) / "ledger.db", args.records, now)
        try:
            print(f"sqlite ledger of {args.records} settled records, keys in random order")
            for size in args.sizes:
                took = delete_ms(store, size, args.batches, now - CUTOFF_AGE)
                print(f"batch {size:>5}: delete median {statistics.median(took):.1f} ms, longest {max(took):.1f} ms")
        finally:
            store.close()


if __name__ == "__main__":
    main()
