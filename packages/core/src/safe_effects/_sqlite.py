"""The default store: one SQLite file in WAL mode, one connection per thread, BEGIN IMMEDIATE for writes."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime
from functools import lru_cache, partial, wraps
from itertools import compress
from operator import is_, not_
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from ._admission import version_in_doubt
from ._approvals import Approval, ApprovalState, decided_meanwhile, decision_of
from ._bookkeeping import check_columns, check_versions
from ._errors import InvalidInput, LedgerClosed, LedgerCorrupt, LedgerUnavailable
from ._fork import renew_in_children
from ._migrations import (
    MIGRATIONS,
    ONE_UNSETTLED_VERSION,
    OTHER_UNSETTLED_VERSION,
    SEVERAL_UNSETTLED_VERSIONS,
    SQLITE_BOOKKEEPING,
    blocked_by_versions,
)
from ._numbers import check_seconds
from ._records import AuditEntry, EffectRecord, Evidence, EvidenceVerdict
from ._rows import (
    AUDIT_COLUMNS,
    RECORD_COLUMNS,
    Codec,
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

# result codes (and their extended forms) that say the file cannot be written now, not that the SQL is wrong
_UNAVAILABLE = ("SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_IOERR", "SQLITE_FULL", "SQLITE_CANTOPEN")
# a damaged page (and its extended codes, SQLITE_CORRUPT_INDEX ...) or header: a file that was the ledger (a wrong
# path is caught as it is opened, see SQLiteStore._connect)
_CORRUPT = ("SQLITE_CORRUPT", "SQLITE_NOTADB")

P = ParamSpec("P")
T = TypeVar("T")

# fixed width, always UTC with microseconds: text order is time order
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def _utc_text(value: datetime) -> str:
    """``value`` (already UTC) as ``_TIME_FORMAT`` text; %-formatting is several times faster than strftime."""
    return "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ" % (  # noqa: UP031  # speed, see docstring
        value.year,
        value.month,
        value.day,
        value.hour,
        value.minute,
        value.second,
        value.microsecond,
    )


_CODEC = Codec(
    time_out=_utc_text,
    time_in=lambda value: datetime.strptime(value, _TIME_FORMAT).replace(tzinfo=UTC),
    json_out=json_text,
    json_in=json.loads,
)

_SELECT = f"SELECT {', '.join(RECORD_COLUMNS)} FROM effect_intents"
_OTHER_UNSETTLED_VERSION = OTHER_UNSETTLED_VERSION.format(table="effect_intents", p="?")
_STATUS_INDEX = "effect_intents_status_updated"  # (status, updated_at), migration v1
# positional parameters in the encoders' column order: binding by name costs a lookup per column
_RECORD_ROW = row_encoder(EffectRecord, _CODEC)
_AUDIT_ROW = row_encoder(AuditEntry, _CODEC)


_IS_NONE = partial(is_, None)


def _nulls_apart(values: list[Any]) -> tuple[tuple[bool, ...], list[Any]]:
    """Which of ``values`` are None, and the others, to bind: a statement writes its NULLs as literals.

    CPython 3.11's sqlite3 binds None through its adapter protocol, whose lookup fails with a formatted
    AttributeError: about 2,000 instructions per NULL, 14 NULLs in a routine effect's two writes. The shapes
    of NULLs are few, and sqlite3 caches the statement of each like any other.
    """
    nulls = tuple(map(_IS_NONE, values))
    return nulls, list(compress(values, map(not_, nulls)))


# the record stays in Python, and rowcount says whether a row was written: RETURNING made SQLite build a
# result row per write, about 15 us each on the test machine
@lru_cache(maxsize=256)
def _insert_statement(nulls: tuple[bool, ...]) -> str:
    """The INSERT of a record whose columns ``nulls`` says are NULL."""
    values = ", ".join("NULL" if null else "?" for null in nulls)
    return (
        f"INSERT INTO effect_intents ({', '.join(_RECORD_ROW.columns)}) "
        f"VALUES ({values}) ON CONFLICT (tenant_id, intent_key) DO NOTHING"
    )


# the id: next in this intent's own sequence (see migration v3), under the write lock. Plain ? placeholders,
# the intent bound again for the subquery (see _audit_values): early CPython 3.12 releases warn that a numbered
# ?1 bound from a sequence is a named parameter (gh-117995), and a run with warnings as errors then fails
_INSERT_AUDIT = (
    f"INSERT INTO effect_audit ({', '.join(_AUDIT_ROW.columns)}, id) "
    f"VALUES ({', '.join('?' * len(_AUDIT_ROW.columns))}, "
    "(SELECT coalesce(max(id), 0) + 1 FROM effect_audit WHERE tenant_id = ? AND intent_key = ?))"
)


def _audit_values(audit: AuditEntry) -> list[Any]:
    """``_INSERT_AUDIT``'s parameters: the audit row, then its intent again for the id's subquery."""
    values = _AUDIT_ROW.values(audit)
    values += (audit.tenant, str(audit.intent_key))
    return values


@lru_cache(maxsize=256)
def _update_statement(columns: tuple[str, ...], nulls: tuple[bool, ...]) -> str:
    """The conditional UPDATE of ``columns`` (a handful of shapes), those ``nulls`` says to NULL."""
    pairs = zip(columns, nulls, strict=True)
    assignments = ", ".join(f"{column} = NULL" if null else f"{column} = ?" for column, null in pairs)
    return (
        f"UPDATE effect_intents SET {assignments} WHERE tenant_id = ? AND intent_key = ? AND status = ? AND version = ?"
    )


_EVIDENCE_COLUMNS = tuple("tenant_id" if f == "tenant" else f for f in Evidence.model_fields)
_APPROVAL_COLUMNS = tuple("tenant_id" if f == "tenant" else f for f in Approval.model_fields)


def _decide(conn: sqlite3.Connection, decided: Approval, *, was: ApprovalState) -> bool:
    """Write ``decided`` over the stored approval if that is still in state ``was``; False when it is not."""
    state, by, reason, at = decision_of(decided)
    updated = conn.execute(
        "UPDATE effect_approvals SET state = ?, decided_by = ?, decision_reason = ?, resolved_at = ? "
        "WHERE id = ? AND state = ?",
        (state.value, by, reason, _CODEC.time_out(utc(at, "resolved_at")), decided.id, was.value),
    )
    return updated.rowcount == 1


def _rows(cursor: sqlite3.Cursor) -> list[dict[str, Any]]:
    """Rows as dicts without touching ``row_factory``, which a caller's connection may have set its own way."""
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


