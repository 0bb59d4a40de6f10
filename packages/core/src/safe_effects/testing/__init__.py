"""Test helpers shipped with safe-effects: a movable clock and the HTTP fake every provider fake builds on."""

from ._clock import FakeClock
from ._http_fake import Exchange, Fault, FakeHTTPServer, FakeRequest, FakeResponse, FaultKind

__all__ = [
    "FakeClock",
    "FakeHTTPServer",
    "FakeRequest",
    "FakeResponse",
    "Exchange",
    "Fault",
    "FaultKind",
]
