"""Deleting old settled records, never below the retention floor and never an unsettled one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ._adapter import ProviderAdapter
from ._contract import ProviderContract
from ._errors import InvalidInput
from ._records import EffectRecord
from ._states import TERMINAL, EffectStatus
from ._store import Store

# the contract's own default (disputes and bounces arrive months later); Stripe, SES and SendGrid keep it
DEFAULT_MINIMUM: timedelta = ProviderContract.model_fields["record_retention_minimum"].default
# records per delete: SQLite's workers wait for each one (1,000 held its write lock 100-300 ms on a ledger of
# 1.5 million records whose keys do not follow time); PostgreSQL's keep writing meanwhile
DEFAULT_BATCH = 200


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
    batch: int = DEFAULT_BATCH,
) -> PurgeReport:
    """Delete confirmed, rejected and compensated records last updated more than ``older_than`` ago, but not a
    confirmed original whose compensation is still unsettled.

    The floor is ``force_minimum`` when given explicitly, else the largest ``record_retention_minimum`` among
    the contracts (from ``adapters``) of all the records to be deleted, and never less than the contract
    default. It is checked over every one of them before the first is deleted, so a refusal changes nothing.
    Each batch then deletes exactly the records it listed (by key, each still settled and before the
    cut-off); one that settled after the check under a longer floor than ``older_than`` is left alone.
    """
    given: object = batch  # as passed at run time, whatever the annotation promises
    if not isinstance(given, int) or isinstance(given, bool) or given <= 0:
        raise InvalidInput(f"batch must be a positive int, got {batch!r}")
    for name, span in (("older_than", older_than), ("force_minimum", force_minimum)):
        # a negative span puts the cut-off in the future: records settled a moment ago would be deleted, and
        # where the provider has no keys the same intent key would then send the effect again
        if (span is not None or name == "older_than") and (not isinstance(span, timedelta) or span < timedelta(0)):
            raise InvalidInput(f"{name} must be a timedelta of zero or more, got {span!r}; nothing was purged")
    if not isinstance(now, datetime):
        raise InvalidInput(f"now must be a datetime, got {type(now).__name__}; nothing was purged")
    cutoff, deleted = now - older_than, 0
    minimum = DEFAULT_MINIMUM if force_minimum is None else force_minimum
    floors = adapters if force_minimum is None and adapters else None  # contracts that may raise the floor
    if floors is not None:
        minimum = max(minimum, _contract_floor(store, floors, cutoff, batch))
    if older_than < minimum:
        raise InvalidInput(
            f"refusing to purge records younger than {minimum.days} days (asked for {older_than.days}): "
            "that is the provider contract's retention minimum; --force-min-days lowers it explicitly"
        )
    after: tuple[datetime, str, str] | None = None
    while True:
        listed = store.list_by_status(TERMINAL, updated_before=cutoff, limit=batch, after=after)
        if not listed:
            return PurgeReport(cutoff, minimum, deleted)
        last = listed[-1]
        after = (last.updated_at, last.tenant, last.intent_key)
        keys = [
            (record.tenant, record.intent_key)
            for record in listed
            if (floors is None or _floor(floors, record) <= older_than) and not _compensation_open(store, record)
        ]
        deleted += store.purge(statuses=TERMINAL, updated_before=cutoff, limit=batch, keys=keys)
        if len(listed) < batch:
            return PurgeReport(cutoff, minimum, deleted)


def _compensation_open(store: Store, record: EffectRecord) -> bool:
    """Whether ``record`` is a confirmed original whose compensation has not settled: marked compensated once that
    one confirms, it must still be there then, and its key must not be free to act again meanwhile."""
    if record.status is not EffectStatus.CONFIRMED or record.compensated_by is None:
        return False
    compensation = store.get(record.tenant, record.compensated_by)
    return compensation is not None and compensation.status not in TERMINAL


def _floor(adapters: Mapping[str, ProviderAdapter[Any]], record: EffectRecord) -> timedelta:
    """The retention minimum ``record`` is under: its provider's contract, never less than the default."""
    adapter = adapters.get(record.provider)
    if adapter is None:
        return DEFAULT_MINIMUM
    return max(DEFAULT_MINIMUM, adapter.contract_for(record.operation).record_retention_minimum)


def _contract_floor(
    store: Store, adapters: Mapping[str, ProviderAdapter[Any]], cutoff: datetime, batch: int
) -> timedelta:
    """The longest retention minimum any record to be purged is under, paging through all of them."""
    floor = DEFAULT_MINIMUM
    seen: set[tuple[str, str]] = set()
    after: tuple[datetime, str, str] | None = None
    while True:
        listed = store.list_by_status(TERMINAL, updated_before=cutoff, limit=batch, after=after)
        for record in listed:
            if (record.provider, record.operation) not in seen:
                seen.add((record.provider, record.operation))
                floor = max(floor, _floor(adapters, record))
        if len(listed) < batch:
            return floor
        last = listed[-1]
        after = (last.updated_at, last.tenant, last.intent_key)
