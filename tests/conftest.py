"""Fixtures every test folder shares: a store per backend, and a URL child processes can open."""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from safe_effects import Ledger, Store, open_store
from safe_effects._migrations import MIGRATIONS, POSTGRES_BOOKKEEPING, SQLITE_BOOKKEEPING

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture(scope="session")
def pg_url() -> str:
    """The test PostgreSQL; unreachable fails under CI=true (it is mandatory there), else skips visibly."""
    import psycopg

    url = os.environ.get("SAFE_EFFECTS_TEST_PG_URL", DEFAULT_PG_URL)
    try:
        psycopg.connect(url, connect_timeout=3).close()
    except psycopg.Error as error:
        message = f"PostgreSQL at SAFE_EFFECTS_TEST_PG_URL={url!r} is unreachable: {error}"
        if os.environ.get("CI") == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return url


@pytest.fixture(
    params=[pytest.param("sqlite", id="sqlite"), pytest.param("postgres", id="postgres", marks=pytest.mark.postgres)]
)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def fresh_store_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], str]]:
    """Factory of URLs of new, unmigrated stores on ``backend``; their PostgreSQL schemas are dropped after."""
    schemas: list[str] = []

    def make() -> str:
        if backend == "sqlite":
            return f"sqlite:///{tmp_path / f'store-{uuid.uuid4().hex[:8]}.db'}"
        base: str = request.getfixturevalue("pg_url")
        schemas.append(f"se_test_{uuid.uuid4().hex[:12]}")
        return f"{base}{'&' if '?' in base else '?'}schema={schemas[-1]}"

    yield make
    if schemas:
        import psycopg
        from psycopg import sql

        with psycopg.connect(request.getfixturevalue("pg_url"), autocommit=True) as conn:
            for schema in schemas:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture
def pg_schema(pg_url: str) -> Iterator[str]:
    """A PostgreSQL schema name of this test's own, dropped afterwards."""
    import psycopg
    from psycopg import sql

    name = f"se_test_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def store_url(fresh_store_url: Callable[[], str]) -> str:
    """A migrated store's URL for ``open_store``, e.g. in a child process."""
    url = fresh_store_url()
    store = open_store(url)
    store.migrate()
    store.close()
    return url


@pytest.fixture
def store_at_version(
    backend: str, fresh_store_url: Callable[[], str], request: pytest.FixtureRequest
) -> Callable[[int], str]:
    """Factory of URLs of stores migrated only up to a version, as a deployment of that release left them."""

    def make(version: int) -> str:
        url = fresh_store_url()
        migrations = [migration for migration in MIGRATIONS if migration.version <= version]
        if backend == "sqlite":
            with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)) as conn:
                conn.execute(SQLITE_BOOKKEEPING)
                for migration in migrations:
                    for statement in migration.sqlite:
                        conn.execute(statement)
                    conn.execute(
                        "INSERT INTO schema_migrations VALUES (?, ?)", (migration.version, "2026-01-01T00:00:00Z")
                    )
            return url
        import psycopg
        from psycopg import sql

        schema = sql.Identifier(url.rpartition("?schema=")[2])
        with psycopg.connect(request.getfixturevalue("pg_url"), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(schema))
            conn.execute(sql.SQL(POSTGRES_BOOKKEEPING).format(schema=schema))  # type: ignore[arg-type]
            for migration in migrations:
                with conn.transaction():  # as the store runs each (SET LOCAL needs one)
                    for statement in migration.postgres:
                        conn.execute(sql.SQL(statement).format(schema=schema))  # type: ignore[arg-type]
                    conn.execute(
                        sql.SQL("INSERT INTO {}.schema_migrations (version) VALUES (%s)").format(schema),
                        (migration.version,),
                    )
        return url

    return make


@dataclass
class WorkerRole:
    """A PostgreSQL login role of a test's own, as workers get one: no rights until :meth:`grant_dml`."""

    name: str
    admin_url: str

    def grant_dml(self, schema: str) -> None:
        """What docs/operations.md recommends for workers: USAGE on the schema, DML on its tables."""
        import psycopg
        from psycopg import sql

        names = {"schema": sql.Identifier(schema), "role": sql.Identifier(self.name)}
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(sql.SQL("GRANT USAGE ON SCHEMA {schema} TO {role}").format(**names))
            admin.execute(
                sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}").format(
                    **names
                )
            )

    def url(self, store_url: str) -> str:
        """``store_url`` (a PostgreSQL one) logged in as this role."""
        parts = urlsplit(store_url)
        return parts._replace(netloc=f"{self.name}@{parts.hostname}:{parts.port or 5432}").geturl()


