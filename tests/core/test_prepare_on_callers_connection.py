"""``Ledger.prepare(connection=...)``: the intent joins the caller's own transaction, on the ledger's own
database, whatever that connection's settings; anything else is refused before a row is written."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from psycopg import sql
from psycopg.types.datetime import TimestamptzBinaryLoader, TimestamptzLoader
from psycopg.types.string import TextLoader

from safe_effects import EffectRequest, EffectStatus, IntentConflict, IntentNotFound, InvalidInput, Ledger, open_store
from safe_effects.testing import GenericFakeAdapter, GenericFakeProvider

KEY = "order:o_1:charge:v1"
REQUEST = EffectRequest(operation="charge", params={"amount": 4200})
OTHER_PARAMS = EffectRequest(operation="charge", params={"amount": 1})
OTHER_DATABASE = "postgres"  # every cluster has it; the tests' ledgers live in another


@pytest.fixture
def adapter(tmp_path: Path) -> GenericFakeAdapter:
    return GenericFakeAdapter(GenericFakeProvider(tmp_path / "provider.db"))


def _sqlite_path(store_url: str) -> str:
    return store_url.removeprefix("sqlite:///")


def _prepare_twice_then_commit(ledger: Ledger, adapter: GenericFakeAdapter, app: Any) -> None:
    """Prepare; prepare again (the record read back on ``app``); other params refused; commit: one intent."""
    first = ledger.prepare(adapter, REQUEST, intent_key=KEY, connection=app)
    assert ledger.prepare(adapter, REQUEST, intent_key=KEY, connection=app) == first
    with pytest.raises(IntentConflict):
        ledger.prepare(adapter, OTHER_PARAMS, intent_key=KEY, connection=app)
    app.commit()
    assert ledger.get(KEY) == first


# -- SQLite ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite"])
def test_an_autocommit_connection_with_no_transaction_is_refused_and_left_as_it_was(
    store_url: str, adapter: GenericFakeAdapter
) -> None:
    """Joined by a BEGIN of the ledger's, nothing of the caller's would end that transaction: its later writes
    would wait in it, holding the ledger's write lock from every other writer."""
    with (
        Ledger.open(store_url) as ledger,
        closing(sqlite3.connect(_sqlite_path(store_url), isolation_level=None)) as app,
    ):
        with pytest.raises(InvalidInput, match="autocommit mode with no transaction open"):
            ledger.prepare(adapter, REQUEST, intent_key=KEY, connection=app)
        assert not app.in_transaction
        with pytest.raises(IntentNotFound):
            ledger.get(KEY)
        # the ledger's write lock is free: held, this would wait out the busy timeout and raise LedgerUnavailable
        other = ledger.execute(adapter, REQUEST, intent_key="order:o_2:charge:v1")
        assert other.record.status is EffectStatus.CONFIRMED

        app.execute("BEGIN IMMEDIATE")  # the caller's own transaction: joined, and rolled back with it
        ledger.prepare(adapter, REQUEST, intent_key=KEY, connection=app)
        app.execute("ROLLBACK")
        with pytest.raises(IntentNotFound):
            ledger.get(KEY)
    assert len(adapter.fake.effects()) == 1  # o_2's own


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_callers_row_factory_does_not_change_what_prepare_reads(store_url: str, adapter: GenericFakeAdapter) -> None:
    with Ledger.open(store_url) as ledger, closing(sqlite3.connect(_sqlite_path(store_url))) as app:
        app.row_factory = lambda cursor, row: {c[0]: v for c, v in zip(cursor.description, row, strict=True)}
        _prepare_twice_then_commit(ledger, adapter, app)
    assert adapter.fake.effects() == []


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_connection_of_another_kind_is_named_in_full(store_url: str, adapter: GenericFakeAdapter) -> None:
    with Ledger.open(store_url) as ledger, closing(sqlite3.connect(_sqlite_path(store_url))) as app:
        with pytest.raises(InvalidInput, match=r"got sqlite3\.Cursor"):
            ledger.prepare(adapter, REQUEST, intent_key=KEY, connection=app.cursor())
        with pytest.raises(IntentNotFound):
            ledger.get(KEY)


# -- PostgreSQL --------------------------------------------------------------------------------------------


