"""The sweep that settles unknown (and abandoned in-flight) intents by lookup, for a scheduler or the CLI.

Each record goes through :meth:`Ledger.reconcile` (recorded evidence, then ``adapter.lookup``; it never
redispatches). Two reconcilers may run at once: the store's conditional transitions let exactly one settle a
record, and the other sees :class:`StaleRecord` and counts it as ``contended``. Lookups are paced per provider
by the contract's ``rate_limit_per_minute``, per process.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from itertools import zip_longest
from typing import Any

from ._adapter import HELD_BACK, LOOKUP_ERROR, ProviderAdapter
from ._clock import system_sleep
from ._errors import InvalidInput, SafeEffectsError, StaleRecord
from ._ledger import Ledger
from ._ledger_check import check_ledger
from ._numbers import check_count, check_seconds
from ._rate import TokenBucket
from ._records import EffectRecord
from ._rows import MAX_CURSOR_NAME, check_cursor_name
from ._states import TERMINAL, EffectStatus

_log = logging.getLogger("safe_effects")

S = EffectStatus


class _LookupDeferred(Exception):
    """The reconciler's pacing stopped a lookup: the record waits for the next run."""


_ABANDONED_PER_SWEEP = 1000  # in-flight records a sweep reads per provider to take over (the oldest first)
_PROVIDER_PART = 64  # characters of a provider's name in its stored cursor's name (a longer one is hashed)
MAX_CURSOR_PREFIX = MAX_CURSOR_NAME - _PROVIDER_PART - 1  # room for "/" and the provider part


@dataclass(frozen=True, slots=True)
class ReconcileItem:
    """What happened to one record: ``confirmed``, ``rejected``, ``prepared`` (proven absent), ``unknown``
    (inconclusive), ``contended`` (another process got it), ``deferred`` (rate limit), ``skipped`` (no adapter)
    or ``error``. ``provider_result_id`` and ``version`` are the record's after this run touched it (None when
    it did not settle it), so a script can cite the object found and resolve what is left at its version."""

    tenant: str
    intent_key: str
    provider: str
    before: EffectStatus
    outcome: str
    method: str | None = None
    note: str | None = None
    provider_result_id: str | None = None
    version: int | None = None


@dataclass(frozen=True, slots=True)
class ReconcileReport:
    items: tuple[ReconcileItem, ...] = ()

    def counts(self) -> dict[str, int]:
        return dict(Counter(item.outcome for item in self.items))

    @property
    def settled(self) -> int:
        """Records this run moved out of doubt (confirmed, rejected, or proven absent)."""
        return sum(1 for item in self.items if item.outcome in ("confirmed", "rejected", "prepared"))


Position = tuple[datetime, str, str]  # (updated_at, tenant, intent_key): the store's list order


