"""The PostgreSQL store: psycopg 3 with a connection pool, one round trip per claim and per confirm.

Writes are single statements on autocommit connections: a data-modifying CTE changes the record and
appends its audit row atomically, so a claim or a confirm costs one round trip and one commit.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Collection, Mapping
from contextlib import nullcontext
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from ._admission import version_in_doubt
from ._approvals import Approval, ApprovalState, decided_meanwhile, decision_of
from ._bookkeeping import check_columns, check_versions
from ._errors import InvalidInput, MissingDependency, StaleRecord
from ._fork import keep_inherited, renew_in_children
from ._migrations import (
    MIGRATIONS,
    ONE_UNSETTLED_VERSION,
    OTHER_UNSETTLED_VERSION,
    POSTGRES_BOOKKEEPING,
    SEVERAL_UNSETTLED_VERSIONS,
    blocked_by_versions,
)
from ._numbers import check_count, check_seconds
from ._pg_connections import (
    Checkout,
    Configure,
    Pooled,
    PoolSweep,
    close_at_exit,
    denied,
    one_line,
    pool_connection_options,
    primary,
    store_connection,
    unavailable,
)
from ._pg_pool import interrupt_safe_pool
from ._pg_pooling import SESSION_POOLING, TRANSACTION_POOLING, checked_pool_mode
from ._pg_refusals import migration_refused
from ._records import AuditEntry, EffectRecord, Evidence, EvidenceVerdict
from ._rows import (
    AUDIT_COLUMNS,
    RECORD_COLUMNS,
    RECORD_FIELDS,
    Codec,
    RowEncoder,
    check_cursor_name,
    check_limit,
    cursor_values,
    from_row,
    json_text,
    list_statement,
    lookup_text,
    oldest_keys,
    plan_transition,
    purge_statuses,
    row_encoder,
    stale,
    stored_value,
    stored_values,
    to_row,
    utc,
)
from ._states import EffectStatus
from ._store import kind_of
from ._tenants import check_tenant

if TYPE_CHECKING:
    from psycopg import Connection, Cursor, sql
    from psycopg.rows import DictRow, TupleRow
    from psycopg_pool import ConnectionPool

_EVIDENCE_COLUMNS = tuple("tenant_id" if f == "tenant" else f for f in Evidence.model_fields)
_APPROVAL_COLUMNS = tuple("tenant_id" if f == "tenant" else f for f in Approval.model_fields)
# audit columns the CTE takes from the written row; the rest are parameters, cast to their column types
_FROM_ROW = ("tenant_id", "intent_key", "version")
_AUDIT_CASTS = {
    "at": "timestamptz",
    "from_status": "text",
    "to_status": "text",
    "actor": "text",
    "reason": "text",
    "detail": "jsonb",
}
_AUDIT_PARAMS = tuple(_AUDIT_CASTS)  # AuditEntry fields, in the order the statements bind them
_MAX_IDENTIFIER_BYTES = 63  # PostgreSQL silently truncates longer names (NAMEDATALEN - 1)


_log = logging.getLogger("safe_effects")
DEFAULT_SCHEMA = "safe_effects"


def _reads_binary(conn: Connection[Any]) -> bool:
    """Whether a record is read back in binary on ``conn``: on a caller's own connection (``prepare(connection=
    ...)``), which may have any DateStyle while psycopg reads text timestamps in ISO style only; not on the
    pool's (set to ISO), nor through a client-side binding cursor (behind PgBouncer), which reads no binary."""
    import psycopg  # noqa: PLC0415  # optional extra, present once a PostgresStore is made

    return not isinstance(conn, store_connection()) and not issubclass(conn.cursor_factory, psycopg.ClientCursor)


_HOW_TO_GET = (
    " (psycopg2 and async connections are not supported; SQLAlchemy on postgresql+psycopg: "
    "session.connection().connection.driver_connection; Django: django.db.connection.connection)"
)
# the types of the record's columns: a caller's connection may load them its own way (Django's loads jsonb
# as text and, with USE_TZ off, timestamps as naive local times)
_RECORD_TYPES = ("text", "int4", "timestamptz", "jsonb")


def _load_as_psycopg_does(cursor: Cursor[Any]) -> None:
    """Give ``cursor`` psycopg's own loaders for the record's types (a cursor's are its own copy)."""
    import psycopg  # noqa: PLC0415  # optional extra, present once a PostgresStore is made

    for name in _RECORD_TYPES:
        oid = psycopg.adapters.types[name].oid
        for form in (psycopg.pq.Format.TEXT, psycopg.pq.Format.BINARY):
            if (loader := psycopg.adapters.get_loader(oid, form)) is not None:
                cursor.adapters.register_loader(oid, loader)


def _database_of(conn: Connection[Any]) -> tuple[str, str]:
    """(database name, its server's start time): what tells two databases apart, from any role. The time is
    read as epoch microseconds, which no DateStyle or TimeZone of the caller's connection changes."""
    row = conn.execute(
        "SELECT current_database(), (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint"
    ).fetchone()
    assert row is not None
    return str(row[0]), datetime.fromtimestamp(int(row[1]) / 1_000_000, UTC).isoformat()


