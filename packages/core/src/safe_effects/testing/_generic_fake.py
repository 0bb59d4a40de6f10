"""A provider-neutral fake and its adapter, to test the executor without any SDK.

The fake keeps its state in a SQLite file so several worker processes (and the test that kills them) see
one provider. It records every request, dedupes by key when told to (forgetting keys after ``retention``;
a same-key request with other params is refused, as Stripe refuses it), and fails on demand. Crash points
on the provider's side of the wire are hit here: ``after_dispatch`` when the request arrived,
``after_provider_accept`` once the effect is committed.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

from safe_effects._adapter import EffectRequest, LookupResult, LookupStatus, Outcome, Verdict
from safe_effects._clock import Clock, system_clock
from safe_effects._contract import (
    ConcurrentSameKey,
    IdempotencyContract,
    LookupKind,
    LookupMethod,
    ParameterMatching,
    ProviderContract,
)
from safe_effects._crash import NO_CRASH, CrashPlan, CrashPoint
from safe_effects._digest import request_digest
from safe_effects._keys import IntentKey
from safe_effects._records import EffectRecord


class FakeFailure(StrEnum):
    """What the next matching request does instead of (or after) succeeding."""

    REFUSED = "refused"  # connection refused before sending: nothing happened, retryable
    RATE_LIMITED = "rate_limited"  # 429: nothing happened, retryable
    DECLINED = "declined"  # definitive refusal: nothing happened
    LOST_BEFORE_COMMIT = "lost_before_commit"  # timeout; the provider never acted
    LOST_AFTER_COMMIT = "lost_after_commit"  # timeout; the provider acted
    SERVER_ERROR_AFTER_COMMIT = "server_error_after_commit"  # 500 after acting


class FakeTimeout(Exception):
    """The response never came back."""


class FakeRefused(Exception):
    """The connection was refused: the request never left."""


class FakeRateLimited(Exception):
    def __init__(self, retry_after: float) -> None:
        self.retry_after = retry_after
        super().__init__(f"rate limited, retry after {retry_after}s")


class FakeDeclined(Exception):
    """A definitive refusal, like a declined card."""


class FakeServerError(Exception):
    """A 500: the provider may or may not have acted."""


class FakeParamsMismatch(FakeDeclined):
    """A remembered key reused with other params: refused before acting (Stripe's 400 ``idempotency_error``)."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"key {key!r} was first used with other parameters")


_SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (seq INTEGER PRIMARY KEY, key TEXT, digest TEXT, at TEXT, outcome TEXT);
CREATE TABLE IF NOT EXISTS effects (seq INTEGER PRIMARY KEY, key TEXT, result_id TEXT, digest TEXT, at TEXT);
CREATE TABLE IF NOT EXISTS failures (seq INTEGER PRIMARY KEY, failure TEXT);
"""


@dataclass(frozen=True, slots=True)
class FakeEffect:
    key: str
    result_id: str
    digest: str
    at: datetime


class GenericFakeProvider:
    """File-backed fake provider shared by every process that opens the same path."""

    def __init__(
        self,
        path: str | Path,
        *,
        dedupe: bool = True,
        retention: timedelta | None = timedelta(hours=24),
        clock: Clock = system_clock,
        crash_plan: CrashPlan = NO_CRASH,
    ) -> None:
        self.path = Path(path)
        self.dedupe = dedupe
        self.retention = retention
        self.clock = clock
        self.crash_plan = crash_plan
        with closing(self._connect()) as db:
            db.executescript(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        """A new connection, for the caller to close: sqlite3's own ``with`` commits but never closes."""
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        return db

    def fail_next(self, *failures: FakeFailure) -> None:
        """Queue failures; each request consumes one."""
        with closing(self._connect()) as db:
            db.executemany("INSERT INTO failures (failure) VALUES (?)", [(f.value,) for f in failures])

    def handle(self, key: str, params: Mapping[str, Any]) -> str:
        """Serve one request: returns a result id, or raises the queued failure."""
        digest = request_digest(dict(params))
        now = self.clock()
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute("SELECT seq, failure FROM failures ORDER BY seq LIMIT 1").fetchone()
            failure = FakeFailure(row[1]) if row else None
            if row:
                db.execute("DELETE FROM failures WHERE seq = ?", (row[0],))
            db.execute(
                "INSERT INTO requests (key, digest, at, outcome) VALUES (?, ?, ?, ?)",
                (key, digest, now.isoformat(), failure.value if failure else "ok"),
            )
            db.execute("COMMIT")
        finally:
            db.close()
        self.crash_plan.hit(CrashPoint.AFTER_DISPATCH)
        if failure is FakeFailure.REFUSED:
            raise FakeRefused("connection refused")
        if failure is FakeFailure.RATE_LIMITED:
            raise FakeRateLimited(0.01)
        if failure is FakeFailure.DECLINED:
            raise FakeDeclined("declined")
        if failure is FakeFailure.LOST_BEFORE_COMMIT:
            raise FakeTimeout("read timed out")
        result_id = self._commit(key, digest, now)
        self.crash_plan.hit(CrashPoint.AFTER_PROVIDER_ACCEPT)
        if failure is FakeFailure.LOST_AFTER_COMMIT:
            raise FakeTimeout("read timed out")
        if failure is FakeFailure.SERVER_ERROR_AFTER_COMMIT:
            raise FakeServerError("500 internal error")
        return result_id

    def _commit(self, key: str, digest: str, now: datetime) -> str:
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            if self.dedupe:
                existing = self._remembered(db, key, now)
                if existing is not None:
                    db.execute("COMMIT")
                    result_id, first_digest = existing
                    if first_digest != digest:  # strict parameter matching, as the contract declares
                        raise FakeParamsMismatch(key)
                    return result_id
            seq = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM effects").fetchone()[0]
            result_id = f"fx_{seq}"
            db.execute(
                "INSERT INTO effects (seq, key, result_id, digest, at) VALUES (?, ?, ?, ?, ?)",
                (seq, key, result_id, digest, now.isoformat()),
            )
            db.execute("COMMIT")
            return result_id
        finally:
            db.close()

    def _remembered(self, db: sqlite3.Connection, key: str, now: datetime) -> tuple[str, str] | None:
        """(result id, params digest) of the key's newest effect, unless the key was forgotten since."""
        row = db.execute(
            "SELECT result_id, digest, at FROM effects WHERE key = ? ORDER BY seq DESC LIMIT 1", (key,)
        ).fetchone()
        if row is None:
            return None
        if self.retention is not None and datetime.fromisoformat(row[2]) + self.retention <= now:
            return None
        return str(row[0]), str(row[1])

    def effects(self, key: str | None = None) -> list[FakeEffect]:
        """Every effect the provider committed (optionally for one key): the provider's side of the truth."""
        with closing(self._connect()) as db:
            rows = db.execute(
                "SELECT key, result_id, digest, at FROM effects WHERE ? IS NULL OR key = ? ORDER BY seq",
                (key, key),
            ).fetchall()
        return [FakeEffect(r[0], r[1], r[2], datetime.fromisoformat(r[3])) for r in rows]

    def requests(self, key: str | None = None) -> list[tuple[str, str]]:
        """(key, outcome) for every request that reached the provider."""
        with closing(self._connect()) as db:
            rows = db.execute(
                "SELECT key, outcome FROM requests WHERE ? IS NULL OR key = ? ORDER BY seq", (key, key)
            ).fetchall()
        return [(r[0], r[1]) for r in rows]

    def find(self, key: str) -> FakeEffect | None:
        found = self.effects(key)
        return found[0] if found else None


def generic_contract(
    *,
    dedupe: bool = True,
    retention: timedelta | None = timedelta(hours=24),
    lookup_proves_absence: bool = False,
    normal_response_window: timedelta = timedelta(seconds=5),
) -> ProviderContract:
    """A contract for the generic fake: a Stripe-like deduping provider, or a SendGrid-like one without keys."""
    return ProviderContract(
        provider="fake",
        idempotency=IdempotencyContract(
            supported=dedupe,
            header="Idempotency-Key" if dedupe else None,
            max_key_length=255,
            retention=retention if dedupe else None,
            parameter_matching=ParameterMatching.STRICT if dedupe else ParameterMatching.NONE,
            concurrent_same_key=ConcurrentSameKey.CONFLICT if dedupe else ConcurrentSameKey.DUPLICATES,
        ),
        lookups=(
            LookupMethod(
                kind=LookupKind.SEARCH,
                description="exact lookup by key",
                proves_absence=lookup_proves_absence,
            ),
        ),
        normal_response_window=normal_response_window,
        redispatch_when_proven_absent=lookup_proves_absence,
    )


@dataclass(slots=True)
class GenericFakeAdapter:
    """Implements :class:`~safe_effects.ProviderAdapter` over :class:`GenericFakeProvider`."""

    fake: GenericFakeProvider
    contract: ProviderContract = field(default_factory=generic_contract)
    lookups_enabled: bool = True
    provider: str = "fake"

    def contract_for(self, operation: str) -> ProviderContract:
        return self.contract

    def provider_key(self, tenant: str, intent_key: IntentKey) -> str:
        return f"{tenant}/{intent_key}"

    def dispatch(self, request: EffectRequest, provider_key: str) -> str:
        return self.fake.handle(provider_key, request.params)

    def classify(self, error: BaseException) -> Verdict:
        if isinstance(error, FakeRefused):
            return Verdict.of(error, Outcome.RETRYABLE, "refused")
        if isinstance(error, FakeRateLimited):
            return Verdict.of(error, Outcome.RETRYABLE, "rate_limited", retry_after=error.retry_after)
        if isinstance(error, FakeParamsMismatch):
            return Verdict.of(error, Outcome.FINAL, "idempotency_mismatch")
        if isinstance(error, FakeDeclined):
            return Verdict.of(error, Outcome.FINAL, "declined")
        return Verdict.of(error, Outcome.UNKNOWN)

    def result_id(self, response: str) -> str:
        return response

    def response_digest(self, response: str) -> str:
        return "sha256:" + hashlib.sha256(json.dumps(response).encode()).hexdigest()

    def lookup(self, record: EffectRecord) -> LookupResult:
        if not self.lookups_enabled or record.provider_key is None:
            return LookupResult(LookupStatus.INCONCLUSIVE, "search", detail={"reason": "lookups disabled"})
        found = self.fake.find(record.provider_key)
        if found is not None:
            return LookupResult(
                LookupStatus.FOUND,
                "search",
                provider_result_id=found.result_id,
                evidence=f"fake effect {found.result_id}",
            )
        proves_absence = any(m.proves_absence for m in self.contract.lookups)
        return LookupResult(LookupStatus.ABSENT if proves_absence else LookupStatus.INCONCLUSIVE, "search")
