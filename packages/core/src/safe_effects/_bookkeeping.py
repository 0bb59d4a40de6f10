"""Whose ``schema_migrations`` table a store found: the ledger's own, or another migration tool's.

The name is common (golang-migrate, dbmate, Rails and home-grown runners use it), and a ledger may share a
SQLite file or a PostgreSQL schema with an application (``Ledger.prepare(connection=...)`` on SQLite needs the
very file). Read as the ledger's, another tool's versions would say "up to date" with no ledger table there, or
its columns would fail the first migration with a raw driver error.
"""

from __future__ import annotations

from collections.abc import Collection

from ._errors import StoreNotReady

COLUMNS = ("version", "applied_at")  # what SQLITE_BOOKKEEPING and POSTGRES_BOOKKEEPING create
_WAY_OUT = (
    "keep the ledger in a file or schema of its own, or give that tool another table name (golang-migrate's "
    "x-migrations-table, dbmate's --migrations-table); nothing was changed"
)


def check_columns(where: str, columns: Collection[str]) -> None:
    """Refuse a ``schema_migrations`` table whose columns are not the ones safe-effects creates."""
    if sorted(columns) != sorted(COLUMNS):
        raise StoreNotReady(
            f"{where} has a schema_migrations table with columns ({', '.join(columns)}), not safe-effects' "
            f"({', '.join(COLUMNS)}): another migration tool keeps it; {_WAY_OUT}"
        )


def check_versions(where: str, versions: Collection[int], has_intents: bool) -> None:
    """Refuse versions listed where the ledger's first table is missing: they are not the ledger's."""
    if versions and not has_intents:
        listed = ", ".join(map(str, sorted(versions)))
        raise StoreNotReady(
            f"{where} has a schema_migrations table listing version(s) {listed} but no effect_intents table: "
            f"it is another migration tool's (or the ledger's tables were dropped); {_WAY_OUT}"
        )
