"""How long a request may still be running at the provider after it went out, and so how long a lookup's
"refused" or "absent" proves nothing about it: the lookup sees the state before the request (no object yet, an
earlier attempt's decline), and settling on that would resend or reject what is about to act."""

from __future__ import annotations

from datetime import datetime, timedelta

from ._adapter import LookupResult, LookupStatus
from ._contract import ProviderContract
from ._records import EffectRecord


def may_still_run(
    record: EffectRecord, contract: ProviderContract, max_skew: timedelta | None, now: datetime
) -> str | None:
    """Why ``record``'s last attempt may still be running at ``now``, or None once it cannot be (or never went out).

    ``dispatched_at`` is when that attempt started, or for a worker lost mid-call the latest it may have (its
    lease's end); the sender's clock wrote it, hence twice the allowed skew on top of the contract's normal
    response window.
    """
    sent = record.dispatched_at
    if sent is None:
        return None
    until = sent + contract.normal_response_window + 2 * (max_skew or timedelta(0))
    if now >= until:
        return None
    started = sent.isoformat()
    return f"the last attempt, sent at {started}, may still be running at the provider until {until.isoformat()}"


def held_back(
    found: LookupResult, record: EffectRecord, contract: ProviderContract, max_skew: timedelta | None, now: datetime
) -> str | None:
    """Why ``found`` is no answer yet: an "absent" or "refused" while the last attempt may still run, else None.
    What is found has happened, and an inconclusive lookup says nothing either way."""
    if found.status not in (LookupStatus.ABSENT, LookupStatus.REFUSED):
        return None
    return may_still_run(record, contract, max_skew, now)
