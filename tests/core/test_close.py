"""Closing a ledger while calls run in other threads (a service's shutdown, an async app's to_thread calls):
each running call writes the answer its provider gave, new calls are refused typed, nothing is sent twice."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest

from safe_effects import (
    EffectInProgress,
    EffectRequest,
    EffectStatus,
    EffectUnknown,
    LeasePolicy,
    Ledger,
    LedgerClosed,
    Receipt,
    open_store,
)
from safe_effects.testing import GenericFakeAdapter, GenericFakeProvider

KEY = "invoice:inv_42:collect:v1"
OTHER = "invoice:inv_43:collect:v1"
CHARGE = EffectRequest(operation="charge", params={"amount": 2000, "currency": "eur"})
S = EffectStatus


@dataclass
class HeldAdapter(GenericFakeAdapter):
    """The fake acts, then the call holds its answer until the test releases it: a call in progress."""

    answered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def dispatch(self, request: EffectRequest, provider_key: str) -> str:
        result = super().dispatch(request, provider_key)
        self.answered.set()
        assert self.release.wait(30), "the test never released the call"
        return result


@pytest.fixture
def fake(tmp_path: Path) -> GenericFakeProvider:
    return GenericFakeProvider(tmp_path / "fake.sqlite3")


@pytest.fixture
def adapter(fake: GenericFakeProvider) -> HeldAdapter:
    return HeldAdapter(fake)


@pytest.fixture
def threads() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=4) as pool:
        yield pool


def _held_call(ledger: Ledger, adapter: HeldAdapter, threads: ThreadPoolExecutor) -> Future[Receipt]:
    """``execute`` in a thread, returned once the provider has acted and the call holds the answer."""
    running = threads.submit(ledger.execute, adapter, CHARGE, intent_key=KEY)
    assert adapter.answered.wait(10), "the call never reached the provider"
    return running


def _record(store_url: str, key: str = KEY) -> EffectStatus | None:
    """The record's status as a new worker reads it (None: nothing recorded)."""
    store = open_store(store_url)
    try:
        record = store.get("default", key)
    finally:
        store.close()
    return None if record is None else record.status


def test_close_lets_a_running_call_write_its_answer_and_refuses_new_calls(
    store_url: str, adapter: HeldAdapter, fake: GenericFakeProvider, threads: ThreadPoolExecutor
) -> None:
    ledger = Ledger.open(store_url)
    running = _held_call(ledger, adapter, threads)
    closing = threads.submit(ledger.close)
    time.sleep(0.2)
    assert not closing.done(), "close() returned while a call held an answer it had not written"
    with pytest.raises(LedgerClosed, match="the ledger is closed"):
        ledger.execute(adapter, CHARGE, intent_key=OTHER)
    adapter.release.set()
    receipt = running.result(timeout=10)
    closing.result(timeout=10)
    assert receipt.record.status is S.CONFIRMED
    assert _record(store_url) is S.CONFIRMED
    assert _record(store_url, OTHER) is None  # refused before anything was written...
    assert len(fake.effects()) == 1  # ...or sent


def test_close_waits_no_longer_than_asked_and_the_late_answer_ends_unknown(
    store_url: str,
    adapter: HeldAdapter,
    fake: GenericFakeProvider,
    threads: ThreadPoolExecutor,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ledger = Ledger.open(store_url)
    running = _held_call(ledger, adapter, threads)
    with caplog.at_level(logging.WARNING, logger="safe_effects"):
        started = time.monotonic()
        ledger.close(wait=0.2)
        assert time.monotonic() - started < 5
    assert "1 call(s) still running" in caplog.text
    assert f"Intents sent or being sent: {KEY!r} (tenant 'default')" in caplog.text  # the intent to watch, named
    adapter.release.set()
    with pytest.raises(EffectUnknown, match=r"is closed.*call again once its lease runs out"):
        running.result(timeout=10)
    assert _record(store_url) is S.IN_FLIGHT  # a killed worker's state: reconciled after the lease
    assert len(fake.effects()) == 1


def test_a_caller_waiting_for_another_stops_waiting_when_the_ledger_closes(
    store_url: str, adapter: HeldAdapter, fake: GenericFakeProvider, threads: ThreadPoolExecutor
) -> None:
    ledger = Ledger.open(store_url, lease=LeasePolicy(wait_for_other=timedelta(seconds=60), poll_interval=0.01))
    running = _held_call(ledger, adapter, threads)
    waiting = threads.submit(ledger.execute, adapter, CHARGE, intent_key=KEY)
    time.sleep(0.2)
    assert not waiting.done()  # it waits for the holder, as it should
    closing = threads.submit(ledger.close)
    with pytest.raises(EffectInProgress, match="this ledger is closing"):
        waiting.result(timeout=5)  # long before its 60 s wait
    adapter.release.set()
    assert running.result(timeout=10).record.status is S.CONFIRMED
    closing.result(timeout=10)
    assert len(fake.effects()) == 1
    assert _record(store_url) is S.CONFIRMED


@pytest.mark.parametrize(
    "call",
    [
        lambda ledger, adapter: ledger.execute(adapter, CHARGE, intent_key=KEY),
        lambda ledger, adapter: ledger.get(KEY),
        lambda ledger, adapter: ledger.reconcile(adapter, intent_key=KEY),
        lambda ledger, adapter: ledger.prepare(adapter, CHARGE, intent_key=KEY),
        lambda ledger, adapter: ledger.store.get("default", KEY),
    ],
    ids=["execute", "get", "reconcile", "prepare", "store.get"],
)
def test_a_closed_ledger_refuses_every_call_typed_not_as_an_outage(
    store_url: str,
    adapter: HeldAdapter,
    fake: GenericFakeProvider,
    call: Callable[[Ledger, HeldAdapter], object],
) -> None:
    """Not LedgerUnavailable ("retry later" would never succeed), and SQLite opens no connection nobody closes."""
    ledger = Ledger.open(store_url)
    ledger.close()
    with pytest.raises(LedgerClosed):
        call(ledger, adapter)
    assert len(fake.effects()) == 0
    assert _record(store_url) is None


def test_a_call_that_closes_its_own_ledger_does_not_wait_for_itself(store_url: str, fake: GenericFakeProvider) -> None:
    """An observer or adapter that closes the ledger from inside a call (a shutdown hook) must not deadlock."""
    ledger = Ledger.open(store_url)

    @dataclass
    class ClosingAdapter(GenericFakeAdapter):
        def dispatch(self, request: EffectRequest, provider_key: str) -> str:
            result = super().dispatch(request, provider_key)
            ledger.close(wait=30)
            return result

    started = time.monotonic()
    with pytest.raises(EffectUnknown):
        ledger.execute(ClosingAdapter(fake), CHARGE, intent_key=KEY)
    assert time.monotonic() - started < 10
    assert len(fake.effects()) == 1
    assert _record(store_url) is S.IN_FLIGHT
