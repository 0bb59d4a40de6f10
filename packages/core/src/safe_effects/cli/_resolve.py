"""Operator decisions: ``resolve``, ``approve``, ``decline``, ``pending`` (two-person rule above a threshold)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from safe_effects._adapter_registry import load_adapters
from safe_effects._approvals import Approval
from safe_effects._operator import Decision, Operator, actor
from safe_effects._states import EffectStatus
from safe_effects._tenants import DEFAULT_TENANT
from safe_effects._thresholds import ENV_THRESHOLDS, ApprovalThresholds

from ._common import (
    NO_PERSONAL_DATA,
    AdaptersSpec,
    AsJson,
    OperatorName,
    ReasonText,
    StoreUrl,
    Tenant,
    asked_for,
    emit,
    opened,
    print_json,
    table,
)


class Settle(StrEnum):
    CONFIRMED = "confirmed"
    REJECTED = "rejected"


NoLookup = Annotated[bool, typer.Option("--no-lookup", help="Do not look the effect up at the provider first.")]
Thresholds = Annotated[
    list[str] | None,
    typer.Option(
        "--approval-threshold",
        help=f"e.g. usd=100000 (minor units); can only tighten {ENV_THRESHOLDS}, which is also read.",
    ),
]


def _print_decision(decision: Decision) -> None:
    print_json(
        {
            "record": decision.record,
            "approval": decision.approval,
            "pending": decision.pending,
            "looked_up": decision.looked_up,
        }
    )


def _report(decision: Decision, as_json: bool) -> None:
    if as_json:
        _print_decision(decision)
        return
    record, approval = decision.record, decision.approval
    if decision.pending and approval is not None:
        emit(
            f"pending: {record.intent_key} stays {record.status} v{record.version} until another operator runs\n"
            f"  safe-effects approve {record.intent_key} --tenant {record.tenant} --operator <someone else>\n"
            f"  ({approval.reason})"
            f"{_looked_up(decision)}"
        )
        return
    resolution = record.resolution
    by = f" by {resolution.operator}" if resolution and resolution.operator else ""
    approved = f", approved by {resolution.approved_by}" if resolution and resolution.approved_by else ""
    found = f" (provider id {record.provider_result_id})" if record.provider_result_id else ""
    emit(f"{record.intent_key} is now {record.status}{found} v{record.version}{by}{approved}{_looked_up(decision)}")


def _looked_up(decision: Decision) -> str:
    """The line saying whether the provider was asked first: a resolution no lookup checked is the operator's
    evidence alone, and the output must not leave that to be guessed."""
    return f"\n  ({decision.looked_up})" if decision.looked_up else ""


def resolve(
    key: str,
    *,
    store: StoreUrl,
    to: Annotated[Settle, typer.Option("--as", help="What the evidence shows happened.")],
    operator: OperatorName,
    reason: ReasonText,
    expect_version: Annotated[int, typer.Option("--expect-version", help="The version `show` displayed.")],
    provider_id: Annotated[str | None, typer.Option("--provider-id", help="Provider's id (to confirm).")] = None,
    evidence: Annotated[
        str | None, typer.Option("--evidence", help=f"Where you saw it (to confirm). {NO_PERSONAL_DATA}")
    ] = None,
    tenant: Tenant = DEFAULT_TENANT,
    approval_threshold: Thresholds = None,
    adapters: AdaptersSpec = None,
    no_lookup: NoLookup = False,
    as_json: AsJson = False,
) -> None:
    """Settle an unknown intent as confirmed or rejected, if it is still at the version you looked at; withdraw
    a prepared one (never sent) as rejected; or correct a rejected one to confirmed, when its provider's own
    answer or event says it acted. Where the provider's adapter is at hand (installed and configured, or
    --adapters) the effect is looked up first, and a resolution the lookup contradicts is refused."""
    thresholds = ApprovalThresholds.configured(*(approval_threshold or []))
    lookups = None if no_lookup else load_adapters(adapters)
    with opened(store, worker_id=actor(operator)) as ledger:
        decision = Operator(ledger, thresholds=thresholds, adapters=lookups).resolve(
            key,
            to=EffectStatus(to.value),
            operator=operator,
            reason=reason,
            expect_version=expect_version,
            tenant=tenant,
            provider_result_id=provider_id,
            evidence=evidence,
        )
    _report(decision, as_json)


def approve(
    key: str,
    *,
    store: StoreUrl,
    operator: OperatorName,
    tenant: Tenant = DEFAULT_TENANT,
    reason: Annotated[
        str | None, typer.Option("--reason", help=f"Optional note from the approver. {NO_PERSONAL_DATA}")
    ] = None,
    adapters: AdaptersSpec = None,
    no_lookup: NoLookup = False,
    as_json: AsJson = False,
) -> None:
    """Apply another operator's pending resolution (you cannot approve your own), looking the effect up at the
    provider first as resolve does."""
    lookups = None if no_lookup else load_adapters(adapters)
    with opened(store, worker_id=actor(operator)) as ledger:
        decision = Operator(ledger, adapters=lookups).approve(key, operator=operator, tenant=tenant, reason=reason)
    _report(decision, as_json)


def decline(
    key: str,
    *,
    store: StoreUrl,
    operator: OperatorName,
    reason: ReasonText,
    tenant: Tenant = DEFAULT_TENANT,
    as_json: AsJson = False,
) -> None:
    """Refuse a pending resolution (or withdraw your own); the intent stays as it is (unknown, prepared or
    rejected)."""
    with opened(store, worker_id=actor(operator)) as ledger:
        decision = Operator(ledger).decline(key, operator=operator, reason=reason, tenant=tenant)
    if as_json:
        _print_decision(decision)
        return
    emit(f"declined: {decision.record.intent_key} stays {decision.record.status} v{decision.record.version}")


def pending(
    *,
    store: StoreUrl,
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant.")] = None,
    as_json: AsJson = False,
) -> None:
    """Resolutions waiting for a second operator, oldest first."""
    with opened(store) as ledger:
        waiting: list[Approval] = Operator(ledger).pending(tenant=tenant)
    if as_json:
        print_json(waiting)
        return
    # the approver approves exactly what was asked: the provider id and evidence are part of it
    rows = [
        [a.created_at, a.tenant, a.intent_key, asked_for(a), a.expected_version, a.requested_by, a.reason]
        for a in waiting
    ]
    columns = ["asked", "tenant", "intent key", "asks for", "at v", "by", "reason"]
    emit(table(f"{len(waiting)} pending", columns, rows))
