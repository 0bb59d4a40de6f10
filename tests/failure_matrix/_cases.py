"""Run one matrix case against one provider fake with real worker processes, and observe both sides.

A case is a few rounds of callers (worker processes running ``_worker.py``); between rounds the fake's
faults, hooks and clock set the scene. Synchronisation is by hooks and pipes, never by sleeping: the
fake's ``on_received``/``on_committed`` hook SIGKILLs the worker at that exact moment, and concurrent
workers start their call when the test writes "go" to their stdin after each printed "ready".
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safe_effects import EffectStatus, Ledger

from ._providers import ProviderFake
from .expected import Case, Cell, Step

WORKER = Path(__file__).with_name("_worker.py")
WORKER_TIMEOUT = 60.0
LATER_HOURS = 25.0  # past Stripe's 24 h key retention
CRASH_IN_WORKER = {Case.BEFORE_DISPATCH, Case.AFTER_RESPONSE, Case.DURING_RECEIPT_PERSIST}


class KillOnWrite:
    """A fake-server hook: SIGKILL the armed worker when its first write request gets here, once."""

    def __init__(self, is_write: Callable[[Any], bool]) -> None:
        self._is_write = is_write
        self._lock = threading.Lock()
        self._pid: int | None = None
        self.fired = False

    def arm(self, pid: int) -> None:
        with self._lock:
            self._pid = pid

    def __call__(self, request: Any) -> None:
        with self._lock:
            if self._pid is None or self.fired or not self._is_write(request):
                return
            os.kill(self._pid, signal.SIGKILL)  # synchronous: the worker dies before this request is answered
            self.fired = True


@dataclass
class Observed:
    """What one run of a case produced, in the shape of :class:`Cell` (plus timings and worker answers)."""

    steps: list[Step]
    requests: int
    effects: int
    resolution: str | None
    settles_by: str | None
    answers: list[dict[str, Any]]
    seconds: float = 0.0

    def compared(self) -> dict[str, object]:
        return {
            "steps": [(s.outcome, s.status) for s in self.steps],
            "requests": self.requests,
            "effects": self.effects,
            "resolution": self.resolution,
            "settles_by": self.settles_by,
        }


class Runner:
    """Spawns workers for one intent and reads the ledger between rounds."""

    def __init__(self, fake: ProviderFake, store_url: str, ledger: Ledger, key: str) -> None:
        self.fake, self.store_url, self.ledger, self.key = fake, store_url, ledger, key
        self.answers: list[dict[str, Any]] = []

    def spawn(self, *extra: str, wait_go: bool = False, crash_at: str = "") -> subprocess.Popen[str]:
        """A worker for this intent; ``crash_at`` reaches its ``CrashPlan.from_env()`` as SAFE_EFFECTS_CRASH_AT."""
        command = [
            sys.executable,
            str(WORKER),
            "--provider",
            self.fake.name,
            "--store",
            self.store_url,
            "--fake-url",
            self.fake.url,
            "--key",
            self.key,
            *extra,
            *(["--wait-go"] if wait_go else []),
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("SAFE_EFFECTS_CRASH_")}
        if crash_at:
            env |= {"SAFE_EFFECTS_CRASH_AT": crash_at, "SAFE_EFFECTS_CRASH_ACTION": "sigkill"}
        return subprocess.Popen(
            command,
            stdin=subprocess.PIPE if wait_go else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )

    def finish(self, worker: subprocess.Popen[str]) -> str:
        """The caller's outcome: ``killed`` for a SIGKILLed worker, else the JSON line's ``outcome``."""
        out, err = worker.communicate(timeout=WORKER_TIMEOUT)
        if worker.returncode == -signal.SIGKILL:
            self.answers.append({"outcome": "killed"})
            return "killed"
        assert worker.returncode == 0, f"worker exited {worker.returncode}: {err}"
        answer: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        self.answers.append(answer)
        assert answer["outcome"] != "error", f"worker failed: {answer['message']}\n{err}"
        return str(answer["outcome"])

    def run(self, *extra: str, crash_at: str = "") -> str:
        return self.finish(self.spawn(*extra, crash_at=crash_at))

    def status(self) -> str:
        record = self.ledger.store.get("default", self.key)
        return "absent" if record is None else record.status.value

    def step(self, outcome: str) -> Step:
        return Step(outcome, self.status())

    def killed_on(self, register: Callable[[Callable[[Any], None]], None], *extra: str) -> Step:
        """One worker, SIGKILLed by the fake's hook when its write arrives or is committed."""
        hook = KillOnWrite(self.fake.is_write)
        register(hook)
        worker = self.spawn(*extra)
        hook.arm(worker.pid)  # armed long before the worker (still importing) can send anything
        outcome = self.finish(worker)
        assert hook.fired, "the fake's hook never saw the worker's write"
        return self.step(outcome)

    def concurrently(self, count: int, *extra: str) -> Step:
        """``count`` workers, each past its imports and ledger set-up, released together."""
        workers = [self.spawn(*extra, wait_go=True) for _ in range(count)]
        for worker in workers:
            assert worker.stdout is not None
            ready = worker.stdout.readline()
            assert json.loads(ready) == {"ready": True}, ready
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        return self.step(" & ".join(sorted(self.finish(worker) for worker in workers)))