class _ThreadConnection:
    """A thread's connection, kept in the store's thread-local: once the thread (or a gevent greenlet) has
    ended, its locals and this with them are gone, which tells the store the connection is free to close.

    The thread's own liveness is not asked: under gevent ``Thread.is_alive()`` may switch greenlets, and a
    ``Timeout`` landing there marks the main thread stopped on Python 3.11 and 3.12 (CPython's bpo-45274
    handling), which closed the connection the main greenlet's next call needed (the gevent review)."""

    __slots__ = ("__weakref__", "conn")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn


def _no_space_note(path: Path) -> str:
    """A note when the ledger's disk has no free space: SQLite reports a full disk as "disk I/O error" where
    it cannot create the WAL or shared-memory file it opens with (the last process closing deletes them)."""
    if not hasattr(os, "statvfs"):  # Windows
        return ""
    try:
        full = os.statvfs(path.parent).f_bavail == 0
    except OSError:  # the directory is gone: nothing to add
        return ""
    return "; the disk holding it has no free space left" if full else ""


def _raise_typed(error: sqlite3.DatabaseError, path: Path, what: str) -> None:
    """A locked, failing or full file is :class:`LedgerUnavailable` (``what`` says what it did not do); a
    damaged one is :class:`LedgerCorrupt`; anything else is left to its caller to raise."""
    name = getattr(error, "sqlite_errorname", None) or ""  # the sqlite3 module's own errors have none
    if name.startswith(_UNAVAILABLE):
        raise LedgerUnavailable(f"the SQLite ledger {path} {what}: {error}{_no_space_note(path)}") from error
    if name.startswith(_CORRUPT):
        raise LedgerCorrupt(
            f"the SQLite ledger {path} is damaged ({error}): nothing was written; stop its workers and restore it "
            "from a backup (docs/operations.md, Backups and restores)"
        ) from error


