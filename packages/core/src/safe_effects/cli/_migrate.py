"""``migrate``: create the ledger's tables, or apply the schema migrations a new release brings."""

from __future__ import annotations

from safe_effects._passwords import redacted
from safe_effects._store_url import open_store

from ._common import AsJson, StoreUrl, emit, print_json


def migrate(*, store: StoreUrl, as_json: AsJson = False) -> None:
    """Apply pending schema migrations (idempotent; safe from two processes at once)."""
    opened = open_store(store)
    try:
        applied = opened.migrate()  # what this run applied: a concurrent run may have applied the rest
    finally:
        opened.close()
    if as_json:
        print_json({"store": redacted(store), "applied": applied})  # a password never reaches a log
        return
    emit(f"applied migration(s) {', '.join(map(str, applied))}" if applied else "the schema is up to date")
