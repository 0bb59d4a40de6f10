"""Model <-> row mapping shared by both stores, so the two backends cannot drift apart on columns."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from functools import lru_cache, partial
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Any, TypeVar, get_args

from pydantic import BaseModel, ValidationError
from pydantic_core import to_json

from ._errors import InvalidInput, StaleRecord
from ._keys import MAX_KEY_LENGTH, IntentKey
from ._numbers import check_count
from ._records import AuditEntry, EffectRecord
from ._states import EffectStatus, check_transition
from ._tenants import check_tenant
from ._text import check_storable

if TYPE_CHECKING:
    from ._store import Store

M = TypeVar("M", bound=BaseModel)

RECORD_FIELDS: tuple[str, ...] = tuple(EffectRecord.model_fields)
_RECORD_FIELD_SET = frozenset(RECORD_FIELDS)
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
KEY_FIELDS = frozenset({"intent_key", "compensates", "compensated_by"})
# identity and bookkeeping columns only the store itself may set during a transition
RESERVED_CHANGES = frozenset({"tenant", "intent_key", "status", "version", "created_at", "updated_at", "updated_by"})


MAX_LIMIT = 2**31 - 1  # rows per read: far beyond any page, and within both stores' LIMIT


def stored_value(kind: type[Enum], given: object, what: str) -> str:
    """The stored text of ``given``, a member of ``kind`` or its text; else :class:`InvalidInput` listing them."""
    try:
        return str(kind(given).value)
    except ValueError:
        allowed = ", ".join(str(member.value) for member in kind)
        raise InvalidInput(f"{what} {given!r:.80} is not one of: {allowed}") from None


def stored_values(kind: type[Enum], given: object, what: str) -> list[str]:
    """:func:`stored_value` of each of ``given``; a str is refused, which would be read letter by letter."""
    if isinstance(given, str | bytes) or not isinstance(given, Iterable):
        raise InvalidInput(f"{what} must be a collection of {kind.__name__}, got {given!r:.80}")
    return [stored_value(kind, item, what) for item in given]


def check_limit(limit: object) -> int:
    """A read's ``limit``: a whole number of rows, 0 or more (SQLite reads -1 as no limit, PostgreSQL refuses it)."""
    return check_count("limit", limit, minimum=0, maximum=MAX_LIMIT)


def lookup_text(value: object, what: str) -> str:
    """A key or id a read looks a row up by: a str a store can hold (SQLite would match nothing on a NUL, where
    PostgreSQL refuses it with a driver error), so both stores answer alike."""
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be a str, got {type(value).__name__}")
    return check_storable(value, what)


@dataclass(frozen=True, slots=True)
class Codec:
    """How one backend writes and reads timestamps and JSON columns."""

    time_out: Callable[[datetime], Any]  # given an aware UTC datetime
    time_in: Callable[[Any], datetime]
    json_out: Callable[[Any], Any]  # given a dict or a model
    json_in: Callable[[Any], Any]


def json_text(value: Any) -> str:
    """A JSON column's text: dicts and models alike, through pydantic-core (ten times json's speed)."""
    return to_json(value).decode()


def utc(value: datetime, name: str) -> datetime:
    """Refuse naive datetimes: stored order must be time order, which needs one known zone."""
    if value.tzinfo is UTC:  # what the ledger's clock gives: nothing to check or convert
        return value
    if value.utcoffset() is None:
        raise InvalidInput(f"{name} must be a timezone-aware datetime, got naive {value.isoformat()}")
    try:
        return value.astimezone(UTC)
    except OverflowError:  # year 1 east of UTC, or 9999 west of it: no UTC instant to store
        raise InvalidInput(f"{name} has no UTC time within the years 1 to 9999: {value.isoformat()}") from None


class _TimeOut:
    """A codec's datetime -> bind value, remembering the last conversion.

    One write binds the same ``now`` to up to five columns (created, updated, dispatched, the audit row's
    ``at``): it is checked and converted once. The input is held, so its identity cannot be reused.
    """

    __slots__ = ("_last", "_out")

    def __init__(self, out: Callable[[datetime], Any]) -> None:
        self._out = out
        self._last: tuple[datetime | None, Any] = (None, None)

    def __call__(self, value: datetime, name: str) -> Any:
        last = self._last  # one read: another thread may replace the pair meanwhile
        if last[0] is value:
            return last[1]
        converted = self._out(utc(value, name))
        self._last = (value, converted)
        return converted


@lru_cache(maxsize=16)
def _time_out(codec: Codec) -> _TimeOut:
    return _TimeOut(codec.time_out)


def _holds(annotation: Any, kind: type) -> bool:
    """Whether a field's type is ``kind`` or a subclass, alone or ``| None``."""
    candidates = get_args(annotation) or (annotation,)
    return any(isinstance(c, type) and issubclass(c, kind) for c in candidates)


