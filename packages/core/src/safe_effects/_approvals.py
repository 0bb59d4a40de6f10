"""Pending operator resolutions for the two-person rule: one row per request, kept after it is decided."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel

from ._errors import InvalidInput, StaleRecord
from ._keys import IntentKey
from ._states import EffectStatus


class ApprovalState(StrEnum):
    PENDING = "pending"  # waiting for a second operator
    APPLIED = "applied"  # a second operator approved it and the record was settled
    DECLINED = "declined"  # a second operator refused it; the record stays unknown
    STALE = "stale"  # the record moved on after the request; it can no longer be applied


class Approval(BaseModel, frozen=True, extra="forbid"):  # config as class keywords: type checkers read those
    """A resolution one operator asked for above the threshold; applied only once another approves it.

    ``created_at`` is when it was asked for and ``resolved_at`` when it was decided: the store's time columns.
    """

    id: int | None = None  # set by the store
    tenant: str
    intent_key: IntentKey
    expected_version: int  # the record version the requesting operator saw
    to_status: EffectStatus
    requested_by: str
    reason: str
    evidence: str | None = None
    provider_result_id: str | None = None
    created_at: datetime
    state: ApprovalState = ApprovalState.PENDING
    decided_by: str | None = None
    decision_reason: str | None = None
    resolved_at: datetime | None = None

    def decided(self, state: ApprovalState, *, by: str, reason: str | None, at: datetime) -> Approval:
        """This approval as decided: what the store writes when it moves it on."""
        update = {"state": ApprovalState(state), "decided_by": by, "decision_reason": reason, "resolved_at": at}
        return self.model_copy(update=update)


def decision_of(decided: Approval) -> tuple[ApprovalState, str, str | None, datetime]:
    """(state, decided_by, decision_reason, resolved_at) of an approval moved on by :meth:`Approval.decided`."""
    if decided.state is ApprovalState.PENDING or decided.decided_by is None or decided.resolved_at is None:
        raise InvalidInput(f"approval {decided.id} for {decided.intent_key!r} is not decided: nothing to write")
    return decided.state, decided.decided_by, decided.decision_reason, decided.resolved_at


def decided_meanwhile(approval: Approval) -> StaleRecord:
    """The error for an approval someone else decided between our read and our write."""
    return StaleRecord(f"the pending request for {approval.intent_key!r} was decided meanwhile")
