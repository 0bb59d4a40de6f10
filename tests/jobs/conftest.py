"""Job queues for real: a worker of each queue in a process of its own, running ``_billing``'s job against a
FakeStripe in this process, armed with the shipped ``safe_crash`` trap: it SIGKILLs the process that runs the
job the moment Stripe has charged, before any answer leaves. The ledger is SQLite here: the crash window
itself is tested on both stores by tests/failure_matrix."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

import stripe_safe
from safe_effects import EffectStatus, LeasePolicy, Ledger
from safe_effects.testing import CrashKit, FakeRequest
from stripe_safe.testing import FakeStripe

HERE = Path(__file__).parent
INTENT = "invoice:inv_7:collect:v1"
READY_WITHIN = 60.0  # seconds for a worker to start on a busy 2-core machine


def require_service(name: str, port: int) -> None:
    """Skip, saying why, when ``name`` does not listen on 127.0.0.1:``port``; under CI=true, fail instead."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=3).close()
    except OSError as error:
        why = f"{name} at 127.0.0.1:{port} is unreachable ({error})"
        if os.environ.get("CI") == "true":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)


class WorkerProcess:
    """A queue's worker in a process of its own (``python -m`` ``args``), serving ``queue`` from this folder
    with ``_billing``'s environment; ready once its log shows ``ready``. Its ``trap`` kills the process that
    runs the job as Stripe charges."""

    def __init__(
        self,
        tmp_path: Path,
        fake: FakeStripe,
        safe_crash: CrashKit,
        *,
        queue: str,
        args: list[str],
        env: dict[str, str],
        ready: str,
    ) -> None:
        self.queue = queue
        self.ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
        self.starts = tmp_path / "starts"
        self.starts.touch()
        self.log = tmp_path / "worker.log"
        self._ready = ready
        environment = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
            "LEDGER_URL": self.ledger_url,
            "STRIPE_URL": fake.url,
            "STARTS": str(self.starts),
            **env,
        }
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", *args], cwd=HERE, env=environment, stdout=log, stderr=subprocess.STDOUT
            )
        # the run that sends the charge wrote its pid first; the trap fires once, on the first charge Stripe commits
        self.trap = safe_crash.at(
            fake.server, "after_provider_accept", pid=lambda: self.runs()[-1], path_prefix="/v1/payment_intents"
        )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_WITHIN
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"the worker exited with {self.process.returncode}:\n{self.log_text()}")
            if self._ready in self.log_text():
                return
            time.sleep(0.1)
        pytest.fail(f"the worker was not ready within {READY_WITHIN:g} s:\n{self.log_text()}")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def runs(self) -> list[int]:
        """The pid of each process that started the job, in order."""
        return [int(pid) for pid in self.starts.read_text().split()]

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)  # a warm shutdown
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def fake() -> Iterator[FakeStripe]:
    with FakeStripe() as server:
        yield server


def charges(fake: FakeStripe) -> list[FakeRequest]:
    """Every PaymentIntent POST that reached FakeStripe."""
    return list(fake.requests("POST", "/v1/payment_intents"))


def assert_run_again_and_charged_once(fake: FakeStripe, worker: WorkerProcess, payment_intent_id: str) -> None:
    """The job's process was killed as Stripe charged, another ran the job again, and the key's replay
    answered it: one charge, two requests under one key, the ledger confirmed with Stripe's id."""
    assert worker.trap.fired, "nothing was killed"
    assert len(set(worker.runs())) >= 2  # run again, in another process than the one killed
    assert fake.effect_count("payment_intents.create") == 1  # charged once...
    assert [p["id"] for p in fake.payment_intents] == [payment_intent_id]
    assert len(charges(fake)) >= 2  # ...though sent twice...
    assert len({r.header("Idempotency-Key") for r in charges(fake)}) == 1  # ...under one key
    with Ledger.open(worker.ledger_url) as ledger:
        record = ledger.get(INTENT)
    assert record.status is EffectStatus.CONFIRMED
    assert record.provider_result_id == payment_intent_id
    assert record.resolution is not None
    assert record.resolution.method == "key_replay"


def assert_only_the_reconciler_settles(fake: FakeStripe, worker: WorkerProcess) -> None:
    """The job ran once and was lost with its process; the charge happened, the intent is in doubt, and a
    reconciliation settles it by a lookup at Stripe, sending nothing."""
    assert worker.trap.fired
    assert len(worker.runs()) == 1  # run once, killed, never run again
    assert fake.effect_count("payment_intents.create") == 1  # the charge happened all the same
    adapter = stripe_safe.adapter_from_env({"STRIPE_API_KEY": "sk_test_jobs", "STRIPE_API_BASE": fake.url})
    with Ledger.open(worker.ledger_url, lease=LeasePolicy(duration=timedelta(seconds=2))) as ledger:
        assert ledger.get(INTENT).status is EffectStatus.IN_FLIGHT  # in doubt: the killed process's claim
        time.sleep(2.5)  # its lease runs out, as the reconciler's sweep would find it
        settled = ledger.reconcile(adapter, intent_key=INTENT)
    assert settled.status is EffectStatus.CONFIRMED
    assert settled.resolution is not None
    assert settled.resolution.method.startswith("lookup:")  # found at Stripe, not sent again
    assert fake.effect_count("payment_intents.create") == 1
    assert len(charges(fake)) == 1
