"""Schema migrations: an existing ledger upgrades in place, keeps its history, and stays append-only; a store
that is not the ledger's, or not migrated yet, is refused by name before anything is read or written."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from psycopg import sql

from safe_effects import (
    EffectRecord,
    EffectStatus,
    IntentKey,
    Ledger,
    MigrationsPending,
    PostgresStore,
    SQLiteStore,
    Store,
    StoreNotReady,
    StorePermissionDenied,
    open_store,
)
from safe_effects._migrations import MIGRATIONS

if TYPE_CHECKING:
    from conftest import WorkerRole

S = EffectStatus
T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def record(key: str) -> EffectRecord:
    return EffectRecord(
        tenant="default",
        intent_key=IntentKey.parse(key),
        provider="fake",
        operation="charge",
        request_digest="sha256:" + "0" * 64,
        status=S.PREPARED,
        created_at=T0,
        updated_at=T0,
    )


def write_as_v2_release(path: Path, keys: list[str]) -> None:
    """What the v2 release wrote for each key: a prepared record claimed once, two audit rows, global ids."""
    stamp = "2026-01-02T03:04:05.678901Z"
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        for key in keys:
            conn.execute(
                "INSERT INTO effect_intents (tenant_id, intent_key, provider, operation, request_digest, status, "
                "version, attempt_count, summary, created_at, updated_at) "
                "VALUES ('default', ?, 'fake', 'charge', ?, 'in_flight', 2, 1, '{}', ?, ?)",
                (key, "sha256:" + "0" * 64, stamp, stamp),
            )
            for version, (source, target) in enumerate([(None, "prepared"), ("prepared", "in_flight")], start=1):
                conn.execute(
                    "INSERT INTO effect_audit (tenant_id, intent_key, at, from_status, to_status, version, actor, "
                    "reason, detail) VALUES ('default', ?, ?, ?, ?, ?, 'old-release', NULL, '{}')",
                    (key, stamp, source, target, version),
                )


def audit_ids(path: Path) -> list[tuple[str, int, int]]:
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        return list(conn.execute("SELECT intent_key, id, version FROM effect_audit ORDER BY intent_key, id"))


@pytest.mark.parametrize("backend", ["sqlite"])
def test_sqlite_v2_ledger_upgrades_keeping_its_audit_trail(store_at_version: Callable[[int], str]) -> None:
    path = Path(store_at_version(2).removeprefix("sqlite:///"))
    write_as_v2_release(path, [f"invoice:inv_{n}:collect:v1" for n in range(3)])
    store = SQLiteStore(path)
    try:
        before = audit_ids(path)
        trails = [store.audit_trail("default", f"invoice:inv_{n}:collect:v1") for n in range(3)]

        store.migrate()

        assert audit_ids(path) == before  # every row, same ids, same order
        assert [store.audit_trail("default", f"invoice:inv_{n}:collect:v1") for n in range(3)] == trails
        with closing(sqlite3.connect(path, isolation_level=None)) as conn:
            [ddl] = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'effect_audit'").fetchone()
            assert "WITHOUT ROWID" in ddl.upper()
            assert "AUTOINCREMENT" not in ddl.upper()
            assert max(v for (v,) in conn.execute("SELECT version FROM schema_migrations")) == MIGRATIONS[-1].version
        # an intent's ids carry on after its migrated ones; a new intent starts its own sequence
        moved = store.get("default", "invoice:inv_2:collect:v1")
        assert moved is not None
        assert (moved.updated_by, moved.lease_token) == (None, None)  # v4's columns: unknown for older writes
        store.save_reconciler_cursor("cron", (T0, "default", "invoice:inv_2:collect:v1"))  # v5's table
        assert store.reconciler_cursor("cron") == (T0, "default", "invoice:inv_2:collect:v1")
        assert store.transition(moved, S.UNKNOWN, now=T0, actor="new-release").updated_by == "new-release"
        new, _ = store.insert_if_absent(record("invoice:inv_new:collect:v1"))
        store.transition(new, S.UNKNOWN, now=T0, actor="new-release")
        last_old_id = max(i for key, i, _ in before if key == "invoice:inv_2:collect:v1")
        assert set(audit_ids(path)) - set(before) == {
            ("invoice:inv_2:collect:v1", last_old_id + 1, 3),
            ("invoice:inv_new:collect:v1", 1, 2),  # its creation has no row: its first audited change is id 1
        }
        assert [e.to_status for e in store.audit_trail("default", "invoice:inv_2:collect:v1")] == [
            S.PREPARED,
            S.IN_FLIGHT,
            S.UNKNOWN,
        ]
    finally:
        store.close()


def raw_audit_statement(store: Store, statement: str, request: pytest.FixtureRequest) -> None:
    """Run ``statement`` against the audit table behind the store's back, as a careless operator might."""
    if isinstance(store, SQLiteStore):
        with closing(sqlite3.connect(store.path, isolation_level=None)) as conn:
            conn.execute(statement.format(table="effect_audit"))
        return
    import psycopg
    from psycopg import sql

    assert isinstance(store, PostgresStore)
    table = sql.Identifier(store.schema, "effect_audit")
    with psycopg.connect(request.getfixturevalue("pg_url"), autocommit=True) as conn:
        conn.execute(sql.SQL(statement).format(table=table))  # type: ignore[arg-type]  # a test-local literal


