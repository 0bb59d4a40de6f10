"""Deleting old settled records, never below the retention floor and never an unsettled one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ._adapter import ProviderAdapter
from ._contract import ProviderContract
from ._errors import InvalidInput
from ._states import TERMINAL
from ._store import Store

# the contract's own default (disputes and bounces arrive months later); Stripe, SES and SendGrid keep it
DEFAULT_MINIMUM: timedelta = ProviderContract.model_fields["record_retention_minimum"].default


@dataclass(frozen=True, slots=True)
class PurgeReport:
    cutoff: datetime
    minimum: timedelta
    deleted: int


def purge_settled(
    store: Store,
    *,
    older_than: timedelta,
    now: datetime,
    adapters: Mapping[str, ProviderAdapter[Any]] | None = None,
    force_minimum: timedelta | None = None,
    batch: int = 1000,
) -> PurgeReport:
    """Delete confirmed, rejected and compensated records last updated more than ``older_than`` ago.

    The floor is ``force_minimum`` when given explicitly, else the largest ``record_retention_minimum`` among
    the contracts (from ``adapters``) of each batch's records, and never less than the contract default.
    """
    if batch <= 0:
        raise InvalidInput(f"batch must be positive, got {batch}")
    cutoff, deleted = now - older_than, 0
    minimum = DEFAULT_MINIMUM if force_minimum is None else force_minimum
    while True:
        if force_minimum is None and adapters:
            minimum = max(minimum, _contract_floor(store, adapters, cutoff, batch))
        if older_than < minimum:
            raise InvalidInput(
                f"refusing to purge records younger than {minimum.days} days (asked for {older_than.days}): "
                "that is the provider contract's retention minimum; --force-min-days lowers it explicitly"
            )
        count = store.purge(statuses=TERMINAL, updated_before=cutoff, limit=batch)
        deleted += count
        if count < batch:
            return PurgeReport(cutoff, minimum, deleted)


def _contract_floor(
    store: Store, adapters: Mapping[str, ProviderAdapter[Any]], cutoff: datetime, batch: int
) -> timedelta:
    """The longest retention minimum any record of the next batch is under (its provider's contract)."""
    floor = DEFAULT_MINIMUM
    seen: set[tuple[str, str]] = set()
    for record in store.list_by_status(TERMINAL, updated_before=cutoff, limit=batch):
        adapter = adapters.get(record.provider)
        if adapter is not None and (record.provider, record.operation) not in seen:
            seen.add((record.provider, record.operation))
            floor = max(floor, adapter.contract_for(record.operation).record_retention_minimum)
    return floor
