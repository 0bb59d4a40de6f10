"""Retry and lease policies refuse values the executor cannot work with, when they are made."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from safe_effects import InvalidInput, LeasePolicy, RetryPolicy


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"max_attempts": 0}, "RetryPolicy.max_attempts must be an int of 1 or more, got 0"),
        ({"max_attempts": 2.5}, "RetryPolicy.max_attempts must be an int"),
        ({"max_attempts": True}, "RetryPolicy.max_attempts must be an int"),
        ({"max_total_seconds": -1}, "RetryPolicy.max_total_seconds must be 0 or more seconds, got -1"),
        ({"initial_wait": float("nan")}, "RetryPolicy.initial_wait must be a finite number"),
        ({"max_wait": "5"}, "RetryPolicy.max_wait must be a finite number of seconds, got '5'"),
    ],
)
def test_a_retry_policy_names_the_value_it_refuses(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidInput, match=named):
        RetryPolicy(**fields)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"duration": timedelta(0)}, "LeasePolicy.duration must be more than 0 seconds"),
        ({"duration": 120}, "LeasePolicy.duration must be a datetime.timedelta, got 120"),
        ({"wait_for_other": timedelta(seconds=-1)}, "LeasePolicy.wait_for_other must be 0 or more seconds"),
        ({"poll_interval": 0}, "LeasePolicy.poll_interval must be more than 0 seconds"),
        ({"poll_interval": float("inf")}, "LeasePolicy.poll_interval must be a finite number"),
    ],
)
def test_a_lease_policy_names_the_value_it_refuses(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidInput, match=named):
        LeasePolicy(**fields)


def test_the_edges_the_executor_works_with_are_accepted() -> None:
    assert RetryPolicy(max_attempts=1, max_total_seconds=0, initial_wait=0, max_wait=0).max_attempts == 1
    assert LeasePolicy(duration=timedelta(milliseconds=1), wait_for_other=timedelta(0)).wait_for_other == timedelta(0)