@pytest.fixture
def worker_role(pg_url: str) -> Iterator[WorkerRole]:
    """A :class:`WorkerRole`; its sessions, grants and the role itself are gone after the test."""
    import psycopg
    from psycopg import sql

    role = WorkerRole(f"se_test_{uuid.uuid4().hex[:12]}", pg_url)
    name = sql.Identifier(role.name)
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(name))
    yield role
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role.name,))
        admin.execute(sql.SQL("DROP OWNED BY {}").format(name))  # its grants
        admin.execute(sql.SQL("DROP ROLE {}").format(name))


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """A migrated store: SQLite on a file in tmp_path, PostgreSQL in a schema of its own."""
    opened = open_store(store_url)
    yield opened
    opened.close()


@pytest.fixture
def open_ledger(store_url: str) -> Iterator[Callable[..., Ledger]]:
    """``Ledger.open(store_url, **options)`` for each worker a test needs; all closed after the test.

    A PostgreSQL pool left to the garbage collector warns (an error here) at a moment no test controls.
    """
    opened: list[Ledger] = []

    def make(**options: Any) -> Ledger:
        opened.append(Ledger.open(store_url, **options))
        return opened[-1]

    yield make
    for ledger in opened:
        ledger.close()


class DatabaseProxy:
    """A TCP proxy in front of the test PostgreSQL, for a ledger whose database goes away under it.

    ``cut()`` drops every connection and refuses new ones, as a stopped server does. ``drop_answer_to(marker)``
    lets the next client message holding ``marker`` reach the server, which runs and commits it, and loses
    the server's answer: the client's connection is cut instead (``dropped`` is set then).
    """

    def __init__(self, host: str, port: int, *, listen_port: int = 0) -> None:
        self.target = (host, port)
        self.server = socket.create_server(("127.0.0.1", listen_port))
        self.port = self.server.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.marker: bytes | None = None
        self.dropped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def conninfo(self, url: str) -> str:
        """``url`` (without ``?schema=``) pointed at this proxy."""
        from psycopg.conninfo import make_conninfo

        return make_conninfo(url.partition("?schema=")[0], host="127.0.0.1", port=self.port)

    def drop_answer_to(self, marker: bytes) -> None:
        self.marker = marker

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self.server.accept()
                upstream = socket.create_connection(self.target)
                self.sockets += [client, upstream]
                lose_answer = threading.Event()
                threading.Thread(target=self._up, args=(client, upstream, lose_answer), daemon=True).start()
                threading.Thread(target=self._down, args=(upstream, client, lose_answer), daemon=True).start()

    def _up(self, client: socket.socket, upstream: socket.socket, lose_answer: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                if self.marker is not None and self.marker in data:
                    self.marker = None
                    lose_answer.set()
                upstream.sendall(data)

    def _down(self, upstream: socket.socket, client: socket.socket, lose_answer: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := upstream.recv(65536):
                if lose_answer.is_set():  # the server answered: it committed; the answer goes nowhere
                    self.dropped.set()  # first: the client may look as soon as its connection breaks
                    client.shutdown(socket.SHUT_RDWR)
                    return
                client.sendall(data)

    def cut(self) -> None:
        """Refuse new connections and drop the open ones (again: no-op)."""
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread; close alone would not
        self.server.close()
        for open_socket in self.sockets:
            with contextlib.suppress(OSError):
                open_socket.shutdown(socket.SHUT_RDWR)
            open_socket.close()


@pytest.fixture
def database_proxy(database_back_on: Callable[[int], DatabaseProxy]) -> DatabaseProxy:
    """A :class:`DatabaseProxy` in front of the test PostgreSQL; cut after the test."""
    return database_back_on(0)


@pytest.fixture
def database_back_on(pg_url: str) -> Iterator[Callable[[int], DatabaseProxy]]:
    """Start a :class:`DatabaseProxy` to the test PostgreSQL listening on a given port (0: any): a database
    that comes up where a client was already trying to reach it. Every one is cut after the test."""
    from psycopg.conninfo import conninfo_to_dict

    named = conninfo_to_dict(pg_url)
    started: list[DatabaseProxy] = []

    def start(port: int) -> DatabaseProxy:
        proxy = DatabaseProxy(str(named.get("host", "127.0.0.1")), int(named.get("port", 5432)), listen_port=port)
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        proxy.cut()


@pytest.fixture
def no_aws_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A machine with no AWS credentials, profile, config file, instance metadata or region: boto3 finds nothing."""
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_PROFILE",
        "AWS_DEFAULT_REGION",
        "AWS_REGION",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    import boto3  # here: most of the suite never needs it

    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # one made before would keep the credentials it found