def _checked_settings(
    conninfo: object, schema: str, *, min_size: object, max_size: object, timeout: object, connect: object
) -> str:
    """The schema, and the pool's settings refused by name before anything connects (psycopg_pool would raise a
    bare error); returns the checked schema."""
    if not isinstance(conninfo, str):
        raise InvalidInput(f"conninfo must be a str, got {type(conninfo).__name__}")
    smallest, largest = check_count("min_size", min_size, minimum=0), check_count("max_size", max_size)
    if smallest > largest:
        raise InvalidInput(f"min_size ({smallest}) must not be more than max_size ({largest})")
    check_seconds("timeout", timeout, positive=True)
    check_count("connect_timeout", connect)  # libpq's 0 would wait for ever
    return _checked_schema(schema)


def _checked_schema(schema: str) -> str:
    """``schema`` if this store can use it as a name, else :class:`InvalidInput` before anything is created."""
    if not isinstance(schema, str):
        raise InvalidInput(f"schema must be a str, got {type(schema).__name__}")
    if not schema:
        raise InvalidInput("schema must not be empty")
    if len(schema.encode()) > _MAX_IDENTIFIER_BYTES:
        # two longer names that share their first 63 bytes would silently be one schema, one ledger
        raise InvalidInput(
            f"schema {schema[:80]!r} is {len(schema.encode())} bytes; PostgreSQL names hold at most "
            f"{_MAX_IDENTIFIER_BYTES}"
        )
    if "%" in schema or "\x00" in schema:
        # statements are rendered once with the schema inside, then run with parameters: psycopg would read
        # a % in the name as a placeholder (and PostgreSQL holds no NUL)
        raise InvalidInput(f"schema {schema!r} holds a '%' or NUL character, which this store cannot use in names")
    return schema


class _VersionRefused(Exception):
    """A write met migration v6's index (another version of the action is unsettled): nothing was written."""


def _render(query: sql.Composable) -> bytes:
    """Rendered once at start-up: psycopg would otherwise re-escape every identifier on every execute."""
    return query.as_bytes(None)


def _scrape_statements(intents: sql.Identifier) -> tuple[bytes, bytes, bytes]:
    """What a metrics scrape reads (status counts, oldest first dispatch, earliest lease expiry), all of it
    unsettled records only, which the status index serves."""
    from psycopg import sql  # noqa: PLC0415  # optional extra, present once a PostgresStore is made

    return (
        _render(
            sql.SQL(
                "SELECT tenant_id, provider, status, count(*) FROM {} WHERE status = ANY(%s) "
                "GROUP BY tenant_id, provider, status ORDER BY tenant_id, provider, status"
            ).format(intents)
        ),
        _render(
            sql.SQL(
                "SELECT provider, min(coalesce(first_dispatched_at, updated_at)) FROM {} WHERE status = %s "
                "GROUP BY provider"
            ).format(intents)
        ),
        _render(
            sql.SQL(
                "SELECT provider, min(lease_expires_at) FROM {} WHERE status = %s AND lease_expires_at IS NOT NULL "
                "GROUP BY provider"
            ).format(intents)
        ),
    )


