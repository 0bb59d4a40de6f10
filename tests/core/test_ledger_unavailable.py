"""The ledger's database failing around a provider call: typed errors, no second effect, no stuck lease.

The database is really unavailable here: another connection holds the lock the ledger's write needs, past a
short busy timeout (SQLite) or ``lock_timeout`` (PostgreSQL), or PostgreSQL terminates the store's backends.
"""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import safe_effects._pg_connections as pg_connections
from safe_effects import (
    EffectDeferred,
    EffectInProgress,
    EffectRecord,
    EffectRequest,
    EffectStatus,
    EffectUnknown,
    IntentNotFound,
    InvalidInput,
    LeasePolicy,
    Ledger,
    LedgerUnavailable,
    Operator,
    PostgresStore,
    RetryPolicy,
    SQLiteStore,
    open_store,
    purge_settled,
)
from safe_effects.testing import FakeClock, FakeFailure, GenericFakeAdapter, GenericFakeProvider, generic_contract

from ._time_limits import Interruption, JobTimeLimit, time_limit

if TYPE_CHECKING:
    pass

if TYPE_CHECKING:
    from conftest import DatabaseProxy

S = EffectStatus
KEY = "invoice:inv_1:collect:v1"
REQUEST = EffectRequest(operation="charge", params={"amount": 4200})
FAST_RETRY = RetryPolicy(max_attempts=3, initial_wait=0.01, max_wait=0.05)
LEASE = LeasePolicy(duration=timedelta(seconds=60), wait_for_other=timedelta(seconds=1), poll_interval=0.01)


@dataclass
class HookedAdapter(GenericFakeAdapter):
    """The generic fake adapter, running ``after_send`` once, right after the fake provider acted."""

    after_send: list[Callable[[], object]] = field(default_factory=list)
    dispatches: list[str] = field(default_factory=list)

    def dispatch(self, request: EffectRequest, provider_key: str) -> str:
        self.dispatches.append(provider_key)
        response = super().dispatch(request, provider_key)
        while self.after_send:
            self.after_send.pop(0)()
        return response


@pytest.fixture
def fake(tmp_path: Path) -> GenericFakeProvider:
    return GenericFakeProvider(tmp_path / "provider.db")


@pytest.fixture
def adapter(fake: GenericFakeProvider) -> HookedAdapter:
    return HookedAdapter(fake)


# -- a database that does not answer: another connection holds what the ledger's write needs --------------


@dataclass
class Blocker:
    """Holds the ledger's write lock (SQLite: the file; PostgreSQL: the intent's row) until released."""

    hold: Callable[[], object]
    release: Callable[[], object]  # may be called again: releasing a released lock does nothing


@pytest.fixture
def short_wait_ledger(backend: str, store_url: str) -> Iterator[tuple[Ledger, Blocker]]:
    """A ledger whose writes give up on a held lock after ~0.1 s, and a blocker that holds that lock."""
    if backend == "sqlite":
        path = store_url.removeprefix("sqlite:///")
        ledger = Ledger(SQLiteStore(path, busy_timeout=0.1), retry=FAST_RETRY, lease=LEASE)
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)  # released from a timer
        blocker = Blocker(lambda: other.execute("BEGIN IMMEDIATE"), lambda: other.in_transaction and other.rollback())
    else:
        conninfo, _, schema = store_url.rpartition("?schema=")
        ledger = Ledger(
            PostgresStore(f"{conninfo}?options=-c%20lock_timeout%3D100", schema=schema), retry=FAST_RETRY, lease=LEASE
        )
        other = psycopg.connect(conninfo)
        lock = f'SELECT 1 FROM "{schema}".effect_intents WHERE intent_key = %s FOR UPDATE'
        blocker = Blocker(lambda: other.execute(lock, (KEY,)), other.rollback)
    try:
        yield ledger, blocker
    finally:
        blocker.release()
        other.close()
        ledger.close()


