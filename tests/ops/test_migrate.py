"""A command never creates or upgrades a ledger; ``safe-effects migrate`` does, once."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pytest
from typer.testing import CliRunner, Result

from safe_effects import InvalidInput, Ledger, LedgerUnavailable, PostgresStore, StorePermissionDenied, open_store
from safe_effects._passwords import redacted
from safe_effects.cli._app import app

if TYPE_CHECKING:
    from conftest import WorkerRole


def run(url: str, *args: str) -> Result:
    return CliRunner().invoke(app, list(args), env={"SAFE_EFFECTS_STORE": url})


def test_a_mistyped_sqlite_path_is_refused_and_no_file_appears(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'typo.db'}"
    listed = run(url, "list", "--json")
    assert listed.exit_code == 1
    assert "the file does not exist (create one with `safe-effects migrate`)" in listed.stderr
    assert not (tmp_path / "typo.db").exists()


def test_a_relative_sqlite_path_is_named_as_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sqlite:///tmp/x.db (three slashes) is tmp/x.db below the current directory: the refusal says so."""
    monkeypatch.chdir(tmp_path)
    listed = run("sqlite:///tmp/ledger.db", "list")
    assert listed.exit_code == 1
    assert f"(that is {tmp_path / 'tmp' / 'ledger.db'}; an absolute path is sqlite:////...)" in listed.stderr


def test_an_unmigrated_store_is_refused_until_migrate_runs_once(fresh_store_url: Callable[[], str]) -> None:
    url = fresh_store_url()
    store = open_store(url)
    try:
        if isinstance(store, PostgresStore):  # an empty schema, as a DBA may create one for the ledger
            import psycopg

            with psycopg.connect(url.rpartition("?schema=")[0], autocommit=True) as admin:
                admin.execute(f'CREATE SCHEMA "{store.schema}"')
        assert store.pending_migrations() == [1, 2, 3, 4, 5, 6]  # SQLite: an existing file without tables
    finally:
        store.close()
    refused = run(url, "list")
    assert refused.exit_code == 1
    assert refused.stderr.startswith(
        f"error [migrations_pending]: the ledger at {url} lacks schema migration(s) 1, 2, 3, 4, 5, 6: run "
        "`safe-effects migrate` first"
    )

    first = run(url, "migrate", "--json")
    again = run(url, "migrate")
    listed = run(url, "list", "--json")

    assert json.loads(first.stdout)["applied"] == [1, 2, 3, 4, 5, 6]
    assert "the schema is up to date" in again.stdout
    assert (listed.exit_code, json.loads(listed.stdout)) == (0, [])


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_mistyped_postgres_schema_is_named_and_no_new_ledger_is_suggested(store_url: str) -> None:
    """The CLI answered a typo in ?schema= with "lacks schema migration(s) 1..5: run `safe-effects migrate`",
    and following that advice made a new, empty ledger that answered "no unknowns"."""
    typo = f"{store_url}_typo"
    listed = run(typo, "list")
    assert listed.exit_code == 1
    assert f"the database has no schema '{typo.rpartition('=')[2]}' (check the URL's ?schema=" in listed.stderr
    assert "migrate" not in listed.stderr
    store = open_store(typo)
    try:
        assert not store.schema_exists()  # refused, not created
    finally:
        store.close()


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_worker_role_cannot_migrate_and_is_told_who_can(
    store_at_version: Callable[[int], str], worker_role: WorkerRole
) -> None:
    """A role with DML rights only (docs/operations.md) opening a ledger with a migration pending got a raw
    InsufficientPrivilege on the bookkeeping table's CREATE TABLE IF NOT EXISTS, from the library and the CLI."""
    url = store_at_version(4)
    worker_role.grant_dml(url.rpartition("?schema=")[2])
    worker = worker_role.url(url)
    told = r"schema migration\(s\) 5, 6 pending in schema '.+'; role '.+' may not create or change tables there"

    with pytest.raises(StorePermissionDenied, match=told + r".*: run `safe-effects migrate` as the schema's owner"):
        Ledger.open(worker)
    migrated = run(worker, "migrate")

    assert migrated.exit_code == 1
    assert migrated.stderr.startswith("error [store_permission_denied]: schema migration(s) 5, 6 pending")
    assert migrated.stderr.count("\n") == 1
    store = open_store(url)
    try:
        assert store.pending_migrations() == [5, 6]  # the ledger is as it was
    finally:
        store.close()


@pytest.mark.postgres
def test_a_password_in_the_store_url_is_never_printed(pg_url: str) -> None:
    """The refusal of a store without a ledger and ``migrate --json`` name the store: they go to terminals, CI
    logs and tickets, so a password in the URL shows as ***."""
    parts = urlsplit(pg_url)
    netloc = f"{parts.username or 'postgres'}:S3cret-pw@{parts.hostname}:{parts.port or 5432}"
    schema = f"se_test_{uuid.uuid4().hex[:12]}"
    url = parts._replace(netloc=netloc, query=f"schema={schema}").geturl()  # trust auth ignores the password
    try:
        refused = run(url, "list")
        migrated = run(url, "migrate", "--json")
        assert refused.exit_code == 1
        assert "the database has no schema" in refused.stderr
        assert json.loads(migrated.stdout)["applied"] == [1, 2, 3, 4, 5, 6]
        for output in (refused.stdout, refused.stderr, migrated.stdout, migrated.stderr):
            assert "S3cret-pw" not in output
        assert ":***@" in refused.stderr
        assert ":***@" in json.loads(migrated.stdout)["store"]
    finally:
        import psycopg

        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


