"""Checked facts about Stripe v1 writes, as data plus small pure functions: no SDK calls here.

The operation name is derived from the SDK's own request shape (``post /v1/payment_intents/pi_1/confirm`` is
``payment_intents.confirm``, ``delete /v1/subscriptions/sub_1`` is ``subscriptions.delete``), so every write
(POST or DELETE) is covered without a per-method wrapper.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from datetime import timedelta
from functools import lru_cache
from typing import Any

from safe_effects import (
    DEFAULT_TENANT,
    ConcurrentSameKey,
    IdempotencyContract,
    IntentKey,
    InvalidInput,
    LookupKind,
    LookupMethod,
    ParameterMatching,
    ProviderContract,
)

PROVIDER = "stripe"
IDEMPOTENCY_HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 255
KEY_RETENTION = timedelta(hours=24)
# Stripe's error code for a key that already holds a request with other params (400, IdempotencyError): the
# ledger records it unknown under this code, and the contract never replays such a key (see mismatch_codes)
KEY_HELD_BY_ANOTHER_REQUEST = "idempotency_error"
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 30.0

METADATA_INTENT = "safe_effects_intent"  # Stripe metadata keys are at most 40 characters
METADATA_TENANT = "safe_effects_tenant"
MAX_METADATA_VALUE = 500
MAX_METADATA_KEYS = 50  # per object (docs.stripe.com/api/metadata); the wrapper's two keys count too
MAX_METADATA_KEY_NAME = 40

# Resources the Search API covers (docs.stripe.com/search#supported-query-fields-for-each-resource).
SEARCHABLE = frozenset({"payment_intents", "charges", "customers", "invoices", "prices", "products", "subscriptions"})
# Creates that are not searchable, by the list that finds them (consistent, no search lag): the list's path and
# the filters of its ``*ListParams`` in stripe-python 16 that narrow it to the write's parent, read from the
# record's summary where the call gave them. Every such list is also bounded by ``created`` around the sends.
LISTED_BY: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "refunds.create": ("/v1/refunds", ("payment_intent", "charge")),
    "transfers.create": ("/v1/transfers", ("destination", "transfer_group")),
    "payouts.create": ("/v1/payouts", ("destination",)),  # no parent: the time bound does the narrowing
    "credit_notes.create": ("/v1/credit_notes", ("invoice",)),
    "invoiceitems.create": ("/v1/invoiceitems", ("invoice", "customer")),
    "setup_intents.create": ("/v1/setup_intents", ("customer",)),
    "checkout.sessions": ("/v1/checkout/sessions", ("customer",)),  # operation_for's name for the create
}
# Creates whose params accept ``metadata``: the wrapper stamps the intent there, which a lookup reads after 24 h,
# a search where the resource is searchable, else a list (docs/providers/stripe.md lists which writes a lookup
# settles).
STAMPED_CREATES = frozenset({*(f"{resource}.create" for resource in SEARCHABLE), *LISTED_BY})
# An action on an existing object took effect when the retrieved object shows one of these statuses.
ACTION_DONE: Mapping[str, frozenset[str]] = {
    "payment_intents.confirm": frozenset({"succeeded", "processing", "requires_capture"}),
    "payment_intents.capture": frozenset({"succeeded"}),
    "payment_intents.cancel": frozenset({"canceled"}),
    "invoices.pay": frozenset({"paid"}),
    "invoices.finalize": frozenset({"open", "paid", "uncollectible", "void"}),  # any status but draft
    "setup_intents.confirm": frozenset({"succeeded", "processing"}),
    "subscriptions.delete": frozenset({"canceled"}),
}
# The methods that write: Stripe documents idempotency keys for POST only ("don't send idempotency keys in GET
# and DELETE requests because it has no effect"), but a DELETE can still move money or send something
# (``subscriptions.cancel`` with ``invoice_now``/``prorate`` invoices and charges at once; deleting a
# subscription item with ``proration_behavior=always_invoice`` too), so both go through the ledger.
WRITE_METHODS = frozenset({"post", "delete"})
# POSTs that change nothing, passed straight through like reads: Stripe's "create a preview invoice" computes an
# invoice and stores nothing (no key needed, no id to read back; the SDK's only read-only POST)
READ_ONLY_POSTS = frozenset({"/v1/invoices/create_preview"})


def writes(method: str, url: str) -> bool:
    """Whether a request can change something at Stripe, so it goes through the ledger."""
    verb = method.lower()
    return verb in WRITE_METHODS and not (verb == "post" and url.split("?", 1)[0] in READ_ONLY_POSTS)


# The request options that pick the account a call acts on. They are part of the request digest and of the
# record's summary (ids, never secrets), so the ledger answer and every lookup read the same account.
SCOPE_OPTIONS = ("stripe_account", "stripe_context")

SOURCES = (
    "https://docs.stripe.com/idempotency",
    "https://docs.stripe.com/api/idempotent_requests",
    "https://docs.stripe.com/error-handling",
    "https://docs.stripe.com/error-low-level",
    "https://docs.stripe.com/rate-limits",
    "https://docs.stripe.com/search",
    "https://docs.stripe.com/api/metadata",
    "https://docs.stripe.com/api/errors",
    "https://github.com/stripe/stripe-python/blob/master/stripe/_http_client.py",
)

KEY_REPLAY = LookupMethod(
    kind=LookupKind.KEY_REPLAY,
    description="resend the same request with the same Idempotency-Key: Stripe replays the saved result "
    "(Idempotent-Replayed: true) or runs it once if the first attempt never started executing",
    proves_absence=False,
)
SEARCH = LookupMethod(
    kind=LookupKind.SEARCH,
    description=f"Search API on metadata['{METADATA_INTENT}'] (and the tenant), written by the wrapper",
    lag=timedelta(hours=1),  # usually under a minute; up to an hour during incidents
    rate_limit_per_minute=20 * 60,
    proves_absence=False,
)
RETRIEVE = LookupMethod(
    kind=LookupKind.RETRIEVE,
    description="retrieve the object named in the request path and read its status, or list a create's "
    "parent's objects and match the stamped metadata: consistent reads, no lag",
    proves_absence=False,
)

EVENTS = LookupMethod(
    kind=LookupKind.EVENT_STREAM,
    description="list /v1/events of the object's '.created' (a create) or '.updated' (an update) type made while "
    "the record was sent, and match the event's request.idempotency_key, the key the write went out with (and, "
    "for an update, the object's id); a created object is then retrieved for its state. Stripe lists the last "
    "30 days; consistent, unlike the search",
    # Stripe allows 100 reads a second (25 in test mode); one lookup reads up to EVENT_PAGES (10) pages
    rate_limit_per_minute=10 * 60,
    proves_absence=False,
    verified=False,  # documented (the Event object's request field), not observed against Stripe
)
# event names that are not the object's type: an update of /v1/subscriptions/sub_1 makes customer.subscription.updated
_EVENT_NAMES = {"subscriptions": "customer.subscription"}
# the event each kind of write makes for the object it writes
EVENT_CHANGES: Mapping[str, str] = {"create": "created", "update": "updated"}
# writes Stripe logs under other names than <object>.created / .updated, or not at all: a charge is logged by its
# outcome; a PaymentIntent's or SetupIntent's update, by nothing (docs.stripe.com/api/events/types)
_MADE_EVENTS: Mapping[tuple[str, str], tuple[str, ...]] = {
    ("charges", "create"): ("charge.succeeded", "charge.failed", "charge.pending"),
    ("payment_intents", "update"): (),
    ("setup_intents", "update"): (),
}

BASE_CONTRACT = ProviderContract(
    provider=PROVIDER,
    idempotency=IdempotencyContract(
        supported=True,
        header=IDEMPOTENCY_HEADER,
        max_key_length=MAX_KEY_LENGTH,
        retention=KEY_RETENTION,
        parameter_matching=ParameterMatching.STRICT,
        concurrent_same_key=ConcurrentSameKey.CONFLICT,
        mismatch_codes=frozenset({KEY_HELD_BY_ANOTHER_REQUEST}),
    ),
    lookups=(KEY_REPLAY, SEARCH, RETRIEVE),
    normal_response_window=timedelta(seconds=READ_TIMEOUT),
    forced_sdk_settings={
        "max_network_retries": "0",
        "http_client": "stripe.RequestsClient",
        "connect_timeout_seconds": str(CONNECT_TIMEOUT),
        "read_timeout_seconds": str(READ_TIMEOUT),
    },
    sources=SOURCES,
    unverified=(
        "the message text of the 409 idempotency_key_in_use error",
        "search lag bounds (documented as usually under a minute, up to an hour in incidents)",
        "that a 500 saved for a key is replayed as the same 500 (documented, not observed here)",
    ),
)


NO_KEYS = IdempotencyContract(supported=False)


@lru_cache(maxsize=1024)  # every write asks; the SDK has a few hundred operations, each contract frozen
def contract_for(operation: str) -> ProviderContract:
    """The Stripe contract narrowed to the lookups that can answer for ``operation``.

    A DELETE (``*.delete``) has no key dedupe at Stripe: no same-key replay, so a lost answer stays unknown
    until a retrieve shows the after-state or an operator settles it.
    """
    resource, _, action = operation.rpartition(".")
    usable = [] if action == "delete" else [KEY_REPLAY]
    if action == "create" and resource in SEARCHABLE:
        usable.append(SEARCH)
    if operation in LISTED_BY or operation in ACTION_DONE:
        usable.append(RETRIEVE)
    elif logs_events(resource, action):
        usable.append(EVENTS)  # a search that lags is backed by the create's event; an update has no other lookup
    update: dict[str, Any] = {"operation": operation, "lookups": tuple(usable)}
    if action == "delete":
        update["idempotency"] = NO_KEYS
    return BASE_CONTRACT.model_copy(update=update)


# Collections whose objects may carry an id the caller chose, letters only ("summer", "gold_plan"): the segment
# after one is that id whatever it looks like (none of them has an action named on the collection)
CALLER_NAMED = frozenset({"coupons", "plans", "products"})


def _is_id(segment: str) -> bool:
    """Stripe ids (``pi_3MtwBw...``) carry digits or capitals; resource and action names never do."""
    return any(char.isdigit() or char.isupper() for char in segment)


def _id_flags(path: str) -> list[tuple[str, bool]]:
    """The segments of ``path`` after its version, each with whether it is an object's id."""
    flags: list[tuple[str, bool]] = []
    for segment in (s for s in path.split("?", 1)[0].split("/")[2:] if s):
        after_caller_named = bool(flags) and not flags[-1][1] and flags[-1][0] in CALLER_NAMED
        flags.append((segment, after_caller_named or _is_id(segment)))
    return flags


