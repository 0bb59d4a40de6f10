"""purge deletes only settled records past the floor; unknown, in-flight and prepared ones always stay."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from safe_effects import EffectOutcome, EffectRequest, EffectStatus, Ledger, RetryPolicy
from safe_effects.testing import FakeClock, FakeFailure

if TYPE_CHECKING:
    from conftest import Ops

S = EffectStatus


@pytest.fixture
def aged(ops: Ops) -> Ops:
    """Records of every status last touched 200 days ago, plus a fresh confirmed one."""
    clock = FakeClock(datetime.now(UTC) - timedelta(days=200))
    old = Ledger(ops.ledger.store, clock=clock, retry=RetryPolicy(initial_wait=0.0, max_wait=0.05))
    fake = ops.fake

    def run(key: str, failure: FakeFailure | None = None) -> None:
        if failure is not None:
            fake.fail_next(failure)
        with contextlib.suppress(EffectOutcome):  # rejected / unknown outcomes are what we want stored here
            old.execute(ops.adapter, EffectRequest(operation="charge", params={"k": key}), intent_key=key)

    run("old:confirmed:x:v1")
    run("old:rejected:x:v1", FakeFailure.DECLINED)
    run("old:unknown:x:v1", FakeFailure.LOST_AFTER_COMMIT)
    old.prepare(ops.adapter, EffectRequest(operation="charge", params={}), intent_key="old:prepared:x:v1")
    prepared = old.prepare(
        ops.adapter, EffectRequest(operation="charge", params={"f": 1}), intent_key="old:flight:x:v1"
    )
    old.store.transition(prepared, S.IN_FLIGHT, now=clock(), actor="w", changes={"lease_owner": "w"})
    ops.confirmed("new:confirmed:x:v1")
    return ops


def keys(ops: Ops) -> set[str]:
    return {r.intent_key for r in ops.ledger.store.list_by_status(list(S), limit=100)}


ALL = {
    "old:confirmed:x:v1",
    "old:rejected:x:v1",
    "old:unknown:x:v1",
    "old:prepared:x:v1",
    "old:flight:x:v1",
    "new:confirmed:x:v1",
}


def test_purge_below_the_floor_is_refused(aged: Ops) -> None:
    refused = aged.cli("purge", "--older-than", "30")
    assert refused.exit_code == 1
    assert "refusing to purge records younger than 120 days" in refused.stderr
    assert keys(aged) == ALL


def test_purge_keeps_unsettled_and_recent_records(aged: Ops) -> None:
    report = aged.cli_json("purge", "--older-than", "150")
    assert report["deleted"] == 2
    assert report["minimum_days"] == 120
    assert keys(aged) == ALL - {"old:confirmed:x:v1", "old:rejected:x:v1"}
    assert aged.ledger.store.audit_trail("default", "old:confirmed:x:v1")  # the audit trail outlives the record


def test_forced_minimum_still_never_deletes_unsettled(aged: Ops) -> None:
    report = aged.cli_json("purge", "--older-than", "0", "--force-min-days", "0")
    assert report["deleted"] == 3
    assert keys(aged) == {"old:unknown:x:v1", "old:prepared:x:v1", "old:flight:x:v1"}


def test_a_contract_with_longer_retention_raises_the_floor(aged: Ops) -> None:
    refused = aged.cli("purge", "--older-than", "150", "--adapters", "ops_fake_adapters:long_retention")
    assert refused.exit_code == 1
    assert "younger than 365 days" in refused.stderr
    assert keys(aged) == ALL