_PW = "Hunter2SecretPw"


def _refused_conninfos(pg_url: str) -> list[str]:
    """Store URLs and a conninfo libpq refuses while quoting the offending token, which is (or holds) the
    password: raw, percent-decoded, or quoted in a keyword/value conninfo."""
    parts = urlsplit(pg_url)
    host = f"{parts.hostname}:{parts.port or 5432}"
    return [
        f"postgresql://postgres:{_PW}%ZZ@{host}/test",  # a bad escape in the userinfo
        f"postgresql://postgres:{_PW[:6]}@{_PW[6:]}@{host}/test",  # an unencoded @: libpq reads the rest as host
        f"postgresql://postgres@{host}/test?password={_PW}%2",  # ... in a password= parameter
        f"postgresql://postgres:{_PW[:7]}%{ord(_PW[7]):X}{_PW[8:]}@{host}/test?sslmode={_PW}",  # decoded form
        f"host={parts.hostname} dbname=test user=postgres password='{_PW}' sslmode='{_PW}'",  # keyword/value
    ]


@pytest.mark.postgres
def test_a_password_is_masked_in_what_libpq_says_about_a_refused_conninfo(pg_url: str) -> None:
    """libpq quotes a conninfo token it cannot read verbatim; the typed error, the CLI's line included, shows
    the password as *** in whichever form it was written, and a printed traceback does not chain the driver's
    error that quoted it (psycopg's own message names an unresolvable host, password and all)."""
    for conninfo in _refused_conninfos(pg_url):
        with pytest.raises((InvalidInput, LedgerUnavailable)) as raised:
            PostgresStore(conninfo)
        assert not any(piece in str(raised.value) for piece in (_PW, _PW[:6], _PW[6:])), conninfo
        trace = "".join(traceback.format_exception(raised.value))
        assert not any(piece in trace for piece in (_PW, _PW[:6], _PW[6:])), trace
        # a driver error that quoted the password is not chained; one that did not (psycopg before 3.2.13 names
        # no host in a failed name resolution) is, and then there is nothing to mask
        quoted = raised.value.__cause__ is None
        assert "***" in str(raised.value) or not quoted, str(raised.value)
        if "://" in conninfo:
            with pytest.raises((InvalidInput, LedgerUnavailable)) as opened:
                Ledger.open(conninfo)
            assert _PW[6:] not in str(opened.value)
            for command in ("list", "migrate"):
                printed = run(conninfo, command)
                assert printed.exit_code == 1
                assert _PW[6:] not in printed.stdout + printed.stderr
                assert "***" in printed.stderr or not quoted, printed.stderr


def test_an_unreachable_postgres_is_one_typed_line_at_once() -> None:
    with socket.socket() as probe:  # a port nothing listens on: connection refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    listed = subprocess.run(  # the installed entry point, with its logging, not the in-process runner
        [sys.executable, "-m", "safe_effects.cli", "list", "--store", f"postgresql://postgres@127.0.0.1:{port}/test"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert listed.returncode == 1
    assert time.monotonic() - started < 10  # not the pool's 30 s wait for a connection
    lines = listed.stderr.splitlines()
    assert len(lines) == 1, listed.stderr  # no pool warnings, no traceback
    assert lines[0].startswith("error [ledger_unavailable]: the PostgreSQL ledger cannot be reached: "), lines
    assert "Connection refused" in lines[0]


@pytest.mark.postgres
def test_a_missing_postgres_database_is_named_to_cli_and_library(pg_url: str) -> None:
    database = f"se_nodb_{uuid.uuid4().hex[:8]}"
    url = urlsplit(pg_url)._replace(path=f"/{database}").geturl()
    listed = run(url, "list")
    assert listed.exit_code == 1
    assert listed.stderr.startswith("error [ledger_unavailable]: ")
    assert listed.stderr.count("\n") == 1
    assert f'database "{database}" does not exist' in listed.stderr
    with pytest.raises(LedgerUnavailable, match=f'database "{database}" does not exist'):
        Ledger.open(url)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:S3cret@db:5432/x?schema=s", "postgresql://u:***@db:5432/x?schema=s"),
        ("postgresql://u:@db/x", "postgresql://u:***@db/x"),
        (
            "postgresql://u@db/x?sslmode=require&password=S3cret&schema=s",
            "postgresql://u@db/x?sslmode=require&password=***&schema=s",
        ),
        ("postgresql://u:pa?ss@db/x", "postgresql://u:***@db/x"),  # libpq's reading: credentials end at the @
        ("postgresql://u:s3cr@tPart@db/x", "postgresql://u:***@db/x"),  # an unencoded @: masked whole
        ("postgresql://u:pa/ss@db/x?application_name=a@b", "postgresql://u:***@db/x?application_name=a@b"),
        ("postgresql://db/x?schema=s", "postgresql://db/x?schema=s"),
        ("sqlite:///tmp/l.db", "sqlite:///tmp/l.db"),
    ],
)
def test_a_store_url_is_redacted_for_messages(url: str, shown: str) -> None:
    assert redacted(url) == shown