@dataclass(slots=True)
class Reconciler:
    """Sweeps unknowns oldest first, round robin per provider; ``adapters`` maps a record's provider name to
    its adapter.

    An inconclusive, deferred, skipped or failed lookup writes nothing, so the record keeps its place in the
    least-recently-updated order. Were every sweep to start from the oldest, ``limit`` such records would
    fill every sweep and newer unknowns would never be looked up. So the reconciler keeps a cursor for each
    provider: each sweep continues after the last of its records (in the store's (updated_at, tenant,
    intent_key) order) the previous sweep of this object looked at, and wraps around to the oldest at the
    end. Every candidate is looked at once per round, new ones after the current round's. A record deferred
    by the provider's rate limit was not looked at: its provider's cursor stays before it, so the next sweep
    starts there. One cursor per provider keeps one provider's backlog or rate limit from holding back
    another's: each provider gets up to ``limit`` records a sweep.

    The cursors live in this object, and with ``cursor_name`` also in the store (as ``NAME/provider``), moved
    after each record the sweep looked at (an inconclusive attempt still writes nothing to its record), so a
    sweep stopped part way (SIGTERM, Ctrl-C, a store outage) is taken up by the next at the first record it had
    not finished. Without a name a
    fresh Reconciler starts from the oldest again, which suits a long-running process that keeps one
    (``safe-effects reconcile --loop``); a scheduler that builds a new one per run (cron, ``safe-effects
    reconcile``) names its cursors to carry the round robin from run to run. Reconcilers sharing a name share
    the positions: each sweep continues from wherever the last one, of any of them, stopped.
    """

    ledger: Ledger
    adapters: Mapping[str, ProviderAdapter[Any]]
    max_wait: float = 1.0  # sleep up to this for a provider's next token, else defer its records to the next run
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = system_sleep
    cursor_name: str | None = None  # keep the cursors in the store under this name, for the next run
    _buckets: dict[str, TokenBucket] = field(default_factory=dict, init=False)
    # per provider, the last record the previous sweep looked at (None: start from the oldest)
    _cursors: dict[str, Position | None] = field(default_factory=dict, init=False)
    _starts: dict[str, Position | None] = field(default_factory=dict, init=False)  # where this sweep began
    _ends: dict[str, Position | None] = field(default_factory=dict, init=False)  # where a finished sweep ends

    def __post_init__(self) -> None:
        check_ledger(self.ledger, "Reconciler")
        if not isinstance(self.adapters, Mapping):
            raise InvalidInput(f"adapters must map provider names to adapters, got {type(self.adapters).__name__}")
        check_seconds("max_wait", self.max_wait, positive=False)
        if self.cursor_name is not None and len(check_cursor_name(self.cursor_name)) > MAX_CURSOR_PREFIX:
            raise InvalidInput(
                f"a reconciler cursor name must be at most {MAX_CURSOR_PREFIX} characters: each provider's cursor "
                f"is stored as NAME/provider, within {MAX_CURSOR_NAME}"
            )

    def candidates(self, limit: int) -> list[EffectRecord]:
        """Per provider with records in doubt, up to ``limit`` unknown records and in-flight ones whose lease
        expired, least recently updated first, starting after that provider's previous sweep stopped and
        wrapping around to the oldest (see the class). Moves no cursor: :meth:`run_once` does, as it goes."""
        in_doubt = self.ledger.store.status_counts([S.UNKNOWN, S.IN_FLIGHT])
        per_provider: list[list[EffectRecord]] = []
        self._starts.clear()
        self._ends.clear()
        for provider in sorted({provider for _, provider, _, _ in in_doubt}):
            self._starts[provider] = start = self._position(provider)
            picked, self._ends[provider] = self._walk(provider, start, limit)
            per_provider.append(picked)
        # taken in turns, so one provider's paced lookups (sleeps between them) do not hold back the others'
        return [record for turn in zip_longest(*per_provider) for record in turn if record is not None]

    def _position(self, provider: str) -> Position | None:
        if self.cursor_name is None:
            return self._cursors.get(provider)
        return self.ledger.store.reconciler_cursor(self._stored_name(provider))

    def _move_cursor(self, provider: str, position: Position | None) -> None:
        self._cursors[provider] = position
        if self.cursor_name is not None:
            self.ledger.store.save_reconciler_cursor(self._stored_name(provider), position)

    def _stored_name(self, provider: str) -> str:
        """``NAME/provider``; a provider name too long for the store's limit is shortened, told apart by a hash."""
        if len(provider) > _PROVIDER_PART:
            provider = f"{provider[:40]}~{hashlib.sha256(provider.encode()).hexdigest()[:16]}"
        return f"{self.cursor_name}/{provider}"

    def _walk(self, provider: str, start: Position | None, limit: int) -> tuple[list[EffectRecord], Position | None]:
        """``provider``'s candidates after ``start`` (wrapping around once), and where its next sweep starts."""
        store, now, served = self.ledger.store, self.ledger.clock(), self.ledger.tenants
        chosen: list[EffectRecord] = []
        seen: set[tuple[str, str]] = set()
        cursor, wrapped = start, start is None
        while len(chosen) < limit:
            page = store.list_by_status([S.UNKNOWN, S.IN_FLIGHT], provider=provider, limit=limit, after=cursor)
            for record in page:
                if (record.tenant, record.intent_key) in seen:  # all the way round: every candidate is in
                    return chosen, cursor
                seen.add((record.tenant, record.intent_key))
                cursor = _position_of(record)
                if served is not None and record.tenant not in served:  # another ledger's to settle
                    continue
                if record.status is S.UNKNOWN or record.lease_expired(now):  # a live in-flight one is working
                    chosen.append(record)
                    if len(chosen) == limit:
                        break
            if len(chosen) < limit and len(page) < limit:  # the end of the list
                if wrapped:
                    return chosen, None
                cursor, wrapped = None, True
        return chosen, cursor

    def run_once(self, *, limit: int = 100) -> ReconcileReport:
        """One sweep over at most ``limit`` records per provider; inconclusive ones stay unknown for the next
        run or a person. A reconciler whose clock is off sweeps nothing (:class:`ClockSkewed`): it judges every
        lease by that clock, and would take live calls over."""
        check_count("limit", limit)  # 0 or less swept nothing and said so as a sweep that found nothing
        self.ledger._clock_guard.check()
        deferred: set[str] = set()  # providers whose lookups wait for the next sweep
        items: list[ReconcileItem] = []
        looked_at: dict[str, Position | None] = {}  # per provider, the last record this sweep looked at
        for record in self.candidates(limit):
            provider, was_deferred = record.provider, record.provider in deferred
            item = self._one(record, deferred)
            items.append(item)
            self.ledger.observer.on_event("reconcile_attempt", {"provider": item.provider, "outcome": item.outcome})
            if provider in deferred and not was_deferred:  # its first deferred record: the next sweep starts
                # at it (whatever became of moving its expired lease: another process may have got there first)
                self._move_cursor(provider, looked_at.get(provider, self._starts[provider]))
            elif item.outcome != "deferred":  # done with: a sweep stopped after this point starts after it
                looked_at[provider] = _position_of(record)
                self._move_cursor(provider, looked_at[provider])
        for provider, end in self._ends.items():  # past the records walked over but not picked (live leases)
            if provider not in deferred and (provider not in looked_at or looked_at[provider] != end):
                self._move_cursor(provider, end)
        self._take_over_abandoned()
        self.ledger.observer.on_event("reconciler_run", {})
        return ReconcileReport(tuple(items))

    def _take_over_abandoned(self) -> None:
        """Turn every in-flight record whose lease expired unknown, for the providers this reconciler serves, even
        outside this sweep's records: it needs no lookup, and behind a rate-limited backlog the round robin would
        reach such a record only many sweeps later, leaving it shown as abandoned while a reconciler runs."""
        store, now, served = self.ledger.store, self.ledger.clock(), self.ledger.tenants
        for provider in sorted(self.adapters):
            for record in store.list_by_status([S.IN_FLIGHT], provider=provider, limit=_ABANDONED_PER_SWEEP):
                if record.lease_expired(now) and (served is None or record.tenant in served):
                    with contextlib.suppress(StaleRecord):  # its worker answered, or another process took it over
                        self.ledger._expire_lease(record)

    def _one(self, record: EffectRecord, deferred: set[str]) -> ReconcileItem:
        def item(
            outcome: str, method: str | None = None, note: str | None = None, *, after: EffectRecord | None = None
        ) -> ReconcileItem:
            found = after.provider_result_id if after is not None and after.status is not S.UNKNOWN else None
            return ReconcileItem(
                record.tenant, record.intent_key, record.provider, record.status, outcome, method, note,
                provider_result_id=found, version=None if after is None else after.version,
            )  # fmt: skip

        try:
            adapter = self.adapters.get(record.provider)
            if adapter is None:
                return item("skipped", note=f"no adapter for provider {record.provider!r}")
            # a lost worker's lease expires and evidence on file settles without a lookup, so neither is paced
            after, looked_up = self.ledger._reconcile(
                adapter,
                intent_key=record.intent_key,
                tenant=record.tenant,
                before_lookup=lambda: self._pace(adapter, record, deferred),
            )
        except _LookupDeferred:
            return item("deferred", note="provider lookup rate limit reached; next run")
        except StaleRecord:
            return item("contended", note="another process moved it first")
        except Exception as error:  # one broken record or adapter must not stop the sweep
            now_at = self._reread(record)
            left = (
                "left as it was"
                if now_at is None or now_at.version == record.version
                else f"now {now_at.status} v{now_at.version}"  # an expired lease was taken over before it failed
            )
            _log.warning(
                "reconciling intent %r (tenant %r, %s) failed: %s: %s; %s",
                record.intent_key, record.tenant, record.provider, type(error).__name__, error, left,
                exc_info=not isinstance(error, SafeEffectsError),
            )  # fmt: skip
            return item("error", note=f"{type(error).__name__}: {error}; {left}", after=now_at)
        method = after.resolution.method if after.resolution is not None else None
        if after.status in TERMINAL or after.status is S.PREPARED:
            return item(after.status.value if self._ours(after) else "contended", method, after=after)
        if looked_up is not None and looked_up.method == LOOKUP_ERROR:  # a revoked key, an outage: not "not yet"
            why = looked_up.detail.get("error", "no detail")
            return item("error", f"lookup:{LOOKUP_ERROR}", f"the lookup failed ({why}); stays unknown", after=after)
        if looked_up is not None and (held_back := looked_up.detail.get(HELD_BACK)):
            note = f"not yet: {held_back}; stays unknown for the next run"
            return item("unknown", f"lookup:{looked_up.method}", note, after=after)
        return item("unknown", note="inconclusive: stays unknown for the next run or an operator", after=after)

    def _pace(self, adapter: ProviderAdapter[Any], record: EffectRecord, deferred: set[str]) -> None:
        """Wait for a lookup token; none in time defers this provider's lookups to the next run."""
        if record.provider in deferred or not self._paced(adapter, record):
            deferred.add(record.provider)
            raise _LookupDeferred

    def _paced(self, adapter: ProviderAdapter[Any], record: EffectRecord) -> bool:
        """Take a lookup token for the provider, sleeping up to ``max_wait``; False when it would take longer."""
        rates = [m.rate_limit_per_minute for m in adapter.contract_for(record.operation).lookups]
        limits = [rate for rate in rates if rate]
        if not limits:
            return True
        bucket = self._buckets.get(record.provider)
        if bucket is None:
            bucket = self._buckets[record.provider] = TokenBucket(min(limits), self.monotonic)
        bucket.per_minute = min(bucket.per_minute, *limits)
        wait = bucket.wait_time()
        if wait > self.max_wait:
            return False
        if wait > 0:
            self.sleep(wait)
        bucket.take()
        return True

    def _reread(self, record: EffectRecord) -> EffectRecord | None:
        """``record`` as stored now, or None when the store cannot say (it may be what failed)."""
        try:
            return self.ledger.store.get(record.tenant, record.intent_key)
        except Exception:  # an error report must not fail on a second error
            return None

    def _ours(self, record: EffectRecord) -> bool:
        """Did this process write the record's latest state (rather than a concurrent reconciler)?"""
        return record.updated_by == self.ledger.worker_id


def _position_of(record: EffectRecord) -> Position:
    return (record.updated_at, record.tenant, record.intent_key)