def _reads(method: Callable[Concatenate[SQLiteStore, P], T]) -> Callable[Concatenate[SQLiteStore, P], T]:
    """A read of the store whose outage or damage is typed as a write's is (see :func:`_raise_typed`)."""

    @wraps(method)
    def read(self: SQLiteStore, /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.DatabaseError as error:
            _raise_typed(error, self.path, "could not be read")
            raise

    return read


class _WriteTransaction:
    """``with store._write() as conn``: BEGIN IMMEDIATE, the body, COMMIT; ROLLBACK if anything fails.

    IMMEDIATE takes the write lock up front so readers never deadlock on upgrade. A file that stays locked
    past the busy timeout, or a disk that fails, is :class:`LedgerUnavailable`. A plain class rather than a
    generator-based context manager: two writes per effect made the generator's cost measurable.
    """

    __slots__ = ("_conn", "_path")

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn, self._path = conn, path

    def __enter__(self) -> sqlite3.Connection:
        if self._conn.in_transaction:  # a signal handler's exception cut a call short between BEGIN and body
            self._conn.execute("ROLLBACK")
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.DatabaseError as error:
            _raise_typed(error, self._path, "did not answer")
            raise
        except BaseException:  # such an exception as BEGIN returned: __exit__ will not run, so the write lock
            if self._conn.in_transaction:  # would stay held, blocking every other writer of the file
                self._conn.execute("ROLLBACK")
            raise
        return self._conn

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, _: object) -> None:
        try:
            if error is None:
                self._conn.execute("COMMIT")
                return
        except sqlite3.DatabaseError as failed:
            error = failed
        try:
            if self._conn.in_transaction:  # nothing of a failed transaction may stay
                self._conn.execute("ROLLBACK")
        except sqlite3.DatabaseError as failed:
            _raise_typed(failed, self._path, "did not answer")
            raise
        if isinstance(error, sqlite3.DatabaseError):
            _raise_typed(error, self._path, "did not answer")
        if kind is None:  # COMMIT failed, and not because the database is unavailable
            raise error


def _autocommits(connection: sqlite3.Connection) -> bool:
    """Whether sqlite3 commits each statement of ``connection`` by itself: ``isolation_level=None``, or
    Python 3.12's ``autocommit=True``; sqlite3's implicit transactions (the default) are the caller's to end."""
    return connection.isolation_level is None or getattr(connection, "autocommit", None) is True


_MAX_BUSY_TIMEOUT = (2**31 - 1) / 1000  # seconds: SQLite takes the busy timeout as a 32-bit count of ms


