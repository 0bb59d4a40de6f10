"""The fake Stripe's events: one for each create and update it runs, listed as ``GET /v1/events`` lists them.

Each event carries ``request.id`` and ``request.idempotency_key``, the API request that caused it, as Stripe's
do. Real Stripe sends more kinds (``payment_intent.succeeded``, ``charge.refunded`` ...); the fake makes the
``.created`` and ``.updated`` of the object a write returns (a charge's create as ``charge.succeeded`` or
``charge.failed``: Stripe has no ``charge.created``), which is what a lookup by events reads.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from safe_effects import Clock
from stripe_safe._contract import EVENT_CHANGES

from ._objects import ApiError, created_in

EVENT_RETENTION = timedelta(days=30)  # GET /v1/events lists the last 30 days (docs.stripe.com/api/events/list)
_EVENT_NAMES = {"subscription": "customer.subscription"}  # events named otherwise than their object
# changes Stripe logs no such event for (its list of event types): a PaymentIntent's or SetupIntent's update, a
# Checkout Session's create
_UNLOGGED = frozenset({("payment_intent", "updated"), ("setup_intent", "updated"), ("checkout.session", "created")})
_LIST_PARAMS = frozenset({"created", "limit", "type", "types", "starting_after"})


@dataclass(frozen=True, slots=True)
class _Logged:
    event: dict[str, Any]
    account: str
    at: datetime


class EventLog:
    """The events of every account, oldest first."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._logged: list[_Logged] = []
        self._ids = itertools.count(1)

    @property
    def events(self) -> list[dict[str, Any]]:
        """Every event, oldest first, whatever its account and age: copies, as a test may change what it reads."""
        return [copy.deepcopy(logged.event) for logged in self._logged]

    def record(
        self, operation: str, obj: Mapping[str, Any], *, account: str, request_id: str, idempotency_key: str | None
    ) -> None:
        """The event of a create or update that returned ``obj`` (a snapshot of it); other writes make none."""
        past = EVENT_CHANGES.get(operation.rpartition(".")[2])
        kind = obj.get("object")
        if past is None or not isinstance(kind, str) or (kind, past) in _UNLOGGED:
            return
        if kind == "charge" and past == "created":  # Stripe has no charge.created: a charge is logged by outcome
            past = str(obj.get("status"))
        now = self._clock()
        event = {
            "id": f"evt_F{next(self._ids):07d}",
            "object": "event",
            "type": f"{_EVENT_NAMES.get(kind, kind)}.{past}",
            "created": int(now.timestamp()),
            "livemode": False,
            "pending_webhooks": 0,
            "data": {"object": copy.deepcopy(dict(obj))},
            "request": {"id": request_id, "idempotency_key": idempotency_key},
        }
        self._logged.append(_Logged(event, account, now))

    def listed(self, query: Mapping[str, Any], account: str) -> dict[str, Any]:
        """One page of ``account``'s events of the last 30 days, newest first, as Stripe's list answers it: by
        ``created`` (a value or a range), ``type`` (exact, or a prefix ending in ``.*``) or ``types`` (any of a
        list), ``limit`` (1-100, 10 by default) and ``starting_after`` (the last id of the page before)."""
        unknown = sorted(set(query) - _LIST_PARAMS)
        if unknown:
            raise ApiError(400, "invalid_request_error", f"Received unknown parameter: {unknown[0]}", param=unknown[0])
        limit = int(query.get("limit", 10))
        if not 1 <= limit <= 100:
            raise ApiError(400, "invalid_request_error", "Limit must be between 1 and 100.", param="limit")
        since = self._clock() - EVENT_RETENTION
        wanted = [str(query["type"])] if "type" in query else [str(kind) for kind in query.get("types", [])]
        found = [
            logged.event
            for logged in reversed(self._logged)
            if logged.account == account
            and logged.at >= since
            and created_in(logged.event, query.get("created"))
            and (not wanted or any(_type_matches(logged.event["type"], kind) for kind in wanted))
        ]
        after = query.get("starting_after")
        if after is not None:
            ids = [event["id"] for event in found]
            if after not in ids:
                raise ApiError(400, "invalid_request_error", f"No such event: '{after}'", param="starting_after")
            found = found[ids.index(after) + 1 :]
        return {"object": "list", "data": found[:limit], "has_more": len(found) > limit, "url": "/v1/events"}


def _type_matches(kind: str, wanted: str) -> bool:
    if wanted.endswith(".*"):
        return kind.startswith(wanted[:-1])
    return kind == wanted
