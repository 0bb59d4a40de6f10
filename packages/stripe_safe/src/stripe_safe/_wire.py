"""The caller's params as the SDK will put them on the wire, for the request digest.

stripe-python's form encoding (``_api_encode``) turns a few Python values that are not JSON into wire values
itself: a ``datetime`` given as a param's value becomes a Unix timestamp (a naive one read as local time, as
the SDK does), a Stripe object its id, and a ``Decimal`` anywhere is written as its text. The digest covers
what Stripe receives, so the same call digests alike whichever of those spellings it used. A ``datetime`` or
object directly inside a list is written as its ``str()`` by the SDK, not converted: it is left for the
digest to refuse, naming its path, as is anything else that is not JSON (bytes, a file to upload).
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from stripe import StripeObject  # bound once: the stripe module resolves its names lazily, per access


def _timestamp(value: datetime) -> int:
    if value.utcoffset() is not None:
        return calendar.timegm(value.utctimetuple())
    return int(time.mktime(value.timetuple()))


def _value(value: Any) -> Any:
    """A param's value as sent: what the SDK converts for a mapping's value."""
    if isinstance(value, str | int | float) or value is None:
        return value
    if isinstance(value, datetime):
        return _timestamp(value)
    if isinstance(value, StripeObject) and isinstance(object_id := getattr(value, "id", None), str):
        return object_id
    return as_sent(value)


def as_sent(value: Any) -> Any:
    """``value`` with the SDK's own encodings applied; the same object when there is nothing to encode.

    Each item is encoded once and a container copied only when one of its items changed, so the common call
    (plain JSON) costs a walk and no copy.
    """
    if isinstance(value, str | int | float) or value is None:  # the common leaves first
        return value
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, Mapping):
        changed: dict[Any, Any] | None = None
        for key, item in value.items():
            if (new := _value(item)) is not item:
                changed = dict(value) if changed is None else changed
                changed[key] = new
        return value if changed is None else changed
    if isinstance(value, list | tuple):
        items = [as_sent(item) for item in value]
        return value if all(new is old for new, old in zip(items, value, strict=True)) else items
    return value
