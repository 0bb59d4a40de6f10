"""What an operator may do to an intent, each step conditional on what they saw and recorded in the audit trail.

The CLI is a thin shell over :class:`Operator`; a scheduler or an admin UI can call it directly.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._adapter import EffectRequest, ProviderAdapter
from ._approvals import Approval, ApprovalState, decided_meanwhile
from ._errors import ApprovalError, InvalidInput, StaleRecord
from ._evidence_rules import acted_evidence
from ._keys import IntentKey
from ._ledger import Ledger
from ._numbers import check_count
from ._provider_check import refuse_what_the_provider_holds
from ._records import OPERATOR_METHOD, AuditEntry, EffectRecord, Receipt, Resolution
from ._states import EffectStatus, resolvable, settled_status
from ._tenants import DEFAULT_TENANT
from ._text import check_storable
from ._thresholds import ApprovalThresholds

S = EffectStatus


@dataclass(frozen=True, slots=True)
class Decision:
    """The record after an operator action, and the approval it created or decided (if any)."""

    record: EffectRecord
    approval: Approval | None = None
    looked_up: str | None = None  # what a lookup at the provider showed before deciding, or why none was made

    @property
    def pending(self) -> bool:
        return self.approval is not None and self.approval.state is ApprovalState.PENDING


def actor(operator: str) -> str:
    """Audit rows name people as ``operator:<name>`` so they never look like a worker id; the name is checked
    first, so a bad one is refused as ``--operator`` and not as the CLI ledger's worker id."""
    return f"operator:{_identity(operator)}"


def _required(value: str | None, what: str) -> str:
    text = (_optional(value, what) or "").strip()
    if not text:
        raise InvalidInput(f"{what} is required")
    return check_storable(text, what)


def _identity(operator: str | None) -> str:
    """The operator's name, with no invisible characters: the two-person rule compares names, and a name
    differing only by a zero-width space would let one person approve their own request."""
    name = _required(operator, "operator identity (--operator)")
    hidden = next((c for c in name if _invisible(c)), None)
    if hidden is not None:
        raise InvalidInput(f"operator identity {name!r} holds an invisible character (U+{ord(hidden):04X})")
    return name


# Unicode's default-ignorable code points (DerivedCoreProperties.txt) outside the format characters (Cf), and
# blanks that render as nothing: a grapheme joiner, variation selectors, Hangul fillers, the braille blank.
# Appended to a name, each makes another string that shows as the same name
_IGNORABLE = (
    (0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x2800, 0x2800), (0x3164, 0x3164),
    (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0), (0x1BCA0, 0x1BCA3), (0xE0000, 0xE0FFF),
)  # fmt: skip


def _invisible(char: str) -> bool:
    """A control or format character, or one that shows as nothing (see ``_IGNORABLE``)."""
    if unicodedata.category(char) in ("Cc", "Cf"):
        return True
    point = ord(char)
    return any(low <= point <= high for low, high in _IGNORABLE)


