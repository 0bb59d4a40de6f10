"""Text a store can hold: a Python str may carry lone surrogates (no UTF-8) or NUL (PostgreSQL refuses it).

JSON's ``"\\ud800"`` escape parses to a lone surrogate and ``"\\u0000"`` to NUL; no provider sends either, and a
value holding one would fail deep inside a store's INSERT. Checked at the edges instead, with a typed error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ._errors import InvalidInput

_SURROGATE = re.compile("[\ud800-\udfff]")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def utf8_text(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (no lone surrogate): enough for bytes that are hashed, never stored."""
    return text.isascii() or _SURROGATE.search(text) is None


def storable_text(text: str) -> bool:
    """Whether every store can hold ``text``: UTF-8, and no NUL."""
    return _UNSTORABLE.search(text) is None


def check_storable(text: str, what: str) -> str:
    """``text`` if every store can hold it; else :class:`InvalidInput` naming ``what``, before any write."""
    if not storable_text(text):
        raise InvalidInput(f"{what} holds a lone surrogate or NUL, which no store holds")
    return text


def holds_unstorable_text(parsed: Any) -> bool:
    """Whether any str in parsed JSON (keys included) is not :func:`storable_text`.

    Iterative, so a deeply nested body cannot exhaust the stack, and it visits each container once, so a
    caller's mapping that refers to itself ends.
    """
    pending, seen = [parsed], set()
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if not storable_text(item):
                return True
            continue
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, Mapping):
            pending.extend(item)
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return False
