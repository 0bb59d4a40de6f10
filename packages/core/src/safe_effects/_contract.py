"""Provider contracts: the checked facts about a provider that drive every executor decision.

The executor never asks "is this Stripe?"; it asks the contract whether the provider dedupes, for how long,
how an unknown can be looked up, and how long a normal response takes.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, Field


class _Frozen(BaseModel, frozen=True, extra="forbid"):
    """Config as class keywords, ``frozen=True`` on every subclass too: what type checkers read."""


class ParameterMatching(StrEnum):
    STRICT = "strict"  # same key + other params is refused by the provider (Stripe: 400 idempotency_error)
    NONE = "none"  # the provider does not compare (or has no keys at all)


class ConcurrentSameKey(StrEnum):
    CONFLICT = "conflict"  # the second request is refused while the first runs (Stripe: 409)
    DUPLICATES = "duplicates"  # no dedupe: both run (SendGrid, SES)


class LookupKind(StrEnum):
    KEY_REPLAY = "key_replay"  # resend with the same idempotency key inside the retention window
    SEARCH = "search"  # search by a field the wrapper wrote (Stripe metadata, SendGrid custom_args)
    RETRIEVE = "retrieve"  # fetch by a provider id already known
    EVENT_STREAM = "event_stream"  # events pushed by the provider (webhooks, SES event publishing)


class LookupMethod(_Frozen, frozen=True):
    kind: LookupKind
    description: str
    lag: timedelta | None = None  # how far behind the truth the method may be
    rate_limit_per_minute: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    requires: str | None = None  # e.g. "Email Activity add-on"
    proves_absence: bool = False  # can "not found" be trusted as "never happened"?
    verified: bool = True  # False where the fact is documented but not checked by us


class IdempotencyContract(_Frozen, frozen=True):
    supported: bool
    header: str | None = None
    max_key_length: int | None = None
    key_charset: str | None = None  # a regex the key must fullmatch
    retention: timedelta | None = None  # how long the provider remembers a key
    parameter_matching: ParameterMatching = ParameterMatching.NONE
    concurrent_same_key: ConcurrentSameKey = ConcurrentSameKey.DUPLICATES
    # error codes by which the provider says its key already holds a request with other params (Stripe:
    # idempotency_error). This ledger sends one key with one body, so that request was made outside it (the
    # raw SDK before adoption, another version of the wrapper) at a time nobody here knows: the key may expire
    # before the window counted from this ledger's first send, and a replay would then act a second time
    mismatch_codes: frozenset[str] = frozenset()


class ProviderContract(_Frozen, frozen=True):
    """Per provider (and optionally per operation): idempotency, lookups, timing and SDK settings."""

    provider: str
    operation: str = "*"
    idempotency: IdempotencyContract
    lookups: tuple[LookupMethod, ...] = ()
    normal_response_window: timedelta  # beyond this an unknown is worth an alert
    replay_safety_margin: timedelta = timedelta(hours=1)  # stop replaying this long before keys expire
    redispatch_when_proven_absent: bool = False
    # how long after an acceptance event (SES Send, SendGrid processed) a rejecting one may still arrive; an
    # acceptance alone confirms an unknown intent only once this has passed, so event order cannot decide
    rejection_window: timedelta = timedelta(minutes=15)
    forced_sdk_settings: dict[str, str] = Field(default_factory=dict)  # retries off, explicit timeouts
    record_retention_minimum: timedelta = timedelta(days=120)  # purge floor (disputes, bounces)
    sources: tuple[str, ...] = ()
    unverified: tuple[str, ...] = ()  # facts we rely on that nobody here has checked against the provider

    def replay_deadline(self, first_dispatched_at: datetime) -> datetime | None:
        """Last moment a same-key replay is still deduped by the provider (minus the safety margin)."""
        if not self.idempotency.supported or self.idempotency.retention is None:
            return None
        return first_dispatched_at + self.idempotency.retention - self.replay_safety_margin

    def can_replay(
        self, first_dispatched_at: datetime | None, now: datetime, *, last_error_code: str | None = None
    ) -> bool:
        """True when resending with the same key is certain to be deduped by the provider: inside the window
        counted from the first send, and unless the provider said another request holds the key
        (``last_error_code`` in ``idempotency.mismatch_codes``), whose window nobody here can count. A first
        send later than ``now`` says this clock is behind the sender's, by an unknown amount: no replay."""
        if last_error_code is not None and last_error_code in self.idempotency.mismatch_codes:
            return False
        if first_dispatched_at is None or first_dispatched_at > now:  # a send "in the future": clocks disagree
            return False
        deadline = self.replay_deadline(first_dispatched_at)
        return deadline is not None and now < deadline

    def may_reopen_when_absent(
        self, first_dispatched_at: datetime | None, now: datetime, *, last_error_code: str | None = None
    ) -> bool:
        """Whether a lookup that proves absence may put an intent back to dispatchable.

        Only where the contract trusts that proof, and never past a key retention window: inside it a wrong
        "absent" (a lagging lookup) is still caught by the provider's dedupe, after it nothing would catch it.
        A provider without keys has no window; there the contract's word on its lookup is all there is.
        """
        if not self.redispatch_when_proven_absent:
            return False
        if not self.idempotency.supported or self.idempotency.retention is None:
            return True
        return self.can_replay(first_dispatched_at, now, last_error_code=last_error_code)