def operation_for(path: str, method: str = "post") -> str:
    """``/v1/payment_intents`` → ``payment_intents.create``, ``.../pi_1`` → ``.update``, ``.../pi_1/confirm``
    → ``payment_intents.confirm``; a DELETE of ``/v1/subscriptions/sub_1`` → ``subscriptions.delete``; ids are
    dropped so one name covers every object."""
    segments = _id_flags(path)
    names = [segment for segment, is_id in segments if not is_id]
    if method.lower() == "delete":
        return ".".join([*names, "delete"])
    if segments and segments[-1][1]:
        return ".".join([*names, "update"])
    if len(segments) == 1:
        return f"{segments[0][0]}.create"
    return ".".join(names)


def deleted_object_type(path: str) -> str:
    """The ``object`` of what a DELETE of ``path`` removed: ``/v1/coupons/co_1`` → ``coupon``,
    ``/v1/customers/cus_1/discount`` → ``discount`` (the last resource name, singular)."""
    names = [segment for segment, is_id in _id_flags(path) if not is_id]
    last = names[-1] if names else "object"
    return last[:-1] if last.endswith("s") else last


def retrieve_paths(path: str, result_id: str) -> list[str]:
    """Where to GET the object a POST to ``path`` produced, in the order to try: the path up to its id, or the
    path + id (a create, a sub-collection: ``/v1/transfers/tr_1/reversals/trr_1``); after an action on an
    object, also the acted-on object's collection + id, for an action that makes another object of the same
    kind (a payout's ``/reverse`` makes a payout: ``/v1/payouts/po_2``)."""
    segments = path.split("?", 1)[0].rstrip("/").split("/")
    if result_id in segments:
        return ["/".join(segments[: segments.index(result_id) + 1])]
    paths = ["/".join([*segments, result_id])]
    acted_on = [i for i, segment in enumerate(segments[:-1]) if i > 1 and _is_id(segment)]
    if acted_on:
        paths.append("/".join([*segments[: acted_on[0]], result_id]))
    return paths