def _converter(model: type[BaseModel], field: str, codec: Codec) -> Callable[[Any], Any] | None:
    """How one non-null field becomes a bind value; None when the driver binds it as it is."""
    if field == "tenant":
        return check_tenant
    if field in TIME_FIELDS:
        return partial(_time_out(codec), name=field)
    if field in JSON_FIELDS:
        return codec.json_out
    annotation = model.model_fields[field].annotation
    if _holds(annotation, Enum):
        # psycopg would dump an Enum by its name; ``_value_`` is the member's plain value, read without the
        # Python-level descriptor behind ``.value``
        return attrgetter("_value_")
    if _holds(annotation, IntentKey):
        return str  # a plain str takes psycopg's C dumper; a subclass is looked up in Python on every bind
    return None  # str, int, bool: both drivers bind them natively


class RowEncoder:
    """Bind values for a fixed list of one model's fields, in that order: built once, run on every write.

    The per-field decisions (tenant check, timestamp and JSON encoding, enums by value) are made here once:
    encoding a record reads its fields in one C call and converts only those that need it.
    """

    __slots__ = ("_converted", "_read", "columns", "fields")

    def __init__(self, model: type[BaseModel], codec: Codec, fields: Collection[str] | None = None) -> None:
        self.fields: tuple[str, ...] = tuple(model.model_fields if fields is None else fields)
        self.columns: tuple[str, ...] = tuple("tenant_id" if f == "tenant" else f for f in self.fields)
        steps = ((index, _converter(model, field, codec)) for index, field in enumerate(self.fields))
        self._converted = tuple((index, convert) for index, convert in steps if convert is not None)
        read = itemgetter(*self.fields)
        self._read: Callable[[dict[str, Any]], tuple[Any, ...]] = (
            read if len(self.fields) > 1 else lambda data: (read(data),)  # one field: itemgetter gives no tuple
        )

    def values(self, model: BaseModel) -> list[Any]:
        row = list(self._read(model.__dict__))
        for index, convert in self._converted:
            if (value := row[index]) is not None:
                row[index] = convert(value)
        return row


@lru_cache(maxsize=256)
def row_encoder(model: type[BaseModel], codec: Codec, fields: tuple[str, ...] | None = None) -> RowEncoder:
    """The shared encoder for ``model`` (or only ``fields`` of it) under ``codec``."""
    return RowEncoder(model, codec, fields)


def to_row(model: BaseModel, codec: Codec, fields: Collection[str] | None = None) -> dict[str, Any]:
    """Column name -> bindable value for ``model`` (or only ``fields`` of it): tenant validated, datetimes UTC."""
    encoder = row_encoder(type(model), codec, None if fields is None else tuple(fields))
    return dict(zip(encoder.columns, encoder.values(model), strict=True))


def list_statement(
    select: str,
    statuses: Collection[EffectStatus],
    *,
    mark: str,
    codec: Codec,
    tenant: str | None,
    provider: str | None,
    updated_before: datetime | None,
    limit: int,
    after: tuple[datetime, str, str] | None,
    key_prefix: str | None = None,
) -> tuple[str, list[Any]]:
    """``list_by_status``'s SQL (``select`` is ``SELECT <columns> FROM <intents>``, ``mark`` the placeholder)
    and its parameters, filters validated.

    One ordered, limited read of the (status, updated_at) index per status, merged by an outer ORDER BY: a
    single ``status IN (...)`` cannot be read in ``updated_at`` order, so the database would read and sort
    every record of those statuses, the whole history for a settled one, to return the first ``limit``.
    """
    distinct = dict.fromkeys(stored_values(EffectStatus, statuses, "statuses"))  # one named twice is read once
    limit = check_limit(limit)
    conditions: list[tuple[str, Any]] = []
    if tenant is not None:
        conditions.append((f"tenant_id = {mark}", check_tenant(tenant)))
    if provider is not None:
        conditions.append((f"provider = {mark}", lookup_text(provider, "provider")))
    if updated_before is not None:
        conditions.append((f"updated_at < {mark}", codec.time_out(utc(updated_before, "updated_before"))))
    if key_prefix is not None:  # substr, not LIKE: SQLite's LIKE ignores case, and % or _ in a key are literal
        prefix = check_key_prefix(key_prefix)
        conditions.append((f"substr(intent_key, 1, {len(prefix)}) = {mark}", prefix))
    cursor: list[Any] = []
    where = ""
    if after is not None:  # the first bound lets the index start at the cursor; the row comparison breaks ties
        at, tenant_after, key_after = cursor_values(after, codec)
        where = f" AND updated_at >= {mark} AND (updated_at, tenant_id, intent_key) > ({mark}, {mark}, {mark})"
        cursor = [at, at, tenant_after, key_after]
    where = "".join(f" AND {condition}" for condition, _ in conditions) + where
    values = [value for _, value in conditions] + cursor
    order = f" ORDER BY updated_at, tenant_id, intent_key LIMIT {mark}"
    parts = [(f"{select} WHERE status = {mark}{where}{order}", [status, *values, limit]) for status in distinct]
    if len(parts) == 1:
        return parts[0]
    merged = " UNION ALL ".join(f"SELECT * FROM ({query}) AS s{i}" for i, (query, _) in enumerate(parts))
    return merged + order, [value for _, params in parts for value in params] + [limit]


