"""The README's job-queue advice, run for real: a Celery worker (prefork, one child) on RabbitMQ charges an
invoice through the wrapped Stripe client, and FakeStripe's commit hook SIGKILLs the child the moment Stripe
has charged, before any answer leaves. Both sides are asserted: FakeStripe's charges and requests, the
ledger's record, and what Celery did with the job.

- Acknowledged late (``task_acks_late`` and ``task_reject_on_worker_lost``, as the README says), the job goes
  back to the queue, a new child runs it with the same intent key, and the key's replay answers it: one charge.
- Acknowledged early, the job is gone with the child. The charge happened, the intent stays in flight, and
  only the reconciler settles it (by a lookup, never a resend): why the README asks for late acknowledgement.

The ledger is SQLite here: the crash window itself is tested on both stores by tests/failure_matrix.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from celery.exceptions import WorkerLostError

import stripe_safe
from safe_effects import EffectStatus, LeasePolicy, Ledger
from safe_effects.testing import FakeRequest
from stripe_safe.testing import FakeStripe

pytestmark = pytest.mark.slow  # a worker process per test, killed mid-charge
HERE = Path(__file__).parent
BROKER_URL = os.environ.get("SAFE_EFFECTS_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
INTENT = "invoice:inv_7:collect:v1"
READY_WITHIN = 60.0  # seconds for a worker to start on a busy 2-core machine
S = EffectStatus


def _broker_reachable() -> str | None:
    """Why the broker cannot be used, or None."""
    host, port = "127.0.0.1", 5672
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as error:
        return f"RabbitMQ at {host}:{port} is unreachable ({error})"
    return None


@pytest.fixture(scope="module")
def celery_app() -> Iterator[ModuleType]:
    """The app module, loaded in this process to send tasks and read their results."""
    if (why := _broker_reachable()) is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    spec = importlib.util.spec_from_file_location("_celery_app", HERE / "_celery_app.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["_celery_app"] = module  # the task's name, as the worker registers it: _celery_app.collect
    spec.loader.exec_module(module)
    yield module
    module.app.close()  # the result consumer's and the producer pool's connections
    del sys.modules["_celery_app"]


class KillOnCharge:
    """FakeStripe's commit hook: SIGKILL the task's process once Stripe has charged, before it answers."""

    def __init__(self, starts: Path) -> None:
        self._starts = starts
        self._lock = threading.Lock()
        self.killed: list[int] = []

    def __call__(self, request: FakeRequest) -> None:
        with self._lock:
            if self.killed or request.method != "POST" or not request.path.startswith("/v1/payment_intents"):
                return
            pid = int(self._starts.read_text().split()[-1])  # the run that sent this request wrote it first
            os.kill(pid, signal.SIGKILL)  # synchronous: the child dies before this request is answered
            self.killed.append(pid)


class Worker:
    """``celery worker`` in a process of its own, on a queue of the test's own."""

    def __init__(self, tmp_path: Path, fake: FakeStripe, *, acks_late: bool) -> None:
        self.queue = f"safe-effects-test-{uuid.uuid4().hex[:8]}"
        self.ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
        self.starts = tmp_path / "starts"
        self.starts.touch()
        self.log = tmp_path / "worker.log"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
            "BROKER_URL": BROKER_URL,
            "QUEUE": self.queue,
            "LEDGER_URL": self.ledger_url,
            "STRIPE_URL": fake.url,
            "STARTS": str(self.starts),
            "ACKS_LATE": "1" if acks_late else "0",
        }
        command = [sys.executable, "-m", "celery", "-A", "_celery_app", "worker", "--pool", "prefork"]
        command += ["--concurrency", "1", "--queues", self.queue, "--without-heartbeat", "--without-mingle"]
        command += ["--without-gossip", "--loglevel", "INFO", "--logfile", str(self.log)]
        self.process = subprocess.Popen(command, cwd=HERE, env=env)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_WITHIN
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"the worker exited with {self.process.returncode}:\n{self._log_text()}")
            if " ready." in self._log_text():
                return
            time.sleep(0.1)
        pytest.fail(f"the worker was not ready within {READY_WITHIN:g} s:\n{self._log_text()}")

    def _log_text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def runs(self) -> list[int]:
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