def play(case: Case, run: Runner) -> list[Step]:
    """The rounds of callers that make up ``case``."""
    fake = run.fake
    if case in CRASH_IN_WORKER:
        return [run.step(run.run(crash_at=case.value)), run.step(run.run())]
    if case is Case.AFTER_DISPATCH:
        return [run.killed_on(fake.server.on_received), run.step(run.run())]
    if case is Case.AFTER_PROVIDER_ACCEPT:
        return [run.killed_on(fake.server.on_committed), run.step(run.run())]
    if case is Case.RETRY_AFTER_WINDOW:
        first = run.killed_on(fake.server.on_committed)
        fake.later(LATER_HOURS)
        return [first, run.step(run.run("--clock-offset-hours", f"{LATER_HOURS:g}"))]
    if case is Case.TWO_WORKERS:
        fake.inject_delay(1.0)  # the winner's answer takes a second: the loser finds the intent in flight
        return [run.concurrently(2, "--lease-seconds", "10")]
    if case is Case.RESPONSE_DELAYED:
        fake.inject_delay(3.0)
        return [run.step(run.run("--read-timeout", "1")), run.step(run.run())]
    if case is Case.RATE_LIMITED:
        fake.inject_rate_limit(1)
        return [run.step(run.run())]
    if case is Case.RATE_LIMITED_PERSISTENT:
        fake.inject_rate_limit(3)  # the worker's retry budget is 3 attempts
        return [run.step(run.run()), run.step(run.run())]
    if case is Case.SERVER_ERROR:
        fake.inject_server_error()
        return [run.step(run.run()), run.step(run.run())]
    if case is Case.SERVER_ERROR_AFTER_COMMIT:
        fake.inject_server_error_after_commit()
        return [run.step(run.run()), run.step(run.run())]
    raise AssertionError(f"no script for case {case}")


def check_invariants(fake: ProviderFake, ledger: Ledger, key: str, steps: list[Step]) -> None:
    """One effect, one receipt, one outcome: true in every cell, whatever the expected table says."""
    effects = fake.effect_ids()
    record = ledger.store.get("default", key)
    assert record is not None, "the intent has no ledger record"
    assert len(effects) <= 1, f"{len(effects)} provider effects for one intent: {effects}"
    if record.status is EffectStatus.CONFIRMED:
        assert effects == [record.provider_result_id], f"confirmed as {record.provider_result_id}, provider: {effects}"
    if any("confirmed" in step.outcome for step in steps):
        assert len(effects) == 1, f"a caller saw confirmed with {len(effects)} provider effects"
    assert record.status is not EffectStatus.IN_FLIGHT, "a record is left in flight after every worker finished"
    if record.status is EffectStatus.UNKNOWN:
        listed = ledger.store.list_by_status([EffectStatus.UNKNOWN], limit=1000)
        assert [r.intent_key for r in listed] == [key], "an unknown intent must be listed for reconciliation"


def settle(fake: ProviderFake, ledger: Ledger, key: str) -> str | None:
    """For an unknown with one provider effect: deliver the provider's event and check it settles confirmed."""
    record = ledger.get(key)
    if record.status is not EffectStatus.UNKNOWN:
        return None
    effects = fake.effect_ids()
    if not effects:
        assert record.provider_result_id is None
        return "operator"  # nothing will ever arrive: an operator checks the provider and resolves it
    fake.deliver_event(ledger)
    settled = ledger.get(key)
    assert settled.status is EffectStatus.CONFIRMED, settled.status
    assert settled.provider_result_id == effects[0]
    assert fake.effect_ids() == effects
    assert settled.resolution is not None
    return settled.resolution.method


def observe(case: Case, fake: ProviderFake, store_url: str, ledger: Ledger, key: str) -> Observed:
    """Run ``case``, check the invariants, then read both sides into an :class:`Observed`."""
    run = Runner(fake, store_url, ledger, key)
    steps = play(case, run)
    check_invariants(fake, ledger, key, steps)
    assert fake.server.pending_faults() == [], "a fault the case set up never fired"
    record = ledger.get(key)
    resolution = record.resolution.method if record.resolution is not None else None
    requests, effects = fake.write_requests(), len(fake.effect_ids())
    return Observed(steps, requests, effects, resolution, settle(fake, ledger, key), run.answers)


def as_json(cell: Cell | Observed) -> dict[str, Any]:
    """The compared fields as JSON values (steps as lists, not tuples)."""
    return {**cell.compared(), "steps": [[step.outcome, step.status] for step in cell.steps]}
