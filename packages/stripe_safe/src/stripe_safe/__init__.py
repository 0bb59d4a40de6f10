"""stripe_safe: a drop-in ``stripe.StripeClient`` whose writes go through the safe-effects ledger."""

from ._adapter import StripeAdapter, StripeCall, StripeTransport
from ._classify import classify
from ._client import StripeClient
from ._contract import (
    BASE_CONTRACT,
    METADATA_INTENT,
    METADATA_TENANT,
    PROVIDER,
    contract_for,
    operation_for,
    provider_key,
    search_query,
)

__all__ = [
    "StripeClient",
    "StripeAdapter",
    "StripeCall",
    "StripeTransport",
    "classify",
    "contract_for",
    "BASE_CONTRACT",
    "PROVIDER",
    "METADATA_INTENT",
    "METADATA_TENANT",
    "operation_for",
    "provider_key",
    "search_query",
]
