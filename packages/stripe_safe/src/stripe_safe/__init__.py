"""stripe_safe: a drop-in ``stripe.StripeClient`` whose writes go through the safe-effects ledger."""

from ._adapter import StripeAdapter, StripeCall, StripeTransport
from ._classify import classify
from ._client import AnswerUnavailable, StripeClient, receipt_of
from ._contract import (
    BASE_CONTRACT,
    MAX_METADATA_KEYS,
    METADATA_INTENT,
    METADATA_TENANT,
    PROVIDER,
    contract_for,
    operation_for,
    provider_key,
    search_query,
)
from ._from_env import adapter_from_env

__all__ = [
    "adapter_from_env",
    "StripeClient",
    "AnswerUnavailable",
    "receipt_of",
    "StripeAdapter",
    "StripeCall",
    "StripeTransport",
    "classify",
    "contract_for",
    "BASE_CONTRACT",
    "PROVIDER",
    "METADATA_INTENT",
    "METADATA_TENANT",
    "MAX_METADATA_KEYS",
    "operation_for",
    "provider_key",
    "search_query",
]
