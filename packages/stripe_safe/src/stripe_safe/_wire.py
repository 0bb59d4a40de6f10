"""The caller's params as the SDK will put them on the wire, for the request digest.

stripe-python accepts a few Python values that are not JSON and encodes them itself: a ``datetime`` as a Unix
timestamp (a naive one read as local time, as the SDK does), a ``Decimal`` as its text, a Stripe object as
its id. The digest covers what Stripe receives, so the same call digests alike whichever of the SDK's
spellings it used. Anything else that is not JSON (bytes, a file to upload) is left for the digest to refuse,
naming its path.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

import stripe


def _timestamp(value: datetime) -> int:
    if value.utcoffset() is not None:
        return calendar.timegm(value.utctimetuple())
    return int(time.mktime(value.timetuple()))


def as_sent(value: Any) -> Any:
    """``value`` with the SDK's own encodings applied; the same object when there is nothing to encode."""
    if isinstance(value, str | int | float) or value is None:  # the common leaves first
        return value
    if isinstance(value, Mapping):  # copied only when something inside changes (rare): no copy per call
        if all(as_sent(item) is item for item in value.values()):
            return value
        return {key: as_sent(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        if all(as_sent(item) is item for item in value):
            return value
        return [as_sent(item) for item in value]
    if isinstance(value, datetime):
        return _timestamp(value)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, stripe.StripeObject) and isinstance(object_id := getattr(value, "id", None), str):
        return object_id
    return value
