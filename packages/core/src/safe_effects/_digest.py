"""Request digests: SHA-256 over one canonical JSON form, so the same request always hashes the same.

Canonical form: object keys sorted, compact separators, UTF-8 (no ASCII escaping), ints and floats kept
distinct (``1`` vs ``1.0``), NaN and Infinity refused, bool is JSON true/false. Lists and tuples are arrays.
``Decimal`` is refused rather than canonicalised: ``Decimal("1.0")`` and ``Decimal("1.00")`` compare equal
but mean different things to different providers, so the caller must choose an int (minor units) or a str.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from ._errors import UndigestibleRequest
from ._text import utf8_text

DIGEST_PREFIX = "sha256:"
# one encoder for good: json.dumps with options builds a new JSONEncoder on every call
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _problem(value: Any) -> tuple[list[str], str] | None:
    """Why ``value`` is not canonical JSON, with the path to it (innermost segment first), or None.

    Paths are only built on the way back up from a problem: the common, valid request pays for none.
    """
    if value is None or isinstance(value, bool | int):
        return None
    if isinstance(value, str):
        return None if utf8_text(value) else ([], "holds a lone surrogate, which is not UTF-8 text")
    if isinstance(value, float):
        return None if math.isfinite(value) else ([], f"is {value!r}: NaN and Infinity are not JSON")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return [], f"has a non-string key {key!r} ({type(key).__name__})"
            if not utf8_text(key):
                return [], f"has a key with a lone surrogate {key!r}, which is not UTF-8 text"
            if (found := _problem(item)) is not None:
                found[0].append(f".{key}")
                return found
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            if (found := _problem(item)) is not None:
                found[0].append(f"[{index}]")
                return found
        return None
    hint = " (use int minor units or a str)" if type(value).__name__ == "Decimal" else ""
    return [], f"is a {type(value).__name__}, which is not JSON{hint}"


def _dotted(segments: list[str]) -> str:
    """``[".price", "[1]", ".items"]`` (innermost first) -> ``items[1].price``."""
    return "".join(reversed(segments)).removeprefix(".")


def canonical_json(params: Any) -> bytes:
    """The exact bytes the digest is computed over; raises :class:`UndigestibleRequest` naming the path."""
    try:
        found = _problem(params)
    except RecursionError:  # nesting deeper than the interpreter's stack: no provider takes such a request
        raise UndigestibleRequest("", "is nested too deeply to digest") from None
    if found is not None:
        raise UndigestibleRequest(_dotted(found[0]), found[1])
    return _CANONICAL.encode(params).encode()


def request_digest(params: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON form of ``params``."""
    return DIGEST_PREFIX + hashlib.sha256(canonical_json(params)).hexdigest()


def bytes_digest(data: bytes | str) -> str:
    """``sha256:<hex>`` of raw bytes (a str is UTF-8 encoded): for bodies and payloads kept as sent."""
    return DIGEST_PREFIX + hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()
