"""The SQLite ledger on a disk that fills up: a real filesystem out of space, not a simulated error.

The ledger lives on a small tmpfs mounted for the test; a filler file takes its last byte, so the next WAL
frame SQLite appends fails with ENOSPC (SQLITE_FULL). Mounting needs root (or CAP_SYS_ADMIN): elsewhere the
tests skip and say so. What is asserted is both sides: the fake provider's effects and the ledger's records,
and that the file is intact afterwards.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from safe_effects import (
    EffectRequest,
    EffectStatus,
    EffectUnknown,
    IntentNotFound,
    LeasePolicy,
    Ledger,
    LedgerUnavailable,
    RetryPolicy,
    SQLiteStore,
)
from safe_effects.testing import GenericFakeProvider

from .test_ledger_unavailable import HookedAdapter

S = EffectStatus
KEY = "invoice:inv_1:collect:v1"
REQUEST = EffectRequest(operation="charge", params={"amount": 4200})
FAST_RETRY = RetryPolicy(max_attempts=3, initial_wait=0.01, max_wait=0.05)
LEASE = LeasePolicy(duration=timedelta(seconds=60), wait_for_other=timedelta(seconds=1), poll_interval=0.01)
DISK_FULL = "database or disk is full; the disk holding it has no free space left"


@dataclass
class SmallDisk:
    """A mounted tmpfs of a few megabytes that :meth:`fill` leaves without a free byte."""

    path: Path

    @property
    def filler(self) -> Path:
        return self.path / "filler"

    def fill(self) -> None:
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            while True:
                os.write(fd, b"\0" * 65536)  # a short last write, then ENOSPC: nothing is left
        except OSError as full:
            if full.errno != errno.ENOSPC:  # something else stopped the writes: the disk may not be full
                raise
        finally:
            os.close(fd)

    def free(self) -> None:
        self.filler.unlink()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    if not sys.platform.startswith("linux"):
        pytest.skip("mounts a tmpfs: Linux only")
    mount_point = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {mounted.stderr.strip()}")
    try:
        yield SmallDisk(mount_point)
    finally:
        subprocess.run(["umount", "--lazy", str(mount_point)], check=True)


@pytest.fixture
def fake(tmp_path: Path) -> GenericFakeProvider:
    return GenericFakeProvider(tmp_path / "provider.db")  # the provider's own disk has room


@pytest.fixture
def adapter(fake: GenericFakeProvider) -> HookedAdapter:
    return HookedAdapter(fake)


@pytest.fixture
def ledger(small_disk: SmallDisk, adapter: HookedAdapter) -> Iterator[Ledger]:
    store = SQLiteStore(small_disk.path / "ledger.db")
    store.migrate()
    opened = Ledger(store, retry=FAST_RETRY, lease=LEASE)
    opened.execute(adapter, REQUEST, intent_key="invoice:inv_0:collect:v1")  # the file and its WAL exist
    adapter.dispatches.clear()
    try:
        yield opened
    finally:
        opened.close()


def _intact(small_disk: SmallDisk) -> None:
    with closing(sqlite3.connect(small_disk.path / "ledger.db")) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


def test_a_claim_on_a_full_disk_sends_nothing_and_the_same_call_goes_through_once_space_returns(
    small_disk: SmallDisk, ledger: Ledger, adapter: HookedAdapter, fake: GenericFakeProvider
) -> None:
    small_disk.fill()
    with pytest.raises(LedgerUnavailable, match=DISK_FULL):
        ledger.execute(adapter, REQUEST, intent_key=KEY)
    assert adapter.dispatches == []
    assert fake.requests(KEY) == []
    with pytest.raises(IntentNotFound):
        ledger.get(KEY)  # reads work on a full disk; the refused claim left nothing
    with closing(SQLiteStore(small_disk.path / "ledger.db")) as reader:  # another connection, as the CLI's
        assert reader.get("default", "invoice:inv_0:collect:v1") is not None

    small_disk.free()  # the same ledger, its connection kept: no restart needed
    receipt = ledger.execute(adapter, REQUEST, intent_key=KEY)
    assert receipt.record.status is S.CONFIRMED
    assert len(fake.effects(receipt.record.provider_key)) == 1
    _intact(small_disk)


def test_an_answer_a_full_disk_cannot_record_is_effect_unknown_and_settled_once_space_returns(
    small_disk: SmallDisk, ledger: Ledger, adapter: HookedAdapter, fake: GenericFakeProvider
) -> None:
    adapter.after_send.append(small_disk.fill)  # the provider acted; then another writer takes the last byte

    with pytest.raises(EffectUnknown, match="could not record") as unknown:
        ledger.execute(adapter, REQUEST, intent_key=KEY)
    assert isinstance(unknown.value.__cause__, LedgerUnavailable)
    assert DISK_FULL in str(unknown.value.__cause__)
    [provider_key] = adapter.dispatches
    assert len(fake.effects(provider_key)) == 1
    assert ledger.get(KEY).status is S.IN_FLIGHT  # the claim stands; the answer was written nowhere

    small_disk.free()
    receipt = ledger.execute(adapter, REQUEST, intent_key=KEY)
    assert receipt.record.status is S.CONFIRMED
    assert receipt.record.resolution is not None
    assert receipt.record.resolution.method == "key_replay"
    assert adapter.dispatches == [provider_key, provider_key]  # resent under the same key...
    assert len(fake.effects(provider_key)) == 1  # ...which the provider deduplicated: one effect
    assert receipt.record.provider_result_id == fake.effects(provider_key)[0].result_id
    _intact(small_disk)


def test_a_ledger_nothing_holds_open_cannot_be_opened_on_a_full_disk_and_the_error_says_why(
    small_disk: SmallDisk, ledger: Ledger
) -> None:
    ledger.close()  # the last connection: SQLite deletes the WAL and shared-memory files it opens with
    small_disk.fill()
    url = f"sqlite:///{small_disk.path / 'ledger.db'}"
    with pytest.raises(LedgerUnavailable, match=r"could not be opened: .*; the disk holding it has no free space left"):
        Ledger.open(url)

    small_disk.free()
    with Ledger.open(url) as reopened:
        assert reopened.get("invoice:inv_0:collect:v1").status is S.CONFIRMED
    _intact(small_disk)
