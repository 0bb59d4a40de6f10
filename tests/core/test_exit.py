"""A process that ends without ``ledger.close()`` on PostgreSQL: its pool is closed at exit (on Python 3.13
psycopg_pool's own clean-up waited 5 s per pool thread), and a forked child's exit leaves its parent's
sessions alone."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from safe_effects.testing import GenericFakeProvider

pytestmark = pytest.mark.postgres

# the child: one effect through the generic fake, then the end of the script with the ledger still open
_PREAMBLE = """
import logging, os, sys
from safe_effects import EffectRequest, Ledger
from safe_effects.testing import GenericFakeAdapter, GenericFakeProvider

logging.basicConfig(level=logging.DEBUG, format="%(name)s %(levelname)s %(message)s")
fake = GenericFakeProvider(sys.argv[2])
ledger = Ledger.open(sys.argv[1])
ledger.execute(
    GenericFakeAdapter(fake),
    EffectRequest(operation="charge", params={"amount": 2000, "currency": "eur"}),
    intent_key="invoice:inv_42:collect:v1",
)
"""


def _run(script: str, url: str, fake_path: Path, *more: str) -> subprocess.CompletedProcess[str]:
    """The preamble and ``script`` in a new interpreter: argv is the store URL, the fake's file, ``more``."""
    code = textwrap.dedent(_PREAMBLE) + textwrap.dedent(script)
    return subprocess.run(
        [sys.executable, "-c", code, url, str(fake_path), *more],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _status(pg_url: str, schema: str) -> list[tuple[str, str]]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = conn.execute(
            sql.SQL("SELECT intent_key, status FROM {}").format(sql.Identifier(schema, "effect_intents"))
        ).fetchall()
    return [(str(key), str(status)) for key, status in rows]


def test_a_ledger_left_open_is_closed_at_exit_without_waiting_for_its_threads(
    pg_url: str, pg_schema: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    ended = _run("", f"{pg_url}?schema={pg_schema}", tmp_path / "fake.sqlite3")
    took = time.monotonic() - started

    assert ended.returncode == 0, ended.stderr
    assert f"closing the pool of the PostgreSQL ledger (schema {pg_schema}) left open at exit" in ended.stderr
    assert "couldn't stop thread" not in ended.stderr
    assert took < 15, f"the process took {took:.1f} s to end"
    # both sides: the effect was made once and recorded before the exit
    assert len(GenericFakeProvider(tmp_path / "fake.sqlite3").effects()) == 1
    assert _status(pg_url, pg_schema) == [("invoice:inv_42:collect:v1", "confirmed")]


def test_a_forked_child_ending_normally_leaves_its_parents_sessions_open(
    pg_url: str, pg_schema: str, tmp_path: Path
) -> None:
    app = f"se_exit_{uuid.uuid4().hex[:8]}"
    # the parent names its server sessions, forks a child that ends through sys.exit (atexit runs there),
    # then checks that each of its sessions still answers on the server, and makes a second effect
    script = """
    import psycopg
    def sessions():
        with psycopg.connect(sys.argv[3], autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s", [sys.argv[4]]
            ).fetchall()
        return {row[0] for row in rows}
    before = sessions()
    child = os.fork()
    if child == 0:
        sys.exit(0)
    os.waitpid(child, 0)
    import time
    time.sleep(0.5)
    lost = before - sessions()
    print(len(before), len(lost), flush=True)
    ledger.execute(
        GenericFakeAdapter(fake),
        EffectRequest(operation="charge", params={"amount": 500, "currency": "eur"}),
        intent_key="invoice:inv_43:collect:v1",
    )
    """
    ended = _run(script, f"{pg_url}?schema={pg_schema}&application_name={app}", tmp_path / "fake.sqlite3", pg_url, app)

    assert ended.returncode == 0, ended.stderr
    before, lost = (int(n) for n in ended.stdout.split()[-2:])
    assert before >= 1, ended.stdout  # the parent's pool had opened its sessions
    assert lost == 0, ended.stdout
    assert len(GenericFakeProvider(tmp_path / "fake.sqlite3").effects()) == 2
    assert sorted(_status(pg_url, pg_schema)) == [
        ("invoice:inv_42:collect:v1", "confirmed"),
        ("invoice:inv_43:collect:v1", "confirmed"),
    ]