def test_an_answer_the_ledger_cannot_record_is_effect_unknown_and_the_next_call_settles_it(
    short_wait_ledger: tuple[Ledger, Blocker],
    adapter: HookedAdapter,
    fake: GenericFakeProvider,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ledger, blocker = short_wait_ledger
    adapter.after_send.append(blocker.hold)  # the provider acted; now the ledger's database does not answer

    with pytest.raises(EffectUnknown, match="could not record") as unknown:
        ledger.execute(adapter, REQUEST, intent_key=KEY)
    assert isinstance(unknown.value.__cause__, LedgerUnavailable)
    assert len(fake.effects()) == 1
    # the provider's id exists nowhere else but in the exception: the log keeps it for the on-call engineer
    [logged] = [r for r in caplog.records if r.name == "safe_effects"]
    assert logged.levelname == "ERROR"
    assert logged.getMessage().startswith(
        f"intent {KEY!r} (tenant 'default', fake charge): the provider answered (confirmed, provider id "
        f"{fake.effects()[0].result_id}) but the ledger could not record it ("
    )
    blocker.release()
    assert ledger.get(KEY).status is S.IN_FLIGHT  # the answer is not written anywhere

    # the same process calls again at once: its own dead lease does not make it wait (EffectInProgress)
    receipt = ledger.execute(adapter, REQUEST, intent_key=KEY)
    assert receipt.record.status is S.CONFIRMED
    assert receipt.record.resolution is not None
    assert receipt.record.resolution.method == "key_replay"
    assert len(fake.effects()) == 1  # the replay used the same key: the fake deduped it
    trail = ledger.store.audit_trail("default", KEY)
    # the claim and its own answer are the record's; the lost answer and the replay are exceptions, audited
    assert [a.to_status for a in trail] == [S.UNKNOWN, S.IN_FLIGHT, S.CONFIRMED]


def test_a_write_that_fails_once_is_written_on_the_next_attempt(
    short_wait_ledger: tuple[Ledger, Blocker], adapter: HookedAdapter, fake: GenericFakeProvider
) -> None:
    ledger, blocker = short_wait_ledger

    def release_soon() -> None:
        blocker.hold()
        threading.Timer(0.15, blocker.release).start()  # a blip: over after the first attempt gave up

    adapter.after_send.append(release_soon)
    receipt = ledger.execute(adapter, REQUEST, intent_key=KEY)
    assert receipt.record.status is S.CONFIRMED
    assert not receipt.from_ledger
    assert len(fake.effects()) == 1
    assert len(adapter.dispatches) == 1


def test_a_claim_the_ledger_cannot_write_sends_nothing(
    short_wait_ledger: tuple[Ledger, Blocker], adapter: HookedAdapter, fake: GenericFakeProvider
) -> None:
    ledger, blocker = short_wait_ledger
    ledger.prepare(adapter, REQUEST, intent_key=KEY)  # a row for PostgreSQL's blocker to lock
    blocker.hold()
    with pytest.raises(LedgerUnavailable):
        ledger.execute(adapter, REQUEST, intent_key=KEY)
    blocker.release()
    assert adapter.dispatches == []
    assert fake.effects() == []
    assert ledger.get(KEY).status is S.PREPARED


def test_a_back_off_cut_short_while_the_ledger_is_down_is_sent_by_this_ledgers_next_call(
    short_wait_ledger: tuple[Ledger, Blocker], adapter: HookedAdapter, fake: GenericFakeProvider
) -> None:
    """A job's time limit lands in the wait after a refused connection, and the ledger cannot take the write
    back to prepared: only refusals were met, so the job's retry in this process sends it at once (another
    worker would wait out the lease, then reconcile)."""
    ledger, blocker = short_wait_ledger
    slow = Ledger(ledger.store, retry=RetryPolicy(initial_wait=5.0, max_wait=10.0), lease=LEASE)
    fake.fail_next(FakeFailure.REFUSED)
    with pytest.raises(JobTimeLimit), time_limit(0.2, first=blocker.hold):
        slow.execute(adapter, REQUEST, intent_key=KEY)
    blocker.release()
    left = slow.get(KEY)
    assert (left.status, left.lease_owner) == (S.IN_FLIGHT, slow.worker_id)  # the write back did not happen
    assert fake.effects() == []

    receipt = slow.execute(adapter, REQUEST, intent_key=KEY)  # the job's retry, in the same process

    assert receipt.record.status is S.CONFIRMED
    assert [outcome for _, outcome in fake.requests()] == ["refused", "ok"]
    assert len(fake.effects()) == 1


def test_a_back_off_cut_short_while_the_ledger_is_down_keeps_an_earlier_sends_history(
    short_wait_ledger: tuple[Ledger, Blocker], adapter: HookedAdapter, fake: GenericFakeProvider
) -> None:
    """The same, on a later claim of an intent sent before: taken back as never sent, its first dispatch time
    (which bounds the provider's key window) would be rewritten. It stays in flight for the lease instead."""
    ledger, blocker = short_wait_ledger
    fake.fail_next(*[FakeFailure.REFUSED] * 3)
    with pytest.raises(EffectDeferred):  # FAST_RETRY's three attempts refused: back to prepared, sent before
        ledger.execute(adapter, REQUEST, intent_key=KEY)
    first = ledger.get(KEY).first_dispatched_at
    slow = Ledger(ledger.store, retry=RetryPolicy(initial_wait=5.0, max_wait=10.0), lease=LEASE)
    fake.fail_next(FakeFailure.REFUSED)
    with pytest.raises(JobTimeLimit), time_limit(0.2, first=blocker.hold):
        slow.execute(adapter, REQUEST, intent_key=KEY)
    blocker.release()

    with pytest.raises(EffectInProgress):  # not taken back: the lease (60 s here) decides
        slow.execute(adapter, REQUEST, intent_key=KEY)
    left = slow.get(KEY)
    assert (left.status, left.attempt_count, left.first_dispatched_at) == (S.IN_FLIGHT, 2, first)
    assert fake.effects() == []


def test_a_replay_claim_committed_unacknowledged_keeps_the_first_sends_key_window(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A charge's answer was lost; 22 h later a same-key replay's claim commits and its acknowledgement is lost
    (``LedgerUnavailable``, nothing sent). That intent was sent before: it is not taken back as never sent,
    which would restart the first dispatch time the provider's key window is counted from. Mutant: every
    failed claim remembered as unsent; the retry sends it as new, the window starts again, and a replay after
    the provider forgot the key charges the customer a second time."""
    clock = FakeClock()
    fake = GenericFakeProvider(tmp_path / "keyed.db", clock=clock)  # keys kept 24 h
    adapter = GenericFakeAdapter(fake, generic_contract())
    with Ledger.open(store_url, clock=clock, retry=FAST_RETRY, lease=LEASE) as ledger:
        fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
        with pytest.raises(EffectUnknown):
            ledger.execute(adapter, REQUEST, intent_key=KEY)  # charged (fx_1), the answer lost
        first = ledger.get(KEY).first_dispatched_at
        clock.advance(timedelta(hours=22))
        write, unacknowledged = ledger.store.transition, [S.IN_FLIGHT]

        def claim_committed_answer_lost(record: EffectRecord, to: EffectStatus, **changes: Any) -> EffectRecord:
            written = write(record, to, **changes)
            if to in unacknowledged:
                unacknowledged.clear()
                raise LedgerUnavailable("connection lost after the commit")
            return written

        monkeypatch.setattr(ledger.store, "transition", claim_committed_answer_lost)
        with pytest.raises(LedgerUnavailable):
            ledger.execute(adapter, REQUEST, intent_key=KEY)  # the replay's claim: committed, nothing sent
        claimed = ledger.get(KEY)
        assert (claimed.status, claimed.attempt_count, claimed.first_dispatched_at) == (S.IN_FLIGHT, 2, first)
        assert len(fake.requests()) == 1

        clock.advance(LEASE.duration + timedelta(seconds=1))
        fake.fail_next(FakeFailure.LOST_AFTER_COMMIT)
        with pytest.raises(EffectUnknown):
            ledger.execute(adapter, REQUEST, intent_key=KEY)  # the lease ran out: replayed (deduped), lost again
        assert ledger.get(KEY).first_dispatched_at == first
        clock.advance(timedelta(hours=2))  # the provider has forgotten the key; the window from ``first`` closed

        receipt = ledger.execute(adapter, REQUEST, intent_key=KEY)  # no replay: a lookup finds the charge

    assert (receipt.record.status, receipt.record.provider_result_id) == (S.CONFIRMED, "fx_1")
    assert [outcome for _, outcome in fake.requests()] == ["lost_after_commit", "lost_after_commit"]
    assert [e.result_id for e in fake.effects()] == ["fx_1"]


# -- PostgreSQL: connections, isolation, names, URLs ----------------------------------------------------------


def _terminate(pg_url: str, application_name: str) -> int:
    """End those backends and wait (up to 5 s) until each has exited: its FATAL notice is then on the wire, as
    after a restart, rather than still on its way."""
    with psycopg.connect(pg_url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE application_name = %s",
            (application_name,),
        ).fetchall()
    return len(rows)


@contextmanager
def _tagged_ledger(store_url: str, tag: str, **options: Any) -> Iterator[Ledger]:
    conninfo, _, schema = store_url.rpartition("?schema=")
    ledger = Ledger(PostgresStore(f"{conninfo}?application_name={tag}", schema=schema), **options)
    try:
        yield ledger
    finally:
        ledger.close()


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_pooled_connections_whose_backend_died_are_replaced_not_handed_out(
    store_url: str, pg_url: str, adapter: HookedAdapter, fake: GenericFakeProvider
) -> None:
    """A restart, failover or idle-session kill: the server is up again, the pool's connections are dead."""
    with _tagged_ledger(store_url, "se_test_killed", lease=LEASE) as ledger:
        ledger.execute(adapter, REQUEST, intent_key="warm:up:call:v1")
        assert _terminate(pg_url, "se_test_killed") >= 1
        assert ledger.execute(adapter, REQUEST, intent_key=KEY).record.status is S.CONFIRMED

        # and between the claim and the confirm, while the provider answers
        adapter.after_send.append(lambda: _terminate(pg_url, "se_test_killed"))
        assert ledger.execute(adapter, REQUEST, intent_key="invoice:inv_2:collect:v1").record.status is S.CONFIRMED
    assert len(fake.effects()) == 3
    assert len(adapter.dispatches) == 3


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_racing_claims_wait_for_each_other_under_a_serializable_default(
    store_url: str, adapter: HookedAdapter, fake: GenericFakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some databases default to SERIALIZABLE; the store's conditional writes need READ COMMITTED re-checks."""
    monkeypatch.setenv("PGOPTIONS", "-c default_transaction_isolation=serializable")
    workers = [Ledger.open(store_url, lease=LEASE) for _ in range(2)]
    failures: list[BaseException] = []
    try:
        for i in range(10):
            key, barrier = f"invoice:inv_{i}:collect:v1", threading.Barrier(2)

            def run(ledger: Ledger, key: str = key, barrier: threading.Barrier = barrier) -> None:
                barrier.wait()
                try:
                    ledger.execute(adapter, REQUEST, intent_key=key)
                except Exception as error:  # collected: which types come out is the point
                    failures.append(error)

            threads = [threading.Thread(target=run, args=(w,)) for w in workers]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert workers[0].get(key).status is S.CONFIRMED
    finally:
        for ledger in workers:
            ledger.close()
    assert failures == []
    assert len(fake.effects()) == 10
    assert len(adapter.dispatches) == 10


@pytest.mark.postgres
def test_a_schema_name_postgres_would_truncate_is_refused(pg_url: str) -> None:
    name = "se_test_" + "x" * 56  # 64 bytes: PostgreSQL keeps 63, so two such names could be one schema
    with pytest.raises(InvalidInput, match="at most 63"):
        Ledger.open(f"{pg_url}?schema={name}")


@pytest.mark.postgres
@pytest.mark.parametrize("encoded", ["se_test_50%25_off", "se_test_%00nul"])
def test_a_schema_name_with_percent_or_nul_is_refused_before_anything_is_created(pg_url: str, encoded: str) -> None:
    """Statements are rendered with the schema inside and run with parameters: psycopg would take a % in the
    name for a placeholder and fail every statement with its own error."""
    with pytest.raises(InvalidInput, match="'%' or NUL"):
        Ledger.open(f"{pg_url}?schema={encoded}")
    with psycopg.connect(pg_url) as admin:
        created = admin.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'se_test_%%'").fetchall()
    assert not [name for (name,) in created if "off" in name or "nul" in name]


def _setting(store: PostgresStore, name: str) -> str:
    with store._checkout() as conn:  # a pooled connection, as the store's statements get it
        row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
    assert row is not None
    return str(row[0])


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_claim_stuck_behind_another_sessions_lock_ends_at_the_statement_timeout(
    store_url: str, adapter: HookedAdapter, fake: GenericFakeProvider
) -> None:
    """Without a statement timeout the worker would wait for as long as an operator's forgotten session holds
    the row: here the lock is released after 5 s, so a missing timeout shows as a dispatch, not a hang."""
    conninfo, _, schema = store_url.rpartition("?schema=")
    ledger = Ledger(PostgresStore(conninfo, schema=schema, statement_timeout=0.2), retry=FAST_RETRY, lease=LEASE)
    other = psycopg.connect(conninfo)
    try:
        ledger.prepare(adapter, REQUEST, intent_key=KEY)
        other.execute(f'SELECT 1 FROM "{schema}".effect_intents WHERE intent_key = %s FOR UPDATE', (KEY,))
        safety_net = threading.Timer(5, other.rollback)
        safety_net.start()
        with pytest.raises(LedgerUnavailable, match="statement timeout"):
            ledger.execute(adapter, REQUEST, intent_key=KEY)
        safety_net.cancel()
        other.rollback()
        assert adapter.dispatches == []
        assert fake.effects() == []
        assert (ledger.get(KEY).status, ledger.get(KEY).version) == (S.PREPARED, 1)
        assert ledger.store.audit_trail("default", KEY) == []  # prepare is told by the record alone
    finally:
        other.close()
        ledger.close()


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_the_statement_timeout_defaults_to_30_s_and_yields_to_one_the_url_sets(store_url: str) -> None:
    conninfo, _, schema = store_url.rpartition("?schema=")
    stores = {
        "default": PostgresStore(conninfo, schema=schema),
        "from the URL": PostgresStore(f"{conninfo}?options=-c%20statement_timeout%3D5s", schema=schema),
        "none": PostgresStore(conninfo, schema=schema, statement_timeout=None),
    }
    try:
        assert {name: _setting(store, "statement_timeout") for name, store in stores.items()} == {
            "default": "30s",
            "from the URL": "5s",
            "none": "0",
        }
    finally:
        for store in stores.values():
            store.close()


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("setting", "value", "named"),
    [
        ("statement_timeout", 0, "statement_timeout must be more than 0 seconds"),
        ("statement_timeout", -1.0, "statement_timeout must be more than 0 seconds"),
        ("statement_timeout", float("nan"), "statement_timeout must be a finite number of seconds"),
        ("statement_timeout", "x", "statement_timeout must be a finite number of seconds"),
        # rounded to 0 ms it would turn the timeout off; past a 32-bit count of ms every connection was refused
        ("statement_timeout", 1e-4, "statement_timeout must be at least 0.001 seconds"),
        ("statement_timeout", 1e300, "statement_timeout must be at most 2.14748e\\+06 seconds"),
        ("timeout", 0, "timeout must be more than 0 seconds"),  # every call would be LedgerUnavailable
        ("timeout", "x", "timeout must be a finite number of seconds"),
        ("connect_timeout", 0, "connect_timeout must be an int of 1 or more"),
        ("min_size", -1, "min_size must be an int of 0 or more"),
        ("max_size", 0, "max_size must be an int of 1 or more"),
        ("min_size", 11, r"min_size \(11\) must not be more than max_size \(10\)"),
        ("schema", 5, "schema must be a str, got int"),
    ],
)
def test_a_store_setting_it_cannot_use_is_refused_by_name_before_connecting(
    pg_url: str, setting: str, value: object, named: str
) -> None:
    options = {"schema": "se_test_never_made", setting: value}
    with pytest.raises(InvalidInput, match=f"^{named}"):
        PostgresStore(pg_url, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("path", "busy_timeout", "named"),
    [
        (5, 30.0, "SQLiteStore needs a file path"),
        ("ledger.db", "x", "busy_timeout must be a finite number of seconds"),
        ("ledger.db", -1, "busy_timeout must be 0 or more seconds"),
        ("ledger.db", float("nan"), "busy_timeout must be a finite number of seconds"),
        ("ledger.db", 1e300, "busy_timeout must be at most"),
    ],
)
def test_a_sqlite_store_setting_it_cannot_use_is_refused_by_name(
    tmp_path: Path, path: object, busy_timeout: object, named: str
) -> None:
    where = tmp_path / path if isinstance(path, str) else path
    with pytest.raises(InvalidInput, match=f"^{named}"):
        SQLiteStore(where, busy_timeout=busy_timeout)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
@pytest.mark.parametrize(("timeout", "kept"), [("statement_timeout", "200ms"), ("lock_timeout", "100ms")])
def test_a_migration_waits_for_another_processes_migration_past_the_statement_or_lock_timeout(
    fresh_store_url: Callable[[], str], timeout: str, kept: str
) -> None:
    """Migrations may build indexes on large tables or wait for another process's migration: the statement
    timeout that bounds the ledger's short writes, or a lock timeout of the URL's or the role's, must not
    cancel them (processes starting at once would fail to open)."""
    conninfo, _, schema = fresh_store_url().rpartition("?schema=")
    if timeout == "statement_timeout":
        store = PostgresStore(conninfo, schema=schema, statement_timeout=0.2)
    else:
        store = PostgresStore(make_conninfo(conninfo, options="-c lock_timeout=100"), schema=schema)
    lock = int.from_bytes(hashlib.sha256(f"safe_effects:{schema}".encode()).digest()[:8], signed=True)
    other = psycopg.connect(conninfo, autocommit=True)
    try:
        other.execute("SELECT pg_advisory_lock(%s::bigint)", (lock,))  # as a migration in another process
        threading.Timer(1.0, lambda: other.execute("SELECT pg_advisory_unlock(%s::bigint)", (lock,))).start()
        store.migrate()
        assert store.pending_migrations() == []
        assert _setting(store, timeout) == kept  # SET LOCAL: only the migration ran without it
    finally:
        other.close()
        store.close()


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_an_open_that_refuses_an_option_leaves_no_connection_behind(store_url: str, pg_url: str) -> None:
    """Ledger.open opens the store before the ledger checks its options: a refusal closes the pool again."""
    conninfo, _, schema = store_url.rpartition("?schema=")
    tag = f"se-refused-{uuid.uuid4().hex[:8]}"
    with pytest.raises(InvalidInput, match="worker_id"):
        Ledger.open(f"{conninfo}?application_name={tag}&schema={schema}", worker_id="w\x00")
    deadline = time.monotonic() + 5
    with psycopg.connect(pg_url, autocommit=True) as admin:
        while True:
            left = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (tag,)).fetchone()
            if left == (0,) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert left == (0,)


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_url_parameters_reach_libpq_as_written(store_url: str, pg_url: str) -> None:
    """Re-encoding the query would turn %20 into +, which libpq passes on as a plus sign."""
    conninfo, _, schema = store_url.rpartition("?schema=")
    with Ledger.open(f"{conninfo}?application_name=se%20test%20app&schema={schema}") as ledger:
        ledger.store.status_counts([EffectStatus.UNKNOWN])  # a checkout, so the pool's connection is in use once
        with psycopg.connect(pg_url) as admin:
            names = {row[0] for row in admin.execute("SELECT application_name FROM pg_stat_activity")}
    assert "se test app" in names


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_prepare_refuses_an_autocommit_connection(
    store_url: str, pg_url: str, adapter: HookedAdapter, fake: GenericFakeProvider
) -> None:
    """Its row would commit at once and survive the rollback of the business change it belongs with."""
    _, _, schema = store_url.rpartition("?schema=")
    with Ledger.open(store_url) as ledger, psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        with pytest.raises(InvalidInput, match="autocommit"):
            ledger.prepare(adapter, REQUEST, intent_key=KEY, connection=conn)
        with pytest.raises(IntentNotFound):
            ledger.get(KEY)
    assert adapter.dispatches == []
    assert fake.effects() == []


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_connections_give_up_on_a_silent_network_path_unless_the_url_says_otherwise(store_url: str) -> None:
    """A dropped route answers nothing, so the server's statement_timeout never fires: libpq's keepalives and
    TCP user timeout end such a connection in about 30 s, not the kernel's 15 minutes. Set in the URL, the
    caller's value stands."""
    conninfo, _, schema = store_url.rpartition("?schema=")
    store = PostgresStore(make_conninfo(conninfo, tcp_user_timeout=5000), schema=schema)
    try:
        with store._checkout() as conn:  # a pooled connection, as the store's statements get it
            given = conn.info.get_parameters()
    finally:
        store.close()
    bounds = ("keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout")
    assert [given.get(name) for name in bounds] == ["1", "30", "10", "3", "5000"]


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_pool_whose_every_connection_died_recovers_on_the_next_call(
    store_url: str, pg_url: str, adapter: HookedAdapter, fake: GenericFakeProvider
) -> None:
    """A restart or failover ends all of a grown pool's connections. Checked one by one with the pool's
    backoff (1, 2, 4 s... between them), six dead ones outlasted the 3 s the call may wait: the call failed
    although the database was up. Now one dead connection sweeps them all and the call goes through."""
    conninfo, _, schema = store_url.rpartition("?schema=")
    tag = f"se-dead-{uuid.uuid4().hex[:8]}"
    store = PostgresStore(make_conninfo(conninfo, application_name=tag), schema=schema, min_size=6, timeout=3.0)
    with Ledger(store, lease=LEASE, retry=FAST_RETRY) as ledger:
        ledger.execute(adapter, REQUEST, intent_key="warm:up:call:v1")
        store._pool.wait(timeout=10)  # all six open
        assert _terminate(pg_url, tag) >= 6

        assert ledger.execute(adapter, REQUEST, intent_key=KEY).record.status is S.CONFIRMED
    assert len(fake.effects()) == 2


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
@pytest.mark.parametrize("style", ["German, DMY", "SQL, MDY", "Postgres, DMY"])
def test_records_read_back_whatever_datestyle_the_database_sets(
    store_url: str, adapter: HookedAdapter, fake: GenericFakeProvider, style: str
) -> None:
    """psycopg reads timestamps in ISO style only: a database (or role) set otherwise made every record
    unreadable after its first write, so no retry, listing or reconciliation could run."""
    conninfo, _, schema = store_url.rpartition("?schema=")
    store = PostgresStore(make_conninfo(conninfo, options=f"-c DateStyle={style.replace(' ', '')}"), schema=schema)
    with Ledger(store, lease=LEASE, retry=FAST_RETRY) as ledger:
        first = ledger.execute(adapter, REQUEST, intent_key=KEY)
        again = ledger.execute(adapter, REQUEST, intent_key=KEY)  # the caller's retry reads the record back
        assert again.from_ledger
        assert ledger.get(KEY) == again.record
        assert again.record.created_at == first.record.created_at
        assert [r.intent_key for r in store.list_by_status([S.CONFIRMED])] == [KEY]
    assert len(fake.effects()) == 1


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_worker_role_with_only_table_rights_opens_a_migrated_ledger(
    store_url: str, pg_url: str, adapter: HookedAdapter, fake: GenericFakeProvider
) -> None:
    """Least privilege: the schema's owner migrates, workers get USAGE and DML. Ledger.open migrates, and
    with nothing pending it must run no DDL, which PostgreSQL refuses such a role even for IF NOT EXISTS."""
    conninfo, _, schema = store_url.rpartition("?schema=")
    role = f"se_test_{uuid.uuid4().hex[:12]}"
    names = {"schema": sql.Identifier(schema), "role": sql.Identifier(role)}
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {role} LOGIN").format(**names))
        admin.execute(sql.SQL("GRANT USAGE ON SCHEMA {schema} TO {role}").format(**names))
        admin.execute(
            sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}").format(**names)
        )
    try:
        with Ledger(PostgresStore(make_conninfo(conninfo, user=role), schema=schema), lease=LEASE) as ledger:
            assert ledger.store.migrate() == []  # what Ledger.open runs first
            assert ledger.execute(adapter, REQUEST, intent_key=KEY).record.status is S.CONFIRMED
    finally:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
            admin.execute(sql.SQL("REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {role}").format(**names))
            admin.execute(sql.SQL("REVOKE USAGE ON SCHEMA {schema} FROM {role}").format(**names))
            admin.execute(sql.SQL("DROP ROLE {role}").format(**names))
    assert len(fake.effects()) == 1


