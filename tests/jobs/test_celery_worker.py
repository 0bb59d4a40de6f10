"""The README's Celery advice, run for real: a worker (prefork, one child) on RabbitMQ runs the billing job,
and its child is SIGKILLed the moment Stripe charges (``safe_crash``'s trap, see conftest).

- Acknowledged late (``task_acks_late`` and ``task_reject_on_worker_lost``, as the README says), the job goes
  back to the queue, a new child runs it with the same intent key, and the key's replay answers it.
- Acknowledged early, the job is gone with the child: Celery reports ``WorkerLostError``, the charge happened,
  and only the reconciler settles it. That is why the README asks for late acknowledgement.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
from celery.exceptions import WorkerLostError

from safe_effects.testing import CrashKit
from stripe_safe.testing import FakeStripe

from .conftest import (
    HERE,
    WorkerProcess,
    assert_only_the_reconciler_settles,
    assert_run_again_and_charged_once,
    require_service,
)

pytestmark = pytest.mark.slow  # a worker process per test, killed mid-charge
BROKER_URL = os.environ.get("SAFE_EFFECTS_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")


@pytest.fixture(scope="module")
def celery_app() -> Iterator[ModuleType]:
    """The app module, loaded in this process to send jobs and read their results."""
    require_service("RabbitMQ", 5672)
    sys.path.insert(0, str(HERE))  # as the worker finds it: the task's name is _celery_app.collect
    try:
        yield importlib.import_module("_celery_app")
    finally:
        sys.modules["_celery_app"].app.close()  # the result consumer's and the producer pool's connections
        for name in ("_celery_app", "_billing"):
            sys.modules.pop(name, None)
        sys.path.remove(str(HERE))


@pytest.fixture
def start_worker(
    tmp_path: Path, fake: FakeStripe, safe_crash: CrashKit, celery_app: ModuleType
) -> Iterator[Callable[..., WorkerProcess]]:
    workers: list[WorkerProcess] = []

    def start(*, acks_late: bool) -> WorkerProcess:
        queue = f"safe-effects-test-{uuid.uuid4().hex[:8]}"
        args = ["celery", "-A", "_celery_app", "worker", "--pool", "prefork", "--concurrency", "1"]
        args += ["--queues", queue, "--loglevel", "INFO", "--without-heartbeat", "--without-mingle", "--without-gossip"]
        env = {"BROKER_URL": BROKER_URL, "ACKS_LATE": "1" if acks_late else "0"}
        workers.append(WorkerProcess(tmp_path, fake, safe_crash, queue=queue, args=args, env=env, ready=" ready."))
        workers[-1].wait_ready()
        return workers[-1]

    yield start
    with celery_app.app.connection_for_write() as connection:
        for worker in workers:
            worker.stop()
            connection.default_channel.queue_delete(worker.queue)


def test_a_job_acknowledged_late_whose_worker_is_killed_as_stripe_charges_runs_again_and_charges_once(
    celery_app: ModuleType, start_worker: Callable[..., WorkerProcess], fake: FakeStripe
) -> None:
    worker = start_worker(acks_late=True)
    job = celery_app.collect.apply_async(("inv_7", 4200), queue=worker.queue)
    assert_run_again_and_charged_once(fake, worker, job.get(timeout=90))


def test_a_job_acknowledged_early_is_lost_with_its_worker_and_only_the_reconciler_settles_its_charge(
    celery_app: ModuleType, start_worker: Callable[..., WorkerProcess], fake: FakeStripe
) -> None:
    worker = start_worker(acks_late=False)
    job = celery_app.collect.apply_async(("inv_7", 4200), queue=worker.queue)
    with pytest.raises(WorkerLostError):  # Celery marks it failed; the queue no longer holds it
        job.get(timeout=90)
    assert_only_the_reconciler_settles(fake, worker)
