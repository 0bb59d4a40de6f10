"""A deterministic fake Stripe: the real SDK talks HTTP to it (``base_addresses={"api": fake.url}``).

Rules and state live here and in ``_objects``; the wire, the request log and fault injection live in
:class:`safe_effects.testing.FakeHTTPServer`. Idempotency follows docs.stripe.com/api/idempotent_requests:
a saved result is replayed with ``Idempotent-Replayed: true``; other params → 400 ``idempotency_error``;
a key still executing → 409 ``idempotency_key_in_use``; validation failures and 409s are not saved; keys
are forgotten ``key_retention`` after first use on the injectable clock. Keys are scoped by the API key and the
account the request acts on (``Stripe-Account``, else ``Stripe-Context``); objects by the account alone, as
if every API key were one platform account's.
A DELETE ignores its Idempotency-Key ("it has no effect", docs.stripe.com/api/idempotent_requests): every
DELETE runs. Creates and updates log an event (``_events``), listed by ``GET /v1/events``.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from safe_effects import Clock, system_clock
from safe_effects.testing import FakeHTTPServer, FakeRequest, FakeResponse, Fault
from stripe_safe._contract import operation_for

from ._events import EventLog
from ._form import decode_form, decode_query, flat_query, parse_search
from ._objects import KINDS, ApiError, Result, World

_SEARCHABLE = ("payment_intents", "charges", "customers", "invoices", "subscriptions")
_NAMESPACES = ("checkout",)  # resources a namespace holds: GET /v1/checkout/sessions lists kind "checkout.sessions"


@dataclass(slots=True)
class _Saved:
    fingerprint: str
    first_used: datetime
    request_id: str
    result: Result | None = None  # None while the first request still executes


def stripe_error_fault(
    status: int,
    type_: str,
    message: str,
    *,
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
    **match: Any,
) -> Fault:
    """A fault answering with a Stripe-shaped error body (the SDK needs ``error`` to be an object)."""
    body = {"error": {"type": type_, "message": message, "code": code}}
    return Fault.status_code(status, body=body, headers={"Request-Id": "req_fault", **(headers or {})}, **match)


def rate_limit_fault(*, retry_after: float | None = None, **match: Any) -> Fault:
    """429 before the endpoint runs: nothing saved, nothing done."""
    headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
    return stripe_error_fault(
        429, "invalid_request_error", "Too many requests.", code="rate_limit", headers=headers, **match
    )


def server_error_fault(**match: Any) -> Fault:
    """500 before the endpoint runs (the handler never sees the request)."""
    return stripe_error_fault(500, "api_error", "An unknown error occurred on our end.", **match)


class FakeStripe:
    """Serve a small, strict subset of the Stripe v1 API with Stripe's idempotency rules."""

    def __init__(
        self,
        *,
        clock: Clock = system_clock,
        key_retention: timedelta = timedelta(hours=24),
        search_lag: timedelta = timedelta(0),
        search_folds_case: bool = False,
        processing_seconds: float = 0.0,
    ) -> None:
        self.clock = clock
        self.key_retention = key_retention
        self.search_lag = search_lag
        # Stripe does not document whether ':' on a metadata string ignores case; True makes the fake's search do
        # so, to check the wrapper trusts only an exact stamp
        self.search_folds_case = search_folds_case
        self.processing_seconds = processing_seconds  # real time a write holds its key (409 window)
        self.world = World(clock)
        self.event_log = EventLog(clock)
        self.server = FakeHTTPServer(self._handle)
        self._lock = threading.RLock()
        self._keys: dict[tuple[str, str, str], _Saved] = {}  # (api key, account, idempotency key)
        self._effects: Counter[str] = Counter()
        self._request_ids = 0
        self._saved_failures: list[bool] = []  # queued saved 500s: True when the endpoint acted first

    # -- lifecycle and test surface -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> FakeStripe:
        self.server.start()
        return self

    def close(self) -> None:
        self.server.close()

    def __enter__(self) -> FakeStripe:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def inject(self, fault: Fault) -> None:
        self.server.inject(fault)

    def fail_next_write(self, *, after_commit: bool) -> None:
        """The next keyed write answers 500 *and Stripe saves that 500 under its key*, as it does once the
        endpoint started executing: replays within the window get the same 500. ``after_commit``: the
        object was created (or changed) before the failure."""
        with self._lock:
            self._saved_failures.append(after_commit)

    def pending_faults(self) -> list[object]:
        """What a test set up that has not fired yet: the server's faults and the saved 500s of
        :meth:`fail_next_write` (the pytest plugin's teardown check reads this)."""
        with self._lock:
            saved = [f"fail_next_write(after_commit={after})" for after in self._saved_failures]
        return [*self.server.pending_faults(), *saved]

    def requests(self, method: str | None = None, path_prefix: str = "/") -> list[FakeRequest]:
        return self.server.requests(method, path_prefix)

    def effect_count(self, operation: str) -> int:
        """How many requests changed provider state for ``operation`` (replays and refusals excluded).

        An operation this fake does not serve is refused, so a typo cannot make an assertion vacuous."""
        known = self._writes()
        if operation not in known:
            raise ValueError(f"FakeStripe serves no operation {operation!r}; known: {', '.join(sorted(known))}")
        with self._lock:
            return self._effects[operation]

    def objects(self, kind: str) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(o) for o in self.world.objects[kind].values()]

    @property
    def payment_intents(self) -> list[dict[str, Any]]:
        return self.objects("payment_intents")

    @property
    def refunds(self) -> list[dict[str, Any]]:
        return self.objects("refunds")

    @property
    def customers(self) -> list[dict[str, Any]]:
        return self.objects("customers")

    @property
    def charges(self) -> list[dict[str, Any]]:
        return self.objects("charges")

    @property
    def invoices(self) -> list[dict[str, Any]]:
        return self.objects("invoices")

    @property
    def subscriptions(self) -> list[dict[str, Any]]:
        return self.objects("subscriptions")

    @property
    def events(self) -> list[dict[str, Any]]:
        """Every event logged (a create's or an update's, carrying its request's id and idempotency key),
        oldest first, on every account."""
        with self._lock:
            return self.event_log.events

    def account_of(self, object_id: str) -> str:
        """The account an object was created on: its Stripe-Account (or Stripe-Context), ``""`` for the platform."""
        with self._lock:
            return self.world.owner[object_id]

    # -- the handler --------------------------------------------------------------------------------------

    def _next_request_id(self) -> str:
        with self._lock:
            self._request_ids += 1
            return f"req_F{self._request_ids:07d}"

    def _handle(self, request: FakeRequest) -> FakeResponse:
        request_id = self._next_request_id()
        auth = request.header("authorization") or ""
        api_key = auth.removeprefix("Bearer ").strip()
        if not api_key.startswith(("sk_test_", "rk_test_")):
            return _answer(Result(401, _error("invalid_request_error", "Invalid API Key provided.")), request_id)
        account = request.header("stripe-account") or request.header("stripe-context") or ""
        if request.method == "GET":
            return _answer(self._read(request, account), request_id)
        if request.method not in ("POST", "DELETE"):
            return _answer(Result(405, _error("invalid_request_error", "Unsupported method.")), request_id)
        if api_key.startswith("rk_test_"):
            message = "The provided key does not have the required permissions for this endpoint."
            return _answer(Result(403, _error("invalid_request_error", message)), request_id)
        key = request.header("idempotency-key")
        if key is None or request.method == "DELETE":  # Stripe ignores keys on a DELETE
            return _answer(self._run(request, account, request_id), request_id)
        return self._idempotent(request, (api_key, account, key), request_id)

    def _idempotent(self, request: FakeRequest, slot: tuple[str, str, str], request_id: str) -> FakeResponse:
        fingerprint = request.path + "?" + json.dumps(decode_form(request.body), sort_keys=True)
        with self._lock:
            saved = self._keys.get(slot)
            if saved is not None and self.clock() - saved.first_used >= self.key_retention:
                del self._keys[slot]  # pruned: the key is new again
                saved = None
            if saved is not None and saved.result is None:
                message = "There is currently another in-progress request using this Idempotent Key."
                body = _error("idempotency_error", message, code="idempotency_key_in_use")
                return _answer(Result(409, body), request_id)
            if saved is not None and saved.fingerprint != fingerprint:
                message = (
                    f"Keys for idempotent requests can only be used with the same parameters they were "
                    f"first used with. Try using a key other than '{slot[-1]}'."
                )
                return _answer(Result(400, _error("idempotency_error", message)), request_id)
            if saved is not None and saved.result is not None:
                return _answer(saved.result, request_id, replay_of=saved.request_id)
            self._keys[slot] = _Saved(fingerprint, self.clock(), request_id)
            saved_failure = self._saved_failures.pop(0) if self._saved_failures else None
        if self.processing_seconds:
            time.sleep(self.processing_seconds)
        result = self._run(request, slot[1], request_id) if saved_failure is not False else Result(500, {})
        if saved_failure is not None:
            error = _error("api_error", "An unknown error occurred on our end.")
            result = Result(500, error, result.effect)
        with self._lock:
            if _saved_by_stripe(result):
                self._keys[slot].result = result
            else:
                del self._keys[slot]
        return _answer(result, request_id)

    def _run(self, request: FakeRequest, account: str, request_id: str) -> Result:
        """Execute one write under the world lock, on ``account``; count it, and log its event, when it changed
        provider state."""
        operation = operation_for(request.path, request.method)
        handler = self._writes().get(operation)
        if handler is None:
            message = f"Unrecognized request URL ({request.method}: {request.path})."
            return Result(404, _error("invalid_request_error", message))
        params = flat_query(request.query) if request.method == "DELETE" else decode_form(request.body)
        segments = request.path.strip("/").split("/")
        with self._lock:
            self.world.account = account
            try:
                result = handler(segments[2] if len(segments) > 2 else "", params)
            except ApiError as refused:
                return Result(refused.status, refused.body)
            if result.effect:
                self._effects[operation] += 1
                written = self._written(result.body)
                if written is not None:
                    key = request.header("idempotency-key") if request.method == "POST" else None
                    self.event_log.record(
                        operation, written, account=account, request_id=request_id, idempotency_key=key
                    )
            body = self.world.expanded(result.body, params.get("expand"))
            return Result(result.status, json.loads(json.dumps(body)), result.effect)  # a snapshot

    def _written(self, body: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The object a write changed: its answer, or for a decline (402) the PaymentIntent or Charge that its
        error names, which Stripe keeps (and logs events for) though nothing was charged."""
        if isinstance(body.get("object"), str):
            return body
        error = body.get("error") or {}
        if isinstance(error.get("payment_intent"), dict):
            return dict(error["payment_intent"])
        charge = error.get("charge")
        return self.world.objects["charges"].get(charge) if isinstance(charge, str) else None

    def _writes(self) -> Mapping[str, Callable[[str, Mapping[str, Any]], Result]]:
        w = self.world
        return {
            "payment_intents.create": lambda _, p: w.create_payment_intent(p),
            "payment_intents.update": w.update_payment_intent,
            "payment_intents.confirm": w.confirm_payment_intent,
            "payment_intents.capture": w.capture_payment_intent,
            "payment_intents.cancel": w.cancel_payment_intent,
            "refunds.create": lambda _, p: w.create_refund(p),
            "customers.create": lambda _, p: w.create_customer(p),
            "customers.update": w.update_customer,
            "coupons.create": lambda _, p: w.create_coupon(p),
            "coupons.delete": w.delete_coupon,
            "charges.create": lambda _, p: w.create_charge(p),
            "invoices.create": lambda _, p: w.create_invoice(p),
            "invoices.create_preview": lambda _, p: w.preview_invoice(p),  # a POST that changes nothing
            "invoices.pay": w.pay_invoice,
            "invoices.finalize": w.finalize_invoice,
            "credit_notes.create": lambda _, p: w.create_credit_note(p),
            "invoiceitems.create": lambda _, p: w.create_invoice_item(p),
            "transfers.create": lambda _, p: w.create_transfer(p),
            "payouts.create": lambda _, p: w.create_payout(p),
            "setup_intents.create": lambda _, p: w.create_setup_intent(p),
            "setup_intents.confirm": w.confirm_setup_intent,
            "checkout.sessions": lambda _, p: w.create_checkout_session(p),  # operation_for's name for the path
            "subscriptions.create": lambda _, p: w.create_subscription(p),
            "subscriptions.update": w.update_subscription,
            "subscriptions.delete": w.cancel_subscription,
            "account_links.create": lambda _, p: w.create_account_link(p),
            "billing_portal.sessions": lambda _, p: w.create_portal_session(p),  # operation_for's name for the path
        }

    def _read(self, request: FakeRequest, account: str) -> Result:
        kind, rest = _collection(request.path)
        if kind == "events" and not rest:
            with self._lock:
                try:
                    return Result(200, self.event_log.listed(decode_query(request.query), account))
                except ApiError as refused:
                    return Result(refused.status, refused.body)
        if kind not in KINDS or len(rest) > 1:
            return Result(404, _error("invalid_request_error", f"Unrecognized request URL (GET: {request.path})."))
        query = decode_query(request.query)
        with self._lock:
            self.world.account = account
            if rest == ["search"] and kind in _SEARCHABLE:
                return self._search(kind, request.path, str(query.get("query", "")))
            try:
                if rest:
                    return Result(200, self.world.expanded(self.world.get(kind, rest[0]), query.get("expand")))
                listed = self.world.listed(kind, query)[: int(query.get("limit", "10"))]
            except ApiError as refused:
                return Result(refused.status, refused.body)
            return Result(200, {"object": "list", "data": listed, "has_more": False, "url": request.path})

    def _search(self, kind: str, path: str, query: str) -> Result:
        try:
            clauses = parse_search(query)
        except ValueError as bad:
            return Result(400, _error("invalid_request_error", str(bad), code="parameter_invalid_string"))
        found = self.world.searched(
            kind, clauses, visible_before=self.clock() - self.search_lag, fold_case=self.search_folds_case
        )
        return Result(
            200, {"object": "search_result", "data": found, "has_more": False, "next_page": None, "url": path}
        )


def _collection(path: str) -> tuple[str, list[str]]:
    """``/v1/refunds/re_1`` → ``("refunds", ["re_1"])``, ``/v1/checkout/sessions`` → ``("checkout.sessions", [])``;
    ``("", [])`` off the v1 API."""
    segments = path.strip("/").split("/")
    if len(segments) < 2 or segments[0] != "v1":
        return "", []
    width = 2 if segments[1] in _NAMESPACES else 1
    return ".".join(segments[1 : 1 + width]), segments[1 + width :]


def _error(type_: str, message: str, *, code: str | None = None) -> dict[str, Any]:
    return {"error": {"type": type_, "message": message, "code": code}}


def _saved_by_stripe(result: Result) -> bool:
    """Stripe saves a result once the endpoint ran: successes, declines (402), server errors; not 4xx validation."""
    return result.status < 400 or result.status == 402 or result.status >= 500


def _answer(result: Result, request_id: str, *, replay_of: str | None = None) -> FakeResponse:
    """Serialize; ``committed`` only when this very request changed state (a replay never does)."""
    headers = {"Request-Id": request_id}
    if replay_of is not None:
        headers |= {"Idempotent-Replayed": "true", "Original-Request": replay_of}
    committed = result.effect and replay_of is None
    return FakeResponse.json(result.status, result.body, headers=headers, committed=committed)