# The param that shapes an answer (which fields come expanded), by API version: a read-back asks for the same shape.
ANSWER_SHAPE = {"v1": "expand", "v2": "include"}
# Headers a caller must not set per call: the ledger's key and the account are request options it records.
RESERVED_HEADERS: Mapping[str, str] = {
    "idempotency-key": "options={'idempotency_key': <intent key>} (or client.for_intent(...))",
    "stripe-account": "options={'stripe_account': ...}",
    "stripe-context": "options={'stripe_context': ...}",
}


def read_params(path: str, params: Mapping[str, Any]) -> dict[str, Any] | None:
    """The caller's ``expand`` (v1) or ``include`` (v2), for a GET of what a write to ``path`` produced, so
    the ledger's answer has the shape the write's answer had."""
    version = path.lstrip("/").split("/", 1)[0]
    name = ANSWER_SHAPE.get(version)
    if name is None or not params.get(name):
        return None
    return {name: params[name]}


# Writes whose answer no GET serves (no id, or no retrieve endpoint): a repeated call is answered by Stripe's
# replay of the same key. None moves money: were the key forgotten, the replay would act again.
NO_READ_BACK = frozenset(
    {
        "account_links.create",
        "account_sessions.create",
        "accounts.login_links",
        "billing.meter_events",
        "billing_portal.sessions",
        "customer_sessions.create",
        "deauthorize.create",  # POST /oauth/deauthorize
        "ephemeral_keys.create",
        "terminal.connection_tokens",
        "token.create",  # POST /oauth/token
    }
)


