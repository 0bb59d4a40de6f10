"""Real worker processes SIGKILLed at every crash point, then restarted: one effect, one terminal record."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from safe_effects import CrashPlan, CrashPoint, EffectStatus, Ledger, SimulatedCrash
from safe_effects.testing import GenericFakeProvider

KEY = "order:ord_7:charge:v1"
pytestmark = pytest.mark.slow


def worker_command(store_url: str, fake_path: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "safe_effects.testing._generic_worker",
        "--store",
        store_url,
        "--fake",
        str(fake_path),
        "--key",
        KEY,
        "--params",
        '{"amount": 500}',
        *extra,
    ]


def run_worker(store_url: str, fake_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = worker_command(store_url, fake_path, *extra)
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def outcome(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("point", list(CrashPoint))
def test_deduping_provider_ends_with_exactly_one_effect(store_url: str, tmp_path: Path, point: CrashPoint) -> None:
    fake_path = tmp_path / "fake.db"
    killed = run_worker(store_url, fake_path, "--crash-at", point.value)
    assert killed.returncode == -signal.SIGKILL

    restarted = outcome(run_worker(store_url, fake_path))

    fake = GenericFakeProvider(fake_path)
    assert restarted["outcome"] == "confirmed"
    assert len(fake.effects()) == 1
    assert restarted["result_id"] == fake.effects()[0].result_id
    with Ledger.open(store_url) as ledger:
        record = ledger.get(KEY)
    assert record.status is EffectStatus.CONFIRMED
    assert record.provider_result_id == "fx_1"


@pytest.mark.parametrize("point", list(CrashPoint))
def test_non_deduping_provider_stays_unknown_and_never_resends(
    store_url: str, tmp_path: Path, point: CrashPoint
) -> None:
    fake_path = tmp_path / "fake.db"
    flags = ("--no-dedupe", "--no-lookups")
    assert run_worker(store_url, fake_path, *flags, "--crash-at", point.value).returncode == -signal.SIGKILL
    reached = len(GenericFakeProvider(fake_path, dedupe=False).requests())

    restarted = outcome(run_worker(store_url, fake_path, *flags))

    fake = GenericFakeProvider(fake_path, dedupe=False)
    assert restarted["outcome"] == "effect_unknown"
    assert len(fake.requests()) == reached  # the restarted worker sent nothing
    assert len(fake.effects()) <= 1
    with Ledger.open(store_url) as ledger:
        assert ledger.get(KEY).status is EffectStatus.UNKNOWN
        assert [r.intent_key for r in ledger.store.list_by_status([EffectStatus.UNKNOWN])] == [KEY]


def test_two_workers_on_one_key_dispatch_once(store_url: str, tmp_path: Path) -> None:
    fake_path = tmp_path / "fake.db"
    GenericFakeProvider(fake_path)  # create the schema before the race
    command = worker_command(store_url, fake_path, "--lease-seconds", "30")
    workers = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    results = [json.loads(w.communicate(timeout=60)[0].strip()) for w in workers]

    fake = GenericFakeProvider(fake_path)
    assert [r["outcome"] for r in results] == ["confirmed", "confirmed"]
    assert {r["result_id"] for r in results} == {"fx_1"}
    assert sorted(bool(r["from_ledger"]) for r in results) == [False, True]
    assert len(fake.requests()) == 1
    assert len(fake.effects()) == 1


def test_a_crash_plan_records_its_hits_itself_not_from_its_arguments() -> None:
    """A plan subclass's own field comes right after ``action`` (the soak's random plan takes its rate so): the
    record of hits is no constructor argument, where a third positional value once landed unnoticed."""
    with pytest.raises(TypeError):
        CrashPlan(frozenset({CrashPoint.BEFORE_DISPATCH}), "raise", set())  # type: ignore[call-arg]
    plan = CrashPlan.crash_at(CrashPoint.BEFORE_DISPATCH)
    with pytest.raises(SimulatedCrash):
        plan.hit(CrashPoint.BEFORE_DISPATCH)
    assert plan.fired == {CrashPoint.BEFORE_DISPATCH}
