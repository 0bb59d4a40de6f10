"""Claims a ledger wrote without an acknowledgement and never sent, so its next call can send them.

A claim's write can commit while its answer is lost (a connection cut after the commit): the caller gets
``LedgerUnavailable`` (nothing sent), yet an in-flight record under this ledger's lease now exists. Other
processes must wait for the lease to run out and then reconcile, as for a lost worker; this process knows
better, because only it could have sent under its own lease. :class:`UnsentClaims` remembers such claims.

A remembered claim is handed over only when nothing in this process can have sent it: the record is exactly
the claim that failed (version and dispatch time), no other call of this ledger is on the intent (it may have
written the claim itself, at the same instant on a clock that stands still, and be about to send it), a claim
this ledger did write is forgotten before it is sent, and the executor asks only about a record whose
outcome it has not itself failed to write (that one was sent).
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime
from types import TracebackType

from ._records import EffectRecord
from ._states import EffectStatus

Intent = tuple[str, str]  # (tenant, intent key)


class UnsentClaims:
    """This ledger's failed claims of never-sent intents, and its calls in progress by intent."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failed: dict[tuple[str, str, int], datetime] = {}  # (tenant, key, version) -> its dispatched_at
        self._working: Counter[Intent] = Counter()

    def working(self, tenant: str, key: str) -> _Working:
        """Around one call on an intent (``with claims.working(tenant, key):``)."""
        return _Working(self, (tenant, key))

    def failed(self, claim: EffectRecord) -> None:
        """The write of ``claim`` raised: it may have committed."""
        if claim.dispatched_at is not None:
            with self._lock:
                self._failed[(claim.tenant, claim.intent_key, claim.version)] = claim.dispatched_at

    def written(self, claim: EffectRecord) -> None:
        """This call wrote ``claim`` and will send it: no failure of that version may be taken over."""
        with self._lock:
            self._failed.pop((claim.tenant, claim.intent_key, claim.version), None)

    def take(self, record: EffectRecord, worker_id: str) -> bool:
        """Whether ``record`` is a claim whose write failed here, never sent: True once, for one caller."""
        if record.status is not EffectStatus.IN_FLIGHT or record.lease_owner != worker_id:
            return False
        claim = (record.tenant, record.intent_key, record.version)
        with self._lock:
            taken = self._failed.get(claim) == record.dispatched_at and self._working[claim[:2]] <= 1
            if taken:
                del self._failed[claim]
        return taken


class _Working:
    """Counts a call on an intent while it runs (a class: the hot path pays no generator frame)."""

    __slots__ = ("_claims", "_intent")

    def __init__(self, claims: UnsentClaims, intent: Intent) -> None:
        self._claims, self._intent = claims, intent

    def __enter__(self) -> None:
        with self._claims._lock:
            self._claims._working[self._intent] += 1

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        with self._claims._lock:
            left = self._claims._working[self._intent] - 1
            if left:
                self._claims._working[self._intent] = left
            else:
                del self._claims._working[self._intent]