class SQLiteStore:
    """A :class:`~safe_effects.Store` on one SQLite file.

    ``synchronous=FULL`` because in WAL mode NORMAL may lose the last commits on power loss, and a record
    committed as ``in_flight`` before dispatch must never vanish, or a retry would send the effect twice.
    """

    def __init__(self, path: str | Path, *, busy_timeout: float = 30.0) -> None:
        if not isinstance(path, str | os.PathLike):
            raise InvalidInput(f"SQLiteStore needs a file path (str or os.PathLike), got {type(path).__name__}")
        check_seconds("busy_timeout", busy_timeout, positive=False, at_most=_MAX_BUSY_TIMEOUT)
        if str(path) in ("", ":memory:") or str(path).startswith("file:"):
            raise InvalidInput(f"SQLiteStore needs a file path shared by every thread, got {str(path)!r}")
        self.path = Path(path).absolute()  # fixed at open: a later os.chdir must not move the ledger
        self._busy_timeout = busy_timeout
        self._local = threading.local()
        self._lock = threading.Lock()
        # every thread's connection, with a weak reference to its holder in that thread's locals: close() closes
        # them all, and a thread that has ended gets its connection closed when another opens one (a server with
        # a thread per request would otherwise keep two file descriptors per finished thread, until the process
        # runs out of them)
        self._connections: list[tuple[weakref.ref[_ThreadConnection], sqlite3.Connection]] = []
        self._closed = False
        renew_in_children(self)

    def _renew_after_fork(self) -> None:
        """SQLite keeps each process's locks on a file in memory, which fork copies: a child's new connection
        would trust the parent's locks and take none of its own, and the parent closing its last connection
        would checkpoint and delete the WAL under the child's commits. Closing the inherited connections in the
        child, before it opens any, clears that state; it releases only the child's own locks (none yet)."""
        for _, conn in self._connections:
            conn.close()
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections = []

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection: sqlite3 connections must not be shared between threads."""
        held: _ThreadConnection | None = getattr(self._local, "held", None)
        if held is None:
            if self._closed:  # a new connection now would be one that nothing ever closes
                raise LedgerClosed(f"the SQLite ledger {self.path} is closed")
            held = _ThreadConnection(self._connect())
            self._local.held = held
            with self._lock:
                ended = [old for owner, old in self._connections if owner() is None]
                self._connections = [(owner, old) for owner, old in self._connections if owner() is not None]
                self._connections.append((weakref.ref(held), held.conn))
            for old in ended:  # its thread is gone: nothing can be using it
                old.close()
        return held.conn

    def _connect(self) -> sqlite3.Connection:
        """A new connection in WAL mode with ``synchronous=FULL``; a file that cannot be opened (a missing
        directory, no file descriptor left, a locked switch to WAL) is :class:`LedgerUnavailable`."""
        try:
            # isolation_level=None: no implicit BEGIN, every transaction here is an explicit BEGIN IMMEDIATE
            conn = sqlite3.connect(self.path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False)
            try:
                self._enable_wal(conn)
                conn.execute("PRAGMA synchronous = FULL")
            except BaseException:
                conn.close()
                raise
        except sqlite3.OperationalError as error:
            _raise_typed(error, self.path, "could not be opened")
            raise
        except sqlite3.DatabaseError as error:  # a file of something else: a wrong path, not an outage
            if error.sqlite_errorname == "SQLITE_NOTADB":
                raise InvalidInput(f"the SQLite ledger {self.path} is not a SQLite database: check the path") from error
            _raise_typed(error, self.path, "could not be opened")
            raise
        return conn

    def _enable_wal(self, conn: sqlite3.Connection) -> None:
        """Switching a new file to WAL answers SQLITE_BUSY without waiting for busy_timeout, so retry here."""
        deadline = time.monotonic() + self._busy_timeout
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as error:
                if error.sqlite_errorname != "SQLITE_BUSY" or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)

    def _write(self) -> _WriteTransaction:
        """One write transaction on this thread's connection; see :class:`_WriteTransaction`."""
        return _WriteTransaction(self._conn(), self.path)  # an open failure is LedgerUnavailable already

    def migrate(self) -> list[int]:
        """Apply pending migrations under BEGIN IMMEDIATE, so a second process waits and then finds them done;
        returns the versions this call applied."""
        done: list[int] = []
        with self._write() as conn:
            applied = self._applied_versions(conn)
            if applied is None:
                conn.execute(SQLITE_BOOKKEEPING)
                applied = set()
            for migration in MIGRATIONS:
                if migration.version in applied:
                    continue
                try:
                    for statement in migration.sqlite:
                        conn.execute(statement)
                except sqlite3.IntegrityError as blocked:  # an index no existing rows may break (v6)
                    if ONE_UNSETTLED_VERSION not in str(blocked):
                        raise
                    actions = conn.execute(SEVERAL_UNSETTLED_VERSIONS.format(table="effect_intents")).fetchall()
                    raise blocked_by_versions(actions) from None
                conn.execute(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                    (migration.version, _utc_text(datetime.now(UTC))),
                )
                done.append(migration.version)
        return done

    def database_time(self) -> None:
        """None: the file's every writer runs on this host, under this host's one clock."""

    @_reads
    def pending_migrations(self) -> list[int]:
        applied = self._applied_versions(self._conn()) or set()
        return [m.version for m in MIGRATIONS if m.version not in applied]

    def _applied_versions(self, conn: sqlite3.Connection) -> set[int] | None:
        """The versions the bookkeeping table lists; None while it is missing. Another tool's table of that
        name is :class:`StoreNotReady` (see ``_bookkeeping``)."""
        where = f"the SQLite ledger {self.path}"
        columns = [row[0] for row in conn.execute("SELECT name FROM pragma_table_info('schema_migrations')")]
        if not columns:
            return None
        check_columns(where, columns)
        applied = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
        intents = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'effect_intents'")
        check_versions(where, applied, intents.fetchone() is not None)
        return applied

    def close(self) -> None:
        """Close every thread's connection (they were opened with check_same_thread=False for this); the store
        opens none after it (:class:`LedgerClosed`)."""
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, []
        for _, conn in connections:
            conn.close()
        self._local = threading.local()

    def insert_if_absent(self, record: EffectRecord, *, connection: Any = None) -> tuple[EffectRecord, bool]:
        """Insert ``record`` unless the key exists; see :class:`Store`."""
        row = _RECORD_ROW.values(record)
        if connection is None:
            with self._write() as conn:
                return self._insert(conn, record, row)
        cursor = self._callers(connection)
        if not connection.in_transaction:  # sqlite3's own transaction handling: its commit() ends this one
            cursor.execute("BEGIN IMMEDIATE")
        return self._insert(cursor, record, row)

    def _callers(self, connection: Any) -> sqlite3.Cursor:
        """A cursor of the caller's connection, checked to be sqlite3 on this very file (else the prepared row
        lands elsewhere) with a transaction that a commit or rollback of the caller's will end; it reads plain
        tuples, whatever ``row_factory`` the caller's connection has."""
        if not isinstance(connection, sqlite3.Connection):
            raise InvalidInput(f"connection must be a sqlite3.Connection, got {kind_of(connection)}")
        try:
            cursor = connection.cursor()
        except sqlite3.ProgrammingError:  # "Cannot operate on a closed database."
            raise InvalidInput("connection is closed: prepare joins the caller's open transaction") from None
        cursor.row_factory = None
        files = [row[2] for row in cursor.execute("PRAGMA database_list") if row[1] == "main"]
        if not files or Path(files[0]).resolve() != self.path.resolve():
            raise InvalidInput(f"connection is on {files[0] if files else '?'!r}, this store is on {self.path}")
        if not connection.in_transaction and _autocommits(connection):
            # BEGIN here would leave a transaction open that nothing of the caller's ends: its later writes
            # would wait in it, and every other writer of the ledger with them
            raise InvalidInput(
                "connection is in autocommit mode with no transaction open: prepare joins the caller's "
                "transaction, so open one first (BEGIN IMMEDIATE) and commit it with the business change"
            )
        return cursor

    def _insert(
        self, conn: sqlite3.Connection | sqlite3.Cursor, record: EffectRecord, row: list[Any]
    ) -> tuple[EffectRecord, bool]:
        nulls, params = _nulls_apart(row)
        try:
            written = conn.execute(_insert_statement(nulls), params).rowcount == 1
        except sqlite3.IntegrityError as refused:  # another version of the action is unsettled (migration v6)
            if ONE_UNSETTLED_VERSION not in str(refused):
                raise
            key = record.intent_key
            other = conn.execute(_OTHER_UNSETTLED_VERSION, (record.tenant, key, key)).fetchone()
            raise version_in_doubt(record, other) from None
        if written:
            return record, True  # the row is exactly the record: no need to parse it back
        existing = self._select(conn, record.tenant, record.intent_key)
        assert existing is not None, "the write lock is held: the conflicting row cannot vanish in between"
        return existing, False

    def _select(self, conn: sqlite3.Connection | sqlite3.Cursor, tenant: str, intent_key: str) -> EffectRecord | None:
        rows = _rows(conn.execute(f"{_SELECT} WHERE tenant_id = ? AND intent_key = ?", (tenant, intent_key)))
        return from_row(EffectRecord, rows[0], _CODEC) if rows else None

    @_reads
    def get(self, tenant: str, intent_key: str) -> EffectRecord | None:
        return self._select(self._conn(), check_tenant(tenant), lookup_text(intent_key, "intent_key"))

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
        """Conditional update on (status, version) plus its audit row (unless ``audited=False``) and the
        approval it applies (if any) in one transaction; see :class:`Store`."""
        new, fields, audit = plan_transition(
            record, to, now=now, actor=actor, reason=reason, changes=changes, detail=detail, audited=audited
        )
        encoder = row_encoder(EffectRecord, _CODEC, fields)  # fields are checked against the model first
        nulls, params = _nulls_apart(encoder.values(new))
        update = _update_statement(encoder.columns, nulls)
        params += (record.tenant, str(record.intent_key), record.status.value, record.version)
        audit_row = None if audit is None else _audit_values(audit)  # encoded before the write lock is taken
        with self._write() as conn:
            if approval is not None and not _decide(conn, approval, was=ApprovalState.PENDING):
                raise decided_meanwhile(approval)
            if conn.execute(update, params).rowcount != 1:
                raise stale(record, self._select(conn, record.tenant, record.intent_key))
            if audit_row is not None:
                conn.execute(_INSERT_AUDIT, audit_row)
            if before_commit is not None:
                before_commit()
        return new  # what was written, validated by plan_transition: no need to parse it back

    @_reads
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
        query, params = list_statement(
            _SELECT,
            statuses,
            mark="?",
            codec=_CODEC,
            tenant=tenant,
            provider=provider,
            updated_before=updated_before,
            limit=limit,
            after=after,
            key_prefix=key_prefix,
        )
        return [from_row(EffectRecord, row, _CODEC) for row in _rows(self._conn().execute(query, params))]

    @_reads
    def find_by_provider_key(self, provider: str, provider_key: str) -> list[EffectRecord]:
        rows = _rows(
            self._conn().execute(
                f"{_SELECT} WHERE provider = ? AND provider_key = ? ORDER BY created_at",
                (lookup_text(provider, "provider"), lookup_text(provider_key, "provider_key")),
            )
        )
        return [from_row(EffectRecord, row, _CODEC) for row in rows]

    @_reads
    def audit_trail(self, tenant: str, intent_key: str) -> list[AuditEntry]:
        rows = _rows(
            self._conn().execute(
                f"SELECT {', '.join(AUDIT_COLUMNS)} FROM effect_audit "
                "WHERE tenant_id = ? AND intent_key = ? ORDER BY id",
                (check_tenant(tenant), lookup_text(intent_key, "intent_key")),
            )
        )
        return [from_row(AuditEntry, row, _CODEC) for row in rows]

    def add_evidence(self, evidence: Evidence) -> bool:
        """Insert once per (provider, source, event_id); False when it was already there."""
        row = to_row(evidence, _CODEC)
        with self._write() as conn:
            inserted = conn.execute(
                f"INSERT INTO effect_evidence ({', '.join(row)}) VALUES ({', '.join(':' + c for c in row)}) "
                "ON CONFLICT (provider, source, event_id) DO NOTHING RETURNING id",
                row,
            ).fetchall()
        return bool(inserted)

    @_reads
    def evidence_for(
        self, tenant: str, intent_key: str, *, verdicts: Collection[EvidenceVerdict] | None = None
    ) -> list[Evidence]:
        wanted = [] if verdicts is None else stored_values(EvidenceVerdict, verdicts, "verdicts")
        only = "" if verdicts is None else f"AND verdict IN ({', '.join('?' * len(wanted))}) "
        rows = _rows(
            self._conn().execute(
                f"SELECT {', '.join(_EVIDENCE_COLUMNS)} FROM effect_evidence "
                f"WHERE tenant_id = ? AND intent_key = ? {only}ORDER BY received_at, id",
                (check_tenant(tenant), lookup_text(intent_key, "intent_key"), *wanted),
            )
        )
        return [from_row(Evidence, row, _CODEC) for row in rows]

    @_reads
    def status_counts(self, statuses: Collection[EffectStatus]) -> list[tuple[str, str, EffectStatus, int]]:
        values = stored_values(EffectStatus, statuses, "statuses")
        if not values:
            return []
        # INDEXED BY: with ANALYZE's statistics (PRAGMA optimize writes them) and no STAT4, SQLite takes each
        # status for a sixth of the table and prefers a whole-table read that comes out in GROUP BY order
        rows = self._conn().execute(
            f"SELECT tenant_id, provider, status, count(*) FROM effect_intents INDEXED BY {_STATUS_INDEX} "
            f"WHERE status IN ({', '.join('?' * len(values))}) "
            "GROUP BY tenant_id, provider, status ORDER BY tenant_id, provider, status",
            values,
        )
        return [(tenant, provider, EffectStatus(status), count) for tenant, provider, status, count in rows]

    @_reads
    def oldest_dispatched(self, status: EffectStatus) -> dict[str, datetime]:
        rows = self._conn().execute(
            "SELECT provider, min(coalesce(first_dispatched_at, updated_at)) "
            f"FROM effect_intents INDEXED BY {_STATUS_INDEX} WHERE status = ? GROUP BY provider",
            (stored_value(EffectStatus, status, "status"),),
        )
        return {provider: _CODEC.time_in(oldest) for provider, oldest in rows}

    @_reads
    def earliest_lease_expiry(self) -> dict[str, datetime]:
        rows = self._conn().execute(
            f"SELECT provider, min(lease_expires_at) FROM effect_intents INDEXED BY {_STATUS_INDEX} "
            "WHERE status = ? AND lease_expires_at IS NOT NULL GROUP BY provider",
            (EffectStatus.IN_FLIGHT.value,),
        )
        return {provider: _CODEC.time_in(expiry) for provider, expiry in rows}

    @_reads
    def reconciler_cursor(self, name: str) -> tuple[datetime, str, str] | None:
        row = (
            self._conn()
            .execute(
                "SELECT updated_at, tenant_id, intent_key FROM reconciler_cursors WHERE name = ?",
                (check_cursor_name(name),),
            )
            .fetchone()
        )
        return None if row is None else (_CODEC.time_in(row[0]), row[1], row[2])

    def save_reconciler_cursor(self, name: str, position: tuple[datetime, str, str] | None) -> None:
        name = check_cursor_name(name)
        values = None if position is None else cursor_values(position, _CODEC)
        with self._write() as conn:
            if values is None:
                conn.execute("DELETE FROM reconciler_cursors WHERE name = ?", (name,))
                return
            conn.execute(
                "INSERT INTO reconciler_cursors (name, updated_at, tenant_id, intent_key) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET updated_at = excluded.updated_at, tenant_id = excluded.tenant_id, "
                "intent_key = excluded.intent_key",
                (name, *values),
            )

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
        cutoff = _CODEC.time_out(utc(updated_before, "updated_before"))
        if keys is None and not (keys := oldest_keys(self, statuses, updated_before, limit)):
            return 0
        # one primary-key delete per key, each re-checking status and age: a single DELETE ... IN (VALUES ...)
        # walks every record below the cutoff instead, holding the write lock the executor waits on
        query = (
            "DELETE FROM effect_intents WHERE tenant_id = ? AND intent_key = ? "
            f"AND status IN ({', '.join('?' * len(values))}) AND updated_at < ?"
        )
        rows = [(check_tenant(tenant), key, *values, cutoff) for tenant, key in keys]
        with self._write() as conn:
            return conn.executemany(query, rows).rowcount

    # -- pending approvals (two-person rule) -------------------------------------------------------------

    def add_approval(self, approval: Approval) -> tuple[Approval, bool]:
        """Insert a pending approval unless one is pending for the intent; see :class:`Store`."""
        row = to_row(approval, _CODEC)
        del row["id"]
        with self._write() as conn:
            inserted = conn.execute(
                f"INSERT INTO effect_approvals ({', '.join(row)}) VALUES ({', '.join(':' + c for c in row)}) "
                "ON CONFLICT DO NOTHING RETURNING id",
                row,
            ).fetchall()
            if inserted:
                return approval.model_copy(update={"id": inserted[0][0]}), True
            rows = _rows(
                conn.execute(
                    f"SELECT {', '.join(_APPROVAL_COLUMNS)} FROM effect_approvals "
                    "WHERE tenant_id = ? AND intent_key = ? AND state = 'pending'",
                    (row["tenant_id"], row["intent_key"]),
                )
            )
        return from_row(Approval, rows[0], _CODEC), False

    @_reads
    def approvals(
        self,
        *,
        tenant: str | None = None,
        intent_key: str | None = None,
        state: ApprovalState | None = None,
        limit: int = 100,
    ) -> list[Approval]:
        """Approvals, oldest request first; see :class:`Store`."""
        query = f"SELECT {', '.join(_APPROVAL_COLUMNS)} FROM effect_approvals WHERE 1 = 1"
        params: list[Any] = []
        for column, value in (("tenant_id", tenant), ("intent_key", intent_key), ("state", state)):
            if value is not None:
                query += f" AND {column} = ?"
                params.append(
                    check_tenant(value)
                    if column == "tenant_id"
                    else lookup_text(value, "intent_key")
                    if column == "intent_key"
                    else stored_value(ApprovalState, value, "state")
                )
        rows = _rows(self._conn().execute(query + " ORDER BY id LIMIT ?", (*params, check_limit(limit))))
        return [from_row(Approval, row, _CODEC) for row in rows]

    def decide_approval(
        self, approval: Approval, *, state: ApprovalState, decided_by: str, reason: str | None, now: datetime
    ) -> bool:
        """Move an approval on if it is still in the state the caller saw; see :class:`Store`."""
        decided = approval.decided(state, by=decided_by, reason=reason, at=now)
        with self._write() as conn:
            return _decide(conn, decided, was=approval.state)