@pytest.mark.parametrize(
    "statement", ["UPDATE {table} SET actor = 'someone else'", "DELETE FROM {table}"], ids=["update", "delete"]
)
def test_the_audit_trail_refuses_updates_and_deletes(
    store: Store, statement: str, request: pytest.FixtureRequest
) -> None:
    written, _ = store.insert_if_absent(record("invoice:inv_1:collect:v1"))
    store.transition(written, S.UNKNOWN, now=T0, actor="worker")
    trail = store.audit_trail("default", written.intent_key)
    assert len(trail) == 1
    with pytest.raises(Exception, match="append-only"):
        raw_audit_statement(store, statement, request)
    assert store.audit_trail("default", written.intent_key) == trail


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_postgres_v2_ledger_upgrades_to_one_audit_key(store_at_version: Callable[[int], str]) -> None:
    url = store_at_version(2)
    for version, target in enumerate(["prepared", "in_flight"], start=1):
        raw(
            url,
            "INSERT INTO {schema}.effect_audit (tenant_id, intent_key, at, from_status, to_status, version, actor, "
            f"detail) VALUES ('default', 'invoice:inv_1:collect:v1', now(), NULL, '{target}', {version}, "
            "'old-release', '{{}}')",
        )
    store = open_store(url)
    try:
        before = store.audit_trail("default", "invoice:inv_1:collect:v1")
        store.migrate()
        assert store.audit_trail("default", "invoice:inv_1:collect:v1") == before
        assert isinstance(store, PostgresStore)
        indexes = raw(
            url, f"SELECT indexdef FROM pg_indexes WHERE schemaname = '{store.schema}' AND tablename = 'effect_audit'"
        )
        assert [row[0].split(" USING ")[1] for row in indexes] == ["btree (tenant_id, intent_key, id)"]
        written, _ = store.insert_if_absent(record("invoice:inv_1:collect:v1"))
        store.transition(written, S.IN_FLIGHT, now=T0, actor="new-release")
        assert len(store.audit_trail("default", "invoice:inv_1:collect:v1")) == 3
        store.save_reconciler_cursor("cron", (T0, "default", "invoice:inv_1:collect:v1"))  # v5's table
        assert store.reconciler_cursor("cron") == (T0, "default", "invoice:inv_1:collect:v1")
    finally:
        store.close()


def raw(url: str, statement: str) -> list[tuple[Any, ...]]:
    """Run ``statement`` behind the store's back, as an operator or another tool would; ``{schema}`` is where
    the ledger's tables live (``main`` on SQLite). Its rows, if it returns any."""
    if url.startswith("sqlite:///"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)) as conn:
            return conn.execute(statement.format(schema="main")).fetchall()
    conninfo, _, schema = url.rpartition("?schema=")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        cursor = conn.execute(sql.SQL(statement).format(schema=sql.Identifier(schema)))  # type: ignore[arg-type]
        return cursor.fetchall() if cursor.description else []


def test_a_ledger_on_a_store_lacking_migrations_is_refused_up_front(store_at_version: Callable[[int], str]) -> None:
    """The documented recipe builds the store and hands it to Ledger: unmigrated, every call failed with a raw
    driver error (no such column lease_token, no table reconciler_cursors), call after call."""
    store = open_store(store_at_version(3))
    try:
        with pytest.raises(MigrationsPending, match=r"lacks schema migration\(s\) 4, 5, 6: run `safe-effects migrate`"):
            Ledger(store)
        assert store.pending_migrations() == [4, 5, 6]
        store.migrate()
        assert Ledger(store).store is store
    finally:
        store.close()


# other tools' bookkeeping tables of the same name, as an application sharing the file or schema keeps them
FOREIGN_BOOKKEEPING = {
    "golang-migrate": ("version bigint NOT NULL PRIMARY KEY, dirty boolean NOT NULL", "(2, false)"),
    "dbmate": ("version varchar(128) PRIMARY KEY", "('20240101120000')"),
    "home-grown": (
        "version integer PRIMARY KEY, applied_at text NOT NULL",
        ", ".join(f"({n}, 'x')" for n in range(1, 8)),
    ),
}


