"""The billing job as an RQ job: RQ runs each job in a work horse forked from the worker, so the ledger is
opened there, on the job's first use. An outcome that means "not done, not failed" (``EffectUnknown``,
``EffectInProgress``) is raised for the ``Retry`` the job was enqueued with to run it again."""

from __future__ import annotations

from _billing import charge, open_client

from stripe_safe import StripeClient

_client: StripeClient | None = None


def collect(invoice_id: str, amount: int) -> str:
    global _client  # noqa: PLW0603  # one client per work horse
    if _client is None:
        _client = open_client()
    return charge(_client, invoice_id, amount)
