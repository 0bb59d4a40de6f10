"""One send inside the boundary: the adapter's dispatch, its verdict on a failure, and the retries of
definitive-retryable refusals (a 429, a refused connection) that the :class:`RetryPolicy` allows.

The executor decides what to record; this module only says how the send ended: the provider's response,
:class:`Retryable` (a refusal the policy allows no further attempt after), :class:`Settled` (any other
failure, with the adapter's verdict) or :class:`BackoffCut` (an exception raised while a retry waited).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, stop_before_delay
from tenacity.stop import stop_base

from ._adapter import EffectRequest, Outcome, ProviderAdapter, Verdict
from ._errors import InvalidInput
from ._policies import RetryPolicy

R = TypeVar("R")


class Retryable(Exception):
    """A definitive refusal the provider asks to retry: nothing was done, the same key may be sent again."""

    def __init__(self, verdict: Verdict, error: Exception) -> None:
        self.verdict = verdict
        self.error = error


class BackoffCut(Exception):
    """Something raised while a retry waited: a job's time limit (Celery's ``SoftTimeLimitExceeded``, RQ's
    ``JobTimeoutException``, raised from a signal handler), a shutdown. Every attempt so far was refused
    definitively, so nothing was sent; ``interruption`` is what cut the wait short, for the caller to see."""

    def __init__(self, refused: Retryable, interruption: BaseException) -> None:
        self.verdict = refused.verdict
        self.interruption = interruption


class Settled(Exception):
    """Dispatch ended without a response: carries the verdict and the provider's exception."""

    def __init__(self, verdict: Verdict, error: Exception) -> None:
        self.verdict = verdict
        self.error = error


def classify(adapter: ProviderAdapter[Any], error: Exception, *, first: bool) -> Verdict:
    """The adapter's verdict; an adapter's own refusal (``InvalidInput``, raised before any I/O) is final on
    an intent's first send. On a replay or a resend it says nothing about what an earlier attempt did."""
    if isinstance(error, InvalidInput):
        return Verdict.of(error, Outcome.FINAL if first else Outcome.UNKNOWN, error.code)
    try:
        return adapter.classify(error)
    except Exception as broken:  # a classifier bug must never turn into a silent success or a resend
        return Verdict.of(error, Outcome.UNKNOWN, f"classify_failed:{type(broken).__name__}")


def send_with_retries(
    adapter: ProviderAdapter[R],
    request: EffectRequest,
    provider_key: str,
    *,
    first: bool,
    policy: RetryPolicy,
    sleep: Callable[[float], None],
    lease_left: Callable[[], float],
    before_retry: Callable[[], None],
) -> R:
    """The adapter's response to ``request`` sent under ``provider_key``, every attempt with that same key.

    ``lease_left`` says how many seconds remain of the claim this send runs under: no retry starts after it
    lapses, since another worker may by then have taken the intent over (and, where a lookup proves absence,
    sent it itself). ``before_retry`` runs as each retry goes out: the executor keeps its time, since a lookup
    must not take the provider's silence for an answer while the latest attempt may still be running.
    """

    def attempt() -> R:
        try:
            return adapter.dispatch(request, provider_key)
        except Exception as error:
            verdict = classify(adapter, error, first=first)
            if verdict.outcome is Outcome.RETRYABLE:
                raise Retryable(verdict, error) from error
            raise Settled(verdict, error) from error

    def retry() -> R:
        before_retry()
        return attempt()

    started = time.monotonic()
    try:
        return attempt()  # almost every call ends here: retry machinery is only built after a refusal
    except Retryable as refused:
        return _retry(retry, refused, started=started, policy=policy, sleep=sleep, lease_left=lease_left)


def _retry(
    attempt: Callable[[], R],
    refused: Retryable,
    *,
    started: float,
    policy: RetryPolicy,
    sleep: Callable[[float], None],
    lease_left: Callable[[], float],
) -> R:
    """Attempts 2..max_attempts through tenacity, all of them within max_total_seconds of the first and
    inside the claim's lease.

    A Retry-After hint longer than ``max_wait`` ends the retries: the caller gets ``EffectDeferred``
    carrying the hint rather than a call that stalls, or an attempt sooner than the provider asked.
    """
    too_long = _RetryAfterTooLong(policy.max_wait)
    lease_ends = _LeaseEnds(lease_left)
    first_wait = _wait(policy, refused, 1)
    if (
        policy.max_attempts <= 1
        or time.monotonic() - started + first_wait > policy.max_total_seconds
        or too_long.exceeded_by(refused)
        or lease_ends.before(first_wait)
    ):
        raise refused

    latest = [refused]  # the refusal the coming wait follows

    def note(state: RetryCallState) -> None:
        failure = state.outcome.exception() if state.outcome is not None else None
        if isinstance(failure, Retryable):
            latest[0] = failure

    def wait(seconds: float) -> None:
        try:
            sleep(seconds)
        except BaseException as interruption:  # only refusals were met: say so, whatever cut the wait short
            raise BackoffCut(latest[0], interruption) from interruption

    wait(first_wait)
    remaining = max(0.0, policy.max_total_seconds - (time.monotonic() - started))
    retrying = Retrying(
        # stop_before_delay counts the coming wait: no attempt starts past max_total_seconds
        stop=stop_after_attempt(policy.max_attempts - 1) | stop_before_delay(remaining) | too_long | lease_ends,
        wait=lambda state: _wait(
            policy, state.outcome.exception() if state.outcome is not None else None, state.attempt_number + 1
        ),
        retry=retry_if_exception_type(Retryable),
        before_sleep=note,
        sleep=wait,
        reraise=True,
    )
    return retrying(attempt)


def _wait(policy: RetryPolicy, failure: BaseException | None, failed_attempts: int) -> float:
    """The provider's Retry-After hint as given, else exponential back-off capped at ``max_wait``."""
    hint = _retry_after(failure)
    if hint is not None:
        return hint  # never sooner than asked; a longer hint than max_wait stopped the retries already
    backoff: float = policy.initial_wait * 2.0 ** (failed_attempts - 1)
    return min(policy.max_wait, backoff)


def _retry_after(failure: BaseException | None) -> float | None:
    """The provider's Retry-After, in seconds, when a retryable refusal carried one."""
    return failure.verdict.retry_after if isinstance(failure, Retryable) else None


class _RetryAfterTooLong(stop_base):
    """Stop retrying inside the call when the provider asks to wait longer than one call may: defer instead."""

    def __init__(self, max_wait: float) -> None:
        self.max_wait = max_wait

    def exceeded_by(self, failure: BaseException | None) -> bool:
        hint = _retry_after(failure)
        return hint is not None and hint > self.max_wait

    def __call__(self, retry_state: RetryCallState) -> bool:
        outcome = retry_state.outcome
        return self.exceeded_by(outcome.exception() if outcome is not None else None)


class _LeaseEnds(stop_base):
    """Stop retrying when the next attempt would start after the claim's lease lapses."""

    def __init__(self, lease_left: Callable[[], float]) -> None:
        self.lease_left = lease_left

    def before(self, wait: float) -> bool:
        return self.lease_left() <= wait

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.before(retry_state.upcoming_sleep)