@pytest.fixture
def read_only_later(pg_url: str) -> Iterator[tuple[PostgresStore, Callable[[], None]]]:
    """A migrated store under a role of its own, and a switch that makes that role's sessions read-only (as a
    failover onto a standby would) and ends its open sessions."""
    role = f"se_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_url, autocommit=True) as admin:
        database = sql.Identifier(admin.info.dbname)
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        admin.execute(sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(database, sql.Identifier(role)))

    def go_read_only() -> None:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(sql.SQL("ALTER ROLE {} SET default_transaction_read_only = on").format(sql.Identifier(role)))
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))

    store = PostgresStore(psycopg.conninfo.make_conninfo(pg_url, user=role), schema=role)
    try:
        store.migrate()
        yield store, go_read_only
    finally:
        store.close()
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
            admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(role)))
            admin.execute(sql.SQL("REVOKE CREATE ON DATABASE {} FROM {}").format(database, sql.Identifier(role)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.mark.postgres
def test_an_answer_a_read_only_database_cannot_record_is_effect_unknown(
    read_only_later: tuple[PostgresStore, Callable[[], None]], adapter: HookedAdapter, fake: GenericFakeProvider
) -> None:
    store, go_read_only = read_only_later
    ledger = Ledger(store, retry=FAST_RETRY, lease=LEASE)
    adapter.after_send.append(go_read_only)
    with pytest.raises(EffectUnknown, match="could not record") as unknown:
        ledger.execute(adapter, REQUEST, intent_key=KEY)
    assert isinstance(unknown.value.__cause__, LedgerUnavailable)
    assert len(fake.effects()) == 1
    assert ledger.get(KEY).status is S.IN_FLIGHT  # reads still work; the answer could not be written


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_the_checkout_ping_works_on_sockets_past_select_s_limit(store_url: str) -> None:
    """select() refuses an fd >= 1024, which a busy process's sockets reach: a new connection (suspect until
    used, so pinged on checkout) must still be handed out, not fail with select's ValueError."""
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        with Ledger.open(store_url) as ledger:
            counts = [ledger.store.status_counts([EffectStatus.UNKNOWN]) for _ in range(3)]
    finally:
        for fd in held:
            os.close(fd)
    assert counts == [[], [], []]


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_job_time_limit_during_the_checkout_ping_puts_the_connection_back(
    store_url: str, monkeypatch: pytest.MonkeyPatch, adapter: HookedAdapter, fake: GenericFakeProvider
) -> None:
    """The ping of a suspect connection may block (a silent network) and a job's time limit fire inside it: the
    connection must go back to the pool, or a small pool runs dry for good."""
    conninfo, _, schema = store_url.rpartition("?schema=")
    store = PostgresStore(conninfo, schema=schema, min_size=1, max_size=1, timeout=2.0)

    def interrupted(conn: Any) -> None:
        raise JobTimeLimit

    with Ledger(store, lease=LEASE, retry=FAST_RETRY) as ledger:
        with monkeypatch.context() as patched:
            patched.setattr(pg_connections, "_ping_if_suspect", interrupted)
            for _ in range(2):
                with pytest.raises(JobTimeLimit):
                    ledger.store.status_counts([EffectStatus.UNKNOWN])
        assert ledger.execute(adapter, REQUEST, intent_key=KEY).record.status is S.CONFIRMED
    assert len(fake.effects()) == 1


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
@pytest.mark.parametrize(
    ("options", "cursor_factory"),
    [("-c DateStyle=German", psycopg.Cursor), ("-c DateStyle=ISO", psycopg.ClientCursor)],
    ids=["german-datestyle", "client-side-binding"],
)
def test_prepare_on_a_callers_connection_reads_the_record_back(
    store_url: str, pg_url: str, adapter: HookedAdapter, options: str, cursor_factory: type[psycopg.Cursor[Any]]
) -> None:
    """The pool's connections are set to ISO; a caller's own connection keeps its DateStyle (read in binary),
    or binds on the client (behind PgBouncer, which reads no binary): preparing the same intent again there
    reads the existing record back."""
    _, _, schema = store_url.rpartition("?schema=")
    caller = psycopg.connect(make_conninfo(pg_url, options=options), cursor_factory=cursor_factory)
    with Ledger.open(store_url) as ledger, caller as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        first = ledger.prepare(adapter, REQUEST, intent_key=KEY, connection=conn)
        again = ledger.prepare(adapter, REQUEST, intent_key=KEY, connection=conn)
        conn.commit()
        assert again == first
        assert ledger.get(KEY) == first
    assert adapter.dispatches == []


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_prepare_joins_a_transaction_opened_on_an_autocommit_connection(
    store_url: str, pg_url: str, adapter: HookedAdapter
) -> None:
    with Ledger.open(store_url) as ledger, psycopg.connect(pg_url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.QueryCanceled), conn.transaction():  # noqa: PT012  # the business write
            ledger.prepare(adapter, REQUEST, intent_key=KEY, connection=conn)
            conn.execute("SELECT pg_cancel_backend(pg_backend_pid())")  # it fails: the transaction rolls back
        with pytest.raises(IntentNotFound):
            ledger.get(KEY)
        with conn.transaction():
            ledger.prepare(adapter, REQUEST, intent_key=KEY, connection=conn)
        assert ledger.get(KEY).status is S.PREPARED


# -- a claim whose write failed but may have committed (_unsent.UnsentClaims) --------------------------------


@pytest.fixture
def keyless(tmp_path: Path) -> HookedAdapter:
    """A provider without idempotency keys whose lookups prove nothing: only the ledger can know it never sent."""
    return HookedAdapter(GenericFakeProvider(tmp_path / "keyless.db", dedupe=False), generic_contract(dedupe=False))


@pytest.fixture
def proxied(store_url: str, database_proxy: DatabaseProxy) -> Iterator[Ledger]:
    """A ledger on ``store_url``'s schema through the proxy, whose writes give up on a held lock after 0.1 s."""
    conninfo = make_conninfo(database_proxy.conninfo(store_url), options="-c lock_timeout=100")
    ledger = Ledger(PostgresStore(conninfo, schema=store_url.rpartition("?schema=")[2]), lease=LEASE, retry=FAST_RETRY)
    yield ledger
    ledger.close()


def _schema(store_url: str) -> sql.Identifier:
    return sql.Identifier(store_url.rpartition("?schema=")[2])


def _claim_whose_answer_is_lost(ledger: Ledger, proxy: DatabaseProxy, adapter: GenericFakeAdapter) -> None:
    """The claim's INSERT commits; its answer never comes back: the caller gets LedgerUnavailable."""
    proxy.drop_answer_to(b"INSERT INTO")
    with pytest.raises(LedgerUnavailable):
        ledger.execute(adapter, REQUEST, intent_key=KEY)


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_claim_committed_unacknowledged_is_sent_by_the_next_call_not_stranded(
    proxied: Ledger, database_proxy: DatabaseProxy, keyless: HookedAdapter
) -> None:
    """For a provider without keys or proof-of-absence lookups, an intent left in flight (then unknown) that was
    never sent could only be settled by an operator. The ledger knows it never sent it: the next call does."""
    _claim_whose_answer_is_lost(proxied, database_proxy, keyless)
    assert database_proxy.dropped.is_set()
    assert keyless.fake.requests() == []
    assert proxied.get(KEY).status is S.IN_FLIGHT  # committed, under this ledger's lease

    receipt = proxied.execute(keyless, REQUEST, intent_key=KEY)  # at once: no EffectInProgress, no unknown
    assert receipt.record.status is S.CONFIRMED
    assert receipt.record.attempt_count == 1
    trail = [a.to_status for a in proxied.store.audit_trail("default", KEY)]
    assert trail == [S.PREPARED, S.IN_FLIGHT]  # the unsent claim put back, then claimed again and answered
    assert receipt.record.version == 4
    assert receipt.record.dispatched_by == proxied.worker_id
    assert len(keyless.fake.requests()) == 1


def test_a_claim_lost_twice_unacknowledged_is_still_known_as_never_sent_and_sent_once(
    store_url: str, keyless: HookedAdapter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim of a new intent commits and its acknowledgement is lost; so does the claim of the next call,
    which took the first back as never sent. Taken back, the intent is as if never claimed (no attempt, no
    dispatch time), so the second failure is remembered too and the third call sends it, once, as its first
    attempt. Mutants: taken back with its dispatch time kept, the second claim looks sent before and is left
    to the lease, then unknown, which for this provider (no keys, lookups that prove nothing) only an operator
    can settle; with its attempt count kept, one send is recorded as the third attempt (and an adapter's own
    refusal of it would be taken for a later send's: unknown, not rejected)."""
    clock = FakeClock()
    with Ledger.open(store_url, clock=clock, retry=FAST_RETRY, lease=LEASE) as ledger:
        store = ledger.store
        insert, transition = store.insert_if_absent, store.transition

        def insert_unacknowledged(record: EffectRecord, **options: Any) -> tuple[EffectRecord, bool]:
            insert(record, **options)
            raise LedgerUnavailable("connection lost after the commit")

        def claim_unacknowledged(record: EffectRecord, to: EffectStatus, **changes: Any) -> EffectRecord:
            written = transition(record, to, **changes)
            if to is S.IN_FLIGHT:
                raise LedgerUnavailable("connection lost after the commit")
            return written

        monkeypatch.setattr(store, "insert_if_absent", insert_unacknowledged)
        with pytest.raises(LedgerUnavailable):
            ledger.execute(keyless, REQUEST, intent_key=KEY)
        monkeypatch.setattr(store, "insert_if_absent", insert)
        monkeypatch.setattr(store, "transition", claim_unacknowledged)
        clock.advance(timedelta(seconds=10))
        with pytest.raises(LedgerUnavailable):
            ledger.execute(keyless, REQUEST, intent_key=KEY)  # taken back, claimed again: lost again
        monkeypatch.setattr(store, "transition", transition)
        assert keyless.fake.requests() == []
        clock.advance(timedelta(seconds=10))

        receipt = ledger.execute(keyless, REQUEST, intent_key=KEY)  # within the lease: taken back and sent

        trail = [(a.from_status, a.to_status) for a in store.audit_trail("default", KEY)]
    record = receipt.record
    assert (record.status, record.attempt_count) == (S.CONFIRMED, 1)
    assert record.first_dispatched_at == record.dispatched_at == clock()
    assert trail == [(S.IN_FLIGHT, S.PREPARED), (S.PREPARED, S.IN_FLIGHT)] * 2
    assert len(keyless.fake.requests()) == 1


@pytest.mark.parametrize("write", ["insert", "claim"])
def test_a_claim_interrupted_as_it_committed_is_sent_by_the_next_call_not_stranded(
    store_url: str, keyless: HookedAdapter, monkeypatch: pytest.MonkeyPatch, write: str
) -> None:
    """A gevent Timeout landing while the claim's write waited for its answer: committed, never sent. Left to its
    lease it became unknown, which for a provider without keys only an operator could settle (the gevent
    review). Remembered as unsent, as an unacknowledged claim is, it is sent by the next call, once."""
    with Ledger.open(store_url, retry=FAST_RETRY, lease=LEASE) as ledger:
        store = ledger.store
        if write == "claim":  # a prepared intent's claim, rather than a new intent's insert
            ledger.prepare(keyless, REQUEST, intent_key=KEY)
        insert, transition = store.insert_if_absent, store.transition

        def insert_interrupted(record: EffectRecord, **options: Any) -> tuple[EffectRecord, bool]:
            insert(record, **options)
            raise Interruption

        def claim_interrupted(record: EffectRecord, to: EffectStatus, **changes: Any) -> EffectRecord:
            written = transition(record, to, **changes)
            if to is S.IN_FLIGHT:
                raise Interruption
            return written

        if write == "insert":
            monkeypatch.setattr(store, "insert_if_absent", insert_interrupted)
        else:
            monkeypatch.setattr(store, "transition", claim_interrupted)
        with pytest.raises(Interruption):
            ledger.execute(keyless, REQUEST, intent_key=KEY)
        monkeypatch.setattr(store, "insert_if_absent", insert)
        monkeypatch.setattr(store, "transition", transition)
        assert (ledger.get(KEY).status, keyless.fake.requests()) == (S.IN_FLIGHT, [])

        receipt = ledger.execute(keyless, REQUEST, intent_key=KEY)  # at once: no EffectInProgress, no unknown

    assert (receipt.record.status, receipt.record.attempt_count) == (S.CONFIRMED, 1)
    assert len(keyless.fake.requests()) == 1


class PausingStore(SQLiteStore):
    """A SQLite store that can hold a caller just after its claim committed, before the executor moves on."""

    after_insert: Callable[[], object] | None = None

    def insert_if_absent(self, record: EffectRecord, **options: Any) -> tuple[EffectRecord, bool]:
        written = super().insert_if_absent(record, **options)
        if self.after_insert is not None:
            self.after_insert()
        return written


def test_a_failed_claim_is_never_taken_over_while_another_call_of_this_ledger_may_send_it(
    tmp_path: Path, keyless: HookedAdapter
) -> None:
    """A claim that failed uncommitted is remembered; another call of the same ledger then writes the claim and
    is about to send it. A third call must wait for that one, not take the claim over as never sent. The clock
    stands still, so the two claims carry the same times: only the claim's tag tells them apart."""
    path = tmp_path / "ledger.db"
    store = PausingStore(path, busy_timeout=0.1)
    store.migrate()
    ledger = Ledger(store, retry=FAST_RETRY, lease=LEASE, clock=FakeClock())
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    with pytest.raises(LedgerUnavailable):
        ledger.execute(keyless, REQUEST, intent_key=KEY)  # nothing committed: the file was locked
    other.rollback()
    other.close()

    committed, go_on = threading.Event(), threading.Event()

    def hold() -> None:
        store.after_insert = None  # only the sender's own insert
        committed.set()
        go_on.wait(5)

    store.after_insert = hold
    sender = threading.Thread(target=ledger.execute, args=(keyless, REQUEST), kwargs={"intent_key": KEY})
    sender.start()
    assert committed.wait(5)
    threading.Timer(0.3, go_on.set).start()
    receipt = ledger.execute(keyless, REQUEST, intent_key=KEY)  # waits for the sender
    sender.join(5)
    ledger.close()
    assert receipt.from_ledger
    assert receipt.record.status is S.CONFIRMED
    assert len(keyless.fake.requests()) == 1


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
@pytest.mark.parametrize(
    "hold",
    [
        # the caller retries while the database still does not answer: its INSERT fails too, and that
        # failure is remembered next to the first one, which committed
        pytest.param("LOCK TABLE {}.effect_intents IN ACCESS EXCLUSIVE MODE", id="retry-fails-too"),
        # the retry takes the claim over, but putting it back to prepared times out on the row lock
        pytest.param("SELECT 1 FROM {}.effect_intents FOR UPDATE", id="take-over-fails"),
    ],
)
def test_a_remembered_claim_survives_another_failure_until_a_call_sends_it(
    store_url: str, pg_url: str, proxied: Ledger, database_proxy: DatabaseProxy, keyless: HookedAdapter, hold: str
) -> None:
    _claim_whose_answer_is_lost(proxied, database_proxy, keyless)
    with psycopg.connect(pg_url) as other:
        other.execute(sql.SQL(hold).format(_schema(store_url)))
        with pytest.raises(LedgerUnavailable):
            proxied.execute(keyless, REQUEST, intent_key=KEY)
    assert proxied.get(KEY).status is S.IN_FLIGHT  # nothing was written, nothing sent
    assert proxied.execute(keyless, REQUEST, intent_key=KEY).record.status is S.CONFIRMED
    assert len(keyless.fake.requests()) == 1


def test_two_ledgers_with_one_worker_id_never_take_each_others_sent_claim(
    tmp_path: Path, keyless: HookedAdapter
) -> None:
    """L1's claim fails uncommitted; L2, same worker id and a clock that stands still, claims the intent at the
    same instant, sends it and cannot record the answer. L1 must not take that claim for its own."""
    path, clock = tmp_path / "ledger.db", FakeClock()
    first, second = SQLiteStore(path, busy_timeout=0.1), SQLiteStore(path, busy_timeout=0.1)
    first.migrate()
    l1 = Ledger(first, worker_id="w", clock=clock, lease=LEASE, retry=FAST_RETRY)
    l2 = Ledger(second, worker_id="w", clock=clock, lease=LEASE, retry=FAST_RETRY)
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(LedgerUnavailable):
            l1.execute(keyless, REQUEST, intent_key=KEY)
        other.rollback()
        keyless.after_send.append(lambda: other.execute("BEGIN IMMEDIATE"))
        with pytest.raises(EffectUnknown):
            l2.execute(keyless, REQUEST, intent_key=KEY)
        other.rollback()
        with pytest.raises(EffectInProgress):  # L2's lease holds; it is reconciled once it runs out
            l1.execute(keyless, REQUEST, intent_key=KEY)
    finally:
        other.close()
        l1.close()
        l2.close()
    assert len(keyless.fake.requests()) == 1


def test_failed_claims_are_forgotten_once_their_intents_move_on(tmp_path: Path, keyless: HookedAdapter) -> None:
    """Two hundred claims fail during an outage; other workers settle them; this ledger's next calls on them
    leave nothing remembered. Claims older than the lease are dropped as new ones fail."""
    path = tmp_path / "ledger.db"
    store = SQLiteStore(path, busy_timeout=0.01)
    store.migrate()
    clock = FakeClock()
    ledger = Ledger(store, lease=LEASE, retry=FAST_RETRY, clock=clock)
    remembered = ledger._unsent  # how much this ledger holds is the point
    keys = [f"invoice:inv_{i}:collect:v1" for i in range(200)]
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    for key in keys:
        with pytest.raises(LedgerUnavailable):
            ledger.execute(keyless, REQUEST, intent_key=key)
    assert len(remembered) == 200
    clock.advance(LEASE.duration * 2)
    with pytest.raises(LedgerUnavailable):
        ledger.execute(keyless, REQUEST, intent_key="invoice:late:collect:v1")
    assert len(remembered) == 1  # only the newest: the others are older than the lease
    other.rollback()
    other.close()
    with Ledger(SQLiteStore(path), lease=LEASE, retry=FAST_RETRY) as elsewhere:
        elsewhere.execute(keyless, REQUEST, intent_key="invoice:late:collect:v1")
    ledger.execute(keyless, REQUEST, intent_key="invoice:late:collect:v1")  # answered from the ledger
    ledger.close()
    assert len(remembered) == 0


class LockingStore(PostgresStore):
    """A PostgreSQL store that runs ``after_insert`` once, just after an insert committed."""

    after_insert: Callable[[], object] | None = None

    def insert_if_absent(self, record: EffectRecord, **options: Any) -> tuple[EffectRecord, bool]:
        written = super().insert_if_absent(record, **options)
        if self.after_insert is not None:
            hook, self.after_insert = self.after_insert, None
            hook()
        return written


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_compensation_claimed_but_not_checked_is_sent_by_the_next_call(
    store_url: str, pg_url: str, keyless: HookedAdapter
) -> None:
    """The compensating claim commits; reading the original then fails. Nothing was sent: the next call sends
    the refund, once (the original still names it, so no other key could)."""
    conninfo = make_conninfo(store_url.rpartition("?schema=")[0], options="-c lock_timeout=100")
    store = LockingStore(conninfo, schema=store_url.rpartition("?schema=")[2])
    ledger = Ledger(store, lease=LEASE, retry=FAST_RETRY)
    refund, original = EffectRequest(operation="refund", params={"amount": 4200}), "invoice:inv_9:collect:v1"
    with psycopg.connect(pg_url) as other:
        try:
            ledger.execute(keyless, REQUEST, intent_key=original)
            lock = sql.SQL("LOCK TABLE {}.effect_intents IN ACCESS EXCLUSIVE MODE").format(_schema(store_url))
            store.after_insert = lambda: other.execute(lock)
            with pytest.raises(LedgerUnavailable):
                ledger.compensate(keyless, refund, original_key=original, compensating_key="invoice:inv_9:refund:v1")
            other.rollback()
            assert len(keyless.fake.requests()) == 1  # the charge only
            receipt = ledger.compensate(
                keyless, refund, original_key=original, compensating_key="invoice:inv_9:refund:v1"
            )
            assert receipt.record.status is S.CONFIRMED
            assert ledger.get(original).status is S.COMPENSATED
        finally:
            ledger.close()
    assert len(keyless.fake.requests()) == 2


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_remembered_claim_never_matches_a_record_made_again_after_a_purge(
    store_url: str, pg_url: str, database_proxy: DatabaseProxy, keyless: HookedAdapter
) -> None:
    """The audit trail outlives a purge and a key made again restarts at version 1: a claim tag remembered
    from the old record must not make a sent claim of the new one look never sent."""
    schema, clock = store_url.rpartition("?schema=")[2], FakeClock()
    conninfo = make_conninfo(database_proxy.conninfo(store_url), options="-c lock_timeout=100")
    a = Ledger(PostgresStore(conninfo, schema=schema), worker_id="A", lease=LEASE, retry=FAST_RETRY, clock=clock)
    b = Ledger(open_store(store_url), worker_id="B", lease=LEASE, retry=FAST_RETRY, clock=clock)
    try:
        _claim_whose_answer_is_lost(a, database_proxy, keyless)  # A remembers the tag of the old record's v1
        clock.advance(LEASE.duration * 2)
        with pytest.raises(EffectUnknown):  # B reconciles the dead claim: unknown, never sent
            b.execute(keyless, REQUEST, intent_key=KEY)
        Operator(b).resolve(KEY, to=S.REJECTED, operator="ann", reason="no such charge", expect_version=2)
        clock.advance(timedelta(days=800))
        assert purge_settled(b.store, older_than=timedelta(days=700), now=clock()).deleted == 1
        with psycopg.connect(pg_url) as other:  # A runs the key again; it is sent; its outcome cannot be written
            lock = sql.SQL("SELECT 1 FROM {}.effect_intents FOR UPDATE").format(_schema(store_url))
            keyless.after_send.append(lambda: other.execute(lock))
            with pytest.raises(EffectUnknown, match="could not record"):
                a.execute(keyless, REQUEST, intent_key=KEY)
        assert len(keyless.fake.requests()) == 1
        settled = a.execute(keyless, REQUEST, intent_key=KEY).record  # sent, so reconciled, never resent
        assert settled.status is S.CONFIRMED
        assert settled.resolution is not None
        assert settled.resolution.method.startswith("lookup")
    finally:
        a.close()
        b.close()
    assert len(keyless.fake.requests()) == 1


class SoftTimeLimit(Exception):
    """What Celery's soft time limit raises from a signal handler, wherever the task happens to be."""


def test_a_signal_raising_while_the_claim_waits_for_the_sqlite_lock_leaves_no_transaction_open(
    tmp_path: Path,
) -> None:
    """The handler runs as BEGIN IMMEDIATE returns, inside the write's ``__enter__``: no ``__exit__`` rolls
    back, and the thread's connection would keep the write lock, blocking every other writer of the file."""
    path = tmp_path / "ledger.db"
    store = SQLiteStore(path)
    store.migrate()
    ledger = Ledger(store)
    fake = GenericFakeProvider(tmp_path / "fake.db")
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock for a moment
    release = threading.Timer(0.5, holder.rollback)
    release.start()

    def on_alarm(*_: object) -> None:
        raise SoftTimeLimit("soft time limit")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)  # arrives while the claim waits for the lock
        with pytest.raises(SoftTimeLimit):
            ledger.execute(GenericFakeAdapter(fake), REQUEST, intent_key="job:j1:charge:v1")
    finally:
        signal.signal(signal.SIGALRM, previous)
        release.join()
        holder.close()
    assert not ledger.store._conn().in_transaction
    with closing(sqlite3.connect(path, isolation_level=None, timeout=0.1)) as other:
        other.execute("BEGIN IMMEDIATE")  # the lock is free at once
        other.rollback()
    with pytest.raises(IntentNotFound):
        ledger.get("job:j1:charge:v1")  # cut short before its claim was written: nothing to reconcile
    assert fake.effects() == []
    receipt = ledger.execute(GenericFakeAdapter(fake), REQUEST, intent_key="job:j2:charge:v1")
    assert receipt.record.status is EffectStatus.CONFIRMED  # the thread's next task writes as usual
    assert len(fake.effects()) == 1
    ledger.close()
