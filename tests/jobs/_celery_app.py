"""A Celery app as the README's job-queue section configures one, running the billing job.

``BROKER_URL`` and ``ACKS_LATE`` ("1" or "0") come from the test's environment, with ``_billing``'s.
"""

from __future__ import annotations

import os
from typing import Any

from _billing import charge, open_client
from celery import Celery, Task
from celery.signals import worker_process_init

from safe_effects import EffectInProgress, EffectUnknown
from stripe_safe import StripeClient

app = Celery("billing", broker=os.environ.get("BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//"))
app.conf.update(
    result_backend="rpc://",
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
    _client = open_client()


@app.task(bind=True, max_retries=None)
def collect(self: Task, invoice_id: str, amount: int) -> str:
    assert _client is not None, "worker_process_init opens the ledger"
    try:
        return charge(_client, invoice_id, amount)
    except (EffectUnknown, EffectInProgress) as in_doubt:  # not done, not failed: the same key again later
        raise self.retry(exc=in_doubt, countdown=0.5) from in_doubt
