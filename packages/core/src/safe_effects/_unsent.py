"""Claims a ledger wrote without an acknowledgement and never sent, so its next call can send them.

A claim's write can commit while its answer is lost (a connection cut after the commit): the caller gets
``LedgerUnavailable`` (nothing sent), yet an in-flight record under the worker's lease now exists. Other
workers must wait for the lease to run out and then reconcile, as for a lost worker; this ledger knows
better. Every claim it writes carries a tag of its own as the record's ``lease_token``; when the write
fails, :class:`UnsentClaims` remembers the tag, and a later call that finds the in-flight record at that
version holding one of those tags knows that this very attempt wrote it and never sent it. The tag, not the
lease owner or the time, is the proof: two ledgers may share a worker id and a clock that stands still, but
never a tag.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from datetime import datetime, timedelta

from ._fork import renew_in_children
from ._records import EffectRecord
from ._states import EffectStatus

# (tenant, intent key, created_at, version): created_at tells a record from one of the same key made after a purge
Claim = tuple[str, str, datetime, int]


class UnsentClaims:
    """One ledger's failed claims of never-sent intents, by the tag each claim writes as its lease token."""

    def __init__(self, *, keep_for: timedelta) -> None:
        self._keep_for = keep_for  # past the lease, other workers reconcile the claim anyway
        self._renew_after_fork()
        renew_in_children(self)

    def _renew_after_fork(self) -> None:
        """A prefix of its own (a forked child's copy would tag its claims as the parent's and its siblings'),
        and no failed claims: those were the parent's."""
        self._lock = threading.Lock()
        self._prefix = uuid.uuid4().hex[:8]
        self._serial = itertools.count()
        self._failed: dict[Claim, dict[str, datetime]] = {}  # claim -> {tag: when it failed}

    def __len__(self) -> int:
        """How many failed claims are remembered (each is dropped once moved past or older than the lease)."""
        with self._lock:
            return len(self._failed)

    def tag(self) -> str:
        """A tag no other claim anywhere carries: this ledger's random prefix and a serial."""
        return f"{self._prefix}.{next(self._serial)}"

    def failed(self, claim: EffectRecord, tag: str, now: datetime) -> None:
        """The write of ``claim``, tagged ``tag``, raised: it may have committed."""
        horizon = now - self._keep_for
        with self._lock:
            self._failed.setdefault(_claim(claim), {})[tag] = now
            for old in [c for c, tags in self._failed.items() if max(tags.values()) < horizon]:
                del self._failed[old]

    def takes(self, record: EffectRecord, worker_id: str) -> bool:
        """Whether ``record`` is a claim whose write failed here, so nothing sent it: it holds its lease under
        a remembered tag."""
        if record.status is not EffectStatus.IN_FLIGHT or record.lease_owner != worker_id:
            return False
        with self._lock:
            tags = self._failed.get(_claim(record), {})
            return record.lease_token is not None and record.lease_token in tags

    def forget(self, claim: EffectRecord) -> None:
        with self._lock:
            self._failed.pop(_claim(claim), None)

    def prune(self, record: EffectRecord, worker_id: str) -> None:
        """Forget failed claims of ``record``'s intent that it has moved past: another record of the key (made
        before a purge), an older version, or this version no longer in flight under this worker's lease."""
        live = record.status is EffectStatus.IN_FLIGHT and record.lease_owner == worker_id
        with self._lock:
            for claim in [c for c in self._failed if c[:2] == (record.tenant, record.intent_key)]:
                _, _, created_at, version = claim
                if (
                    created_at != record.created_at
                    or version < record.version
                    or (version == record.version and not live)
                ):
                    del self._failed[claim]


def _claim(record: EffectRecord) -> Claim:
    return (record.tenant, record.intent_key, record.created_at, record.version)
