"""``StripeAdapter``: the ``safe_effects.ProviderAdapter`` for Stripe, over a small send/read transport."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from stripe import InvalidRequestError, StripeError, StripeObject
from stripe._base_address import BaseAddress
from stripe._request_options import RequestOptions

from safe_effects import (
    DEFAULT_TENANT,
    DeployCheck,
    EffectRecord,
    EffectRequest,
    IntentKey,
    LookupResult,
    LookupStatus,
    ProviderContract,
    Verdict,
    bytes_digest,
    request_digest,
)

from ._classify import classify
from ._contract import (
    ACTION_DONE,
    KEY_HELD_BY_ANOTHER_REQUEST,
    LISTED_BY,
    PAYS_INTENT,
    PROVIDER,
    SEARCHABLE,
    contract_for,
    declined,
    declined_by,
    event_types,
    logs_events,
    made_by,
    matches_intent,
    provider_key,
    search_query,
)


@dataclass(frozen=True, slots=True)
class StripeCall:
    """One SDK write (POST or DELETE) as the service built it; ``params`` are what is sent (the caller's,
    metadata stamped)."""

    method: str
    url: str
    params: Mapping[str, Any] = field(repr=False)  # card data, emails: not for a log line
    options: RequestOptions = field(repr=False)  # a per-call api_key
    base_address: BaseAddress
    usage: list[str] | None


class StripeTransport(Protocol):
    """What the adapter needs from the SDK: one write with a given key, and plain reads.

    ``options`` of a read carry the account it reads (``stripe_account`` / ``stripe_context``, and for the
    ledger's answer to a caller also that call's ``api_key`` and ``stripe_version``).
    """

    def send(self, call: StripeCall, idempotency_key: str) -> StripeObject: ...

    def read(
        self, url: str, params: Mapping[str, Any] | None = None, options: RequestOptions | None = None
    ) -> StripeObject: ...


def scope_options(scope: Mapping[str, str]) -> RequestOptions:
    """Request options naming the account in ``scope`` (a record summary or :func:`scope_of`'s answer)."""
    options: RequestOptions = {}
    if scope.get("stripe_account"):
        options["stripe_account"] = scope["stripe_account"]
    if scope.get("stripe_context"):
        options["stripe_context"] = scope["stripe_context"]
    return options


# how far Stripe's clock may run behind the ledger's and an object made for a record still count as its own;
# an object of a purged record is older than the purge floor (120 days by default)
_CLOCK_SKEW_SECONDS = 3600


def _stamped_for(objects: list[dict[str, Any]], record: EffectRecord) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The objects stamped for ``record``'s intent and made after it was, and what a miss should report: a settled
    record may be purged and its key recorded again, and Stripe keeps (and finds) the purged one's objects."""
    stamped = [o for o in objects if matches_intent(o, record.intent_key, record.tenant)]
    since = record.created_at.timestamp() - _CLOCK_SKEW_SECONDS
    mine = [o for o in stamped if not isinstance(o.get("created"), int) or o["created"] >= since]
    older = [o["id"] for o in stamped if o not in mine]
    return mine, {"hits": 0, "older_than_record": older} if older else {"hits": 0}


def _sent_between(record: EffectRecord) -> dict[str, int]:
    """The ``created`` range (Unix seconds) of an object one of the record's sends made: from the first send to the
    latest, widened by the clock skew allowed; a list filtered by it leaves out a purged record's objects too."""
    first = record.first_dispatched_at or record.created_at
    latest = record.dispatched_at or first
    return {"gte": int(first.timestamp()) - _CLOCK_SKEW_SECONDS, "lte": int(latest.timestamp()) + _CLOCK_SKEW_SECONDS}


@dataclass(frozen=True, slots=True)
class _DeployRead:
    """A read a deploy check makes: one the reconciler makes after the key window, for one kind of lost write."""

    url: str
    params: Mapping[str, Any]
    action: str  # what the API key must be allowed
    lost: str  # the lost write it settles
    how: str


_DEPLOY_READS = (
    _DeployRead(
        "/v1/payment_intents/search",
        {"query": search_query("safe-effects:deploy:check:v1", DEFAULT_TENANT), "limit": 1},
        "search payment intents",
        "a create lost past the 24 h key window",
        "by its stamped metadata",
    ),
    _DeployRead(
        "/v1/events",
        {"limit": 1},
        "list events",
        "an update, or a create no search finds, lost past the 24 h key window",
        "by its event",
    ),
)

# pages of 100 events one events lookup reads, newest first: past them a miss says more were left unread
EVENT_PAGES = 10


def _found(obj: Mapping[str, Any], record: EffectRecord, method: str, **detail: Any) -> LookupResult:
    """FOUND, or REFUSED for what ``record``'s payment left unpaid: a declined or cancelled PaymentIntent, a
    failed Charge (it exists, nothing was charged)."""
    status = LookupStatus.REFUSED if declined(obj, record.operation, record.summary) else LookupStatus.FOUND
    return LookupResult(
        status,
        method,
        provider_result_id=obj["id"],
        response_digest=request_digest(obj),
        evidence=f"stripe:{obj.get('object')}/{obj['id']}",
        detail=detail,
    )


class StripeAdapter:
    """Contract, classifier and lookups for Stripe v1 writes; the transport does the HTTP."""

    provider = PROVIDER

    def __init__(self, transport: StripeTransport) -> None:
        self._transport = transport

    def contract_for(self, operation: str) -> ProviderContract:
        return contract_for(operation)

    def provider_key(self, tenant: str, intent_key: IntentKey) -> str:
        return provider_key(tenant, intent_key)

    def refusal(self, request: EffectRequest) -> str | None:
        """Why this adapter's transport sends nothing (the reconciler's lookup-only one), before any record."""
        reason = getattr(self._transport, "refusal_reason", None)
        return reason if isinstance(reason, str) else None

    def dispatch(self, request: EffectRequest, provider_key: str) -> StripeObject:
        call: StripeCall = request.payload
        return self._transport.send(call, provider_key)

    def classify(self, error: BaseException) -> Verdict:
        return classify(error)

    def result_id(self, response: StripeObject) -> str | None:
        value = response.to_dict(recursive=False).get("id")
        return value if isinstance(value, str) else None

    def response_digest(self, response: StripeObject) -> str:
        """SHA-256 of the body as Stripe sent it (a replay sends the saved body): no re-encoding of the object."""
        raw = response.last_response
        if raw is None:
            return request_digest(response.to_dict(for_json=True))
        return bytes_digest(raw.body)

    def deploy_check(self, env: Mapping[str, str]) -> DeployCheck:
        """Can this API key make the reads that settle a lost write after the key window? Reads only."""
        checked, problems = [], []
        for read in _DEPLOY_READS:
            try:
                self._transport.read(read.url, read.params)
            except StripeError as refused:
                why = f"{type(refused).__name__}: {refused.user_message or refused}"
                problems.append(f"the API key cannot {read.action} ({why}): {read.lost} waits for an operator")
            else:
                checked.append(f"the API key can {read.action}: {read.lost} is found {read.how}")
        return DeployCheck(PROVIDER, checked=tuple(checked), problems=tuple(problems))

    def _read(self, record: EffectRecord, url: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """A read on the account the record's write acted on, as the plain JSON-shaped dicts the contract's
        small functions take."""
        return self._transport.read(url, params, scope_options(record.summary)).to_dict(for_json=True)

    def lookup(self, record: EffectRecord) -> LookupResult:
        """Search (stamped creates, backed by their events while the search lags), list by parent (the other
        stamped creates), retrieve (actions on an object) or read the events (other creates, updates)."""
        resource, _, action = record.operation.rpartition(".")
        if action == "create" and resource in SEARCHABLE:
            searched = self._search(resource, record)
            if searched.status is not LookupStatus.INCONCLUSIVE:
                return searched
            evented = self._events(record, resource, action)
            if evented.status is not LookupStatus.INCONCLUSIVE:
                return evented
            return LookupResult(LookupStatus.INCONCLUSIVE, "search", detail={**searched.detail, **evented.detail})
        if record.operation in LISTED_BY:
            return self._list(record, *LISTED_BY[record.operation])
        if record.operation in ACTION_DONE:
            return self._retrieve(record, ACTION_DONE[record.operation])
        if logs_events(resource, action):
            return self._events(record, resource, action)
        return LookupResult(LookupStatus.INCONCLUSIVE, "none", detail={"reason": f"no lookup for {record.operation}"})

    def _search(self, resource: str, record: EffectRecord) -> LookupResult:
        """Search lags (usually < 1 min, up to an hour): a miss proves nothing."""
        query = search_query(record.intent_key, record.tenant)
        found = self._read(record, f"/v1/{resource}/search", {"query": query})["data"]
        # the query's ':' match is Stripe's to define (case, tokenising): only an exact stamp counts
        mine, missed = _stamped_for(found, record)
        hits = sorted(mine, key=lambda o: (o.get("created", 0), o["id"]))
        if not hits:
            return LookupResult(LookupStatus.INCONCLUSIVE, "search", detail={"query": query, **missed})
        return _found(hits[0], record, "search", query=query, hits=[h["id"] for h in hits])

    def _list(self, record: EffectRecord, path: str, parents: tuple[str, ...]) -> LookupResult:
        """Not searchable: list the parent's objects made while the record was sent (consistent) and match the
        stamped metadata. A miss proves nothing: a busy parent may push the object past one page."""
        filters: dict[str, Any] = {name: record.summary[name] for name in parents if name in record.summary}
        listed = self._read(record, path, {**filters, "created": _sent_between(record), "limit": 100})["data"]
        hits, missed = _stamped_for(listed, record)
        if not hits:
            return LookupResult(LookupStatus.INCONCLUSIVE, "list", detail={**filters, **missed})
        return _found(hits[0], record, "list", hits=[h["id"] for h in hits])

    def _retrieve(self, record: EffectRecord, done: frozenset[str]) -> LookupResult:
        """An action on an existing object happened when the object shows its after-state."""
        path = record.summary["path"]
        object_path = path if record.operation.endswith(".delete") else path.rsplit("/", 1)[0]
        obj = self._read(record, object_path)
        refused = (
            record.operation in PAYS_INTENT
            and declined(obj, record.operation, record.summary)
            and declined_by(obj, record.summary)
        )
        if obj.get("status") in done or refused:
            return _found(obj, record, "retrieve", status=obj.get("status"))
        return LookupResult(
            LookupStatus.INCONCLUSIVE, "retrieve", provider_result_id=obj["id"], detail={"status": obj.get("status")}
        )

    def _events(self, record: EffectRecord, resource: str, action: str) -> LookupResult:
        """A create or an update happened when Stripe logged its object's ``.created`` or ``.updated`` event for
        the request that carried the record's key. No such event proves nothing: an update that changed nothing
        makes none, not every object has events, and Stripe lists only the last 30 days.

        Not read after Stripe's ``idempotency_error``: the key then holds a request with other params (the raw SDK
        before adoption, another version of the wrapper), so its events name that request's object, which may be
        another charge altogether; the intent waits for an operator."""
        if record.last_error_code == KEY_HELD_BY_ANOTHER_REQUEST:
            return LookupResult(LookupStatus.INCONCLUSIVE, "events", detail={"skipped": KEY_HELD_BY_ANOTHER_REQUEST})
        path = record.summary["path"].rstrip("/")
        object_id = path.rsplit("/", 1)[-1] if action == "update" else None
        params: dict[str, Any] = {"created": _sent_between(record), "limit": 100}
        if (kinds := event_types(resource, action)) is not None:
            params["types"] = list(kinds)
        read = 0
        for _ in range(EVENT_PAGES):
            page = self._read(record, "/v1/events", params)
            read += len(page["data"])
            mine = (event for event in page["data"] if made_by(event, record.provider_key, resource, action, object_id))
            hit = next(mine, None)
            if hit is not None:
                return self._made(record, path, hit, action)
            if not page.get("has_more") or not page["data"]:
                return LookupResult(LookupStatus.INCONCLUSIVE, "events", detail={"events_read": read})
            params["starting_after"] = page["data"][-1]["id"]
        return LookupResult(LookupStatus.INCONCLUSIVE, "events", detail={"events_read": read, "more_left": True})

    def _made(self, record: EffectRecord, path: str, event: Mapping[str, Any], action: str) -> LookupResult:
        """What ``event`` says of the record's write: an update happened; a create made an object, which is
        retrieved, since a declined payment's object exists with nothing charged (``_found``). One deleted since
        is judged by the event's own copy."""
        written = event["data"]["object"]
        detail = {"event": event["id"], "type": event["type"]}
        if action == "update":
            return LookupResult(
                LookupStatus.FOUND,
                "events",
                provider_result_id=written["id"],
                response_digest=request_digest(written),
                evidence=f"stripe:event/{event['id']}",
                detail=detail,
            )
        try:
            current = self._read(record, f"{path}/{written['id']}")
        except InvalidRequestError as missing:
            if missing.http_status != 404:
                raise
            current = dict(written)
        return _found(current, record, "events", **detail)
