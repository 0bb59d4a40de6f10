"""The README's advice in RQ's terms, run for real: an RQ worker on Redis runs the billing job in a work horse
it forks per job, and the horse is SIGKILLed the moment Stripe charges (see conftest).

RQ has no late acknowledgement: a job whose horse dies is failed ("Work-horse terminated unexpectedly"), and
only a job enqueued with ``retry=Retry(...)`` runs again. With it, the rerun's same intent key is replayed and
the job charges once; without it, the job lands in the FailedJobRegistry and only the reconciler settles
its charge.
"""

from __future__ import annotations

import importlib
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from redis import Redis
from rq import Queue, Retry
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry

from safe_effects.testing import CrashKit
from stripe_safe.testing import FakeStripe

from .conftest import (
    HERE,
    WorkerProcess,
    assert_only_the_reconciler_settles,
    assert_run_again_and_charged_once,
    require_service,
)

pytestmark = pytest.mark.slow  # a worker process per test, its work horse killed mid-charge
FINISHED_WITHIN = 90.0  # seconds


@pytest.fixture(scope="module")
def rq_jobs() -> Iterator[ModuleType]:
    """The job's module, loaded in this process so that jobs are enqueued by the name the worker imports."""
    require_service("Redis", 6379)
    sys.path.insert(0, str(HERE))
    try:
        yield importlib.import_module("_rq_jobs")
    finally:
        for name in ("_rq_jobs", "_billing"):
            sys.modules.pop(name, None)
        sys.path.remove(str(HERE))


@pytest.fixture
def redis() -> Iterator[Redis]:
    connection = Redis(host="127.0.0.1", port=6379)
    yield connection
    connection.close()


@pytest.fixture
def start_worker(
    tmp_path: Path, fake: FakeStripe, safe_crash: CrashKit, redis: Redis, rq_jobs: ModuleType
) -> Iterator[Callable[[], tuple[WorkerProcess, Queue]]]:
    workers: list[tuple[WorkerProcess, Queue]] = []

    def start() -> tuple[WorkerProcess, Queue]:
        queue = Queue(f"safe-effects-test-{uuid.uuid4().hex[:8]}", connection=redis)
        # the scheduler runs a retry's interval; the worker's own log line says when it listens
        args = ["rq.cli", "worker", queue.name, "--with-scheduler", "--url", "redis://127.0.0.1:6379"]
        worker = WorkerProcess(tmp_path, fake, safe_crash, queue=queue.name, args=args, env={}, ready="Listening on")
        worker.wait_ready()
        workers.append((worker, queue))
        return worker, queue

    yield start
    for worker, queue in workers:
        worker.stop()
        queue.delete(delete_jobs=True)


def _wait_for_end(job: Job) -> JobStatus:
    deadline = time.monotonic() + FINISHED_WITHIN
    while time.monotonic() < deadline:
        status = job.get_status(refresh=True)
        if status in (JobStatus.FINISHED, JobStatus.FAILED):
            return status
        time.sleep(0.1)
    pytest.fail(f"job {job.id} still {job.get_status()} after {FINISHED_WITHIN:g} s")


def _enqueue(queue: Queue, rq_jobs: ModuleType, **options: Any) -> Job:
    return queue.enqueue(rq_jobs.collect, "inv_7", 4200, **options)


def test_a_job_enqueued_with_retry_whose_horse_is_killed_as_stripe_charges_runs_again_and_charges_once(
    start_worker: Callable[[], tuple[WorkerProcess, Queue]], rq_jobs: ModuleType, fake: FakeStripe
) -> None:
    worker, queue = start_worker()
    # a killed horse's claim holds the intent for its 2 s lease: the reruns meet EffectInProgress meanwhile
    job = _enqueue(queue, rq_jobs, retry=Retry(max=10, interval=1))
    assert _wait_for_end(job) is JobStatus.FINISHED
    assert_run_again_and_charged_once(fake, worker, job.return_value())


def test_a_job_enqueued_without_retry_fails_with_its_horse_and_only_the_reconciler_settles_its_charge(
    start_worker: Callable[[], tuple[WorkerProcess, Queue]], rq_jobs: ModuleType, fake: FakeStripe
) -> None:
    worker, queue = start_worker()
    job = _enqueue(queue, rq_jobs)
    assert _wait_for_end(job) is JobStatus.FAILED
    assert job.id in FailedJobRegistry(queue=queue).get_job_ids()
    result = job.latest_result()
    assert result is not None
    assert "Work-horse terminated unexpectedly" in (result.exc_string or "")
    assert_only_the_reconciler_settles(fake, worker)
