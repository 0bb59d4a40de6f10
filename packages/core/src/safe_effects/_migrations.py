"""Versioned DDL for both stores: append a Migration, never edit an applied one.

PostgreSQL statements name tables as ``{schema}.table``; the store fills ``{schema}`` with a quoted
``psycopg.sql.Identifier`` (so literal braces in a statement are written ``{{`` and ``}}``).

A PostgreSQL migration that creates a table ends with ``_postgres_grants_like_intents(table)``: workers may
run as a role with DML rights on the ledger's tables only, granted before the upgrade, which no new table
would otherwise carry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ._errors import StoreNotReady


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema version: the statements that build it on each dialect, run in one transaction."""

    version: int
    sqlite: tuple[str, ...]
    postgres: tuple[str, ...]


SQLITE_BOOKKEEPING = (
    "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"
)
POSTGRES_BOOKKEEPING = (
    "CREATE TABLE IF NOT EXISTS {schema}.schema_migrations "
    "(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
)


def _postgres_grants_like_intents(table: str) -> tuple[str, ...]:
    """Every privilege a role (or PUBLIC) holds on effect_intents, granted on the new ``table`` too, so that
    an upgrade does not lock the workers' roles out of it.

    Read from the catalog (``aclexplode``): information_schema shows only grants the migrating role takes
    part in. The schema goes on the transaction's search path, so no name is quoted inside the DO block.
    """
    return (
        "SET LOCAL search_path TO {schema}",
        f"""DO $grants$
        DECLARE
            held record;
        BEGIN
            FOR held IN
                SELECT acl.grantee, acl.privilege_type, acl.is_grantable
                FROM pg_class AS intents, aclexplode(intents.relacl) AS acl
                WHERE intents.oid = 'effect_intents'::regclass
                  AND acl.grantee <> (SELECT relowner FROM pg_class WHERE oid = '{table}'::regclass)
            LOOP
                EXECUTE format(
                    'GRANT %s ON %s TO %s%s',
                    held.privilege_type,
                    '{table}'::regclass,
                    CASE held.grantee WHEN 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(held.grantee)) END,
                    CASE WHEN held.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END
                );
            END LOOP;
        END $grants$""",
    )


# the audit table refuses UPDATE and DELETE (v1, and again after v3 rebuilt the table)
_SQLITE_AUDIT_APPEND_ONLY = (
    """CREATE TRIGGER effect_audit_no_update BEFORE UPDATE ON effect_audit
       BEGIN SELECT RAISE(ABORT, 'effect_audit is append-only'); END""",
    """CREATE TRIGGER effect_audit_no_delete BEFORE DELETE ON effect_audit
       BEGIN SELECT RAISE(ABORT, 'effect_audit is append-only'); END""",
)

_V1_SQLITE = (
    """CREATE TABLE effect_intents (
        tenant_id TEXT NOT NULL,
        intent_key TEXT NOT NULL,
        provider TEXT NOT NULL,
        operation TEXT NOT NULL,
        request_digest TEXT NOT NULL,
        status TEXT NOT NULL,
        version INTEGER NOT NULL,
        workflow_id TEXT,
        step_id TEXT,
        provider_key TEXT,
        attempt_count INTEGER NOT NULL,
        lease_owner TEXT,
        lease_expires_at TEXT,
        provider_result_id TEXT,
        response_digest TEXT,
        last_error_class TEXT,
        last_error_code TEXT,
        summary TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        first_dispatched_at TEXT,
        dispatched_at TEXT,
        resolved_at TEXT,
        resolution TEXT,
        compensates TEXT,
        compensated_by TEXT,
        PRIMARY KEY (tenant_id, intent_key)
    )""",
    "CREATE INDEX effect_intents_status_updated ON effect_intents (status, updated_at)",
    "CREATE INDEX effect_intents_provider_key ON effect_intents (provider, provider_key)",
    """CREATE TABLE effect_audit (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        tenant_id TEXT NOT NULL,
        intent_key TEXT NOT NULL,
        at TEXT NOT NULL,
        from_status TEXT,
        to_status TEXT NOT NULL,
        version INTEGER NOT NULL,
        actor TEXT NOT NULL,
        reason TEXT,
        detail TEXT NOT NULL
    )""",
    "CREATE INDEX effect_audit_intent ON effect_audit (tenant_id, intent_key, id)",
    *_SQLITE_AUDIT_APPEND_ONLY,
    """CREATE TABLE effect_evidence (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        tenant_id TEXT NOT NULL,
        intent_key TEXT NOT NULL,
        provider TEXT NOT NULL,
        source TEXT NOT NULL,
        event_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        verdict TEXT NOT NULL,
        provider_result_id TEXT,
        received_at TEXT NOT NULL,
        detail TEXT NOT NULL,
        UNIQUE (provider, source, event_id)
    )""",
    "CREATE INDEX effect_evidence_intent ON effect_evidence (tenant_id, intent_key)",
)