@pytest.fixture
def start_worker(tmp_path: Path, fake: FakeStripe, celery_app: ModuleType) -> Iterator[Callable[..., Worker]]:
    started: list[Worker] = []

    def start(*, acks_late: bool) -> Worker:
        worker = Worker(tmp_path, fake, acks_late=acks_late)
        started.append(worker)
        worker.wait_ready()
        return worker

    yield start
    for worker in started:
        worker.stop()
        with celery_app.app.connection_for_write() as connection:
            connection.default_channel.queue_delete(worker.queue)


def _charges(fake: FakeStripe) -> list[FakeRequest]:
    return list(fake.requests("POST", "/v1/payment_intents"))


def _job_killed_at_the_charge(
    celery_app: ModuleType, start_worker: Callable[..., Worker], fake: FakeStripe, *, acks_late: bool
) -> tuple[Worker, KillOnCharge, Any]:
    """A worker, the hook that kills its child as Stripe charges, and the job sent to it (Celery's result)."""
    worker = start_worker(acks_late=acks_late)
    kill = KillOnCharge(worker.starts)
    fake.server.on_committed(kill)
    return worker, kill, celery_app.collect.apply_async(("inv_7", 4200), queue=worker.queue)


def test_a_job_whose_worker_is_killed_after_the_charge_is_run_again_and_charges_once(
    celery_app: ModuleType, start_worker: Callable[..., Worker], fake: FakeStripe
) -> None:
    worker, kill, job = _job_killed_at_the_charge(celery_app, start_worker, fake, acks_late=True)
    payment_intent_id = job.get(timeout=90)

    assert kill.killed, "the hook never fired: the child was not killed"
    runs = worker.runs()
    assert runs[0] == kill.killed[0]
    assert len(set(runs)) >= 2  # redelivered to a new child after the kill
    assert fake.effect_count("payment_intents.create") == 1  # charged once...
    assert [p["id"] for p in fake.payment_intents] == [payment_intent_id]
    keys = {r.header("Idempotency-Key") for r in _charges(fake)}
    assert len(_charges(fake)) >= 2  # ...though sent twice...
    assert len(keys) == 1  # ...under one key
    with Ledger.open(worker.ledger_url) as ledger:
        record = ledger.get(INTENT)
    assert record.status is S.CONFIRMED
    assert record.provider_result_id == payment_intent_id
    assert record.resolution is not None
    assert record.resolution.method == "key_replay"


def test_a_job_acknowledged_early_is_lost_with_its_worker_and_only_the_reconciler_settles_its_charge(
    celery_app: ModuleType, start_worker: Callable[..., Worker], fake: FakeStripe
) -> None:
    worker, kill, job = _job_killed_at_the_charge(celery_app, start_worker, fake, acks_late=False)
    with pytest.raises(WorkerLostError):  # Celery marks it failed; the queue no longer holds it
        job.get(timeout=90)

    assert worker.runs() == kill.killed  # run once, never again
    assert fake.effect_count("payment_intents.create") == 1  # the charge happened all the same
    adapter = stripe_safe.adapter_from_env({"STRIPE_API_KEY": "sk_test_jobs", "STRIPE_API_BASE": fake.url})
    lease = LeasePolicy(duration=timedelta(seconds=2))
    with Ledger.open(worker.ledger_url, lease=lease) as ledger:
        assert ledger.get(INTENT).status is S.IN_FLIGHT  # in doubt: the killed child's claim
        time.sleep(2.5)  # its lease runs out, as the reconciler's sweep would find it
        settled = ledger.reconcile(adapter, intent_key=INTENT)
    assert settled.status is S.CONFIRMED
    assert settled.resolution is not None
    assert settled.resolution.method.startswith("lookup:")  # found at Stripe, not sent again
    assert fake.effect_count("payment_intents.create") == 1
    assert len(_charges(fake)) == 1
