"""The retry policy's bounds after the first refusal, through the real SDK against the fake Stripe: a later
Retry-After beyond ``max_wait``, a first wait beyond ``max_total_seconds``, and a wait that ends exactly as the
claim's lease lapses. Each defers the call with nothing more sent; the fake's request log and the ledger say so."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest

from safe_effects import EffectDeferred, EffectStatus, LeasePolicy, Ledger, RetryPolicy
from safe_effects.testing import FakeClock
from stripe_safe import StripeClient
from stripe_safe.testing import FakeStripe, rate_limit_fault

from .conftest import API_KEY, KEY, PI, SHORT_TIMEOUT


@contextmanager
def _client(
    fake: FakeStripe, clock: FakeClock, store_url: str, sleeps: list[float], **options: object
) -> Iterator[tuple[StripeClient, Ledger]]:
    ledger = Ledger.open(store_url, clock=clock, sleep=sleeps.append, **options)  # type: ignore[arg-type]
    try:
        yield StripeClient(API_KEY, ledger=ledger, base_addresses={"api": fake.url}, timeout=SHORT_TIMEOUT), ledger
    finally:
        ledger.close()


def _deferred(fake: FakeStripe, client: StripeClient) -> EffectDeferred:
    with pytest.raises(EffectDeferred) as deferred:
        client.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # type: ignore[arg-type]
    return deferred.value


def _posts(fake: FakeStripe) -> int:
    return len(fake.requests("POST", "/v1/payment_intents"))


def test_a_later_retry_after_beyond_max_wait_defers_instead_of_waiting_it_out(
    fake: FakeStripe, clock: FakeClock, store_url: str
) -> None:
    """The second 429 asks for 3 s where the policy allows 1 s between attempts: the call defers with that hint
    (no third attempt, no 3 s wait), as the first refusal's hint would. Mutant: the stop on a long hint only
    checked before the first wait."""
    sleeps: list[float] = []
    policy = RetryPolicy(max_attempts=4, initial_wait=0.0, max_wait=1.0, max_total_seconds=30.0)
    fake.inject(rate_limit_fault(retry_after=0.5))
    fake.inject(rate_limit_fault(retry_after=3))
    with _client(fake, clock, store_url, sleeps, retry=policy) as (client, ledger):
        deferred = _deferred(fake, client)
        assert deferred.retry_after == 3
        assert sleeps == [0.5]
        assert _posts(fake) == 2
        assert fake.payment_intents == []
        record = ledger.get(KEY)
        assert (record.status, record.last_error_class) == (EffectStatus.PREPARED, "RateLimitError")


def test_a_first_wait_beyond_the_total_budget_defers_at_once(
    fake: FakeStripe, clock: FakeClock, store_url: str
) -> None:
    """``max_total_seconds`` 1 and a Retry-After of 3 (within ``max_wait`` 5): waiting would start the second
    attempt past the call's budget, so the call defers without waiting. Mutant: the first wait not counted."""
    sleeps: list[float] = []
    policy = RetryPolicy(max_attempts=4, initial_wait=0.0, max_wait=5.0, max_total_seconds=1.0)
    fake.inject(rate_limit_fault(retry_after=3))
    with _client(fake, clock, store_url, sleeps, retry=policy) as (client, ledger):
        assert _deferred(fake, client).retry_after == 3
        assert sleeps == []
        assert _posts(fake) == 1
        assert fake.payment_intents == []
        record = ledger.get(KEY)
        assert (record.status, record.attempt_count) == (EffectStatus.PREPARED, 1)


def test_no_retry_starts_the_instant_the_lease_lapses(fake: FakeStripe, clock: FakeClock, store_url: str) -> None:
    """A lease of 2 s and a Retry-After of 2 s: the second attempt would start as the lease lapses, when another
    worker already counts it expired (``lease_expired`` is ``<=``) and may take the intent over. Mutant: ``<``."""
    sleeps: list[float] = []
    policy = RetryPolicy(max_attempts=4, initial_wait=0.0, max_wait=5.0, max_total_seconds=30.0)
    fake.inject(rate_limit_fault(retry_after=2))
    lease = LeasePolicy(duration=timedelta(seconds=2), poll_interval=0.01)
    with _client(fake, clock, store_url, sleeps, retry=policy, lease=lease) as (client, ledger):
        assert _deferred(fake, client).retry_after == 2
        assert sleeps == []
        assert _posts(fake) == 1
        assert fake.payment_intents == []
        assert ledger.get(KEY).status is EffectStatus.PREPARED
