"""What the ledger stores: effect records, their audit trail and provider evidence. Ids and digests only."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, Field

from ._keys import IntentKey
from ._states import EffectStatus

R = TypeVar("R")  # a provider adapter's response type


class _Frozen(BaseModel, frozen=True, extra="forbid", cache_strings=False):
    """Config as class keywords, and ``frozen=True`` on every subclass too: type checkers read those, not
    ``model_config``, and then refuse an assignment to a field as pydantic does at run time.

    cache_strings off: pydantic-core otherwise keeps a copy of every str-subclass value it converts (each
    IntentKey in an AuditEntry) in a process-wide cache of ~16k strings; records gain nothing from it."""


OPERATOR_METHOD = "operator"  # a Resolution's method when a person settled the record


class Resolution(_Frozen, frozen=True):
    """How an outcome was settled: by the provider's answer, a lookup, evidence, or an operator."""

    method: str  # "provider_response", "key_replay", "lookup:<kind>", "evidence:<source>", "operator"
    operator: str | None = None
    evidence: str | None = None
    reason: str | None = None
    approved_by: str | None = None


class EffectRecord(_Frozen, frozen=True):
    """One row per (tenant, intent key): everything needed to decide what to do next without guessing."""

    tenant: str
    intent_key: IntentKey
    provider: str
    operation: str
    request_digest: str
    status: EffectStatus
    version: int = 1
    workflow_id: str | None = None
    step_id: str | None = None
    provider_key: str | None = None
    attempt_count: int = 0
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    lease_token: str | None = None  # the claim holding the lease: unique to that attempt, see _unsent
    provider_result_id: str | None = None
    response_digest: str | None = None
    last_error_class: str | None = None
    last_error_code: str | None = None
    summary: dict[str, str] = Field(default_factory=dict)
    created_at: datetime
    updated_at: datetime
    updated_by: str | None = None  # who wrote this version (the audit trail holds only exceptional writes)
    first_dispatched_at: datetime | None = None
    dispatched_at: datetime | None = None
    dispatched_by: str | None = None  # the worker that sent the latest attempt; kept after its lease ends
    resolved_at: datetime | None = None
    resolution: Resolution | None = None
    compensates: IntentKey | None = None
    compensated_by: IntentKey | None = None

    def lease_expired(self, now: datetime) -> bool:
        return self.lease_expires_at is None or self.lease_expires_at <= now

    def differences_from(self, other: EffectRecord) -> list[str]:
        """What a record shows that differs from ``other``'s: provider, operation, summary fields, by name only
        (a summary value can be personal, and an :class:`IntentConflict` that names them reaches logs)."""
        named = [name for name in ("provider", "operation") if getattr(self, name) != getattr(other, name)]
        fields = sorted(self.summary.keys() | other.summary.keys())
        return named + [name for name in fields if self.summary.get(name) != other.summary.get(name)]


class AuditEntry(_Frozen, frozen=True):
    """One append-only line per transition: who moved which intent from what to what, and why."""

    tenant: str
    intent_key: str
    at: datetime
    from_status: EffectStatus | None
    to_status: EffectStatus
    version: int
    actor: str
    reason: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class EvidenceVerdict(StrEnum):
    CONFIRMS = "confirms"  # the provider acted (SES Delivery, SendGrid delivered)
    ACCEPTS = "accepts"  # the provider took the request, a refusal may still follow (SES Send, SendGrid processed)
    REJECTS = "rejects"  # the provider refused it (SES Reject, SendGrid dropped before sending)
    INFORMATIONAL = "informational"  # says something, decides nothing (opens, clicks, a late response)


class Evidence(_Frozen, frozen=True):
    """A fact about an intent received from outside the dispatch path (webhook, event queue, late response)."""

    tenant: str
    intent_key: str
    provider: str
    source: str  # "sendgrid_webhook", "ses_event", "late_response", "operator"
    event_id: str  # dedupe key within (provider, source)
    kind: str  # provider's event type
    verdict: EvidenceVerdict
    provider_result_id: str | None = None
    received_at: datetime
    detail: dict[str, Any] = Field(default_factory=dict)


class Receipt(_Frozen, Generic[R], frozen=True, arbitrary_types_allowed=True):
    """What the caller gets for a confirmed effect. ``response`` is the live provider response when there was one,
    of the adapter's response type (``Ledger.execute`` returns a ``Receipt`` of it)."""

    record: EffectRecord
    response: R | None = Field(default=None, repr=False)  # the provider's object: names, addresses; never logged
    from_ledger: bool = False  # True when no provider call was made for this answer

    @property
    def provider_result_id(self) -> str | None:
        return self.record.provider_result_id