@pytest.fixture
def other_database_ledger(store_url: str, pg_url: str) -> Iterator[str]:
    """A ledger of the same schema name in another database of the same server (another environment's)."""
    _, _, schema = store_url.rpartition("?schema=")
    other = psycopg.conninfo.make_conninfo(pg_url, dbname=OTHER_DATABASE)
    store = open_store(f"{pg_url.rsplit('/', 1)[0]}/{OTHER_DATABASE}?schema={schema}")
    store.migrate()
    store.close()
    yield other
    with psycopg.connect(other, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_connection_to_another_database_is_refused_before_anything_is_written(
    store_url: str, other_database_ledger: str, adapter: GenericFakeAdapter
) -> None:
    """Taken, the row would land in that database's ledger of the same schema name, where this ledger never
    looks: an intent prepared and never sent, or never reconciled."""
    _, _, schema = store_url.rpartition("?schema=")
    with Ledger.open(store_url) as ledger, psycopg.connect(other_database_ledger) as app:
        with pytest.raises(InvalidInput, match=f"connection is to database '{OTHER_DATABASE}'"):
            ledger.prepare(adapter, REQUEST, intent_key=KEY, connection=app)
        assert app.execute("SELECT 1").fetchone() == (1,)  # the caller's transaction is still usable
        intents = sql.Identifier(schema, "effect_intents")
        assert app.execute(sql.SQL("SELECT count(*) FROM {}").format(intents)).fetchone() == (0,)
        app.rollback()
        with pytest.raises(IntentNotFound):
            ledger.get(KEY)


class _NaiveLocalTimestamps(TimestamptzLoader):
    """Like Django's loader with USE_TZ off: the server's time as a naive local time."""

    def load(self, data: Any) -> Any:
        return super().load(data).astimezone(ZoneInfo("America/Chicago")).replace(tzinfo=None)


class _NaiveLocalBinaryTimestamps(TimestamptzBinaryLoader):
    def load(self, data: Any) -> Any:
        return super().load(data).astimezone(ZoneInfo("America/Chicago")).replace(tzinfo=None)


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
@pytest.mark.parametrize(
    "cursor_factory", [psycopg.ClientCursor, psycopg.Cursor], ids=["django-default", "server-binding"]
)
def test_a_connection_that_loads_types_its_own_way_reads_the_record_back(
    store_url: str, pg_url: str, adapter: GenericFakeAdapter, cursor_factory: type[psycopg.Cursor[Any]]
) -> None:
    """Django's PostgreSQL backend loads jsonb as text (it decodes JSON itself) and, with USE_TZ off,
    timestamps as naive local times: preparing the same intent again read them as such and failed."""
    _, _, schema = store_url.rpartition("?schema=")
    with Ledger.open(store_url) as ledger, psycopg.connect(pg_url, cursor_factory=cursor_factory) as app:
        app.adapters.register_loader("jsonb", TextLoader)
        app.adapters.register_loader("timestamptz", _NaiveLocalTimestamps)
        app.adapters.register_loader("timestamptz", _NaiveLocalBinaryTimestamps)
        app.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        _prepare_twice_then_commit(ledger, adapter, app)
        assert app.execute("SELECT '{}'::jsonb").fetchone() == ("{}",)  # the caller's own loaders are untouched
    assert adapter.fake.effects() == []


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_connection_of_another_driver_is_named_with_what_to_pass_instead(
    store_url: str, adapter: GenericFakeAdapter, tmp_path: Path
) -> None:
    with Ledger.open(store_url) as ledger, closing(sqlite3.connect(tmp_path / "app.db")) as app:
        with pytest.raises(InvalidInput, match=r"got sqlite3\.Connection \(psycopg2 and async connections"):
            ledger.prepare(adapter, REQUEST, intent_key=KEY, connection=app)
        with pytest.raises(IntentNotFound):
            ledger.get(KEY)


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
@pytest.mark.parametrize("state", ["closed", "aborted", "read-only"])
def test_a_connection_in_a_state_that_cannot_take_the_row_is_refused_by_name(
    store_url: str, pg_url: str, adapter: GenericFakeAdapter, state: str
) -> None:
    """Each raised the driver's own error (OperationalError, InFailedSqlTransaction, ReadOnlySqlTransaction)."""
    with Ledger.open(store_url) as ledger, psycopg.connect(pg_url) as app:
        if state == "closed":
            app.close()
        elif state == "aborted":
            with pytest.raises(psycopg.errors.DivisionByZero):
                app.execute("SELECT 1 / 0")
        else:
            app.execute("SET TRANSACTION READ ONLY")
        named = {"closed": "is closed", "aborted": "transaction is aborted", "read-only": "transaction is read-only"}
        with pytest.raises(InvalidInput, match=f"^connection('s)? {named[state]}"):
            ledger.prepare(adapter, REQUEST, intent_key=KEY, connection=app)
        with pytest.raises(IntentNotFound):
            ledger.get(KEY)
    assert adapter.fake.effects() == []


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_closed_sqlite_connection_is_refused_by_name(store_url: str, adapter: GenericFakeAdapter) -> None:
    with Ledger.open(store_url) as ledger:
        app = sqlite3.connect(_sqlite_path(store_url))
        app.close()
        with pytest.raises(InvalidInput, match=r"^connection is closed"):  # was sqlite3.ProgrammingError
            ledger.prepare(adapter, REQUEST, intent_key=KEY, connection=app)
        with pytest.raises(IntentNotFound):
            ledger.get(KEY)