_V1_POSTGRES = (
    """CREATE TABLE {schema}.effect_intents (
        tenant_id text NOT NULL,
        intent_key text NOT NULL,
        provider text NOT NULL,
        operation text NOT NULL,
        request_digest text NOT NULL,
        status text NOT NULL,
        version integer NOT NULL,
        workflow_id text,
        step_id text,
        provider_key text,
        attempt_count integer NOT NULL,
        lease_owner text,
        lease_expires_at timestamptz,
        provider_result_id text,
        response_digest text,
        last_error_class text,
        last_error_code text,
        summary jsonb NOT NULL,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL,
        first_dispatched_at timestamptz,
        dispatched_at timestamptz,
        resolved_at timestamptz,
        resolution jsonb,
        compensates text,
        compensated_by text,
        PRIMARY KEY (tenant_id, intent_key)
    )""",
    "CREATE INDEX effect_intents_status_updated ON {schema}.effect_intents (status, updated_at)",
    "CREATE INDEX effect_intents_provider_key ON {schema}.effect_intents (provider, provider_key)",
    """CREATE TABLE {schema}.effect_audit (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        tenant_id text NOT NULL,
        intent_key text NOT NULL,
        at timestamptz NOT NULL,
        from_status text,
        to_status text NOT NULL,
        version integer NOT NULL,
        actor text NOT NULL,
        reason text,
        detail jsonb NOT NULL
    )""",
    "CREATE INDEX effect_audit_intent ON {schema}.effect_audit (tenant_id, intent_key, id)",
    """CREATE FUNCTION {schema}.effect_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN RAISE EXCEPTION 'effect_audit is append-only'; END $$""",
    """CREATE TRIGGER effect_audit_append_only BEFORE UPDATE OR DELETE ON {schema}.effect_audit
       FOR EACH ROW EXECUTE FUNCTION {schema}.effect_audit_append_only()""",
    """CREATE TABLE {schema}.effect_evidence (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        tenant_id text NOT NULL,
        intent_key text NOT NULL,
        provider text NOT NULL,
        source text NOT NULL,
        event_id text NOT NULL,
        kind text NOT NULL,
        verdict text NOT NULL,
        provider_result_id text,
        received_at timestamptz NOT NULL,
        detail jsonb NOT NULL,
        UNIQUE (provider, source, event_id)
    )""",
    "CREATE INDEX effect_evidence_intent ON {schema}.effect_evidence (tenant_id, intent_key)",
)

# v2: operator resolutions waiting for a second approver (two-person rule); at most one pending per intent
_V2_SQLITE = (
    """CREATE TABLE effect_approvals (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        tenant_id TEXT NOT NULL,
        intent_key TEXT NOT NULL,
        expected_version INTEGER NOT NULL,
        to_status TEXT NOT NULL,
        requested_by TEXT NOT NULL,
        reason TEXT NOT NULL,
        evidence TEXT,
        provider_result_id TEXT,
        created_at TEXT NOT NULL,
        state TEXT NOT NULL,
        decided_by TEXT,
        decision_reason TEXT,
        resolved_at TEXT
    )""",
    "CREATE UNIQUE INDEX effect_approvals_one_pending ON effect_approvals (tenant_id, intent_key) "
    "WHERE state = 'pending'",
    "CREATE INDEX effect_approvals_intent ON effect_approvals (tenant_id, intent_key, id)",
)