def reserved_header(names: Iterable[object]) -> str | None:
    """The first header name that would bypass the ledger (its key, or an unrecorded account), or None.

    Compared as HTTP does: case-insensitive, bytes as Latin-1, surrounding whitespace ignored.
    """
    for name in names:
        text = name.decode("latin-1") if isinstance(name, bytes) else str(name)
        if text.strip().lower() in RESERVED_HEADERS:
            return text
    return None


def provider_key(tenant: str, intent_key: IntentKey) -> str:
    """The Idempotency-Key: the intent itself for the default tenant, tenant-qualified otherwise (≤ 255).

    No two (tenant, intent) pairs share a key. A qualified key ``<intent>@<tenant>`` never ends in ``:vN``,
    so it is never some default-tenant intent's own key (``|`` and ``@`` may occur inside an intent key,
    which is why the tenant is not a prefix); tenant ids cannot contain ``@``, so the split at the last
    ``@`` is unambiguous. Too long, it becomes ``h|<sha256>``: no ``:vN`` and no ``@`` either.
    """
    if tenant == DEFAULT_TENANT:
        return str(intent_key)
    qualified = f"{intent_key}@{tenant}"
    if len(qualified) <= MAX_KEY_LENGTH:
        return qualified
    return "h|" + hashlib.sha256(qualified.encode()).hexdigest()


def stamp_metadata(operation: str, params: Mapping[str, Any], intent_key: str, tenant: str) -> dict[str, Any]:
    """The params actually sent: the caller's, plus the intent and tenant in ``metadata`` on stamped creates.

    A create whose own metadata leaves no room for the two keys is refused here, before the ledger records
    anything: Stripe would refuse it anyway, and a create without them could not be found by search later.
    So is any write's metadata beyond Stripe's limits: refused by Stripe, the intent would end rejected and
    the corrected call need a new key.
    """
    _check_metadata(operation, params.get("metadata"))
    sent = dict(params)
    if operation in STAMPED_CREATES and len(intent_key) <= MAX_METADATA_VALUE:
        existing = sent.get("metadata")
        metadata = dict(existing) if isinstance(existing, Mapping) else {}
        stamped = {**metadata, METADATA_INTENT: intent_key, METADATA_TENANT: tenant}
        if len(stamped) > MAX_METADATA_KEYS:
            raise InvalidInput(
                f"{operation}: metadata has {len(metadata)} keys of the caller's; Stripe allows "
                f"{MAX_METADATA_KEYS} per object and stripe_safe adds {METADATA_INTENT!r} and {METADATA_TENANT!r} "
                f"(so a lookup can find the object later): keep the caller's to {MAX_METADATA_KEYS - 2} or fewer"
            )
        sent["metadata"] = stamped
    return sent


def _check_metadata(operation: str, metadata: object) -> None:
    """Refuse metadata Stripe refuses: more than 50 keys, a key name over 40 characters, a value over 500."""
    if not isinstance(metadata, Mapping):
        return
    if len(metadata) > MAX_METADATA_KEYS:
        raise InvalidInput(f"{operation}: metadata has {len(metadata)} keys; Stripe allows {MAX_METADATA_KEYS}")
    for name, value in metadata.items():
        if len(str(name)) > MAX_METADATA_KEY_NAME:
            raise InvalidInput(
                f"{operation}: a metadata key is {len(str(name))} characters ({str(name)[:MAX_METADATA_KEY_NAME]!r}"
                f" ...); Stripe allows {MAX_METADATA_KEY_NAME}"
            )
        if isinstance(value, str) and len(value) > MAX_METADATA_VALUE:
            raise InvalidInput(
                f"{operation}: metadata[{name!r}] is {len(value)} characters; Stripe allows {MAX_METADATA_VALUE}"
            )


