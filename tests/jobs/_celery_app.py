"""A Celery app as the README's job-queue section asks for one: a task that charges an invoice through the
wrapped Stripe client, with one intent key per invoice whatever the attempt, and retries on the outcomes that
mean "not done, not failed". The test runs it in a real worker (prefork, one child) on RabbitMQ.

Configured by the environment the test sets: ``BROKER_URL``, ``QUEUE``, ``LEDGER_URL``, ``STRIPE_URL``,
``STARTS`` (a file each run of the task appends its pid to) and ``ACKS_LATE`` ("1" or "0").
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from celery import Celery, Task
from celery.signals import worker_process_init

from safe_effects import EffectInProgress, EffectUnknown, LeasePolicy, Ledger
from stripe_safe import StripeClient

app = Celery("billing", broker=os.environ.get("BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//"))
app.conf.update(
    result_backend="rpc://",
    task_default_queue=os.environ.get("QUEUE", "billing"),
    task_acks_late=os.environ.get("ACKS_LATE", "1") == "1",  # the README: acknowledge late...
    task_reject_on_worker_lost=True,  # ...and hand a job whose worker was killed back to the queue
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
)
_client: StripeClient | None = None


@worker_process_init.connect
def open_ledger(**_: Any) -> None:
    """One ledger per worker process, opened after the fork (the README: Celery's worker_process_init)."""
    global _client  # noqa: PLW0603  # a worker process's one client, made by Celery's signal
    # a short lease, so the job's redelivery takes over a killed child's claim within the test's seconds
    lease = LeasePolicy(duration=timedelta(seconds=2), wait_for_other=timedelta(seconds=1), poll_interval=0.05)
    ledger = Ledger.open(os.environ["LEDGER_URL"], lease=lease)
    _client = StripeClient("sk_test_jobs", ledger=ledger, base_addresses={"api": os.environ["STRIPE_URL"]})


@app.task(bind=True, max_retries=None)
def collect(self: Task, invoice_id: str, amount: int) -> str:
    """Charge ``invoice_id`` once: the key names the invoice's collection, never this attempt."""
    with Path(os.environ["STARTS"]).open("a") as starts:
        starts.write(f"{os.getpid()}\n")
    assert _client is not None, "worker_process_init opens the ledger"
    try:
        intent = _client.v1.payment_intents.create(
            params={"amount": amount, "currency": "eur", "payment_method": "pm_card_visa", "confirm": True},
            options={"idempotency_key": f"invoice:{invoice_id}:collect:v1"},
        )
    except (EffectUnknown, EffectInProgress) as in_doubt:  # not done, not failed: the same key again later
        raise self.retry(exc=in_doubt, countdown=0.5) from in_doubt
    return str(intent.id)
