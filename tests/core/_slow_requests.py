"""Generic-fake adapters for requests the provider runs after the client gave up on them, and lookups that see
the state before such a request: what the response-window rule (``_response_window.may_still_run``) is for."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from safe_effects import EffectRecord, EffectRequest, LookupResult, LookupStatus
from safe_effects.testing import FakeRateLimited, FakeTimeout, GenericFakeAdapter


@dataclass
class LandsAfterItsTimeout(GenericFakeAdapter):
    """The client gives up on a request of ``operation`` (a read timeout) while the provider has not acted on it
    yet; the test lands it later (``land``), and the provider acts then. Other operations go through at once."""

    operation: str = "charge"
    on_the_wire: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def dispatch(self, request: EffectRequest, provider_key: str) -> str:
        if request.operation != self.operation:
            return super().dispatch(request, provider_key)
        self.on_the_wire.append((provider_key, dict(request.params)))
        raise FakeTimeout("read timed out")

    def land(self) -> str:
        return self.fake.handle(*self.on_the_wire.pop())


@dataclass
class RateLimitedFirst(LandsAfterItsTimeout):
    """Attempt 1 is a 429 asking for ``retry_after`` s (nothing happened); the retry is lost as in
    :class:`LandsAfterItsTimeout`."""

    retry_after: float = 20.0
    attempts: int = 0

    def dispatch(self, request: EffectRequest, provider_key: str) -> str:
        self.attempts += 1
        if self.attempts == 1:
            raise FakeRateLimited(self.retry_after)
        return super().dispatch(request, provider_key)


@dataclass
class RateLimitedThenHeld(GenericFakeAdapter):
    """Attempt 1 is a 429 asking for ``retry_after`` s; attempt 2 waits on the wire until ``release``, then
    reaches the provider and acts."""

    retry_after: float = 118.0
    attempts: int = 0
    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def dispatch(self, request: EffectRequest, provider_key: str) -> str:
        self.attempts += 1
        if self.attempts == 1:
            raise FakeRateLimited(self.retry_after)
        self.entered.set()
        assert self.release.wait(10)
        return super().dispatch(request, provider_key)


class RefusesUntilFound(GenericFakeAdapter):
    """A lookup that reads a refusal on file until the effect shows (Stripe: a PaymentIntent still showing the
    card's earlier decline while the confirm that retries the card runs)."""

    def lookup(self, record: EffectRecord) -> LookupResult:
        found = super().lookup(record)
        if found.status is LookupStatus.FOUND:
            return found
        return LookupResult(LookupStatus.REFUSED, "search", evidence="the earlier attempt's decline")
