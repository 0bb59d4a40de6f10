"""A damaged ledger database: a typed LedgerCorrupt naming the remedy, nothing sent, nothing written.

The damage is real: on SQLite a page of the file is overwritten; on PostgreSQL, whose files a test cannot
damage under a running server, a trigger makes the server raise its own data-corruption errors (SQLSTATE
XX001, XX002) inside the store's statements.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from safe_effects import (
    EffectRequest,
    EffectStatus,
    EffectUnknown,
    Ledger,
    LedgerCorrupt,
    SQLiteStore,
    StoreNotReady,
)
from safe_effects.testing import GenericFakeAdapter, GenericFakeProvider

S = EffectStatus
REQUEST = EffectRequest(operation="charge", params={"amount": 4200})
REMEDY = "restore it from a backup"


@pytest.fixture
def fake(tmp_path: Path) -> GenericFakeProvider:
    return GenericFakeProvider(tmp_path / "provider.db")


def _damage_key_index(path: Path) -> None:
    """Overwrite the page type of the (tenant, intent key) index's root page, as a torn write would: every
    statement that uses the index then fails with SQLITE_CORRUPT."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (root,) = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'sqlite_autoindex_effect_intents_1'"
        ).fetchone()
        (page_size,) = conn.execute("PRAGMA page_size").fetchone()
    with path.open("r+b") as file:
        file.seek((root - 1) * page_size)
        file.write(b"\xff")


def _rows_on_file(path: Path) -> list[tuple[str, str]]:
    """(intent key, status) of every record, read past the damaged index."""
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute("SELECT intent_key, status FROM effect_intents NOT INDEXED ORDER BY intent_key").fetchall()


def test_a_damaged_sqlite_file_refuses_a_claim_with_ledger_corrupt_and_sends_nothing(
    tmp_path: Path, fake: GenericFakeProvider
) -> None:
    path = tmp_path / "ledger.db"
    adapter = GenericFakeAdapter(fake)
    with Ledger.open(f"sqlite:///{path}") as ledger:
        ledger.execute(adapter, REQUEST, intent_key="invoice:inv_1:collect:v1")
    _damage_key_index(path)

    with Ledger.open(f"sqlite:///{path}") as ledger:
        with pytest.raises(LedgerCorrupt, match=REMEDY) as corrupt:
            ledger.execute(adapter, REQUEST, intent_key="invoice:inv_2:collect:v1")
        assert str(path) in str(corrupt.value)
        assert isinstance(corrupt.value, StoreNotReady)  # not an outage: a retry loop must not wait it out
        assert corrupt.value.code == "ledger_corrupt"
        with pytest.raises(LedgerCorrupt, match=REMEDY):  # a read meets it the same way
            ledger.get("invoice:inv_1:collect:v1")

    assert len(fake.effects()) == 1  # only inv_1's, from before the damage
    assert _rows_on_file(path) == [("invoice:inv_1:collect:v1", "confirmed")]


def test_a_header_damaged_under_a_running_worker_is_ledger_corrupt(tmp_path: Path, fake: GenericFakeProvider) -> None:
    path = tmp_path / "ledger.db"
    with Ledger.open(f"sqlite:///{path}") as ledger:
        ledger.execute(GenericFakeAdapter(fake), REQUEST, intent_key="invoice:inv_1:collect:v1")
        with closing(sqlite3.connect(path)) as other:  # the last commits moved from the WAL into the file
            other.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        with path.open("r+b") as file:  # its header, overwritten as by a torn write
            file.write(b"\x00" * 100)
        with pytest.raises(LedgerCorrupt, match=REMEDY):
            ledger.execute(GenericFakeAdapter(fake), REQUEST, intent_key="invoice:inv_2:collect:v1")
    assert len(fake.effects()) == 1


def test_a_closed_connection_keeps_its_own_error(tmp_path: Path) -> None:
    """The sqlite3 module's own errors carry no SQLite error name: passed on as they are, not as AttributeError."""
    store = SQLiteStore(tmp_path / "ledger.db")
    store.migrate()
    store._conn().close()  # as a close racing a running call leaves it
    with pytest.raises(sqlite3.ProgrammingError, match="closed database"):
        store.get("default", "invoice:inv_1:collect:v1")
    store.close()


@pytest.fixture
def pg_ledger(pg_url: str, request: pytest.FixtureRequest) -> Iterator[tuple[Ledger, Callable[[str, str], None]]]:
    """A ledger on a fresh schema, and ``damage(event, sqlstate)``: from then on every INSERT or UPDATE
    (``event``) of an intent record fails in the server with that SQLSTATE."""
    schema = f"se_test_corrupt_{request.node.name[-20:].strip('_[]').lower()}"
    admin = psycopg.connect(pg_url, autocommit=True)
    ledger = Ledger.open(f"{pg_url}?schema={schema}")

    def damage(event: str, sqlstate: str) -> None:
        admin.execute(
            sql.SQL(
                "CREATE FUNCTION {schema}.damaged() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "RAISE SQLSTATE {state} USING MESSAGE = 'invalid page in block 7 of relation base/1/2'; END $$; "
                "CREATE TRIGGER damaged BEFORE {event} ON {schema}.effect_intents "
                "FOR EACH ROW EXECUTE FUNCTION {schema}.damaged()"
            ).format(schema=sql.Identifier(schema), state=sql.Literal(sqlstate), event=sql.SQL(event))
        )

    try:
        yield ledger, damage
    finally:
        ledger.close()
        admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        admin.close()


@pytest.mark.postgres
def test_postgres_data_corruption_at_a_claim_is_ledger_corrupt_and_sends_nothing(
    pg_ledger: tuple[Ledger, Callable[[str, str], None]], fake: GenericFakeProvider
) -> None:
    ledger, damage = pg_ledger
    damage("INSERT", "XX001")

    with pytest.raises(LedgerCorrupt, match=f"invalid page in block 7.*{REMEDY}"):
        ledger.execute(GenericFakeAdapter(fake), REQUEST, intent_key="invoice:inv_1:collect:v1")

    assert fake.effects() == []
    assert ledger.store.list_by_status(list(S)) == []


@pytest.mark.postgres
def test_postgres_index_corruption_at_the_confirm_is_effect_unknown_caused_by_ledger_corrupt(
    pg_ledger: tuple[Ledger, Callable[[str, str], None]], fake: GenericFakeProvider
) -> None:
    ledger, damage = pg_ledger

    class DamagedAfterSending(GenericFakeAdapter):
        def dispatch(self, request: EffectRequest, provider_key: str) -> str:
            response = super().dispatch(request, provider_key)
            damage("UPDATE", "XX002")  # the provider acted; the ledger's answer cannot be written
            return response

    with pytest.raises(EffectUnknown) as unknown:
        ledger.execute(DamagedAfterSending(fake), REQUEST, intent_key="invoice:inv_1:collect:v1")

    assert isinstance(unknown.value.__cause__, LedgerCorrupt)
    assert len(fake.effects()) == 1
    assert ledger.get("invoice:inv_1:collect:v1").status is S.IN_FLIGHT  # the answer is written nowhere
