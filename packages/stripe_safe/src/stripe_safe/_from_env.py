"""The reconciler's Stripe adapter, built from the environment: it looks effects up and never writes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import stripe
from stripe._request_options import RequestOptions

from safe_effects import InvalidInput

from ._adapter import StripeAdapter, StripeCall
from ._contract import CONNECT_TIMEOUT, READ_TIMEOUT


class _LookupOnly:
    """A transport over a plain ``stripe.StripeClient`` (public ``raw_request``) that refuses every write."""

    refusal_reason = (
        "the Stripe adapter from adapter_from_env only looks effects up; writes (a refund too) go through a "
        "stripe_safe.StripeClient, e.g. client.compensating(original_key).v1.refunds.create(...)"
    )

    def __init__(self, client: stripe.StripeClient) -> None:
        self._client = client

    def send(self, call: StripeCall, idempotency_key: str) -> stripe.StripeObject:
        raise InvalidInput(self.refusal_reason)  # before any I/O; the ledger refuses a new intent sooner (see refusal)

    def read(
        self, url: str, params: Mapping[str, Any] | None = None, options: RequestOptions | None = None
    ) -> stripe.StripeObject:
        response = self._client.raw_request("get", url, **dict(params or {}), **dict(options or {}))
        return self._client.deserialize(response, api_mode="V1")


def adapter_from_env(env: Mapping[str, str]) -> StripeAdapter:
    """``STRIPE_API_KEY`` (required) and ``STRIPE_API_BASE`` (optional, e.g. a fake) → a lookup-only adapter."""
    base = env.get("STRIPE_API_BASE")
    client = stripe.StripeClient(
        env["STRIPE_API_KEY"],
        base_addresses={"api": base} if base else None,
        max_network_retries=0,
        http_client=stripe.RequestsClient(timeout=(CONNECT_TIMEOUT, READ_TIMEOUT)),
    )
    return StripeAdapter(_LookupOnly(client))
