"""The fake Stripe's world: objects and the rules that change them, free of HTTP and idempotency.

Each write returns a :class:`Result`; ``effect`` names the operation that changed provider state, so the
fake can count effects (a declined create still counts: the PaymentIntent exists).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from stripe_safe._contract import MAX_METADATA_KEY_NAME, MAX_METADATA_KEYS, MAX_METADATA_VALUE

# Test payment methods (docs.stripe.com/testing) and what the fake does with them.
DECLINES: Mapping[str, tuple[str, str]] = {
    "pm_card_chargeDeclined": ("card_declined", "generic_decline"),
    "pm_card_chargeDeclinedInsufficientFunds": ("card_declined", "insufficient_funds"),
    "pm_card_chargeDeclinedExpiredCard": ("expired_card", "expired_card"),
    "tok_chargeDeclined": ("card_declined", "generic_decline"),
}
_CONFIRMABLE = frozenset({"requires_payment_method", "requires_confirmation"})
_DEFAULT_EXTERNAL_ACCOUNT = "ba_Fdefault"  # where a payout with no destination goes: the account's default


@dataclass(frozen=True, slots=True)
class Result:
    status: int
    body: dict[str, Any]
    effect: bool = False  # provider state changed


class ApiError(Exception):
    """A 4xx the fake answers before changing anything (validation, missing object, wrong state)."""

    def __init__(self, status: int, type_: str, message: str, *, code: str | None = None, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.body = {"error": {"type": type_, "message": message, "code": code, "param": param}}


def _required(params: Mapping[str, Any], name: str) -> Any:
    if name not in params or params[name] in ("", None):
        raise ApiError(
            400, "invalid_request_error", f"Missing required param: {name}.", code="parameter_missing", param=name
        )
    return params[name]


def _amount(params: Mapping[str, Any], name: str = "amount") -> int:
    raw = _required(params, name)
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(
            400, "invalid_request_error", f"Invalid integer: {raw}", code="parameter_invalid_integer", param=name
        ) from None
    if value <= 0:
        raise ApiError(400, "invalid_request_error", "Amount must be positive.", code="amount_too_small", param=name)
    return value


def _metadata(params: Mapping[str, Any], on: Mapping[str, str] | None = None) -> dict[str, str]:
    """The object's metadata after ``params`` (merged into ``on`` for an update); Stripe's limits hold: 50
    keys, key names of 40 characters, values of 500."""
    raw = params.get("metadata")
    given = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}
    for name, value in given.items():
        if len(name) > MAX_METADATA_KEY_NAME or len(value) > MAX_METADATA_VALUE:
            too_long = "Metadata key" if len(name) > MAX_METADATA_KEY_NAME else "Metadata value"
            limit = MAX_METADATA_KEY_NAME if len(name) > MAX_METADATA_KEY_NAME else MAX_METADATA_VALUE
            raise ApiError(
                400, "invalid_request_error", f"{too_long}s must be at most {limit} characters.", param="metadata"
            )
    merged = {**(on or {}), **given}
    if len(merged) > MAX_METADATA_KEYS:
        raise ApiError(
            400,
            "invalid_request_error",
            f"You can only specify up to {MAX_METADATA_KEYS} keys in metadata (got {len(merged)}).",
            param="metadata",
        )
    return merged


# The kinds the fake holds, by the list filters it serves for each: every one a filter of that list in
# stripe-python 16 (its ``*ListParams``), matched as equal to the object's field. ``created`` (a value or a
# range), ``limit`` and ``expand`` are served on every list; any other parameter is refused, as Stripe refuses
# one it does not know, so a lookup cannot lean on a filter Stripe does not have.
LIST_FILTERS: Mapping[str, frozenset[str]] = {
    "payment_intents": frozenset({"customer"}),
    "charges": frozenset({"customer", "payment_intent", "transfer_group"}),
    "refunds": frozenset({"payment_intent", "charge"}),
    "customers": frozenset({"email"}),
    "invoices": frozenset({"customer", "subscription"}),
    "subscriptions": frozenset({"customer"}),
    "transfers": frozenset({"destination", "transfer_group"}),
    "payouts": frozenset({"destination", "status"}),
    "credit_notes": frozenset({"customer", "invoice"}),
    "invoiceitems": frozenset({"customer", "invoice"}),
    "setup_intents": frozenset({"customer", "payment_method"}),
    "checkout.sessions": frozenset({"customer", "payment_intent", "subscription", "status"}),
    "coupons": frozenset(),
}
KINDS = tuple(LIST_FILTERS)
_EVERY_LIST = frozenset({"created", "limit", "expand"})
_RANGE: Mapping[str, Callable[[int, int], bool]] = {
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
}


def _unknown_list_params(kind: str, query: Mapping[str, Any]) -> list[str]:
    """The query's parameters a list of ``kind`` does not take (``created[x]`` for a range it has no ``x``)."""
    unknown = sorted(set(query) - LIST_FILTERS[kind] - _EVERY_LIST)
    created = query.get("created")
    if isinstance(created, Mapping):
        unknown += [f"created[{bound}]" for bound in sorted(set(created) - _RANGE.keys())]
    return unknown