def _quoted(value: str) -> str:
    """A Search query string literal: single quotes, with quotes and backslashes escaped."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def search_query(intent_key: str, tenant: str) -> str:
    """The Search API query that finds the object a stamped create produced."""
    return f"metadata['{METADATA_INTENT}']:{_quoted(intent_key)} AND metadata['{METADATA_TENANT}']:{_quoted(tenant)}"


# amounts for the operator's list and the two-person rule; customer and payment method ids, never card data or
# emails; the parent ids a list lookup filters by (LISTED_BY)
SUMMARY_FIELDS = (
    "amount",
    "currency",
    "customer",
    "payment_method",  # a confirm's lookup tells its own decline from an earlier attempt's by it
    "payment_intent",
    "charge",
    "invoice",
    "destination",
    "transfer_group",
)
# writes that can move money even when the call names no amount (a confirm, a capture or refund of the whole
# amount, paying an invoice, a subscription's invoice): their summary says "unknown", which the two-person rule
# treats as large. When in doubt a write is listed: an operator's second look costs less than a missed one
MOVES_MONEY = frozenset(
    {
        "payment_intents.create",
        "payment_intents.confirm",
        "payment_intents.capture",
        "payment_intents.apply_customer_balance",  # pays the intent from the customer's cash balance
        "charges.create",
        "charges.capture",
        "refunds.create",
        "invoices.create",  # auto_advance with charge_automatically: finalized and collected about an hour on
        "invoices.pay",
        "invoices.finalize",  # charge_automatically: Stripe collects a finalized invoice by itself
        "subscriptions.create",  # the first invoice is collected at once (unless a trial)
        "subscriptions.update",  # proration_behavior=always_invoice, a new billing cycle
        "subscriptions.delete",  # invoice_now / prorate: a final invoice, collected at once
        "subscriptions.resume",  # billing_cycle_anchor=now: an invoice, collected at once
        "subscription_items.create",  # proration_behavior=always_invoice, as on update and delete
        "subscription_items.update",
        "subscription_items.delete",
        "subscription_schedules.create",  # a schedule starting now starts a subscription
        "quotes.accept",  # makes the subscription or invoice the quote describes
        "credit_notes.create",  # refund_amount, or lines, may refund at once
        "application_fees.refunds",  # no amount: the whole fee
        "transfers.reversals",  # no amount: the whole transfer
        "payouts.reverse",
        "terminal.readers.process_payment_intent",
        "terminal.readers.refund_payment",
        "issuing.authorizations.approve",  # a card spend goes through
    }
)
UNKNOWN_AMOUNT = "unknown"


def summary_for(
    path: str, params: Mapping[str, Any], method: str = "post", scope: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Operator-facing facts, ids and amounts only: the path, amount and currency, the parent a list lookup
    filters by, and the account the call acted on (``stripe_account`` / ``stripe_context``, see :func:`scope_of`)."""
    summary = {"path": path.split("?", 1)[0], **(scope or {})}
    if method.lower() != "post":
        summary["method"] = method.lower()
    for name in SUMMARY_FIELDS:
        value = params.get(name)
        if isinstance(value, str | int) and not isinstance(value, bool):
            summary[name] = str(value)
    if params.get("confirm") in (True, "true"):  # a create that pays: found waiting for a method, it did not
        summary["confirm"] = "true"
    captured = params.get("amount_to_capture")
    if "amount" not in summary and isinstance(captured, int) and not isinstance(captured, bool):
        summary["amount"] = str(captured)
    if "amount" not in summary and operation_for(summary["path"], method) in MOVES_MONEY:
        summary["amount"] = UNKNOWN_AMOUNT
    return summary


def scope_of(*layers: Mapping[str, Any] | None) -> dict[str, str]:
    """The effective ``stripe_account`` / ``stripe_context``: from the first layer (per-call options, then the
    client's) that sets each; a ``StripeContext`` as its header string. Unset ones are left out, so a
    platform call's digest and summary are what they were before these were recorded."""
    scope: dict[str, str] = {}
    for name in SCOPE_OPTIONS:
        value = next((layer.get(name) for layer in layers if layer and layer.get(name)), None)
        if value is not None and str(value):
            scope[name] = str(value)
    return scope


