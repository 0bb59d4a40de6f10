"""Model <-> row mapping shared by both stores, so the two backends cannot drift apart on columns."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import to_jsonable_python

from ._errors import InvalidInput, StaleRecord
from ._records import AuditEntry, EffectRecord
from ._states import EffectStatus, check_transition
from ._tenants import check_tenant

M = TypeVar("M", bound=BaseModel)

RECORD_FIELDS: tuple[str, ...] = tuple(EffectRecord.model_fields)
RECORD_COLUMNS: tuple[str, ...] = tuple("tenant_id" if f == "tenant" else f for f in RECORD_FIELDS)
AUDIT_COLUMNS: tuple[str, ...] = tuple("tenant_id" if f == "tenant" else f for f in AuditEntry.model_fields)
TIME_FIELDS = frozenset(
    {
        "created_at",
        "updated_at",
        "lease_expires_at",
        "first_dispatched_at",
        "dispatched_at",
        "resolved_at",
        "at",
        "received_at",
    }
)
JSON_FIELDS = frozenset({"summary", "resolution", "detail"})
# identity and bookkeeping columns only the store itself may set during a transition
RESERVED_CHANGES = frozenset({"tenant", "intent_key", "status", "version", "created_at", "updated_at"})


@dataclass(frozen=True, slots=True)
class Codec:
    """How one backend writes and reads timestamps and JSON columns."""

    time_out: Callable[[datetime], Any]
    time_in: Callable[[Any], datetime]
    json_out: Callable[[Any], Any]
    json_in: Callable[[Any], Any]


def utc(value: datetime, name: str) -> datetime:
    """Refuse naive datetimes: stored order must be time order, which needs one known zone."""
    if value.utcoffset() is None:
        raise InvalidInput(f"{name} must be a timezone-aware datetime, got naive {value.isoformat()}")
    return value.astimezone(UTC)


def to_row(model: BaseModel, codec: Codec, fields: Collection[str] | None = None) -> dict[str, Any]:
    """Column name -> bindable value for ``model`` (or only ``fields`` of it): tenant validated, datetimes UTC.

    Field by field rather than through ``model_dump``: this runs four times per effect on the hot path.
    """
    row: dict[str, Any] = {}
    for field in type(model).model_fields if fields is None else fields:
        value = getattr(model, field)
        if field == "tenant":
            row["tenant_id"] = check_tenant(value)
        elif value is None:
            row[field] = None
        elif field in TIME_FIELDS:
            row[field] = codec.time_out(utc(value, field))
        elif field in JSON_FIELDS:
            row[field] = codec.json_out(to_jsonable_python(value))
        elif isinstance(value, Enum):
            row[field] = value.value  # by value: psycopg would dump an Enum by its name
        elif isinstance(value, str):
            row[field] = str(value)  # IntentKey and friends bind as plain text
        else:
            row[field] = value
    return row


def from_row(model: type[M], row: Mapping[str, Any], codec: Codec) -> M:
    """Validate a fetched row back into ``model``; columns the model lacks (serial ids) are dropped."""
    data: dict[str, Any] = {}
    for column, value in row.items():
        field = "tenant" if column == "tenant_id" else column
        if field not in model.model_fields:
            continue
        if value is not None and field in TIME_FIELDS:
            data[field] = codec.time_in(value)
        elif value is not None and field in JSON_FIELDS:
            data[field] = codec.json_in(value)
        else:
            data[field] = value
    return model.model_validate(data)


def plan_transition(
    record: EffectRecord,
    to: EffectStatus,
    *,
    now: datetime,
    actor: str,
    reason: str | None,
    changes: Mapping[str, Any] | None,
    detail: Mapping[str, Any] | None,
) -> tuple[EffectRecord, tuple[str, ...], AuditEntry]:
    """Validate a transition before any SQL: the new record, the fields it sets, and its audit entry."""
    check_transition(record.status, to, record.intent_key)
    check_tenant(record.tenant)
    changes = dict(changes or {})
    unknown = [name for name in changes if name not in EffectRecord.model_fields]
    if unknown:
        raise InvalidInput(f"changes {unknown!r} are not EffectRecord fields")
    reserved = sorted(RESERVED_CHANGES.intersection(changes))
    if reserved:
        raise InvalidInput(f"changes {reserved!r} are set by the transition itself")
    now = utc(now, "now")
    try:
        new = EffectRecord.model_validate(
            {**record.model_dump(), **changes, "status": to, "version": record.version + 1, "updated_at": now}
        )
        audit = AuditEntry(
            tenant=record.tenant,
            intent_key=record.intent_key,
            at=now,
            from_status=record.status,
            to_status=to,
            version=new.version,
            actor=actor,
            reason=reason,
            detail=dict(detail or {}),
        )
    except ValidationError as error:
        raise InvalidInput(f"transition of {record.intent_key!r}: {error}") from error
    return new, ("status", "version", "updated_at", *changes), audit


def first_audit(record: EffectRecord, *, actor: str, reason: str | None) -> AuditEntry:
    """The audit entry that records an intent's creation."""
    return AuditEntry(
        tenant=record.tenant,
        intent_key=record.intent_key,
        at=record.created_at,
        from_status=None,
        to_status=record.status,
        version=record.version,
        actor=actor,
        reason=reason,
    )


def stale(record: EffectRecord, found: EffectRecord | None) -> StaleRecord:
    """Name what the caller expected and what is stored now, so a lost race is easy to read in logs."""
    there = f"{found.status.value} v{found.version}" if found else "no record"
    return StaleRecord(
        f"intent {record.intent_key!r} (tenant {record.tenant!r}) expected "
        f"{record.status.value} v{record.version}, found {there}"
    )