def created_in(obj: Mapping[str, Any], created: Any) -> bool:
    """Does ``obj`` fall in a list's ``created`` filter: an exact Unix time, or a range (``created[gte]=...``)?"""
    if created is None:
        return True
    if isinstance(created, Mapping):
        return all(_RANGE[bound](obj["created"], int(value)) for bound, value in created.items())
    return bool(obj["created"] == int(created))


class World:
    """All objects by kind, plus when each was created (for the search index lag) and on which account.

    ``account`` is the account the current request acts on (its Stripe-Account, else Stripe-Context, else
    ``""`` for the platform); the fake sets it under its lock. As on Stripe, an object exists only on the
    account it was created on: retrieve, list and search on another account do not see it.
    """

    def __init__(self, clock: Callable[[], datetime]) -> None:
        self.clock = clock
        self.objects: dict[str, dict[str, dict[str, Any]]] = {kind: {} for kind in KINDS}
        self.created_at: dict[str, datetime] = {}
        self.owner: dict[str, str] = {}
        self.account = ""
        # the test cards that decline here: a test takes one out where the customer's card would pass now (a
        # retry of the same card after a top-up)
        self.declines = dict(DECLINES)
        self._ids = itertools.count(1)

    def _new(self, kind: str, prefix: str, fields: dict[str, Any], named: str | None = None) -> dict[str, Any]:
        """A new object; ``named`` is the id the caller chose, where Stripe takes one (a coupon's)."""
        oid = named or f"{prefix}_F{next(self._ids):07d}"
        now = self.clock()
        obj = {"id": oid, "created": int(now.timestamp()), "livemode": False, **fields}
        self.objects[kind][oid] = obj
        self.created_at[oid] = now
        self.owner[oid] = self.account
        return obj

    def _visible(self, obj: Mapping[str, Any]) -> bool:
        return self.owner.get(obj["id"], "") == self.account

    def get(self, kind: str, oid: str) -> dict[str, Any]:
        obj = self.objects.get(kind, {}).get(oid)
        if obj is None or not self._visible(obj):
            raise ApiError(
                404, "invalid_request_error", f"No such {kind[:-1]}: '{oid}'", code="resource_missing", param="id"
            )
        return obj

    def expanded(self, obj: Mapping[str, Any], fields: Any) -> dict[str, Any]:
        """``obj`` with each top-level field named in ``fields`` (Stripe's ``expand``) that holds the id of an
        object the fake has replaced by that object; the fake expands no nested paths."""
        found = dict(obj)
        for name in fields if isinstance(fields, list) else []:
            oid = found.get(name)
            target = next((o[oid] for o in self.objects.values() if oid in o), None) if isinstance(oid, str) else None
            if target is not None:
                found[name] = dict(target)
        return found

    # -- payment intents ----------------------------------------------------------------------------------

    def create_payment_intent(self, params: Mapping[str, Any]) -> Result:
        amount, currency = _amount(params), str(_required(params, "currency"))
        if "customer" in params:
            self.get("customers", str(params["customer"]))
        pi = self._new(
            "payment_intents",
            "pi",
            {
                "object": "payment_intent",
                "amount": amount,
                "currency": currency,
                "amount_received": 0,
                "capture_method": params.get("capture_method", "automatic"),
                "customer": params.get("customer"),
                "description": params.get("description"),
                "metadata": _metadata(params),
                "payment_method": params.get("payment_method"),
                "latest_charge": None,
                "last_payment_error": None,
                "status": "requires_confirmation" if params.get("payment_method") else "requires_payment_method",
                "cancellation_reason": None,
            },
        )
        if params.get("confirm") == "true":
            return self._confirm(pi)
        return Result(200, pi, effect=True)

    def confirm_payment_intent(self, oid: str, params: Mapping[str, Any]) -> Result:
        pi = self.get("payment_intents", oid)
        if pi["status"] not in _CONFIRMABLE:
            raise ApiError(
                400,
                "invalid_request_error",
                f"This PaymentIntent's status is {pi['status']}.",
                code="payment_intent_unexpected_state",
            )
        if "payment_method" in params:
            pi["payment_method"] = params["payment_method"]
        if not pi["payment_method"]:
            raise ApiError(
                400,
                "invalid_request_error",
                "You must provide a payment method.",
                code="payment_intent_unexpected_state",
                param="payment_method",
            )
        return self._confirm(pi)

    def _confirm(self, pi: dict[str, Any]) -> Result:
        decline = self.declines.get(str(pi["payment_method"]))
        if decline is not None:
            code, decline_code = decline
            error = {
                "type": "card_error",
                "code": code,
                "decline_code": decline_code,
                "message": "Your card was declined.",
                "payment_method": {"id": pi["payment_method"]},
            }
            pi.update(status="requires_payment_method", last_payment_error=error)
            return Result(402, {"error": {**error, "payment_intent": dict(pi)}}, effect=True)
        manual = pi["capture_method"] == "manual"
        charge = self._new(
            "charges",
            "ch",
            {
                "object": "charge",
                "amount": pi["amount"],
                "currency": pi["currency"],
                "payment_intent": pi["id"],
                "captured": not manual,
                "amount_captured": 0 if manual else pi["amount"],
                "amount_refunded": 0,
                "refunded": False,
                "status": "succeeded",
                "metadata": {},
                "customer": pi["customer"],
            },
        )
        pi.update(
            latest_charge=charge["id"],
            last_payment_error=None,
            status="requires_capture" if manual else "succeeded",
            amount_received=0 if manual else pi["amount"],
        )
        return Result(200, pi, effect=True)

    def capture_payment_intent(self, oid: str, params: Mapping[str, Any]) -> Result:
        pi = self.get("payment_intents", oid)
        if pi["status"] != "requires_capture":
            raise ApiError(
                400,
                "invalid_request_error",
                f"This PaymentIntent's status is {pi['status']}.",
                code="payment_intent_unexpected_state",
            )
        amount = _amount(params, "amount_to_capture") if "amount_to_capture" in params else pi["amount"]
        charge = self.objects["charges"][pi["latest_charge"]]
        charge.update(captured=True, amount_captured=amount)
        pi.update(status="succeeded", amount_received=amount)
        return Result(200, pi, effect=True)

    def cancel_payment_intent(self, oid: str, params: Mapping[str, Any]) -> Result:
        pi = self.get("payment_intents", oid)
        if pi["status"] in ("succeeded", "canceled"):
            raise ApiError(
                400,
                "invalid_request_error",
                f"This PaymentIntent's status is {pi['status']}.",
                code="payment_intent_unexpected_state",
            )
        pi.update(status="canceled", cancellation_reason=params.get("cancellation_reason", "requested_by_customer"))
        return Result(200, pi, effect=True)

    def _updated(self, kind: str, oid: str, params: Mapping[str, Any], fields: tuple[str, ...]) -> Result:
        """An update of ``kind``'s object ``oid``: its metadata merged, and those of ``fields`` the params give."""
        obj = self.get(kind, oid)
        obj["metadata"] = _metadata(params, on=obj["metadata"])
        obj.update({k: params[k] for k in fields if k in params})
        return Result(200, obj, effect=True)

    def update_payment_intent(self, oid: str, params: Mapping[str, Any]) -> Result:
        """As on Stripe, an update clears the last confirmation's ``last_payment_error`` ("cleared if the
        PaymentIntent is later updated for any reason"): a decline is not always there to be seen."""
        updated = self._updated("payment_intents", oid, params, ("description", "payment_method"))
        updated.body["last_payment_error"] = None
        return updated

    # -- refunds, customers, charges, invoices ------------------------------------------------------------

    def create_refund(self, params: Mapping[str, Any]) -> Result:
        if "payment_intent" in params:
            pi = self.get("payment_intents", str(params["payment_intent"]))
            if not pi["latest_charge"]:
                raise ApiError(
                    400,
                    "invalid_request_error",
                    "This PaymentIntent has no successful charge.",
                    code="charge_not_refundable",
                )
            charge = self.objects["charges"][pi["latest_charge"]]
        else:
            charge = self.get("charges", str(_required(params, "charge")))
        remaining = charge["amount_captured"] - charge["amount_refunded"]
        amount = _amount(params) if "amount" in params else remaining
        if amount > remaining or remaining <= 0:
            raise ApiError(
                400,
                "invalid_request_error",
                "Refund amount exceeds the refundable amount.",
                code="charge_already_refunded",
                param="amount",
            )
        charge.update(
            amount_refunded=charge["amount_refunded"] + amount,
            refunded=charge["amount_refunded"] + amount == charge["amount_captured"],
        )
        refund = self._new(
            "refunds",
            "re",
            {
                "object": "refund",
                "amount": amount,
                "currency": charge["currency"],
                "charge": charge["id"],
                "payment_intent": charge["payment_intent"],
                "status": "succeeded",
                "reason": params.get("reason"),
                "metadata": _metadata(params),
            },
        )
        return Result(200, refund, effect=True)

    def create_customer(self, params: Mapping[str, Any]) -> Result:
        customer = self._new(
            "customers",
            "cus",
            {
                "object": "customer",
                "email": params.get("email"),
                "name": params.get("name"),
                "description": params.get("description"),
                "metadata": _metadata(params),
            },
        )
        return Result(200, customer, effect=True)

    def create_coupon(self, params: Mapping[str, Any]) -> Result:
        """A coupon: neither searchable nor listed by a parent, so a lost one is found by its event alone."""
        if "percent_off" not in params and "amount_off" not in params:
            raise ApiError(400, "invalid_request_error", "Must provide one of amount_off or percent_off.")
        fields = {k: params[k] for k in ("percent_off", "amount_off", "currency", "name") if k in params}
        named = str(params["id"]) if params.get("id") else None
        if named is not None and named in self.objects["coupons"]:
            raise ApiError(
                400, "invalid_request_error", "Coupon already exists.", code="resource_already_exists", param="id"
            )
        coupon = self._new(
            "coupons",
            "co",
            {"object": "coupon", "duration": params.get("duration", "once"), "metadata": _metadata(params), **fields},
            named,
        )
        return Result(200, coupon, effect=True)

    def delete_coupon(self, oid: str, params: Mapping[str, Any]) -> Result:
        self.get("coupons", oid)
        del self.objects["coupons"][oid]
        return Result(200, {"id": oid, "object": "coupon", "deleted": True}, effect=True)

    def update_customer(self, oid: str, params: Mapping[str, Any]) -> Result:
        return self._updated("customers", oid, params, ("email", "name", "description"))

    def create_charge(self, params: Mapping[str, Any]) -> Result:
        amount, currency = _amount(params), str(_required(params, "currency"))
        source = str(params.get("source") or params.get("customer") or "")
        if not source:
            raise ApiError(
                400,
                "invalid_request_error",
                "Must provide source or customer.",
                code="parameter_missing",
                param="source",
            )
        decline = self.declines.get(source)
        charge = self._new(
            "charges",
            "ch",
            {
                "object": "charge",
                "amount": amount,
                "currency": currency,
                "payment_intent": None,
                "captured": decline is None,
                "amount_captured": 0 if decline else amount,
                "amount_refunded": 0,
                "refunded": False,
                "status": "failed" if decline else "succeeded",
                "metadata": _metadata(params),
                "customer": params.get("customer"),
                "description": params.get("description"),
            },
        )
        if decline is not None:
            error = {
                "type": "card_error",
                "code": decline[0],
                "decline_code": decline[1],
                "charge": charge["id"],
                "message": "Your card was declined.",
            }
            return Result(402, {"error": error}, effect=True)
        return Result(200, charge, effect=True)

    def create_invoice(self, params: Mapping[str, Any]) -> Result:
        customer = self.get("customers", str(_required(params, "customer")))
        invoice = self._new(
            "invoices",
            "in",
            {
                "object": "invoice",
                "customer": customer["id"],
                "status": "draft",
                "paid": False,
                "amount_due": int(params.get("amount_due", 0)),
                "metadata": _metadata(params),
                "description": params.get("description"),
            },
        )
        return Result(200, invoice, effect=True)

    def preview_invoice(self, params: Mapping[str, Any]) -> Result:
        """Stripe's "create a preview invoice": the invoice the customer would get, computed and kept nowhere."""
        customer = self.get("customers", str(_required(params, "customer")))
        preview = {
            "id": f"upcoming_in_{customer['id']}",
            "object": "invoice",
            "customer": customer["id"],
            "status": "draft",
            "amount_due": 0,
            "metadata": {},
        }
        return Result(200, preview)  # no effect: nothing is stored, and no event is logged

    def pay_invoice(self, oid: str, params: Mapping[str, Any]) -> Result:
        invoice = self.get("invoices", oid)
        if invoice["status"] not in ("draft", "open"):
            raise ApiError(
                400, "invalid_request_error", f"Invoice is already {invoice['status']}.", code="invoice_not_payable"
            )
        invoice.update(status="paid", paid=True)
        return Result(200, invoice, effect=True)

    def finalize_invoice(self, oid: str, params: Mapping[str, Any]) -> Result:
        """A draft invoice becomes ``open`` (collecting it is left to ``invoices.pay``)."""
        invoice = self.get("invoices", oid)
        if invoice["status"] != "draft":
            raise ApiError(400, "invalid_request_error", f"This invoice is already {invoice['status']}.")
        invoice["status"] = "open"
        return Result(200, invoice, effect=True)

    def create_credit_note(self, params: Mapping[str, Any]) -> Result:
        """A credit note of ``amount`` on an open or paid invoice (the fake takes no ``lines``)."""
        invoice = self.get("invoices", str(_required(params, "invoice")))
        if invoice["status"] not in ("open", "paid"):
            raise ApiError(
                400, "invalid_request_error", f"This invoice is {invoice['status']}: it cannot be credited.",
                param="invoice",
            )  # fmt: skip
        note = self._new(
            "credit_notes",
            "cn",
            {
                "object": "credit_note",
                "invoice": invoice["id"],
                "customer": invoice["customer"],
                "amount": _amount(params),
                "status": "issued",
                "reason": params.get("reason"),
                "memo": params.get("memo"),
                "metadata": _metadata(params),
            },
        )
        return Result(200, note, effect=True)

    def create_invoice_item(self, params: Mapping[str, Any]) -> Result:
        """An invoice item of a customer: on a draft ``invoice`` when one is named, else pending (``invoice`` None)."""
        customer = self.get("customers", str(_required(params, "customer")))
        invoice = self.get("invoices", str(params["invoice"])) if params.get("invoice") else None
        if invoice is not None and invoice["status"] != "draft":
            raise ApiError(
                400, "invalid_request_error", f"This invoice is {invoice['status']}: items go on a draft.",
                param="invoice",
            )  # fmt: skip
        item = self._new(
            "invoiceitems",
            "ii",
            {
                "object": "invoiceitem",
                "customer": customer["id"],
                "invoice": invoice["id"] if invoice else None,
                "amount": _amount(params),
                "currency": str(_required(params, "currency")),
                "description": params.get("description"),
                "metadata": _metadata(params),
            },
        )
        return Result(200, item, effect=True)

    # -- Connect money movement ---------------------------------------------------------------------------

    def create_transfer(self, params: Mapping[str, Any]) -> Result:
        """A transfer to a connected account (the fake keeps no accounts: any ``destination`` is taken)."""
        transfer = self._new(
            "transfers",
            "tr",
            {
                "object": "transfer",
                "amount": _amount(params),
                "currency": str(_required(params, "currency")),
                "destination": str(_required(params, "destination")),
                "transfer_group": params.get("transfer_group"),
                "description": params.get("description"),
                "amount_reversed": 0,
                "reversed": False,
                "metadata": _metadata(params),
            },
        )
        return Result(200, transfer, effect=True)

    def create_payout(self, params: Mapping[str, Any]) -> Result:
        """A payout to ``destination``, else to the account's default external account; pending, arriving in 2
        days."""
        payout = self._new(
            "payouts",
            "po",
            {
                "object": "payout",
                "amount": _amount(params),
                "currency": str(_required(params, "currency")),
                "destination": params.get("destination") or _DEFAULT_EXTERNAL_ACCOUNT,
                "method": params.get("method", "standard"),
                "status": "pending",
                "arrival_date": int(self.clock().timestamp()) + 2 * 86400,
                "description": params.get("description"),
                "metadata": _metadata(params),
            },
        )
        return Result(200, payout, effect=True)

    # -- setup intents and checkout sessions --------------------------------------------------------------

    def create_setup_intent(self, params: Mapping[str, Any]) -> Result:
        """A SetupIntent; ``confirm=true`` confirms it at once. Every payment method sets up (a decline test card
        declines charges, not setups)."""
        if "customer" in params:
            self.get("customers", str(params["customer"]))
        if params.get("confirm") == "true":
            _required(params, "payment_method")  # checked before the SetupIntent exists
        setup = self._new(
            "setup_intents",
            "seti",
            {
                "object": "setup_intent",
                "customer": params.get("customer"),
                "payment_method": params.get("payment_method"),
                "usage": params.get("usage", "off_session"),
                "description": params.get("description"),
                "status": "requires_confirmation" if params.get("payment_method") else "requires_payment_method",
                "metadata": _metadata(params),
            },
        )
        if params.get("confirm") == "true":
            return self.confirm_setup_intent(setup["id"], {})
        return Result(200, setup, effect=True)

    def confirm_setup_intent(self, oid: str, params: Mapping[str, Any]) -> Result:
        setup = self.get("setup_intents", oid)
        if setup["status"] not in _CONFIRMABLE:
            raise ApiError(
                400, "invalid_request_error", f"This SetupIntent's status is {setup['status']}.",
                code="setup_intent_unexpected_state",
            )  # fmt: skip
        payment_method = params.get("payment_method") or setup["payment_method"]
        if not payment_method:
            raise ApiError(
                400, "invalid_request_error", "You must provide a payment method.",
                code="setup_intent_unexpected_state", param="payment_method",
            )  # fmt: skip
        setup.update(payment_method=payment_method, status="succeeded")
        return Result(200, setup, effect=True)

    def create_checkout_session(self, params: Mapping[str, Any]) -> Result:
        """An open Checkout Session; ``payment`` and ``subscription`` modes need ``line_items``."""
        mode = str(_required(params, "mode"))
        if mode not in ("payment", "setup", "subscription"):
            raise ApiError(400, "invalid_request_error", f"Invalid mode: {mode}.", param="mode")
        if mode != "setup":
            _required(params, "line_items")
        if "customer" in params:
            self.get("customers", str(params["customer"]))
        session = self._new(
            "checkout.sessions",
            "cs",
            {
                "object": "checkout.session",
                "mode": mode,
                "customer": params.get("customer"),
                "status": "open",
                "payment_status": "no_payment_required" if mode == "setup" else "unpaid",
                "success_url": params.get("success_url"),
                "expires_at": int(self.clock().timestamp()) + 86400,
                "metadata": _metadata(params),
            },
        )
        session["url"] = f"https://checkout.stripe.com/c/pay/{session['id']}"
        return Result(200, session, effect=True)

    # -- links and sessions: created, never retrieved --------------------------------------------------------

    def create_account_link(self, params: Mapping[str, Any]) -> Result:
        """An AccountLink: ``object``, ``created``, ``expires_at`` (5 minutes on) and ``url``; it has no ``id``."""
        _required(params, "account")
        _required(params, "type")
        now = int(self.clock().timestamp())
        url = f"https://connect.stripe.com/setup/s/F{next(self._ids):07d}"
        return Result(200, {"object": "account_link", "created": now, "expires_at": now + 300, "url": url}, effect=True)

    def create_portal_session(self, params: Mapping[str, Any]) -> Result:
        """A billing portal session for an existing customer; Stripe serves no GET for one (a 404 here too)."""
        customer = self.get("customers", str(_required(params, "customer")))
        number = next(self._ids)
        session = {
            "id": f"bps_F{number:07d}",
            "object": "billing_portal.session",
            "created": int(self.clock().timestamp()),
            "customer": customer["id"],
            "livemode": False,
            "return_url": params.get("return_url"),
            "url": f"https://billing.stripe.com/p/session/F{number:07d}",
        }
        return Result(200, session, effect=True)

    # -- subscriptions (cancel is a DELETE) ---------------------------------------------------------------

    def create_subscription(self, params: Mapping[str, Any]) -> Result:
        """A subscription billing ``items[0][price_data][unit_amount]`` (0 when absent) per period."""
        customer = self.get("customers", str(_required(params, "customer")))
        items = params.get("items")
        first = items[0] if isinstance(items, list) and items and isinstance(items[0], Mapping) else {}
        raw_price = first.get("price_data")
        price: Mapping[str, Any] = raw_price if isinstance(raw_price, Mapping) else {}
        subscription = self._new(
            "subscriptions",
            "sub",
            {
                "object": "subscription",
                "customer": customer["id"],
                "status": "active",
                "unit_amount": int(price.get("unit_amount", 0)),
                "currency": price.get("currency", "eur"),
                "canceled_at": None,
                "metadata": _metadata(params),
            },
        )
        return Result(200, subscription, effect=True)

    def update_subscription(self, oid: str, params: Mapping[str, Any]) -> Result:
        return self._updated("subscriptions", oid, params, ("description", "cancel_at_period_end"))

    def cancel_subscription(self, oid: str, params: Mapping[str, Any]) -> Result:
        """``DELETE /v1/subscriptions/:id``; ``invoice_now=true`` bills a final invoice and collects it at once
        (the fake bills one period's ``unit_amount``): a DELETE that moves money."""
        subscription = self.get("subscriptions", oid)
        if subscription["status"] == "canceled":
            raise ApiError(400, "invalid_request_error", "This subscription is already canceled.")
        subscription.update(status="canceled", canceled_at=int(self.clock().timestamp()))
        if params.get("invoice_now") == "true":
            self._new(
                "invoices",
                "in",
                {
                    "object": "invoice",
                    "customer": subscription["customer"],
                    "subscription": oid,
                    "status": "paid",
                    "paid": True,
                    "amount_due": subscription["unit_amount"],
                    "amount_paid": subscription["unit_amount"],
                    "billing_reason": "subscription_cycle",
                    "metadata": {},
                    "description": "final invoice",
                },
            )
        return Result(200, subscription, effect=True)

    # -- reads --------------------------------------------------------------------------------------------

    def listed(self, kind: str, query: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Objects of ``kind`` matching the list's filters and ``created``, newest first; a parameter the list
        does not take is refused."""
        unknown = _unknown_list_params(kind, query)
        if unknown:
            raise ApiError(400, "invalid_request_error", f"Received unknown parameter: {unknown[0]}", param=unknown[0])
        filters = {name: value for name, value in query.items() if name in LIST_FILTERS[kind]}
        found = [
            o
            for o in self.objects[kind].values()
            if self._visible(o)
            and created_in(o, query.get("created"))
            and all(o.get(name) == value for name, value in filters.items())
        ]
        return sorted(found, key=lambda o: o["id"], reverse=True)

    def searched(
        self,
        kind: str,
        clauses: list[tuple[str | None, str, str]],
        visible_before: datetime,
        *,
        fold_case: bool = False,
    ) -> list[dict[str, Any]]:
        """Objects matching every clause, among those the (lagging) search index already holds."""

        def same(found: Any, wanted: str) -> bool:
            if fold_case and isinstance(found, str):
                return found.casefold() == wanted.casefold()
            return bool(found == wanted)

        def hit(obj: dict[str, Any]) -> bool:
            return all(
                same((obj.get("metadata", {}) if scope == "metadata" else obj).get(name), value)
                for scope, name, value in clauses
            )

        return [
            o
            for o in self.objects[kind].values()
            if self._visible(o) and self.created_at[o["id"]] <= visible_before and hit(o)
        ]
