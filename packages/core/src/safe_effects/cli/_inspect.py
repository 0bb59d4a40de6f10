"""Read-only commands: ``list``, ``show`` and ``lookup`` change nothing."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Annotated

import typer

from safe_effects._approvals import Approval
from safe_effects._errors import IntentNotFound
from safe_effects._keys import IntentKey
from safe_effects._records import AuditEntry, EffectRecord, Evidence
from safe_effects._response_window import held_back
from safe_effects._states import EffectStatus
from safe_effects._store import Store
from safe_effects._tenants import DEFAULT_TENANT, check_tenant

from ._common import (
    MAX_LIMIT,
    AdaptersSpec,
    AsJson,
    StoreUrl,
    Tenant,
    adapter_for,
    age,
    asked_for,
    emit,
    opened,
    print_json,
    summary_text,
    table,
)

Statuses = Annotated[
    list[EffectStatus] | None,
    typer.Option(
        "--status", help="Statuses to list (repeatable); default: unknown, and in_flight whose lease expired."
    ),
]


def list_effects(
    *,
    store: StoreUrl,
    status: Statuses = None,
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant.")] = None,
    provider: Annotated[str | None, typer.Option("--provider", help="Only this provider.")] = None,
    key_prefix: Annotated[
        str | None,
        typer.Option(
            "--key-prefix",
            help="Only intents whose key starts with this (invoice:inv_43: finds every action and version of "
            "it); without --status, in every status.",
        ),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=MAX_LIMIT)] = 50,
    as_json: AsJson = False,
) -> None:
    """List intents, least recently updated first: what may have happened and since when. By default what is in
    doubt: unknown, and in flight with its lease expired (a worker died mid-call; the next reconcile or retry
    turns it unknown)."""
    with opened(store) as ledger:
        now = ledger.clock()
        if status or key_prefix is not None:  # one invoice's story: every status, unless asked otherwise
            chosen = status or list(EffectStatus)
            records = ledger.store.list_by_status(
                chosen, tenant=tenant, provider=provider, limit=limit, key_prefix=key_prefix
            )
        else:
            records = _in_doubt(ledger.store, now, tenant=tenant, provider=provider, limit=limit)
    if as_json:
        print_json(
            [
                {
                    **r.model_dump(mode="json"),
                    "age_seconds": (now - r.updated_at).total_seconds(),
                    "lease_expired": _abandoned(r, now),
                }
                for r in records
            ]
        )
        return
    rows = [
        [
            age(r.updated_at, now),
            r.tenant,
            r.intent_key,
            r.provider,
            r.operation,
            f"{r.status}, lease expired" if _abandoned(r, now) else r.status,
            r.version,
            r.last_error_class,
            summary_text(r.summary),
        ]
        for r in records
    ]
    columns = ["age", "tenant", "intent key", "provider", "operation", "status", "v", "last error", "summary"]
    more = f" (the first {limit}: --limit shows more)" if len(records) == limit else ""
    emit(table(f"{len(records)} intent(s){more}", columns, rows))


def _in_doubt(
    store: Store, now: datetime, *, tenant: str | None, provider: str | None, limit: int
) -> list[EffectRecord]:
    """The ``limit`` least recently updated records that may have acted unseen: unknown, and in flight past the
    lease (its worker gone: until a reconcile or a retry takes it over it is still ``in_flight``)."""
    unknown = store.list_by_status([EffectStatus.UNKNOWN], tenant=tenant, provider=provider, limit=limit)
    flying = store.list_by_status([EffectStatus.IN_FLIGHT], tenant=tenant, provider=provider, limit=limit)
    merged = unknown + [r for r in flying if _abandoned(r, now)]
    return sorted(merged, key=lambda r: (r.updated_at, r.tenant, r.intent_key))[:limit]


def _abandoned(record: EffectRecord, now: datetime) -> bool:
    return record.status is EffectStatus.IN_FLIGHT and record.lease_expired(now)


SHOWN_EVIDENCE = 20  # rows of evidence a table shows by default: the first and last half of them


def show(
    key: str,
    *,
    store: StoreUrl,
    tenant: Tenant = DEFAULT_TENANT,
    all_evidence: Annotated[
        bool,
        typer.Option(
            "--all-evidence",
            help=f"Every evidence row; by default a table shows counts and the first and last {SHOWN_EVIDENCE // 2}.",
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Everything about one intent: every field, the audit trail, evidence and approval requests (of a purged
    record, what is left of it: its audit trail and evidence, with an error)."""
    with opened(store) as ledger:
        record: EffectRecord | None = None
        not_found: IntentNotFound | None = None
        try:
            record = ledger.get(key, tenant=tenant)
        except IntentNotFound as missing:
            not_found = missing
        intent, tenant = IntentKey.parse(key), check_tenant(tenant)  # valid: get() would have refused them
        audit = ledger.store.audit_trail(tenant, intent)
        evidence = ledger.store.evidence_for(tenant, intent)
        approvals = ledger.store.approvals(tenant=tenant, intent_key=intent)
        now = ledger.clock()
    if not_found is not None and not (audit or evidence or approvals):
        raise not_found  # never recorded (or under another tenant)
    if as_json:
        print_json({"record": record, "audit": audit, "evidence": evidence, "approvals": approvals})
    else:
        if record is not None:
            fields = [[name, value] for name, value in record.model_dump(mode="json").items()]
            emit(table(f"{record.intent_key} (tenant {record.tenant})", ["field", "value"], fields))
            emit(f"last attempt: {record.dispatched_at or 'never'} ({age(record.dispatched_at, now) or '-'} ago)")
        _emit_trail(audit, evidence, approvals, all_evidence=all_evidence)
    if not_found is not None:  # what it did is on the trail; the record itself is gone
        raise IntentNotFound(
            f"{not_found}: purged, or lost in a restore from a backup; its audit trail and evidence, which "
            "purges keep, are shown"
        )
    if as_json or record is None:
        return
    if record.status is EffectStatus.UNKNOWN:
        emit(f"to resolve it, pass --expect-version {record.version}")
    elif record.status is EffectStatus.CONFIRMED:
        emit(f"to compensate it, pass --expect-version {record.version}")


