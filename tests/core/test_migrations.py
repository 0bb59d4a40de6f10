"""Schema migrations: an existing ledger upgrades in place, keeps its history, and stays append-only."""

from __future__ import annotations

import sqlite3
import uuid
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import pytest

from safe_effects import EffectRecord, EffectStatus, IntentKey, PostgresStore, SQLiteStore, Store
from safe_effects._migrations import MIGRATIONS, SQLITE_BOOKKEEPING

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


def sqlite_at_version(path: Path, version: int) -> None:
    """A SQLite ledger migrated only up to ``version``, as a deployment of that release left it."""
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute(SQLITE_BOOKKEEPING)
        for migration in MIGRATIONS:
            if migration.version > version:
                break
            for statement in migration.sqlite:
                conn.execute(statement)
            conn.execute("INSERT INTO schema_migrations VALUES (?, ?)", (migration.version, "2026-01-01T00:00:00Z"))


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


def test_sqlite_v2_ledger_upgrades_keeping_its_audit_trail(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    sqlite_at_version(path, 2)
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


def test_postgres_v2_ledger_upgrades_to_one_audit_key(pg_url: str) -> None:
    import psycopg
    from psycopg import sql

    from safe_effects._migrations import POSTGRES_BOOKKEEPING

    schema = f"se_test_v2_{uuid.uuid4().hex[:10]}"
    name = sql.Identifier(schema)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        try:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(name))
            conn.execute(sql.SQL(POSTGRES_BOOKKEEPING).format(schema=name))  # type: ignore[arg-type]
            for migration in MIGRATIONS[:2]:
                for statement in migration.postgres:
                    conn.execute(sql.SQL(statement).format(schema=name))  # type: ignore[arg-type]
                conn.execute(
                    sql.SQL("INSERT INTO {}.schema_migrations (version) VALUES (%s)").format(name), (migration.version,)
                )
            for version, target in enumerate(["prepared", "in_flight"], start=1):
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {}.effect_audit (tenant_id, intent_key, at, from_status, to_status, version, "
                        "actor, detail) VALUES ('default', 'invoice:inv_1:collect:v1', now(), NULL, %s, %s, "
                        "'old-release', '{{}}')"
                    ).format(name),
                    (target, version),
                )
            store = PostgresStore(pg_url, schema=schema)
            try:
                before = store.audit_trail("default", "invoice:inv_1:collect:v1")
                store.migrate()
                assert store.audit_trail("default", "invoice:inv_1:collect:v1") == before
                indexes = conn.execute(
                    "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = 'effect_audit'", (schema,)
                ).fetchall()
                assert [row[0].split(" USING ")[1] for row in indexes] == ["btree (tenant_id, intent_key, id)"]
                written, _ = store.insert_if_absent(record("invoice:inv_1:collect:v1"))
                store.transition(written, S.IN_FLIGHT, now=T0, actor="new-release")
                assert len(store.audit_trail("default", "invoice:inv_1:collect:v1")) == 3
                store.save_reconciler_cursor("cron", (T0, "default", "invoice:inv_1:collect:v1"))  # v5's table
                assert store.reconciler_cursor("cron") == (T0, "default", "invoice:inv_1:collect:v1")
            finally:
                store.close()
        finally:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(name))
