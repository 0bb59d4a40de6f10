"""Fixtures for the Stripe suite: a fake Stripe and a ledger sharing one FakeClock, and the real SDK."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import stripe

from safe_effects import EffectRecord, LeasePolicy, Ledger, RetryPolicy
from safe_effects.testing import FakeClock
from stripe_safe import StripeClient, adapter_from_env
from stripe_safe.testing import FakeStripe

API_KEY = "sk_test_safe_effects"
KEY = "invoice:inv_42:collect:v1"
PI = {"amount": 2000, "currency": "eur", "payment_method": "pm_card_visa", "confirm": True}
FAST_RETRY = RetryPolicy(max_attempts=3, initial_wait=0.0, max_wait=1.0)  # sleeps are recorded, not slept
SHORT_TIMEOUT = (1.0, 1.0)  # connect, read: room for a busy 2-core CI machine; delay faults wait longer


@dataclass
class Env:
    fake: FakeStripe
    ledger: Ledger
    clock: FakeClock
    client: StripeClient
    store_url: str
    sleeps: list[float] = field(default_factory=list)

    def record(self, key: str = KEY, tenant: str = "default") -> EffectRecord:
        return self.ledger.get(key, tenant=tenant)

    def posts(self, path_prefix: str = "/v1/") -> int:
        return len(self.fake.requests("POST", path_prefix))

    def reconciled(self, key: str = KEY) -> EffectRecord:
        """The reconciler's settling of ``key``: a lookup-only adapter that has only the record, as
        ``safe-effects reconcile`` builds it."""
        adapter = adapter_from_env({"STRIPE_API_KEY": API_KEY, "STRIPE_API_BASE": self.fake.url})
        return self.ledger.reconcile(adapter, intent_key=key)


def raw_client(url: str, api_key: str = API_KEY, timeout: tuple[float, float] = SHORT_TIMEOUT) -> stripe.StripeClient:
    """The plain SDK, configured as the wrapper configures it: no retries, short timeouts."""
    return stripe.StripeClient(
        api_key,
        base_addresses={"api": url},
        max_network_retries=0,
        http_client=stripe.RequestsClient(timeout=timeout),
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fake(clock: FakeClock) -> Iterator[FakeStripe]:
    with FakeStripe(clock=clock) as server:
        yield server


@pytest.fixture
def env(fake: FakeStripe, clock: FakeClock, store_url: str) -> Iterator[Env]:
    """A wrapped client on a fresh ledger (SQLite and PostgreSQL, via the root ``store_url``)."""
    sleeps: list[float] = []
    ledger = Ledger.open(
        store_url,
        clock=clock,
        retry=FAST_RETRY,
        lease=LeasePolicy(poll_interval=0.01),
        sleep=sleeps.append,
    )
    client = StripeClient(API_KEY, ledger=ledger, base_addresses={"api": fake.url}, timeout=SHORT_TIMEOUT)
    yield Env(fake, ledger, clock, client, store_url, sleeps)
    ledger.close()


@pytest.fixture
def closed_port() -> int:
    """A port nothing listens on: connecting is refused."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