def _emit_trail(
    audit: list[AuditEntry], evidence: list[Evidence], approvals: list[Approval], *, all_evidence: bool
) -> None:
    emit(
        table(
            "audit trail",
            ["at", "from", "to", "v", "actor", "reason"],
            [[a.at, a.from_status, a.to_status, a.version, a.actor, a.reason] for a in audit],
        )
    )
    title, shown = "evidence", evidence
    if len(evidence) > SHOWN_EVIDENCE and not all_evidence:  # a send to 2000 recipients has an event each
        half = SHOWN_EVIDENCE // 2
        counts = Counter(f"{e.kind}/{e.verdict}" for e in evidence)
        tally = ", ".join(f"{count} {what}" for what, count in counts.most_common())
        title = f"evidence: {len(evidence)} ({tally}); the first and last {half}, --all-evidence shows every one"
        shown = [*evidence[:half], *evidence[-half:]]
    emit(
        table(
            title,
            ["received", "source", "event", "kind", "verdict", "provider id"],
            [[e.received_at, e.source, e.event_id, e.kind, e.verdict, e.provider_result_id] for e in shown],
        )
    )
    if approvals:
        emit(
            table(
                "approval requests",
                ["asked", "by", "asks for", "at v", "state", "decided by", "reason", "decision reason"],
                [
                    [
                        a.created_at,
                        a.requested_by,
                        asked_for(a),
                        a.expected_version,
                        a.state,
                        a.decided_by,
                        a.reason,
                        a.decision_reason,
                    ]
                    for a in approvals
                ],
            )
        )


def lookup(
    key: str, store: StoreUrl, tenant: Tenant = DEFAULT_TENANT, adapters: AdaptersSpec = None, as_json: AsJson = False
) -> None:
    """Ask the provider whether the effect happened; shows the answer and changes nothing."""
    with opened(store) as ledger:
        record = ledger.get(key, tenant=tenant)
        adapter = adapter_for(adapters, record.provider)
        found = adapter.lookup(record)
        contract = adapter.contract_for(record.operation)
        not_yet = held_back(found, record, contract, ledger._clock_guard.max_skew, ledger.clock())
    answer = {
        "intent_key": record.intent_key,
        "tenant": record.tenant,
        "provider": record.provider,
        "record_status": record.status,
        "record_version": record.version,
        "lookup_status": found.status,
        "method": found.method,
        "provider_result_id": found.provider_result_id,
        "evidence": found.evidence,
        "detail": dict(found.detail),
        "held_back": not_yet,
    }
    if as_json:
        print_json(answer)
        return
    emit(table(f"lookup of {record.intent_key} (nothing was changed)", ["", ""], [[k, v] for k, v in answer.items()]))
