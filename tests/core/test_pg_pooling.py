"""PostgreSQL behind a real PgBouncer in transaction mode: the pool mode it needs, and the one it refuses.

PgBouncer runs here as a child process in front of the test PostgreSQL (``pool_mode = transaction``). Without
``pool_mode=transaction`` the store's prepared statements met other clients' sessions (measured before this
module: 55 of 300 effects went through, the rest failed on a missing or different prepared statement, 14 of
them after the provider had acted).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from safe_effects import (
    DEFAULT_TENANT,
    EffectRequest,
    EffectStatus,
    InvalidInput,
    Ledger,
    PostgresStore,
    StoreNotReady,
    open_store,
)
from safe_effects._pg_pooling import _warn_no_statement_timeout
from safe_effects.testing import GenericFakeAdapter, GenericFakeProvider

pytestmark = pytest.mark.postgres

REQUEST = EffectRequest(operation="charge", params={"amount": 4200})


def _at_provider(key: str) -> str:
    """The provider key GenericFakeAdapter sends for ``key`` under the default tenant."""
    return f"{DEFAULT_TENANT}/{key}"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _pgbouncer_binary() -> str:
    found = shutil.which("pgbouncer") or next((p for p in ("/usr/sbin/pgbouncer",) if os.path.exists(p)), None)
    if found is None:
        message = "pgbouncer is not installed (Debian: apt install pgbouncer): the pooler tests did not run"
        if os.environ.get("CI") == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return found


@contextmanager
def _pgbouncer(pg_url: str, pool_mode: str, pool_size: int, *, round_robin: bool = False) -> Iterator[str]:
    """A PgBouncer in ``pool_mode`` in front of the test database; yields its URL. ``round_robin``: it hands
    out its server sessions in turn, not the most recently used first."""
    binary = _pgbouncer_binary()  # first: a missing one skips (fails under CI) before a folder is left behind
    target = conninfo_to_dict(pg_url)
    user = str(target.get("user", "postgres"))
    folder = Path(tempfile.mkdtemp(prefix="se-pgbouncer-"))
    folder.chmod(0o755)  # PgBouncer refuses to run as root: it runs as postgres and must read this folder
    port = _free_port()
    (folder / "users.txt").write_text(f'"{user}" ""\n')
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={target.get('host', '127.0.0.1')} port={target.get('port', 5432)}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder / 'users.txt'}\n"
        f"pool_mode = {pool_mode}\ndefault_pool_size = {pool_size}\nmax_client_conn = 100\n"
        f"server_round_robin = {int(round_robin)}\n"
    )
    command = [binary, str(folder / "pgbouncer.ini")]
    if os.geteuid() == 0:
        command[1:1] = ["-u", "postgres"]
    log = folder / "pgbouncer.log"
    with log.open("w") as output:
        child = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    url = urlunsplit(urlsplit(pg_url)._replace(netloc=f"{user}@127.0.0.1:{port}"))
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                psycopg.connect(url, connect_timeout=2).close()
                break
            except psycopg.OperationalError:
                if child.poll() is not None or time.monotonic() > deadline:
                    child.kill()
                    child.wait()
                    pytest.fail(f"pgbouncer did not start: {log.read_text()}", pytrace=False)
                time.sleep(0.05)
        yield url
    finally:
        child.terminate()
        child.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def bouncer(pg_url: str) -> Iterator[str]:
    """PgBouncer in transaction mode, four server sessions."""
    with _pgbouncer(pg_url, "transaction", 4) as url:
        yield url


@pytest.fixture(scope="module")
def round_robin_bouncer(pg_url: str) -> Iterator[str]:
    """PgBouncer in transaction mode handing out its four sessions in turn: one client's next statement lands
    on another session, and the open-time check (which relies on reuse of the last session) sees nothing."""
    with _pgbouncer(pg_url, "transaction", 4, round_robin=True) as url:
        yield url


@pytest.fixture(scope="module")
def session_bouncer(pg_url: str) -> Iterator[str]:
    """PgBouncer in session mode with a single server session: no two clients connected at once."""
    with _pgbouncer(pg_url, "session", 1) as url:
        yield url


def _schema_exists(pg_url: str, name: str) -> bool:
    with psycopg.connect(pg_url) as conn:
        return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (name,)).fetchone() is not None


def _url(conninfo: str, **params: str) -> str:
    """A store URL for ``conninfo`` (a ``postgresql://`` URL) with the store's own parameters appended."""
    query = "&".join(f"{name}={value}" for name, value in params.items())
    return f"{conninfo}{'&' if '?' in conninfo else '?'}{query}"


def test_the_session_mode_behind_a_transaction_pooler_is_refused_at_open_and_nothing_is_created(
    bouncer: str, pg_schema: str, pg_url: str
) -> None:
    with pytest.raises(StoreNotReady, match=r"PgBouncer in transaction mode.*pool_mode=transaction"):
        open_store(_url(bouncer, schema=pg_schema))
    with pytest.raises(StoreNotReady, match=r"pool_mode='transaction'"):
        Ledger.open(_url(bouncer, schema=pg_schema))
    assert not _schema_exists(pg_url, pg_schema)
    with psycopg.connect(bouncer, autocommit=True) as other:  # the probe's setting is gone from the shared session
        assert other.execute("SELECT current_setting('safe_effects.pool_probe', true)").fetchone() in [("",), (None,)]


def test_a_session_pooler_with_one_server_session_opens_in_the_default_mode(
    session_bouncer: str, pg_schema: str, tmp_path: Path
) -> None:
    fake = GenericFakeProvider(tmp_path / "provider.db")
    with Ledger.open(_url(session_bouncer, schema=pg_schema)) as ledger:
        for n in range(8):  # past psycopg's fifth run, when it prepares the statements
            ledger.execute(GenericFakeAdapter(fake), REQUEST, intent_key=f"invoice:inv_{n}:collect:v1")
    assert len(fake.effects()) == 8


def test_behind_a_transaction_pooler_each_intent_is_sent_once_from_many_threads(
    bouncer: str, pg_schema: str, tmp_path: Path
) -> None:
    fake = GenericFakeProvider(tmp_path / "provider.db")
    keys = [f"invoice:inv_{n}:collect:v1" for n in range(60)]
    failures: list[BaseException] = []

    def work(ledger: Ledger, share: list[str]) -> None:
        adapter = GenericFakeAdapter(fake)
        for key in share:
            try:
                ledger.execute(adapter, REQUEST, intent_key=key)
                ledger.execute(adapter, REQUEST, intent_key=key)  # answered from the ledger, not sent again
            except BaseException as error:  # every failure is asserted on below
                failures.append(error)

    with Ledger.open(_url(bouncer, schema=pg_schema, pool_mode="transaction")) as ledger:
        # two threads per share: each key raced by two callers through sessions the pooler hands around
        threads = [threading.Thread(target=work, args=(ledger, keys[i % 6 :: 6])) for i in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == []
        assert {key: len(fake.requests(_at_provider(key))) for key in keys} == dict.fromkeys(keys, 1)
        unsettled = ledger.store.list_by_status([EffectStatus.IN_FLIGHT, EffectStatus.UNKNOWN], limit=100)
        assert unsettled == []
        assert {ledger.get(key).status for key in keys} == {EffectStatus.CONFIRMED}
    # the store set nothing on the server sessions it shared with other clients of the pooler
    with psycopg.connect(bouncer, autocommit=True) as other:
        for _ in range(4):  # the pooler's sessions in turn: none holds what the store would have set
            shown = other.execute(
                "SELECT current_setting('statement_timeout'), current_setting('default_transaction_isolation')"
            ).fetchone()
            assert shown == ("0", "read committed")


def test_behind_a_transaction_pooler_prepare_joins_a_callers_own_transactions(
    round_robin_bouncer: str, pg_schema: str, tmp_path: Path
) -> None:
    """The caller's connection prepares statements as psycopg does by default (after five runs): the store's
    own statements on it must not be, or a later prepare meets a session without them."""
    adapter = GenericFakeAdapter(GenericFakeProvider(tmp_path / "provider.db"))
    keys = [f"order:o_{n}:notify:v1" for n in range(8)]
    with Ledger.open(_url(round_robin_bouncer, schema=pg_schema, pool_mode="transaction")) as ledger:
        # the application's connection, through the pooler, and another client that keeps a second session busy
        with psycopg.connect(round_robin_bouncer) as caller, psycopg.connect(round_robin_bouncer) as other:
            for key in keys:
                other.execute("SELECT 1")  # the two take turns on two sessions
                with caller.transaction():
                    ledger.prepare(adapter, REQUEST, intent_key=key, connection=caller)
                    ledger.prepare(adapter, REQUEST, intent_key=key, connection=caller)  # found, read back
                other.rollback()
        assert {ledger.get(key).status for key in keys} == {EffectStatus.PREPARED}


def test_the_transaction_mode_also_works_on_a_direct_connection(pg_url: str, pg_schema: str, tmp_path: Path) -> None:
    fake = GenericFakeProvider(tmp_path / "provider.db")
    with Ledger.open(_url(pg_url, schema=pg_schema, pool_mode="transaction")) as ledger:
        receipt = ledger.execute(GenericFakeAdapter(fake), REQUEST, intent_key="invoice:inv_1:collect:v1")
    assert receipt.record.status is EffectStatus.CONFIRMED
    assert len(fake.effects()) == 1


@pytest.mark.parametrize(
    ("setting", "refusal"),
    [
        ("default_transaction_isolation%3Dserializable", r"isolation is 'serializable'.*ALTER ROLE"),
        ("DateStyle%3DGerman", r"DateStyle is 'German.*ALTER ROLE"),
    ],
)
def test_a_server_default_the_transaction_mode_cannot_override_is_refused_at_open(
    pg_url: str, pg_schema: str, setting: str, refusal: str
) -> None:
    # what a role or database default would give, set here through the connection's options
    url = _url(pg_url, options=f"-c%20{setting}", schema=pg_schema, pool_mode="transaction")
    with pytest.raises(StoreNotReady, match=refusal):
        open_store(url)
    assert not _schema_exists(pg_url, pg_schema)


def test_the_transaction_mode_warns_when_no_statement_timeout_can_be_kept(
    pg_url: str, pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    _warn_no_statement_timeout.cache_clear()  # said once per process: forget what earlier tests made it say
    with caplog.at_level("WARNING", logger="safe_effects"):
        PostgresStore(pg_url, schema=pg_schema, pool_mode="transaction").close()
        PostgresStore(pg_url, schema=pg_schema, pool_mode="transaction", statement_timeout=None).close()
        PostgresStore(
            make_conninfo(pg_url, options="-c statement_timeout=5s"), schema=pg_schema, pool_mode="transaction"
        ).close()
        PostgresStore(pg_url, schema=pg_schema, pool_mode="transaction").close()  # as the first: said already
    warned = [record.getMessage() for record in caplog.records if "statement_timeout" in record.getMessage()]
    assert len(warned) == 1  # the first; the second asks for none, the third's server sets one, the fourth repeats
    assert 'ALTER ROLE "postgres"' in warned[0]


def test_a_single_threaded_worker_holds_one_pooled_connection(bouncer: str, pg_schema: str, tmp_path: Path) -> None:
    """The pool is ready before the first call: a call that found it empty opened a second connection, which
    counts against the pooler's max_client_conn (and, in session mode, holds a second server session)."""
    adapter = GenericFakeAdapter(GenericFakeProvider(tmp_path / "provider.db"))
    with Ledger.open(_url(bouncer, schema=pg_schema, pool_mode="transaction")) as ledger:
        for n in range(3):
            ledger.execute(adapter, REQUEST, intent_key=f"invoice:inv_{n}:collect:v1")
        assert isinstance(ledger.store, PostgresStore)
        assert ledger.store._pool.get_stats()["pool_size"] == 1


@pytest.mark.parametrize("pool_mode", ["statement", "", "Transaction"])
def test_an_unknown_pool_mode_is_refused_before_anything_is_connected(pool_mode: str) -> None:
    unreachable = "postgresql://postgres@127.0.0.1:1/test"  # a connection attempt would be LedgerUnavailable
    with pytest.raises(InvalidInput, match=r"pool_mode must be 'session'.*or 'transaction'"):
        PostgresStore(unreachable, pool_mode=pool_mode)
    with pytest.raises(InvalidInput, match=r"pool_mode must be"):
        open_store(_url(unreachable, pool_mode=pool_mode))


def test_a_prepared_statement_lost_under_the_store_is_store_not_ready_and_nothing_is_sent(
    pg_url: str, pg_schema: str, tmp_path: Path
) -> None:
    """A pooler the open-time check missed: the session's prepared statements vanish under the store."""
    fake = GenericFakeProvider(tmp_path / "provider.db")
    store = PostgresStore(pg_url, schema=pg_schema, max_size=1)
    store.migrate()
    with Ledger(store) as ledger:
        adapter = GenericFakeAdapter(fake)
        for n in range(8):  # psycopg prepares a statement on its fifth run
            ledger.execute(adapter, REQUEST, intent_key=f"invoice:inv_{n}:collect:v1")
        with store._pool.connection() as conn:  # the one session: as if the pooler swapped it for another
            # inside DO, so psycopg does not see a DEALLOCATE and keeps believing its statements are there
            conn.execute(
                "DO $$ DECLARE name text; BEGIN FOR name IN SELECT p.name FROM pg_prepared_statements p LOOP "
                "EXECUTE format('DEALLOCATE %I', name); END LOOP; END $$"
            )
        with pytest.raises(StoreNotReady, match=r"prepared statement.*pool_mode=transaction"):
            ledger.execute(adapter, REQUEST, intent_key="invoice:inv_lost:collect:v1")
        assert len(fake.effects()) == 8
        assert fake.requests(_at_provider("invoice:inv_lost:collect:v1")) == []
        assert store.get(DEFAULT_TENANT, "invoice:inv_lost:collect:v1") is None
