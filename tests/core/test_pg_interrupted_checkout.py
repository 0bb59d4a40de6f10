"""A call cut short while it waits for a pooled PostgreSQL connection gives its place in the queue up.

gevent's ``Timeout`` (a Celery gevent worker's time limit), a killed greenlet and Dramatiq's time limit all
raise something that is not an ``Exception``. psycopg_pool's wait for a connection let such an exception out
but kept the waiter queued, so the next connection given back went to it and was lost: one slot of the pool
gone for good, and once all of them, every call of the process waited out its timeout (the gevent review).
Here the interruption is a signal handler's, in the main thread, so no gevent is needed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from safe_effects import EffectRequest, EffectStatus, Ledger, PostgresStore
from safe_effects.testing import GenericFakeAdapter, GenericFakeProvider

from ._time_limits import Interruption, interrupt, time_limit

pytestmark = pytest.mark.postgres


@pytest.fixture
def one_connection(pg_url: str, pg_schema: str) -> Iterator[PostgresStore]:
    store = PostgresStore(pg_url, schema=pg_schema, max_size=1, timeout=3.0)
    store.migrate()
    yield store
    store.close()


@pytest.mark.parametrize("times", [1, 3])
def test_a_wait_for_a_connection_cut_short_loses_no_connection(
    one_connection: PostgresStore, times: int, tmp_path: Path
) -> None:
    store = one_connection
    ledger = Ledger(store)
    provider = GenericFakeProvider(tmp_path / "fake.db")
    for _ in range(times):
        held = store._checkout()  # another call holds the only connection
        held.__enter__()
        began = time.monotonic()
        with pytest.raises(Interruption), time_limit(0.2, first=interrupt):
            ledger.get("invoice:inv_1:collect:v1")  # waits for the connection, and is cut short
        assert time.monotonic() - began < 2.0  # by the signal, not by the pool's timeout
        assert store._pool.get_stats().get("requests_waiting", 0) == 0  # out of the queue at once
        held.__exit__(None, None, None)

    began = time.monotonic()
    receipt = ledger.execute(
        GenericFakeAdapter(provider), EffectRequest(operation="charge", params={"n": 1}), intent_key="order:o_1:pay:v1"
    )
    assert time.monotonic() - began < 1.0  # the connection came back to the pool, not to the abandoned wait
    assert receipt.record.status is EffectStatus.CONFIRMED
    assert len(provider.effects()) == 1


def test_a_connection_handed_over_as_the_wait_was_cut_short_goes_back_to_the_pool(
    one_connection: PostgresStore, tmp_path: Path
) -> None:
    """The other order: the connection given back reached the waiter just before the interruption did."""
    from psycopg_pool.pool import WaitingClient

    store = one_connection
    pool = store._pool
    waiter: WaitingClient[object] = WaitingClient()
    assert waiter.set(pool.getconn())  # handed over; its caller is gone before it could take it
    assert pool.get_stats().get("pool_available", 0) == 0

    pool._give_up(waiter)  # type: ignore[attr-defined]  # what an interrupted getconn does

    assert pool.get_stats().get("pool_available", 0) == 1
    provider = GenericFakeProvider(tmp_path / "fake.db")
    request = EffectRequest(operation="charge", params={"n": 2})
    receipt = Ledger(store).execute(GenericFakeAdapter(provider), request, intent_key="order:o_2:pay:v1")
    assert receipt.record.status is EffectStatus.CONFIRMED
    assert len(provider.effects()) == 1