class PostgresStore:
    """A :class:`~safe_effects.Store` in one PostgreSQL schema (created by :meth:`migrate` if missing)."""

    _database: tuple[str, str] | None = None  # (name, server start), read when a caller's connection first asks

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 30.0,
        connect_timeout: int = 10,
        statement_timeout: float | None = 30.0,
        pool_mode: str = SESSION_POOLING,
    ) -> None:
        """``timeout``: seconds a call waits for a pooled connection before :class:`LedgerUnavailable`.
        ``connect_timeout``: libpq's bound on each new connection, unless the conninfo or ``PGCONNECT_TIMEOUT``
        sets one. ``statement_timeout``: seconds one statement may run (waiting on a lock included) before it
        is cancelled as :class:`LedgerUnavailable`, unless the connection already has a timeout (the URL's
        ``options``, ``PGOPTIONS``, the role or the database); ``None`` sets none. Migrations run without it.
        ``pool_mode``: ``"transaction"`` behind a pooler in transaction mode (PgBouncer's ``pool_mode =
        transaction``), see ``_pg_pooling``. The database is connected to here, so a wrong or unreachable one
        (or a pooler the pool mode does not match) fails the open."""
        try:
            import psycopg  # noqa: PLC0415  # optional extra: imported only when a PostgresStore is made
            from psycopg import sql  # noqa: PLC0415  # idem
            from psycopg.rows import dict_row  # noqa: PLC0415  # idem

            pool_class = interrupt_safe_pool()  # imports psycopg_pool
        except ImportError as error:
            raise MissingDependency("psycopg", "postgres") from error
        self.schema = _checked_settings(
            conninfo, schema, min_size=min_size, max_size=max_size, timeout=timeout, connect=connect_timeout
        )
        configure = Configure(statement_timeout, checked_pool_mode(pool_mode))  # checked before connecting
        # behind a transaction pooler a caller's own connection (prepare(connection=...)) must not prepare the
        # store's statements either: the pool's connections are told so once, a caller's per statement
        self._prepare = False if configure.pool_mode == TRANSACTION_POOLING else None
        self._connection_type, self._dict_row = psycopg.Connection, dict_row
        self._codec = Codec(
            time_out=lambda value: value,
            time_in=lambda value: value.astimezone(UTC),
            # JSON text, bound as an untyped string that PostgreSQL reads as the jsonb its column or cast
            # asks for: psycopg's C string dumper, where a Jsonb wrapper takes a Python dumper per value
            json_out=json_text,
            json_in=lambda value: value,
        )
        self._new_pool: Callable[[], ConnectionPool[Connection[TupleRow]]] = partial(
            pool_class,
            conninfo,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            kwargs=pool_connection_options(conninfo, connect_timeout, configure),
            connection_class=store_connection(),
            configure=configure,
            open=True,
        )
        self._open_pool(ready_within=min(timeout, float(connect_timeout)))
        renew_in_children(self)
        # every statement composed and rendered once, the schema as a quoted Identifier: no SQL is ever
        # string-formatted, and no round trip pays for re-rendering dozens of identifiers
        schema_id = sql.Identifier(self.schema)
        intents = sql.Identifier(self.schema, "effect_intents")
        audit = sql.Identifier(self.schema, "effect_audit")
        evidence = sql.Identifier(self.schema, "effect_evidence")
        schema_table = sql.Identifier(self.schema, "schema_migrations")
        self._record_row = row_encoder(EffectRecord, self._codec)
        self._audit_row = row_encoder(AuditEntry, self._codec, _AUDIT_PARAMS)
        cols = sql.SQL(", ").join(map(sql.Identifier, RECORD_COLUMNS))
        select = sql.SQL("SELECT {} FROM {} ").format(cols, intents)
        self._get = _render(select + sql.SQL("WHERE tenant_id = %s AND intent_key = %s"))
        self._assign = {
            field: _render(sql.SQL("{} = %s").format(sql.Identifier(column)))
            for field, column in zip(RECORD_FIELDS, RECORD_COLUMNS, strict=True)
        }
        # the written row stays in Python (the store returns the record it wrote): fetch only what the audit
        # row copies from it, and answer "was a row written" with a constant. Parameters are positional
        # (binding by name costs psycopg a mapping step per column): the record's or the changed fields,
        # then for an update the expected (tenant, key, status, version), then the audit row's own values.
        returned = sql.SQL(", ").join(map(sql.Identifier, _FROM_ROW))
        audit_insert = sql.SQL("INSERT INTO {} ({}) SELECT {} FROM changed").format(
            audit,
            sql.SQL(", ").join(map(sql.Identifier, (*_FROM_ROW, *_AUDIT_CASTS))),
            sql.SQL(", ").join(
                [
                    *map(sql.Identifier, _FROM_ROW),
                    *(sql.SQL("%s::{}").format(sql.SQL(cast)) for cast in _AUDIT_CASTS.values()),
                ]
            ),
        )
        self._insert = _render(
            # RETURNING, not the row count: a caller's connection in pipeline mode has no count until it syncs
            sql.SQL(
                "INSERT INTO {} ({}) VALUES ({}) ON CONFLICT (tenant_id, intent_key) DO NOTHING RETURNING 1"
            ).format(intents, cols, sql.SQL(", ").join([sql.SQL("%s")] * len(RECORD_COLUMNS)))
        )
        self._updates: dict[tuple[tuple[str, ...], bool], tuple[bytes, RowEncoder]] = {}  # filled by _update
        condition = " WHERE tenant_id = %s AND intent_key = %s AND status = %s AND version = %s "
        self._update_shapes = {  # audited: (head, tail)
            True: (
                _render(sql.SQL("WITH changed AS (UPDATE {} SET ").format(intents)),
                _render(
                    sql.SQL(condition + "RETURNING {}), audited AS ({}) SELECT 1 FROM changed").format(
                        returned, audit_insert
                    )
                ),
            ),
            False: (_render(sql.SQL("UPDATE {} SET ").format(intents)), _render(sql.SQL(condition))),
        }
        self._records_select = _render(select).decode().rstrip()  # list_statement composes per-status reads
        self._by_provider_key = _render(
            select + sql.SQL("WHERE provider = %s AND provider_key = %s ORDER BY created_at")
        )
        self._audit_trail = _render(
            sql.SQL("SELECT {} FROM {} WHERE tenant_id = %s AND intent_key = %s ORDER BY id").format(
                sql.SQL(", ").join(map(sql.Identifier, AUDIT_COLUMNS)), audit
            )
        )
        self._add_evidence = _render(
            sql.SQL(
                "INSERT INTO {} ({}) VALUES ({}) ON CONFLICT (provider, source, event_id) DO NOTHING RETURNING id"
            ).format(
                evidence,
                sql.SQL(", ").join(map(sql.Identifier, _EVIDENCE_COLUMNS)),
                sql.SQL(", ").join(map(sql.Placeholder, _EVIDENCE_COLUMNS)),
            )
        )
        self._evidence_for, self._evidence_of_verdicts = (
            _render(
                sql.SQL("SELECT {} FROM {} WHERE tenant_id = %s AND intent_key = %s {}ORDER BY received_at, id").format(
                    sql.SQL(", ").join(map(sql.Identifier, _EVIDENCE_COLUMNS)), evidence, sql.SQL(only)
                )
            )
            for only in ("", "AND verdict = ANY(%s) ")
        )
        self._status_counts, self._oldest, self._lease_expiry = _scrape_statements(intents)
        cursors = sql.Identifier(self.schema, "reconciler_cursors")
        self._cursor = _render(
            sql.SQL("SELECT updated_at, tenant_id, intent_key FROM {} WHERE name = %s").format(cursors)
        )
        self._save_cursor = _render(
            sql.SQL(
                "INSERT INTO {} (name, updated_at, tenant_id, intent_key) VALUES (%s, %s, %s, %s) ON CONFLICT (name) "
                "DO UPDATE SET updated_at = excluded.updated_at, tenant_id = excluded.tenant_id, "
                "intent_key = excluded.intent_key"
            ).format(cursors)
        )
        self._forget_cursor = _render(sql.SQL("DELETE FROM {} WHERE name = %s").format(cursors))
        self._purge_keys = _render(
            sql.SQL(
                "DELETE FROM {0} WHERE status = ANY(%(s)s) AND updated_at < %(cutoff)s AND (tenant_id, intent_key) IN "
                "(SELECT * FROM unnest(%(tenants)s::text[], %(keys)s::text[]))"
            ).format(intents)
        )
        self._migrations = {
            m.version: [_render(sql.SQL(s).format(schema=schema_id)) for s in m.postgres] for m in MIGRATIONS
        }
        self._bookkeeping = _render(sql.SQL(POSTGRES_BOOKKEEPING).format(schema=schema_id))
        self._create_schema = _render(sql.SQL("CREATE SCHEMA {}").format(schema_id))
        self._applied = _render(sql.SQL("SELECT version FROM {}").format(schema_table))
        # the bookkeeping table's columns (NULL while it is missing) and whether effect_intents exists
        self._bookkeeping_shape = _render(
            sql.SQL(
                "SELECT (SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute WHERE attrelid = "
                "to_regclass({}) AND attnum > 0 AND NOT attisdropped), to_regclass({}) IS NOT NULL"
            ).format(sql.Literal(_render(schema_table).decode()), sql.Literal(_render(intents).decode()))
        )
        self._record_version = _render(sql.SQL("INSERT INTO {} (version) VALUES (%s)").format(schema_table))

    def migrate(self) -> list[int]:
        """Apply pending migrations under a per-schema advisory lock, so concurrent callers run them once;
        returns the versions this call applied."""
        try:
            return self._migrate()
        except _VersionRefused:  # the transaction is rolled back: name what blocks it from a fresh one
            from psycopg import sql  # noqa: PLC0415  # optional extra, present once a PostgresStore exists

            query = sql.SQL(SEVERAL_UNSETTLED_VERSIONS.format(table="{}"))
            with self._checkout() as conn:
                actions = conn.execute(query.format(sql.Identifier(self.schema, "effect_intents"))).fetchall()
            raise blocked_by_versions(actions) from None

    def _migrate(self) -> list[int]:
        from psycopg.errors import UniqueViolation  # noqa: PLC0415  # optional extra, loaded by now

        lock = int.from_bytes(hashlib.sha256(f"safe_effects:{self.schema}".encode()).digest()[:8], signed=True)
        with self._checkout() as conn, conn.transaction():
            # an index built on a large table, or a wait for another process's migration, may take long: the
            # statement timeout must not cut it short, nor a lock timeout the wait for that migration. The DDL
            # keeps the URL's or role's lock timeout: it stops an ALTER queued behind an idle transaction from
            # holding up every read and write behind it
            conn.execute("SET LOCAL statement_timeout = 0")
            kept = conn.execute("SELECT current_setting('lock_timeout')").fetchone()
            conn.execute("SET LOCAL lock_timeout = 0")
            conn.execute("SELECT pg_advisory_xact_lock(%s::bigint)", (lock,))
            conn.execute("SELECT set_config('lock_timeout', %s, true)", (kept[0] if kept else "0",))
            applied = self._applied_versions(conn)
            pending = [version for version in self._migrations if version not in (applied or ())]
            if not pending:  # up to date: no DDL, which a role with DML rights may not run
                return pending
            try:
                if applied is None:  # a new ledger. Both checked first: CREATE ... IF NOT EXISTS needs the
                    # right to create (on the database, on the schema) even when the object exists
                    if not self._has_schema(conn):
                        conn.execute(self._create_schema)
                    conn.execute(self._bookkeeping)
                for version in pending:
                    for statement in self._migrations[version]:
                        conn.execute(statement)
                    conn.execute(self._record_version, (version,))
            except denied() as error:  # a worker's role: DML rights only
                raise migration_refused(primary(error), conn.info.user, self.schema, pending) from error
            except UniqueViolation as blocked:  # an index no existing rows may break (v6)
                if blocked.diag.constraint_name != ONE_UNSETTLED_VERSION:
                    raise
                raise _VersionRefused from None
        return pending

    def pending_migrations(self) -> list[int]:
        with self._checkout() as conn:
            applied = self._applied_versions(conn) or set()
        return [version for version in self._migrations if version not in applied]

    def database_time(self) -> datetime:
        """The server's clock now (``clock_timestamp()``, not the transaction's start): what the clocks of the
        workers on other hosts are held to."""
        with self._checkout() as conn:
            row = conn.execute("SELECT clock_timestamp()").fetchone()
        assert row is not None, "SELECT without FROM returns one row"
        moment: datetime = row[0]
        return moment

    def schema_exists(self) -> bool:
        """Whether the store's schema exists: a mistyped ``?schema=`` names none (``migrate`` would create it)."""
        with self._checkout() as conn:
            return self._has_schema(conn)

    def _has_schema(self, conn: Connection[Any]) -> bool:
        return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,)).fetchone() is not None

    def _applied_versions(self, conn: Connection[Any]) -> set[int] | None:
        """The versions the schema's bookkeeping table lists; None while the table (or schema) is missing.
        Another tool's table of that name is :class:`StoreNotReady` (see ``_bookkeeping``)."""
        where = f"the PostgreSQL schema {self.schema!r}"
        columns, has_intents = conn.execute(self._bookkeeping_shape).fetchone() or (None, False)
        if columns is None:
            return None
        check_columns(where, columns)
        applied = {row[0] for row in conn.execute(self._applied)}
        check_versions(where, applied, has_intents)
        return applied

    def close(self) -> None:
        self._pool.close()

    def _renew_after_fork(self) -> None:
        """The parent's sessions stay the parent's: a child's statements on them would interleave with its
        own on one socket. Kept unclosed (psycopg does not end a session from a process that did not open it),
        and a pool of the child's own takes their place; its threads and the sweep's did not survive the fork."""
        keep_inherited(self._pool, self._sweep)
        if not self._pool.closed:  # a store closed before the fork (a master that only migrated) stays closed
            self._open_pool()

    def _open_pool(self, *, ready_within: float | None = None) -> None:
        """A new pool and its sweep. ``ready_within``: wait that long for its first ``min_size`` connections,
        so a first call does not find it empty and open one more (a single-threaded worker held two, which
        counts against a pooler's max_client_conn); a fork's child does not wait, it connects on first use."""
        self._pool = self._new_pool()
        close_at_exit(self._pool, self.schema)
        self._sweep = PoolSweep(self._pool)
        if ready_within is None:
            return
        try:
            self._pool.wait(ready_within)
        except unavailable() as short:  # near a server's or pooler's connection limit: fewer, as before
            _log.warning(
                "the PostgreSQL pool did not open its min_size=%d connections within %g s (%s); going on with "
                "fewer, opened as calls need them", self._pool.min_size, ready_within, one_line(short),
            )  # fmt: skip
            self._open_pool()  # psycopg_pool closes a pool that was not ready in time

    def _checkout(self) -> Checkout:
        return Checkout(self._pool, self._sweep, unavailable(), self.schema)

    def insert_if_absent(self, record: EffectRecord, *, connection: Any = None) -> tuple[EffectRecord, bool]:
        """Insert ``record`` unless the key exists, one statement; see :class:`Store`."""
        params = self._record_row.values(record)
        if connection is None:
            with self._checkout() as conn:
                for _ in range(3):
                    try:
                        return self._insert_or_get(conn, record, params)
                    except _VersionRefused:  # autocommit: the connection is fine to read on
                        if (other := self._other_version(conn, record)) is not None:
                            raise version_in_doubt(record, other) from None
                        # gone: the same key recorded by another process at once, or the other version settled
                raise StaleRecord(f"intent {record.intent_key!r} kept clashing with another version while inserted")
        if not isinstance(connection, self._connection_type):
            raise InvalidInput(f"connection must be a psycopg (3) Connection, got {kind_of(connection)}{_HOW_TO_GET}")
        if connection.closed:
            raise InvalidInput(
                "connection is closed: prepare joins the caller's open transaction; nothing was recorded"
            )
        if connection.info.transaction_status.name == "INERROR":
            raise InvalidInput(
                "connection's transaction is aborted (a statement in it failed): roll it back and run the business "
                "change again; nothing was recorded"
            )
        if connection.autocommit and connection.info.transaction_status.name == "IDLE":
            # the row would commit at once and outlive a rollback of the business change it belongs with
            raise InvalidInput(
                "connection is in autocommit mode with no transaction open: prepare joins the caller's "
                "transaction, so pass a connection with autocommit off, or call it inside conn.transaction()"
            )
        self._check_same_database(connection)
        from psycopg.errors import ReadOnlySqlTransaction  # noqa: PLC0415  # optional extra, loaded by now

        try:
            return self._insert_or_get(connection, record, params)
        except ReadOnlySqlTransaction as refused:  # SET TRANSACTION READ ONLY, or a replica: the caller's to change
            raise InvalidInput(f"connection's transaction is read-only: {refused}; nothing was recorded") from None
        except _VersionRefused:  # the caller's transaction is aborted now: it must roll back, and is read no more
            with self._checkout() as conn:
                other = self._other_version(conn, record)
            if other is not None:
                raise version_in_doubt(record, other) from None
            raise StaleRecord(
                f"intent {record.intent_key!r} was recorded by another process at the same moment (or its other "
                "version settled just then): roll back this transaction and run the business change again"
            ) from None

    def _check_same_database(self, connection: Connection[Any]) -> None:
        """Refuse a caller's connection to another database: the row would land in whatever ledger schema of
        the same name is there (another environment's), where this ledger never looks. A database is told by
        its name and its server's start time, which any role may read without touching the caller's
        transaction; the store's own is read again once before a mismatch is believed (a restart)."""
        theirs = _database_of(connection)
        if theirs == self._database or theirs == (fresh := self._own_database()):
            return
        raise InvalidInput(
            f"connection is to database {theirs[0]!r} on a server started at {theirs[1]}, this ledger's store is "
            f"database {fresh[0]!r} on a server started at {fresh[1]}: prepare on a connection to the ledger's own "
            "database, in the same transaction as the business change"
        )

    def _own_database(self) -> tuple[str, str]:
        with self._checkout() as conn:
            self._database = _database_of(conn)
        return self._database

    def _insert_or_get(
        self, conn: Connection[Any], record: EffectRecord, params: list[Any]
    ) -> tuple[EffectRecord, bool]:
        from psycopg.errors import UniqueViolation  # noqa: PLC0415  # optional extra, loaded by now

        for _ in range(3):  # a purge may delete the conflicting row between the two statements
            # tuple rows for the writes: a dict row maker per statement is measurable at this rate
            try:
                written = self._writer(conn).execute(self._insert, params, prepare=self._prepare).fetchone()
            except UniqueViolation as refused:  # another version of the action is unsettled (migration v6)
                if refused.diag.constraint_name != ONE_UNSETTLED_VERSION:
                    raise
                # or the same key inserted at once by another process: ON CONFLICT handles its own index only,
                # and the other one may report the clash first
                raise _VersionRefused from None
            if written is not None:
                return record, True  # the row is exactly the record: no need to parse it back
            existing = self._fetch_one(conn, record.tenant, record.intent_key)
            if existing is not None:
                return existing, False
        raise StaleRecord(f"intent {record.intent_key!r} kept vanishing while being inserted")

    def _other_version(self, conn: Connection[Any], record: EffectRecord) -> tuple[str, str, str] | None:
        """The unsettled version of ``record``'s action that made the database refuse its insert (None: settled
        since)."""
        from psycopg import sql  # noqa: PLC0415  # optional extra, present once a PostgresStore exists

        intents = sql.Identifier(self.schema, "effect_intents")
        query = sql.SQL(OTHER_UNSETTLED_VERSION.format(table="{}", p="%s")).format(intents)  # a rare path
        key = record.intent_key
        found: tuple[str, str, str] | None = conn.execute(query, (record.tenant, key, key)).fetchone()
        return found

    def _fetch_one(self, conn: Connection[Any], tenant: str, intent_key: str) -> EffectRecord | None:
        with conn.cursor(row_factory=self._dict_row, binary=_reads_binary(conn)) as cur:
            if not isinstance(conn, store_connection()):
                _load_as_psycopg_does(cur)
            row: DictRow | None = cur.execute(self._get, (tenant, intent_key), prepare=self._prepare).fetchone()
        return from_row(EffectRecord, row, self._codec) if row is not None else None

    def get(self, tenant: str, intent_key: str) -> EffectRecord | None:
        check_tenant(tenant)
        lookup_text(intent_key, "intent_key")
        with self._checkout() as conn:
            return self._fetch_one(conn, tenant, intent_key)

    def transition(
        self,
        record: EffectRecord,
        to: EffectStatus,
        *,
        now: datetime,
        actor: str,
        reason: str | None = None,
        changes: Mapping[str, Any] | None = None,
        detail: Mapping[str, Any] | None = None,
        before_commit: Callable[[], None] | None = None,
        audited: bool = True,
        approval: Approval | None = None,
    ) -> EffectRecord:
        """Conditional update on (status, version) plus its audit row (unless ``audited=False``), one statement,
        in one transaction with the approval it applies (if any); see :class:`Store`."""
        new, fields, audit = plan_transition(
            record, to, now=now, actor=actor, reason=reason, changes=changes, detail=detail, audited=audited
        )
        query, encoder = self._update(fields, audited=audit is not None)
        params = encoder.values(new)
        params += (record.tenant, str(record.intent_key), record.status.value, record.version)  # plain str: see _rows
        if audit is not None:
            params += self._audit_row.values(audit)
        with self._checkout() as conn:
            # alone, the statement commits itself; an approval or a crash point needs a transaction
            atomic = conn.transaction() if before_commit is not None or approval is not None else nullcontext()
            with atomic:
                if approval is not None and not self._decide(conn, approval, was=ApprovalState.PENDING):
                    raise decided_meanwhile(approval)
                if self._writer(conn).execute(query, params).rowcount != 1:
                    raise stale(record, self._fetch_one(conn, record.tenant, record.intent_key))
                if before_commit is not None:
                    before_commit()
        return new  # what was written, validated by plan_transition: no need to parse it back

    @staticmethod
    def _writer(conn: Connection[Any]) -> Cursor[Any] | Connection[Any]:
        """What runs the claim and confirm statements: a pool connection's own cursor, made once and reused.

        ``Connection.execute`` builds a new cursor per call, and with it new parameter dumpers: about 7% of
        an effect's client CPU. The cursor lives on the connection (and goes with it); a caller's own
        connection (``prepare(connection=...)``) runs them itself.
        """
        if not isinstance(conn, store_connection()):
            return conn
        pooled = cast("Pooled", conn)
        if pooled.writer is None or pooled.writer.closed:
            pooled.writer = conn.cursor()
        return pooled.writer

    def _update(self, fields: tuple[str, ...], *, audited: bool) -> tuple[bytes, RowEncoder]:
        """The conditional UPDATE for one set of changed fields (a handful of shapes), with or without its
        audit row, and its encoder."""
        if (known := self._updates.get((fields, audited))) is None:
            head, tail = self._update_shapes[audited]
            query = head + b", ".join([self._assign[f] for f in fields]) + tail
            known = self._updates[fields, audited] = (query, row_encoder(EffectRecord, self._codec, fields))
        return known

    def _list_query(
        self,
        statuses: Collection[EffectStatus],
        *,
        tenant: str | None,
        provider: str | None,
        updated_before: datetime | None,
        limit: int,
        after: tuple[datetime, str, str] | None = None,
        key_prefix: str | None = None,
    ) -> tuple[bytes, list[Any]]:
        """The list_by_status SQL and its parameters (kept apart so a test can EXPLAIN exactly this)."""
        query, params = list_statement(
            self._records_select,
            statuses,
            mark="%s",
            codec=self._codec,
            tenant=tenant,
            provider=provider,
            updated_before=updated_before,
            limit=limit,
            after=after,
            key_prefix=key_prefix,
        )
        return query.encode(), params

    def list_by_status(
        self,
        statuses: Collection[EffectStatus],
        *,
        tenant: str | None = None,
        provider: str | None = None,
        updated_before: datetime | None = None,
        limit: int = 100,
        after: tuple[datetime, str, str] | None = None,
        key_prefix: str | None = None,
    ) -> list[EffectRecord]:
        """Records in ``statuses``, least recently updated first; see :class:`Store`."""
        if not stored_values(EffectStatus, statuses, "statuses"):  # checked here too: nothing to read
            return []
        query, params = self._list_query(
            statuses,
            tenant=tenant,
            provider=provider,
            updated_before=updated_before,
            limit=limit,
            after=after,
            key_prefix=key_prefix,
        )
        with self._checkout() as conn, conn.cursor(row_factory=self._dict_row) as cur:
            return [from_row(EffectRecord, row, self._codec) for row in cur.execute(query, params)]

    def find_by_provider_key(self, provider: str, provider_key: str) -> list[EffectRecord]:
        with self._checkout() as conn, conn.cursor(row_factory=self._dict_row) as cur:
            looked_up = (lookup_text(provider, "provider"), lookup_text(provider_key, "provider_key"))
            rows = cur.execute(self._by_provider_key, looked_up).fetchall()
        return [from_row(EffectRecord, row, self._codec) for row in rows]

    def audit_trail(self, tenant: str, intent_key: str) -> list[AuditEntry]:
        check_tenant(tenant)
        lookup_text(intent_key, "intent_key")
        with self._checkout() as conn, conn.cursor(row_factory=self._dict_row) as cur:
            rows = cur.execute(self._audit_trail, (tenant, intent_key)).fetchall()
        return [from_row(AuditEntry, row, self._codec) for row in rows]

    def add_evidence(self, evidence: Evidence) -> bool:
        """Insert once per (provider, source, event_id); False when it was already there."""
        row = to_row(evidence, self._codec)
        with self._checkout() as conn:
            return conn.execute(self._add_evidence, row).fetchone() is not None

    def evidence_for(
        self, tenant: str, intent_key: str, *, verdicts: Collection[EvidenceVerdict] | None = None
    ) -> list[Evidence]:
        check_tenant(tenant)
        lookup_text(intent_key, "intent_key")
        wanted = None if verdicts is None else stored_values(EvidenceVerdict, verdicts, "verdicts")
        with self._checkout() as conn, conn.cursor(row_factory=self._dict_row) as cur:
            if wanted is None:
                cur.execute(self._evidence_for, (tenant, intent_key))
            else:
                cur.execute(self._evidence_of_verdicts, (tenant, intent_key, wanted))
            rows = cur.fetchall()
        return [from_row(Evidence, row, self._codec) for row in rows]

    def status_counts(self, statuses: Collection[EffectStatus]) -> list[tuple[str, str, EffectStatus, int]]:
        values = stored_values(EffectStatus, statuses, "statuses")
        with self._checkout() as conn:
            rows = conn.execute(self._status_counts, (values,)).fetchall()
        return [(tenant, provider, EffectStatus(status), count) for tenant, provider, status, count in rows]

    def oldest_dispatched(self, status: EffectStatus) -> dict[str, datetime]:
        with self._checkout() as conn:
            rows = conn.execute(self._oldest, (stored_value(EffectStatus, status, "status"),)).fetchall()
        return {provider: oldest.astimezone(UTC) for provider, oldest in rows}

    def earliest_lease_expiry(self) -> dict[str, datetime]:
        with self._checkout() as conn:
            rows = conn.execute(self._lease_expiry, (EffectStatus.IN_FLIGHT.value,)).fetchall()
        return {provider: expiry.astimezone(UTC) for provider, expiry in rows}

    def reconciler_cursor(self, name: str) -> tuple[datetime, str, str] | None:
        with self._checkout() as conn:
            row = conn.execute(self._cursor, (check_cursor_name(name),)).fetchone()
        return None if row is None else (row[0].astimezone(UTC), row[1], row[2])

    def save_reconciler_cursor(self, name: str, position: tuple[datetime, str, str] | None) -> None:
        name = check_cursor_name(name)
        values = None if position is None else cursor_values(position, self._codec)
        with self._checkout() as conn:
            if values is None:
                conn.execute(self._forget_cursor, (name,))
            else:
                conn.execute(self._save_cursor, (name, *values))

    def purge(
        self,
        *,
        statuses: Collection[EffectStatus],
        updated_before: datetime,
        limit: int = 1000,
        keys: Collection[tuple[str, str]] | None = None,
    ) -> int:
        """Delete the oldest ``limit`` records in ``statuses``, or exactly ``keys``; audit and evidence stay."""
        values = purge_statuses(statuses, limit, keys)
        if not values:
            return 0
        cutoff = utc(updated_before, "updated_before")
        if keys is None and not (keys := oldest_keys(self, statuses, updated_before, limit)):
            return 0
        params: dict[str, Any] = {"s": values, "cutoff": cutoff}
        params["tenants"] = [check_tenant(tenant) for tenant, _ in keys]
        params["keys"] = [key for _, key in keys]
        with self._checkout() as conn:
            return conn.execute(self._purge_keys, params).rowcount

    # -- pending approvals (two-person rule) -------------------------------------------------------------

    def _approvals_sql(self, text: str) -> sql.Composed:
        """``text`` with ``{table}`` and ``{columns}`` filled in as quoted identifiers."""
        from psycopg import sql  # noqa: PLC0415  # optional extra, present once a PostgresStore exists

        return sql.SQL(text).format(
            table=sql.Identifier(self.schema, "effect_approvals"),
            columns=sql.SQL(", ").join(map(sql.Identifier, _APPROVAL_COLUMNS)),
            inserted=sql.SQL(", ").join(map(sql.Identifier, _APPROVAL_COLUMNS[1:])),
            values=sql.SQL(", ").join(map(sql.Placeholder, _APPROVAL_COLUMNS[1:])),
        )

    def add_approval(self, approval: Approval) -> tuple[Approval, bool]:
        """Insert a pending approval unless one is pending for the intent; see :class:`Store`."""
        row = to_row(approval, self._codec)
        del row["id"]
        insert = self._approvals_sql(
            "INSERT INTO {table} ({inserted}) VALUES ({values}) ON CONFLICT DO NOTHING RETURNING id"
        )
        pending = self._approvals_sql(
            "SELECT {columns} FROM {table} WHERE tenant_id = %s AND intent_key = %s AND state = 'pending'"
        )
        with self._checkout() as conn, conn.cursor(row_factory=self._dict_row) as cur:
            inserted = cur.execute(insert, row).fetchone()
            if inserted is not None:
                return approval.model_copy(update={"id": inserted["id"]}), True
            found = cur.execute(pending, (row["tenant_id"], row["intent_key"])).fetchone()
        if found is None:  # decided between the two statements: the caller may simply ask again
            raise StaleRecord(f"the pending approval for {approval.intent_key!r} was decided meanwhile")
        return from_row(Approval, found, self._codec), False

    def approvals(
        self,
        *,
        tenant: str | None = None,
        intent_key: str | None = None,
        state: ApprovalState | None = None,
        limit: int = 100,
    ) -> list[Approval]:
        """Approvals, oldest request first; see :class:`Store`."""
        query = self._approvals_sql(
            "SELECT {columns} FROM {table} WHERE (%(t)s::text IS NULL OR tenant_id = %(t)s) "
            "AND (%(k)s::text IS NULL OR intent_key = %(k)s) AND (%(s)s::text IS NULL OR state = %(s)s) "
            "ORDER BY id LIMIT %(limit)s"
        )
        params = {
            "t": None if tenant is None else check_tenant(tenant),
            "k": None if intent_key is None else lookup_text(intent_key, "intent_key"),
            "s": None if state is None else stored_value(ApprovalState, state, "state"),
            "limit": check_limit(limit),
        }
        with self._checkout() as conn, conn.cursor(row_factory=self._dict_row) as cur:
            rows = cur.execute(query, params).fetchall()
        return [from_row(Approval, row, self._codec) for row in rows]

    def decide_approval(
        self, approval: Approval, *, state: ApprovalState, decided_by: str, reason: str | None, now: datetime
    ) -> bool:
        """Move an approval on if it is still in the state the caller saw; see :class:`Store`."""
        decided = approval.decided(state, by=decided_by, reason=reason, at=now)
        with self._checkout() as conn:
            return self._decide(conn, decided, was=approval.state)

    def _decide(self, conn: Connection[Any], decided: Approval, *, was: ApprovalState) -> bool:
        """Write ``decided`` over the stored approval if that is still in state ``was``; False when it is not."""
        state, by, reason, at = decision_of(decided)
        update = self._approvals_sql(
            "UPDATE {table} SET state = %s, decided_by = %s, decision_reason = %s, resolved_at = %s "
            "WHERE id = %s AND state = %s"
        )
        params = (state.value, by, reason, utc(at, "resolved_at"), decided.id, was.value)
        return conn.execute(update, params).rowcount == 1
