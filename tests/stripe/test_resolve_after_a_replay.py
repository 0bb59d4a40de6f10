"""An operator's rejection waits out the search lag from the latest send, not the first.

Stripe's search may lag its writes by up to an hour. A charge whose first send (a 500) is hours old and whose
same-key replay (another 500) went out a minute ago is in the search lag of that replay: "nothing found" says
nothing yet. Rejected now, the job moves on to ``:v2`` and charges again if the replay did act.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from safe_effects import EffectStatus, EffectUnknown, InvalidInput, Operator
from stripe_safe.testing import server_error_fault

from .conftest import KEY, PI, Env


def _charge(env: Env) -> None:
    env.client.v1.payment_intents.create(params=PI, options={"idempotency_key": KEY})  # type: ignore[arg-type]


def test_a_rejection_waits_for_the_search_lag_of_the_latest_replay(env: Env) -> None:
    env.fake.inject(server_error_fault())
    with pytest.raises(EffectUnknown):
        _charge(env)
    env.clock.advance(timedelta(hours=2))  # past the search's lag after the first send
    env.fake.inject(server_error_fault())
    with pytest.raises(EffectUnknown):
        _charge(env)  # the job's retry: a same-key replay, lost again
    record = env.record()
    assert (record.status, record.attempt_count) == (EffectStatus.UNKNOWN, 2)
    assert record.dispatched_at == env.clock() != record.first_dispatched_at

    operator = Operator(env.ledger, adapters={"stripe": env.client.adapter})
    with pytest.raises(InvalidInput, match=r"cannot be resolved as rejected yet: .* may lag up to 1:00:00 behind"):
        operator.resolve(
            KEY, to=EffectStatus.REJECTED, operator="ops@example.com", reason="not in the dashboard",
            expect_version=record.version,
        )  # fmt: skip
    assert env.record() == record
    assert env.posts("/v1/payment_intents") == 2
    assert env.fake.payment_intents == []

    env.clock.advance(timedelta(hours=1, minutes=1))  # the replay's lag has passed too: now the search is proof
    rejected = operator.resolve(
        KEY, to=EffectStatus.REJECTED, operator="ops@example.com", reason="not in the dashboard",
        expect_version=record.version,
    ).record  # fmt: skip
    assert rejected.status is EffectStatus.REJECTED
    assert env.posts("/v1/payment_intents") == 2