_V2_POSTGRES = (
    """CREATE TABLE {schema}.effect_approvals (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        tenant_id text NOT NULL,
        intent_key text NOT NULL,
        expected_version integer NOT NULL,
        to_status text NOT NULL,
        requested_by text NOT NULL,
        reason text NOT NULL,
        evidence text,
        provider_result_id text,
        created_at timestamptz NOT NULL,
        state text NOT NULL,
        decided_by text,
        decision_reason text,
        resolved_at timestamptz
    )""",
    "CREATE UNIQUE INDEX effect_approvals_one_pending ON {schema}.effect_approvals (tenant_id, intent_key) "
    "WHERE state = 'pending'",
    "CREATE INDEX effect_approvals_intent ON {schema}.effect_approvals (tenant_id, intent_key, id)",
)

# v3: the audit trail keyed by intent. On SQLite each audit row used to dirty three pages (the table's
# last leaf, the (tenant, intent, id) index, and sqlite_sequence for AUTOINCREMENT), a third of every
# claim's and confirm's WAL frames. Stored WITHOUT ROWID under its primary key (tenant_id, intent_key, id),
# an audit row is one b-tree insert next to its intent's earlier rows. ``id`` becomes a per-intent sequence,
# assigned in the insert under the write lock (max + 1), so it keeps ordering an intent's trail and carries
# on past purges (audit rows are never deleted). Existing ids are kept.
# PostgreSQL keeps its identity ids but trades the (id) primary key plus the (tenant_id, intent_key, id)
# index for one primary key on (tenant_id, intent_key, id): one b-tree insert per audit row instead of two.
# Building the new key locks the table for the length of one index build.
_V3_SQLITE = (
    """CREATE TABLE effect_audit_v3 (
        tenant_id TEXT NOT NULL,
        intent_key TEXT NOT NULL,
        id INTEGER NOT NULL,
        at TEXT NOT NULL,
        from_status TEXT,
        to_status TEXT NOT NULL,
        version INTEGER NOT NULL,
        actor TEXT NOT NULL,
        reason TEXT,
        detail TEXT NOT NULL,
        PRIMARY KEY (tenant_id, intent_key, id)
    ) WITHOUT ROWID""",
    "INSERT INTO effect_audit_v3 SELECT tenant_id, intent_key, id, at, from_status, to_status, version, actor, "
    "reason, detail FROM effect_audit",
    "DROP TABLE effect_audit",  # its index and append-only triggers go with it, before any trigger could fire
    "ALTER TABLE effect_audit_v3 RENAME TO effect_audit",
    *_SQLITE_AUDIT_APPEND_ONLY,
)

_V3_POSTGRES = (
    "ALTER TABLE {schema}.effect_audit DROP CONSTRAINT effect_audit_pkey",
    "ALTER TABLE {schema}.effect_audit ADD PRIMARY KEY (tenant_id, intent_key, id)",
    "DROP INDEX {schema}.effect_audit_intent",
)

# v4: the audit trail keeps what the record alone cannot tell. An intent's creation and its dispatcher's own
# confirmed or rejected answer are no longer repeated there: the record says who wrote its latest version
# (``updated_by``), which worker sent its latest attempt (``dispatched_by``, kept after the lease ends) and
# which claim holds its lease (``lease_token``, the proof UnsentClaims reads, which a claim's audit row
# carried before). They are NULL on records last written before v4, whose audit trail names the writer.
# Adding a nullable column rewrites no rows on either database.
_V4_COLUMNS = ("lease_token", "updated_by", "dispatched_by")
_V4_SQLITE = tuple(f"ALTER TABLE effect_intents ADD COLUMN {column} TEXT" for column in _V4_COLUMNS)
_V4_POSTGRES = tuple(f"ALTER TABLE {{schema}}.effect_intents ADD COLUMN {column} text" for column in _V4_COLUMNS)