def matches_intent(obj: Mapping[str, Any], intent_key: str, tenant: str) -> bool:
    """Did the wrapper stamp ``obj`` for this intent and tenant?"""
    metadata = obj.get("metadata") or {}
    return bool(metadata.get(METADATA_INTENT) == intent_key and metadata.get(METADATA_TENANT) == tenant)


def event_types(resource: str, action: str) -> tuple[str, ...] | None:
    """The events a create or update of ``resource`` makes for its object (``customers``, ``update`` →
    ``customer.updated``; a charge's create → ``charge.succeeded`` or ``.failed`` or ``.pending``; none for a
    PaymentIntent's update); None for a namespaced resource (``issuing.cards``), whose event names follow no one
    rule, so its events are read unfiltered and matched by the ``.created`` / ``.updated`` suffix."""
    if (resource, action) in _MADE_EVENTS:
        return _MADE_EVENTS[resource, action]
    if "." in resource:
        return None
    return (f"{_EVENT_NAMES.get(resource, resource.removesuffix('s'))}.{EVENT_CHANGES[action]}",)


def logs_events(resource: str, action: str) -> bool:
    """Whether Stripe logs an event for this create or update of ``resource`` that a lookup can find."""
    return action in EVENT_CHANGES and event_types(resource, action) != ()


def made_by(
    event: Mapping[str, Any], provider_key: str | None, resource: str, action: str, object_id: str | None = None
) -> bool:
    """Is ``event`` one that the ``action`` (create, update) of ``resource`` sent with ``provider_key`` made, of
    ``object_id`` when one is given? Stripe names the API request that caused an event in its ``request``, with
    the idempotency key that request carried."""
    request = event.get("request")
    data = event.get("data")
    written = data.get("object") if isinstance(data, Mapping) else None
    kind = str(event.get("type", ""))
    expected = event_types(resource, action)
    return (
        provider_key is not None
        and isinstance(request, Mapping)
        and request.get("idempotency_key") == provider_key
        and isinstance(written, Mapping)
        and isinstance(written.get("id"), str)
        and object_id in (None, written["id"])
        and (kind in expected if expected is not None else kind.endswith(f".{EVENT_CHANGES[action]}"))
    )


# The writes that pay a PaymentIntent. One found cancelled with nothing received charged nothing, and never will:
# a cancelled PaymentIntent cannot be paid (a cancel releases an authorisation), whatever its decline still shows
PAYS_INTENT = frozenset({"payment_intents.create", "payment_intents.confirm", "payment_intents.capture"})


def _cancelled_unpaid(obj: Mapping[str, Any]) -> bool:
    return obj.get("status") == "canceled" and obj.get("amount_received") == 0


def declined_by(obj: Mapping[str, Any], summary: Mapping[str, str]) -> bool:
    """Whether a declined PaymentIntent's decline can be this confirm's: the call named no payment method, or
    the one the decline names. A confirm with another card, looked up while Stripe still runs it, finds the
    earlier attempt's ``last_payment_error``; taken for this call's refusal, the intent was rejected while the
    new card was charged, and charged again under a new key. A cancelled one runs no confirm any more."""
    sent = summary.get("payment_method")
    error = obj.get("last_payment_error") or {}
    method = error.get("payment_method") if isinstance(error, Mapping) else None
    named = method.get("id") if isinstance(method, Mapping) else method
    return _cancelled_unpaid(obj) or sent is None or named is None or named == sent


def declined(obj: Mapping[str, Any], operation: str, summary: Mapping[str, str]) -> bool:
    """An object a payment ``operation`` left behind with no money moved: it exists, but nothing was charged. A
    PaymentIntent a create-and-confirm left waiting for another payment method (with its decline, or without:
    Stripe clears ``last_payment_error`` on any update), one cancelled since with nothing received, or a
    Charge that failed (Stripe keeps a declined ``charges.create`` as a Charge with status ``failed``). A create
    that did not confirm leaves every PaymentIntent waiting for a payment method: that is no decline."""
    if obj.get("object") == "charge":
        return obj.get("status") == "failed"
    if obj.get("object") != "payment_intent":
        return False
    if operation in PAYS_INTENT and _cancelled_unpaid(obj):
        return True
    if obj.get("status") != "requires_payment_method":
        return False
    confirmed_by_create = operation == "payment_intents.create" and summary.get("confirm") == "true"
    return confirmed_by_create or bool(obj.get("last_payment_error"))
