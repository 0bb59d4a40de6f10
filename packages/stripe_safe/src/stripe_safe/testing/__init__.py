"""Test helpers: a deterministic fake Stripe the real SDK talks to over HTTP, and Stripe-shaped faults."""

from ._fake import FakeStripe, rate_limit_fault, server_error_fault, stripe_error_fault
from ._objects import DECLINES

__all__ = [
    "FakeStripe",
    "stripe_error_fault",
    "rate_limit_fault",
    "server_error_fault",
    "DECLINES",
]
