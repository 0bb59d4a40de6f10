"""The ledger in a gevent worker (Celery's ``-P gevent``, gunicorn's gevent workers), where threads are greenlets
and a time limit is a ``gevent.Timeout``, which is not an ``Exception``.

Each case runs in a child interpreter that patches first, as such a worker does: the test process itself must
stay unpatched. Found by the gevent review (2026-12-01).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from safe_effects import EffectRequest, EffectStatus, Ledger
from safe_effects._running_calls import PATCHED_SINCE
from safe_effects.testing import GenericFakeAdapter, GenericFakeProvider

pytest.importorskip("gevent", reason="gevent is in the dev group: `python3 dev.py setup` installs it")


def _run_patched(script: str, *argv: str) -> subprocess.CompletedProcess[str]:
    code = "from gevent import monkey\nmonkey.patch_all()\n" + textwrap.dedent(script)
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120, check=False)


def test_sqlite_timeouts_in_greenlets_leave_the_main_greenlets_connection_open(tmp_path: Path) -> None:
    """``Thread.is_alive()`` switched greenlets, and a Timeout landing there marked the main thread stopped
    (Python 3.11 and 3.12): the store closed the main greenlet's connection, and its next call failed."""
    done = _run_patched(
        """
        import random, sys, gevent
        from safe_effects import Ledger
        random.seed(1)
        ledger = Ledger.open("sqlite:///" + sys.argv[1])
        store = ledger.store
        store.get("default", "invoice:x:email:v1")  # the main greenlet's connection
        timeouts = 0
        def reader(limit):
            global timeouts
            try:
                with gevent.Timeout(limit):
                    store.get("default", "invoice:x:email:v1")
                    gevent.sleep(0.02)
                    store.get("default", "invoice:x:email:v1")
            except gevent.Timeout:
                timeouts += 1
        gevent.joinall([gevent.spawn(reader, random.uniform(0.001, 0.06)) for _ in range(50)])
        assert timeouts > 0, "no greenlet was cut short: the case did not happen"
        print(store.get("default", "invoice:x:email:v1"))  # the main greenlet again
        """,
        str(tmp_path / "ledger.db"),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"


@pytest.mark.postgres
def test_postgres_timeouts_while_greenlets_wait_for_a_connection_lose_none(
    pg_url: str, pg_schema: str, tmp_path: Path
) -> None:
    """Each Timeout that cut a wait for a pooled connection short lost the connection given back next."""
    done = _run_patched(
        """
        import sys, time, gevent
        from safe_effects import EffectRequest, Ledger, PostgresStore
        from safe_effects.testing import GenericFakeAdapter, GenericFakeProvider
        store = PostgresStore(sys.argv[1], schema=sys.argv[2], max_size=2, timeout=5.0)
        store.migrate()
        ledger = Ledger(store)
        cut = 0
        def reader():
            global cut
            try:
                with gevent.Timeout(0.005):
                    ledger.get("invoice:x:email:v1")
            except gevent.Timeout:
                cut += 1
        gevent.joinall([gevent.spawn(reader) for _ in range(30)])
        assert cut > 0, "no wait was cut short: the case did not happen"
        began = time.monotonic()
        fake = GenericFakeProvider(sys.argv[3])
        request = EffectRequest(operation="charge", params={"n": 1})
        done = gevent.joinall([
            gevent.spawn(ledger.execute, GenericFakeAdapter(fake), request, intent_key=f"order:o_{n}:pay:v1")
            for n in range(4)
        ], raise_error=True)
        print(round(time.monotonic() - began, 1), len(fake.effects()))
        store.close()
        """,
        pg_url,
        pg_schema,
        str(tmp_path / "fake.db"),
    )
    assert done.returncode == 0, done.stderr
    seconds, effects = done.stdout.split()
    assert float(seconds) < 2.0  # no call waited out the pool's timeout for a connection that was lost
    assert effects == "4"
    with Ledger.open(f"{pg_url}?schema={pg_schema}") as ledger:
        assert {ledger.get(f"order:o_{n}:pay:v1").status for n in range(4)} == {EffectStatus.CONFIRMED}


def test_a_ledger_opened_before_patching_says_so_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """gunicorn's --preload opens the app's ledger before the gevent worker patches: its primitives are then
    the unpatched ones, which block every greenlet. The patch is what a call notices (simulated here)."""
    fake = GenericFakeProvider(tmp_path / "fake.db")
    request = EffectRequest(operation="charge", params={"n": 1})
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        ledger.execute(GenericFakeAdapter(fake), request, intent_key="order:o_1:pay:v1")
        assert PATCHED_SINCE not in caplog.text

        class PatchedLocal(threading.local):
            """What monkey.patch_all() puts in threading.local's place."""

        monkeypatch.setattr(threading, "local", PatchedLocal)
        with caplog.at_level(logging.WARNING, logger="safe_effects"):
            for n in (2, 3):
                ledger.execute(GenericFakeAdapter(fake), request, intent_key=f"order:o_{n}:pay:v1")
    assert caplog.text.count(PATCHED_SINCE) == 1
    assert len(fake.effects()) == 3
