"""A ledger opened before os.fork() (gunicorn --preload, Celery prefork) serves every child safely.

Each child works on its own connections and tags its claims with its own prefix; both sides are checked:
the generic fake's effects and the ledger's records, read afterwards by a process that never forked.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from safe_effects import EffectRequest, EffectStatus, Ledger, PostgresStore, StoreCollector
from safe_effects.testing import GenericFakeAdapter, GenericFakeProvider, generic_contract

# Python 3.12+ warns on every fork of a process with threads (a PostgreSQL pool has some): what these tests
# check is that a fork at rest is safe
pytestmark = pytest.mark.filterwarnings(r"ignore:.*use of fork\(\) may lead to deadlocks:DeprecationWarning")

CHILDREN = 3
CALLS = 20
DEADLINE = 60.0  # seconds for every child to finish; a child stuck on a shared socket is killed after it


def request(n: int) -> EffectRequest:
    return EffectRequest(operation="send", params={"n": n})


def fork(job: Callable[[], None]) -> int:
    """Run ``job`` in a forked child that exits 0 when it returns, 1 when it raises."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        status = 1
        try:
            job()
            status = 0
        finally:
            os._exit(status)
    return pid


def exit_codes(pids: list[int]) -> list[int | None]:
    """Each child's exit status; None for one that did not finish in time (it is killed)."""
    codes: dict[int, int | None] = {}
    deadline = time.monotonic() + DEADLINE
    while len(codes) < len(pids) and time.monotonic() < deadline:
        for pid in pids:
            if pid not in codes and (done := os.waitpid(pid, os.WNOHANG))[0]:
                codes[pid] = os.waitstatus_to_exitcode(done[1])
        time.sleep(0.01)
    for pid in pids:
        if pid not in codes:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            codes[pid] = None
    return [codes[pid] for pid in pids]


@pytest.fixture
def adapter(tmp_path: Path) -> GenericFakeAdapter:
    """A provider without idempotency keys: an effect the ledger loses would be sent again by a retry."""
    return GenericFakeAdapter(GenericFakeProvider(tmp_path / "fake.db", dedupe=False), generic_contract(dedupe=False))


def test_children_of_a_forked_ledger_keep_every_record_after_the_parent_closes_it(
    store_url: str, adapter: GenericFakeAdapter, tmp_path: Path
) -> None:
    """Each child sends while the parent, which opened the ledger, closes it. Sharing the parent's SQLite
    connection, a child's commits went to a WAL the parent's close deleted; sharing its PostgreSQL sessions,
    the children read each other's replies."""
    ledger = Ledger.open(store_url)
    ledger.execute(adapter, request(-1), intent_key="job:parent:send:v1")
    parent_closed = tmp_path / "parent-closed"

    def child(c: int) -> Callable[[], None]:
        def job() -> None:
            ledger.execute(adapter, request(1000 * c), intent_key=f"job:c{c}-first:send:v1")
            (tmp_path / f"child-{c}-ready").touch()
            while not parent_closed.exists():
                time.sleep(0.005)
            for n in range(CALLS):
                ledger.execute(adapter, request(1000 * c + n + 1), intent_key=f"job:c{c}-{n}:send:v1")

        return job

    pids = [fork(child(c)) for c in range(CHILDREN)]
    while not all((tmp_path / f"child-{c}-ready").exists() for c in range(CHILDREN)):
        time.sleep(0.005)
    ledger.close()
    parent_closed.touch()

    assert exit_codes(pids) == [0] * CHILDREN
    sent = {effect.key.split("/", 1)[1] for effect in adapter.fake.effects()}
    assert len(sent) == len(adapter.fake.effects()) == 1 + CHILDREN * (CALLS + 1)
    with Ledger.open(store_url) as fresh:
        recorded = {r.intent_key for r in fresh.store.list_by_status([EffectStatus.CONFIRMED], limit=1000)}
    assert recorded == sent


def test_a_forked_child_is_another_worker_with_tags_of_its_own(store_url: str, tmp_path: Path) -> None:
    """A claim's tag proves the claim is this very ledger's own; a child repeating the parent's tags (or a
    sibling's) could take another process's live claim for its own failed one, and send again."""
    ledger = Ledger.open(store_url)
    seen = tmp_path / "seen"

    def job() -> None:
        seen.write_text(f"{ledger.worker_id} {ledger._unsent.tag()}")

    parent_tag = ledger._unsent.tag()
    assert exit_codes([fork(job)]) == [0]
    child_worker, child_tag = seen.read_text().split()
    assert child_worker != ledger.worker_id
    assert child_tag.split(".")[0] != parent_tag.split(".")[0]
    given = Ledger(ledger.store, worker_id="billing-1")
    assert exit_codes([fork(lambda: seen.write_text(given.worker_id))]) == [0]
    assert seen.read_text() == "billing-1"  # an id the caller chose is kept
    ledger.close()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)  # a SQLite store opens nothing until used
def test_a_store_closed_before_the_fork_stays_closed_in_the_children(store_url: str, tmp_path: Path) -> None:
    """A master that only migrated (``with Ledger.open(url): pass``) must not open a pool in every child."""
    with Ledger.open(store_url) as ledger:
        pass
    store = ledger.store
    assert isinstance(store, PostgresStore)

    def job() -> None:
        (tmp_path / "opened").write_text(str(not store._pool.closed))

    assert exit_codes([fork(job)]) == [0]
    assert (tmp_path / "opened").read_text() == "False"


def test_a_metrics_collector_made_before_the_fork_reads_the_store_in_the_child(store_url: str, tmp_path: Path) -> None:
    """Its reader thread does not survive a fork: without a new one, every scrape in the child says store down."""
    ledger = Ledger.open(store_url)
    registry = CollectorRegistry()
    registry.register(StoreCollector(ledger.store))
    assert registry.get_sample_value("safe_effects_store_up") == 1

    def job() -> None:
        (tmp_path / "up").write_text(str(registry.get_sample_value("safe_effects_store_up")))

    assert exit_codes([fork(job)]) == [0]
    assert float((tmp_path / "up").read_text()) == 1
    ledger.close()