def oldest_keys(
    store: Store, statuses: Collection[EffectStatus], updated_before: datetime, limit: int
) -> list[tuple[str, str]]:
    """(tenant, intent key) of the ``limit`` least recently updated records in ``statuses`` before the cutoff:
    what a purge without keys deletes, found by the same ordered per-status reads as a listing."""
    records = store.list_by_status(statuses, updated_before=updated_before, limit=limit)
    return [(record.tenant, record.intent_key) for record in records]


def purge_statuses(
    statuses: Collection[EffectStatus], limit: int, keys: Collection[tuple[str, str]] | None
) -> list[str]:
    """``purge``'s statuses as stored, checked the same way by both stores: empty when there is nothing to
    delete (no status, no room, an empty key list); more keys than ``limit`` is refused."""
    values = stored_values(EffectStatus, statuses, "statuses")
    if not values or limit <= 0 or (keys is not None and not keys):
        return []
    if keys is not None and len(keys) > limit:
        raise InvalidInput(f"{len(keys)} keys to purge, more than the limit {limit}")
    return values


def from_row(model: type[M], row: Mapping[str, Any], codec: Codec) -> M:
    """Validate a fetched row back into ``model``; columns the model lacks (serial ids) are dropped."""
    data: dict[str, Any] = {}
    known = model.model_fields  # a class property since pydantic 2.10: read once, not per column
    for column, value in row.items():
        field = "tenant" if column == "tenant_id" else column
        if field not in known:
            continue
        if value is not None and field in TIME_FIELDS:
            data[field] = codec.time_in(value)
        elif value is not None and field in JSON_FIELDS:
            data[field] = codec.json_in(value)
        elif value is not None and field in KEY_FIELDS:
            data[field] = IntentKey.stored(value)  # as written: an earlier release's key stays readable
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
    audited: bool = True,
) -> tuple[EffectRecord, tuple[str, ...], AuditEntry | None]:
    """Validate a transition before any SQL: the new record, the fields it sets, and its audit entry (None
    for a write the record alone describes, see :meth:`Store.transition`)."""
    check_transition(record.status, to, record.intent_key)
    check_tenant(record.tenant)
    changes = dict(changes or {})
    unknown = [name for name in changes if name not in _RECORD_FIELD_SET]
    if unknown:
        raise InvalidInput(f"changes {unknown!r} are not EffectRecord fields")
    reserved = sorted(RESERVED_CHANGES.intersection(changes))
    if reserved:
        raise InvalidInput(f"changes {reserved!r} are set by the transition itself")
    now = utc(now, "now")
    try:
        new = EffectRecord.model_validate(
            {
                **record.__dict__,
                **changes,
                "status": to,
                "version": record.version + 1,
                "updated_at": now,
                "updated_by": actor,
            }
        )
        audit = None
        if audited:
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
    return new, ("status", "version", "updated_at", "updated_by", *changes), audit


def check_key_prefix(prefix: object) -> str:
    """A key prefix to list by, checked the same way by both stores before any read."""
    if not isinstance(prefix, str) or not prefix or len(prefix) > MAX_KEY_LENGTH:
        raise InvalidInput(f"a key prefix must be a non-empty str of at most {MAX_KEY_LENGTH} characters")
    return check_storable(prefix, "the key prefix")


MAX_CURSOR_NAME = 200  # characters; a name says which reconciler, it is not data


def check_cursor_name(name: object) -> str:
    """A reconciler cursor's name, checked the same way by both stores before any read or write."""
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_CURSOR_NAME:
        raise InvalidInput(f"a reconciler cursor name must be a non-empty str of at most {MAX_CURSOR_NAME} characters")
    return check_storable(name, "the reconciler cursor name")


def cursor_values(position: tuple[datetime, str, str], codec: Codec) -> tuple[Any, str, str]:
    """A list position (updated_at, tenant, intent key) as bind values, checked like a record's."""
    given: object = position  # as passed at run time, whatever the annotation promises
    if not isinstance(given, tuple) or len(given) != 3 or not isinstance(given[0], datetime):
        raise InvalidInput(f"a list position must be a tuple (updated_at, tenant, intent key), got {given!r:.80}")
    at, tenant, intent_key = position
    key = lookup_text(intent_key, "a cursor position's intent key")
    return codec.time_out(utc(at, "the cursor position's updated_at")), check_tenant(tenant), key


def stale(record: EffectRecord, found: EffectRecord | None) -> StaleRecord:
    """Name what the caller expected and what is stored now, so a lost race is easy to read in logs."""
    there = f"{found.status.value} v{found.version}" if found else "no record"
    return StaleRecord(
        f"intent {record.intent_key!r} (tenant {record.tenant!r}) expected "
        f"{record.status.value} v{record.version}, found {there}"
    )