@pytest.mark.parametrize("tool", FOREIGN_BOOKKEEPING)
def test_another_tools_schema_migrations_table_is_refused_and_left_alone(
    fresh_store_url: Callable[[], str], backend: str, tool: str
) -> None:
    """Read as the ledger's, a home-grown runner's versions 1-7 made migrate say "up to date" with no ledger
    table there; golang-migrate's or dbmate's columns failed the first migration with a raw driver error."""
    url = fresh_store_url()
    columns, rows = FOREIGN_BOOKKEEPING[tool]
    if backend == "postgres":
        raw(url, "CREATE SCHEMA {schema}")
    raw(url, f"CREATE TABLE {{schema}}.schema_migrations ({columns})")
    raw(url, f"INSERT INTO {{schema}}.schema_migrations VALUES {rows}")
    kept = raw(url, "SELECT * FROM {schema}.schema_migrations")

    with pytest.raises(StoreNotReady, match="another migration tool") as refused:
        Ledger.open(url)

    assert "safe-effects migrate" not in str(refused.value)
    store = open_store(url)
    try:
        with pytest.raises(StoreNotReady, match="another migration tool"):
            store.pending_migrations()
    finally:
        store.close()
    assert raw(url, "SELECT * FROM {schema}.schema_migrations") == kept
    with pytest.raises((sqlite3.OperationalError, psycopg.errors.UndefinedTable)):
        raw(url, "SELECT 1 FROM {schema}.effect_intents")  # no ledger table was made


def privileges(url: str, table: str) -> list[tuple[str, str, bool]]:
    """Who holds what on ``table`` by grant (not by owning it)."""
    return raw(
        url,
        "SELECT acl.grantee::regrole::text, acl.privilege_type, acl.is_grantable FROM pg_class AS c, "
        f"aclexplode(c.relacl) AS acl WHERE c.oid = '{{schema}}.{table}'::regclass AND acl.grantee <> c.relowner "
        "ORDER BY 1, 2",
    )


def test_a_ledger_holding_two_unsettled_versions_of_an_action_is_told_to_settle_one_before_migration_6(
    store_at_version: Callable[[int], str],
) -> None:
    """Migration 6's index allows one unsettled version per action; a ledger where the race it closes already
    left two gets a refusal naming them, not a raw driver error, and is left as it was."""
    store = open_store(store_at_version(5))
    try:
        for key in ("invoice:inv_1:collect:v1", "invoice:inv_1:collect:v2", "invoice:inv_2:collect:v1"):
            store.insert_if_absent(record(key))
        with pytest.raises(StoreNotReady, match=r"cannot be applied: invoice:inv_1:collect:vN \(tenant default\)"):
            store.migrate()
        assert store.pending_migrations() == [6]
        assert len(store.list_by_status([S.PREPARED])) == 3
        first = store.get("default", "invoice:inv_1:collect:v1")
        assert first is not None
        store.transition(first, S.REJECTED, now=T0, actor="operator:bob")  # withdrawn
        assert store.migrate() == [6]
    finally:
        store.close()


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_table_an_upgrade_creates_carries_the_rights_roles_hold_on_effect_intents(
    store_at_version: Callable[[int], str], worker_role: WorkerRole
) -> None:
    """Workers granted DML on the ledger's tables (docs/operations.md) before an upgrade: the upgrade's new
    table must not lock them out (a reconciler failed every sweep on reconciler_cursors, migration 5)."""
    url = store_at_version(4)
    schema = url.rpartition("?schema=")[2]
    worker_role.grant_dml(schema)
    raw(url, "GRANT SELECT ON {schema}.effect_intents TO PUBLIC")
    raw(url, f'GRANT TRUNCATE ON {{schema}}.effect_intents TO "{worker_role.name}" WITH GRANT OPTION')
    owner = open_store(url)
    worker = open_store(worker_role.url(url))
    try:
        assert owner.migrate() == [5, 6]

        assert privileges(url, "reconciler_cursors") == privileges(url, "effect_intents")
        worker.save_reconciler_cursor("cron", (T0, "default", "invoice:inv_1:collect:v1"))
        assert worker.reconciler_cursor("cron") == (T0, "default", "invoice:inv_1:collect:v1")
    finally:
        worker.close()
        owner.close()


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_role_refused_a_table_is_told_which_grant_to_ask_for(
    store_url: str, worker_role: WorkerRole, pg_url: str
) -> None:
    """A role granted DML table by table, or before a table existed: a raw InsufficientPrivilege said neither
    which role nor what to grant. The grant the message names lets the same call through."""
    schema = store_url.rpartition("?schema=")[2]
    worker_role.grant_dml(schema)
    raw(store_url, f'REVOKE ALL ON {{schema}}.reconciler_cursors FROM "{worker_role.name}"')
    worker = open_store(worker_role.url(store_url))
    try:
        with pytest.raises(StorePermissionDenied, match="permission denied for table reconciler_cursors") as refused:
            worker.reconciler_cursor("cron")
        grant = str(refused.value).partition("as the schema's owner run ")[2].partition(" (docs/")[0]
        assert f'ON ALL TABLES IN SCHEMA "{schema}" TO "{worker_role.name}"' in grant
        with psycopg.connect(pg_url, autocommit=True) as owner:
            for statement in grant.split("; "):
                owner.execute(statement.encode())

        assert worker.reconciler_cursor("cron") is None
    finally:
        worker.close()