def _optional(value: str | None, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise InvalidInput(f"{what} must be text, got {type(value).__name__}")
    return None if value is None else check_storable(value, what)


def _confirmed_version(trail: Sequence[AuditEntry], record: EffectRecord) -> int | None:
    """The version at which ``record`` was confirmed, from its trail (rows of this record, not of one of the
    same key purged before it was made). A confirm by the provider's answer has no row of its own; the first
    change from confirmed, always audited, was made at the next version. A row stamped before ``created_at``
    by a clock running behind is left out too: the caller then refuses, it never accepts a version wrongly."""
    rows = [a for a in trail if a.at >= record.created_at]
    settled = [a.version for a in rows if a.to_status is S.CONFIRMED and a.from_status is not S.CONFIRMED]
    if settled:
        return settled[-1]
    return next((a.version - 1 for a in rows if a.from_status is S.CONFIRMED), None)


class Operator:
    """Resolve, approve, decline and compensate intents for a named person, never silently."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        thresholds: ApprovalThresholds | None = None,
        adapters: Mapping[str, ProviderAdapter[Any]] | None = None,
    ) -> None:
        """``adapters`` (provider name -> adapter): with the record's provider among them, a resolution first
        looks the effect up at the provider (see :meth:`resolve`)."""
        self.ledger = ledger
        self.thresholds = thresholds or ApprovalThresholds()
        self.adapters = adapters

    def resolve(
        self,
        intent_key: IntentKey | str,
        *,
        to: EffectStatus,
        operator: str,
        reason: str,
        expect_version: int,
        tenant: str = DEFAULT_TENANT,
        provider_result_id: str | None = None,
        evidence: str | None = None,
    ) -> Decision:
        """Settle an unknown intent at the version the operator saw, or park it for a second operator. A rejected
        intent may be corrected to confirmed the same way, when its provider's own evidence says it acted.

        With an adapter for the record's provider (``Operator(adapters=...)``) the effect is looked up first, and
        a resolution the lookup contradicts is refused (:class:`InvalidInput`; see
        :func:`refuse_what_the_provider_holds`), since a rejected intent's job moves on to a new key and sends
        again; :meth:`approve` looks again before it applies one."""
        operator = _identity(operator)
        reason = _required(reason, "a reason (--reason)")
        to = settled_status(to)
        if to is S.CONFIRMED:
            provider_result_id = _required(provider_result_id, "to confirm, the provider's id (--provider-id)")
            evidence = _required(evidence, "to confirm, an evidence reference (--evidence)")
        else:
            provider_result_id = _optional(provider_result_id, "the provider's id (--provider-id)")
            evidence = _optional(evidence, "the evidence reference (--evidence)")
        record = self._current(intent_key, tenant, expect_version, to)
        looked_up = self._check_with_provider(record, to, provider_result_id)
        why = self.thresholds.requires_approval(record.summary)
        if why is None:
            self._check_nothing_pending(record)
            resolution = Resolution(method=OPERATOR_METHOD, operator=operator, evidence=evidence, reason=reason)
            settled = self.ledger.settle(
                record,
                to,
                resolution=resolution,
                actor=actor(operator),
                provider_result_id=provider_result_id,
                detail=resolution.model_dump(exclude_none=True),
            )
            return Decision(settled, looked_up=looked_up)
        # settle checks the events when it applies; a request must not wait for a second operator on what they refuse
        self.ledger._refuse_contradicted(record, to, provider_result_id)
        request = Approval(
            tenant=record.tenant,
            intent_key=record.intent_key,
            expected_version=record.version,
            to_status=to,
            requested_by=operator,
            reason=f"{reason} [needs approval: {why}]",
            evidence=evidence,
            provider_result_id=provider_result_id,
            created_at=self.ledger.clock(),
        )
        stored, created = self.ledger.store.add_approval(request)
        if not created and not _asked_of(stored, record):
            self._close_stale(stored, record, operator)  # left over from an earlier version or record: replace it
            stored, created = self.ledger.store.add_approval(request)
        if not created:
            raise _already_asked(stored, record)
        return Decision(record, stored, looked_up)

    def _check_nothing_pending(self, record: EffectRecord) -> None:
        """A request waiting for a second operator binds every operator, whatever thresholds this process has
        (another shell, or a change of configuration, may have none)."""
        store = self.ledger.store
        waiting = store.approvals(tenant=record.tenant, intent_key=record.intent_key, state=ApprovalState.PENDING)
        if waiting and _asked_of(waiting[0], record):
            raise _already_asked(waiting[0], record)

    def approve(
        self, intent_key: IntentKey | str, *, operator: str, tenant: str = DEFAULT_TENANT, reason: str | None = None
    ) -> Decision:
        """Apply another operator's pending resolution, conditional on the version they saw."""
        operator = _identity(operator)
        reason = _optional(reason, "the approver's reason (--reason)")
        approval = self._pending(intent_key, tenant)
        if _same_person(operator, approval.requested_by):
            raise ApprovalError(
                f"{approval.requested_by} asked for this resolution of {approval.intent_key!r}, and {operator!r} "
                "names the same person; a different operator must approve it (two-person rule)"
            )
        record = self.ledger.get(approval.intent_key, tenant=approval.tenant)
        if not _asked_of(approval, record):
            self._close_stale(approval, record, operator)
            again = " (recorded anew since)" if record.created_at > approval.created_at else ""
            raise StaleRecord(
                f"intent {record.intent_key!r} moved on since {approval.requested_by} asked (saw "
                f"v{approval.expected_version}, now {record.status} v{record.version}{again}); the request is "
                "closed as stale: look again and resolve anew if still needed"
            )
        # the provider may show now what it did not when it was asked (a search index catching up)
        looked_up = self._check_with_provider(
            record, approval.to_status, approval.provider_result_id, approval.requested_by
        )
        decided = approval.decided(ApprovalState.APPLIED, by=operator, reason=reason, at=self.ledger.clock())
        resolution = Resolution(
            method=OPERATOR_METHOD,
            operator=approval.requested_by,
            approved_by=operator,
            evidence=approval.evidence,
            reason=approval.reason if reason is None else f"{approval.reason}; approver: {reason}",
        )
        try:  # the approval and the record move together, or neither does (a decline or second approval racing)
            settled = self.ledger.settle(
                record,
                approval.to_status,
                resolution=resolution,
                actor=actor(operator),
                provider_result_id=approval.provider_result_id,
                detail=resolution.model_dump(exclude_none=True),
                approval=decided,
            )
        except StaleRecord:
            current = self.ledger.get(approval.intent_key, tenant=approval.tenant)
            if not _asked_of(approval, current):  # the record moved on, not (only) the approval
                self._close_stale(approval, current, operator)
            raise
        return Decision(settled, decided, looked_up)

    def decline(
        self, intent_key: IntentKey | str, *, operator: str, reason: str, tenant: str = DEFAULT_TENANT
    ) -> Decision:
        """Refuse (or, for its author, withdraw) a pending resolution; the record stays as it is."""
        operator = _identity(operator)
        reason = _required(reason, "a reason (--reason)")
        approval = self._pending(intent_key, tenant)
        now = self.ledger.clock()
        if not self.ledger.store.decide_approval(
            approval, state=ApprovalState.DECLINED, decided_by=operator, reason=reason, now=now
        ):
            raise decided_meanwhile(approval)
        record = self.ledger.get(approval.intent_key, tenant=approval.tenant)
        return Decision(record, approval.decided(ApprovalState.DECLINED, by=operator, reason=reason, at=now))

    def pending(self, *, tenant: str | None = None, limit: int = 100) -> list[Approval]:
        """Resolutions waiting for a second operator, oldest first; only the tenants this ledger serves."""
        store, served = self.ledger.store, self.ledger.tenants
        if tenant is not None or served is None:
            checked = None if tenant is None else self.ledger._tenant(tenant)
            return store.approvals(tenant=checked, state=ApprovalState.PENDING, limit=limit)
        waiting = [a for t in served for a in store.approvals(tenant=t, state=ApprovalState.PENDING, limit=limit)]
        return sorted(waiting, key=lambda approval: approval.id or 0)[:limit]

    def compensate(
        self,
        adapter: ProviderAdapter[Any],
        *,
        original_key: IntentKey | str,
        compensating_key: IntentKey | str,
        operation: str,
        params: Mapping[str, Any],
        operator: str,
        reason: str,
        expect_version: int,
        tenant: str = DEFAULT_TENANT,
    ) -> Receipt[Any]:
        """Launch the linked compensating intent (a refund, a correction); its summary names who and why.

        Only while the original is still the confirmed record at ``expect_version`` (the one the operator
        looked at); running the same compensation again answers from the ledger.
        """
        operator = _identity(operator)
        reason = _required(reason, "a reason (--reason)")
        if not isinstance(params, Mapping):
            raise InvalidInput(f"a compensation's params must be a JSON object, got {type(params).__name__}")
        check_count("expect_version", expect_version)
        original = self.ledger.get(original_key, tenant=tenant)
        if not self._seen(original, IntentKey.parse(compensating_key), expect_version):
            raise StaleRecord(
                f"intent {original.intent_key!r} is at {original.status} v{original.version}, you saw "
                f"v{expect_version}: it moved on; run `show` again before compensating"
            )
        summary = {**_amount_summary(params), "requested_by": actor(operator), "reason": reason}
        request = EffectRequest(operation=operation, params=params, summary=summary)
        return self.ledger.compensate(
            adapter, request, original_key=original_key, compensating_key=compensating_key, tenant=tenant
        )

    # -- helpers ------------------------------------------------------------------------------------------

    def _seen(self, original: EffectRecord, compensating_key: IntentKey, expect_version: int) -> bool:
        """Is ``expect_version`` a version of ``original`` the operator may have seen before this compensation?

        The current one; or, when the original already names this compensation (a rerun after a crash or a
        lost answer: naming it moved the version by one, marking it compensated by another), any version
        from the one at which the original was confirmed up to the current one. Never a later one.
        """
        if expect_version == original.version:
            return True
        if original.compensated_by != compensating_key or expect_version > original.version:
            return False
        confirmed_at = _confirmed_version(self.ledger.store.audit_trail(original.tenant, original.intent_key), original)
        return confirmed_at is not None and confirmed_at <= expect_version

    def _check_with_provider(
        self, record: EffectRecord, to: EffectStatus, provider_result_id: str | None, asked_by: str | None = None
    ) -> str:
        """:func:`refuse_what_the_provider_holds`, by this ledger's clock and allowed clock skew."""
        return refuse_what_the_provider_holds(
            self.adapters,
            record,
            to,
            provider_result_id,
            now=self.ledger.clock(),
            max_skew=self.ledger._clock_guard.max_skew,
            asked_by=asked_by,
        )

    def _current(self, intent_key: IntentKey | str, tenant: str, expect_version: int, to: EffectStatus) -> EffectRecord:
        """The record, if it is still the unknown (or, to withdraw, prepared; to confirm, rejected) one at the
        version the operator looked at."""
        check_count("expect_version", expect_version)  # "2" once compared unequal to 2: "you saw v2, it moved on"
        record = self.ledger.get(intent_key, tenant=tenant)
        if record.version != expect_version:
            raise StaleRecord(
                f"intent {record.intent_key!r} is at {record.status} v{record.version}, you saw v{expect_version}: "
                "it moved on; run `show` again before resolving"
            )
        if not resolvable(record.status, to):
            hint = " (run `reconcile` first if its lease expired)" if record.status is S.IN_FLIGHT else ""
            raise InvalidInput(
                f"intent {record.intent_key!r} is {record.status}: only an unknown intent can be resolved, a "
                f"prepared one (never sent) withdrawn as rejected, and a rejected one corrected to confirmed{hint}"
            )
        if record.status is S.REJECTED and not acted_evidence(self.ledger.store, record):
            raise InvalidInput(
                f"intent {record.intent_key!r} is rejected, and no evidence from {record.provider} says it acted: "
                "a rejected intent is corrected to confirmed only on the provider's own answer or event (`show` "
                "lists what is recorded)"
            )
        return record

    def _pending(self, intent_key: IntentKey | str, tenant: str) -> Approval:
        key, tenant = IntentKey.parse(intent_key), self.ledger._tenant(tenant)
        found = self.ledger.store.approvals(tenant=tenant, intent_key=key, state=ApprovalState.PENDING, limit=1)
        if not found:
            raise ApprovalError(f"no resolution is pending for intent {key!r} (tenant {tenant!r})")
        return found[0]

    def _close_stale(self, approval: Approval, record: EffectRecord, operator: str) -> None:
        again = ", recorded anew" if record.created_at > approval.created_at else ""
        self.ledger.store.decide_approval(
            approval,
            state=ApprovalState.STALE,
            decided_by=operator,
            reason=f"record moved on to {record.status} v{record.version}{again}",
            now=self.ledger.clock(),
        )


def _asked_of(approval: Approval, record: EffectRecord) -> bool:
    """Is ``record`` still the unknown (or rejected) record, at the version, that the request was made about?

    (tenant, key, version) alone does not name a record: a settled one can be purged and the key recorded
    again, its versions restarting at 1. A request is about the record that existed when it was made, so a
    record created after the request (``created_at`` later than the request's) is another one. Both times
    come from the ledger's clock; only a key purged and re-recorded within the clock skew between two hosts
    could slip through, and such a record must still be in the same state at the same version.
    """
    return (
        resolvable(record.status, approval.to_status)
        and record.version == approval.expected_version
        and record.created_at <= approval.created_at
    )


def _already_asked(request: Approval, record: EffectRecord) -> ApprovalError:
    return ApprovalError(
        f"{request.requested_by} already asked to resolve {record.intent_key!r} as {request.to_status} "
        f"at v{request.expected_version}; approve or decline that request first"
    )


_AMOUNT_BOUND = 10**30  # far beyond any amount in a currency's smallest unit


def _amount_summary(params: Mapping[str, Any]) -> dict[str, str]:
    """The amount and currency of a compensation, for the two-person rule when it ends unknown. A compensation
    moves money back unless it says otherwise, so one without an integer ``amount`` is ``unknown``, which
    the rule treats as large (a provider refunds the whole charge when no amount is given)."""
    amount = params.get("amount")
    known = isinstance(amount, int) and not isinstance(amount, bool)
    if (
        isinstance(amount, int) and abs(amount) >= _AMOUNT_BOUND
    ):  # no currency's amount; Python cannot even write 4,300+ digits
        raise InvalidInput(f"a compensation's amount must be under {_AMOUNT_BOUND:.0e} in absolute value")
    summary = {"amount": str(amount) if known else "unknown"}
    if isinstance(params.get("currency"), str):
        summary["currency"] = params["currency"]
    return summary


def _same_person(a: str, b: str) -> bool:
    """Names equal once case and compatibility forms are folded (a fullwidth 'alice' is 'alice')."""
    return unicodedata.normalize("NFKC", a.strip()).casefold() == unicodedata.normalize("NFKC", b.strip()).casefold()
