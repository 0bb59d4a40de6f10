"""The job both queues run, as the README's job-queue section asks for one: charge an invoice through the
wrapped Stripe client, with one intent key per invoice whatever the attempt.

Configured by the environment the test sets: ``LEDGER_URL``, ``STRIPE_URL`` and ``STARTS`` (a file each run
of the job appends its pid to, which the test's kill hook reads).
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from safe_effects import LeasePolicy, Ledger
from stripe_safe import StripeClient


def open_client() -> StripeClient:
    """A wrapped client on the test's ledger, opened in the process that runs jobs (after any fork)."""
    # a short lease, so the job's next run takes over a killed process's claim within the test's seconds
    lease = LeasePolicy(duration=timedelta(seconds=2), wait_for_other=timedelta(seconds=1), poll_interval=0.05)
    ledger = Ledger.open(os.environ["LEDGER_URL"], lease=lease)
    return StripeClient("sk_test_jobs", ledger=ledger, base_addresses={"api": os.environ["STRIPE_URL"]})


def charge(client: StripeClient, invoice_id: str, amount: int) -> str:
    """Charge ``invoice_id`` once: the key names the invoice's collection, never this attempt."""
    with Path(os.environ["STARTS"]).open("a") as starts:
        starts.write(f"{os.getpid()}\n")
    intent = client.v1.payment_intents.create(
        params={"amount": amount, "currency": "eur", "payment_method": "pm_card_visa", "confirm": True},
        options={"idempotency_key": f"invoice:{invoice_id}:collect:v1"},
    )
    return str(intent.id)