# v5: where a named reconciler's last sweep stopped, so that a reconciler run by cron (a new process every
# time) continues round robin instead of starting again from the oldest unknowns, which an inconclusive
# lookup leaves in place: a backlog of them larger than one sweep would otherwise hide every newer one.
# One row per name, written once per sweep; a new table, so no existing row is touched.
_V5_SQLITE = (
    """CREATE TABLE reconciler_cursors (
        name TEXT PRIMARY KEY,
        updated_at TEXT NOT NULL,
        tenant_id TEXT NOT NULL,
        intent_key TEXT NOT NULL
    )""",
)
_V5_POSTGRES = (
    """CREATE TABLE {schema}.reconciler_cursors (
        name text PRIMARY KEY,
        updated_at timestamptz NOT NULL,
        tenant_id text NOT NULL,
        intent_key text NOT NULL
    )""",
    *_postgres_grants_like_intents("reconciler_cursors"),
)

# v6: at most one unsettled version of an action. Refusing ``...:v2`` while ``...:v1`` is prepared, in flight or
# unknown was a read before the insert: two processes starting v1 and v2 at once both passed it, and both
# charged. This partial unique index makes the database refuse the second insert instead. An action is its
# key without the version number (keys end in ``:v<digits>``, so ``rtrim`` of the digits leaves ``...:v``),
# the same expression on both databases. Building it fails on a ledger that already holds two unsettled
# versions of one action; settle one of them first (the CHANGELOG says how).
ONE_UNSETTLED_VERSION = "effect_intents_one_unsettled_version"
_ACTION = "rtrim(intent_key, '0123456789')"  # the index's expression: a key less its version number
_UNSETTLED = "status IN ('prepared', 'in_flight', 'unknown')"  # the index's predicate
_V6_SQLITE = (
    f"CREATE UNIQUE INDEX {ONE_UNSETTLED_VERSION} ON effect_intents (tenant_id, {_ACTION}) WHERE {_UNSETTLED}",
)
_V6_POSTGRES = (
    f"CREATE UNIQUE INDEX {ONE_UNSETTLED_VERSION} ON {{schema}}.effect_intents (tenant_id, {_ACTION}) "
    f"WHERE {_UNSETTLED}",
)

# the statements that name what the index refuses, ``{table}`` and the placeholder ``{p}`` the store's: what
# blocks building it (actions with several unsettled versions), and, read after an insert it refused, the other
# unsettled version of that insert's action
SEVERAL_UNSETTLED_VERSIONS = (
    f"SELECT tenant_id, {_ACTION} FROM {{table}} WHERE {_UNSETTLED} "
    "GROUP BY 1, 2 HAVING count(*) > 1 ORDER BY 1, 2 LIMIT 5"
)
OTHER_UNSETTLED_VERSION = (
    f"SELECT intent_key, status, provider FROM {{table}} WHERE tenant_id = {{p}} "
    f"AND {_ACTION} = rtrim({{p}}, '0123456789') AND intent_key <> {{p}} AND {_UNSETTLED} LIMIT 1"
)


def blocked_by_versions(actions: Sequence[Sequence[str]]) -> StoreNotReady:
    """Migration 6 refused: ``actions`` (tenant, key less its version number) each hold several unsettled versions."""
    named = ", ".join(f"{action}N (tenant {tenant})" for tenant, action in actions) or "an action"
    return StoreNotReady(
        f"schema migration 6 (at most one unsettled version of an action) cannot be applied: {named} has more "
        "than one version prepared, in flight or unknown. Settle all but one of each (`safe-effects list "
        "--key-prefix ...` shows them; reconcile, or resolve them), then migrate again; nothing was changed"
    )


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, _V1_SQLITE, _V1_POSTGRES),
    Migration(2, _V2_SQLITE, _V2_POSTGRES),
    Migration(3, _V3_SQLITE, _V3_POSTGRES),
    Migration(4, _V4_SQLITE, _V4_POSTGRES),
    Migration(5, _V5_SQLITE, _V5_POSTGRES),
    Migration(6, _V6_SQLITE, _V6_POSTGRES),
)
