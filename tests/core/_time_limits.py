"""A job runner's time limit, as Celery's soft limit and RQ's job timeout deliver it: an exception raised by a
SIGALRM handler, wherever the job is; and the interruptions that are not an Exception."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn


class JobTimeLimit(Exception):
    """What Celery's soft time limit and RQ's job timeout raise: a plain exception, from a signal handler."""


class Interruption(BaseException):
    """What gevent's Timeout (a gevent worker's time limit), a killed greenlet (GreenletExit) and Dramatiq's
    TimeLimitExceeded have in common: not an Exception, so nothing that catches Exception stops it."""


def interrupt() -> NoReturn:
    """Raise :class:`Interruption`: ``time_limit(seconds, first=interrupt)`` delivers one from a signal handler."""
    raise Interruption("interrupted")


@contextmanager
def time_limit(seconds: float, *, first: Callable[[], object] = lambda: None) -> Iterator[None]:
    """Raise :class:`JobTimeLimit` in this thread after ``seconds``; the handler runs ``first`` before it."""

    def expire(signum: int, frame: object) -> None:
        first()
        raise JobTimeLimit(f"the job ran past its {seconds} s limit")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
