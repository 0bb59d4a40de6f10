"""Checks for the numbers a caller sets (seconds, counts), shared so each refusal names its setting the same way.

A wrong value (a timeout of 0, a pool of -1, a limit of 1.5, an int where seconds belong) is an
:class:`InvalidInput` when it is given, not a driver's error or a misbehaving store at the first call.
"""

from __future__ import annotations

import math

from ._errors import InvalidInput


def check_seconds(what: str, value: object, *, positive: bool, at_most: float | None = None) -> float:
    """``value`` as seconds: finite, more than 0 (``positive``) or 0 or more, and at most ``at_most``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput(f"{what} must be a finite number of seconds, got {value!r}")
    if value < 0 or (positive and value == 0):
        bound = "more than 0" if positive else "0 or more"
        raise InvalidInput(f"{what} must be {bound} seconds, got {value!r}")
    if at_most is not None and value > at_most:
        raise InvalidInput(f"{what} must be at most {at_most:g} seconds, got {value!r}")
    return float(value)


def check_count(what: str, value: object, *, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` as a whole count from ``minimum`` (to ``maximum``); a bool or a float is no count."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInput(f"{what} must be an int of {minimum} or more, got {value!r}")
    if maximum is not None and value > maximum:
        raise InvalidInput(f"{what} must be an int of at most {maximum}, got {value!r}")
    return value
