"""Test helpers shipped with safe-effects: a movable clock and the HTTP fake every provider fake builds on."""

from ._clock import FakeClock
from ._generic_fake import (
    FakeDeclined,
    FakeEffect,
    FakeFailure,
    FakeRateLimited,
    FakeRefused,
    FakeServerError,
    FakeTimeout,
    GenericFakeAdapter,
    GenericFakeProvider,
    generic_contract,
)
from ._http_fake import Exchange, FakeHTTPServer, FakeRequest, FakeResponse, Fault, FaultKind

__all__ = [
    "FakeClock",
    "FakeHTTPServer",
    "FakeRequest",
    "FakeResponse",
    "Exchange",
    "Fault",
    "FaultKind",
    "GenericFakeProvider",
    "GenericFakeAdapter",
    "generic_contract",
    "FakeEffect",
    "FakeFailure",
    "FakeTimeout",
    "FakeRefused",
    "FakeRateLimited",
    "FakeDeclined",
    "FakeServerError",
]
