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

from ._errors import InvalidInput, UndigestibleRequest
from ._text import holds_unstorable_text, utf8_text

DIGEST_PREFIX = "sha256:"
# one encoder for good: json.dumps with options builds a new JSONEncoder on every call
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


# Python refuses to write an int of more than sys.get_int_max_str_digits() digits (4300 by default, and at
# least 640); under 2,100 bits (632 digits) an int is always writable, so only a longer one is tried
_BITS_ALWAYS_WRITABLE = 2100
_TOO_LONG = "is an integer with more digits than Python writes (sys.get_int_max_str_digits())"


def _writable(value: int) -> bool:
    try:
        str(value)
    except ValueError:
        return False
    return True


def _problem(value: Any) -> tuple[list[str], str] | None:
    """Why ``value`` is not canonical JSON, with the path to it (innermost segment first), or None.

    Paths are only built on the way back up from a problem: the common, valid request pays for none.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return None if value.bit_length() < _BITS_ALWAYS_WRITABLE or _writable(value) else ([], _TOO_LONG)
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


def _json_problem(value: Any) -> tuple[str, str] | None:
    """(path, problem) when ``value`` is not plain JSON, else None."""
    try:
        found = _problem(value)
    except RecursionError:  # nesting deeper than the interpreter's stack: no provider takes such a request
        return "", "is nested too deeply to digest"
    return None if found is None else (_dotted(found[0]), found[1])


_CONTAINERS = (dict, list, tuple)


def _keys_are_text(value: Any) -> bool:
    """Whether every object key inside ``value`` is a str: json writes the keys ``1`` and ``"1"`` alike."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or (isinstance(item, _CONTAINERS) and not _keys_are_text(item)):
                return False
        return True
    if isinstance(value, list | tuple):
        return all(_keys_are_text(item) for item in value if isinstance(item, _CONTAINERS))
    return True


def canonical_json(params: Any) -> bytes:
    """The exact bytes the digest is computed over; raises :class:`UndigestibleRequest` naming the path.

    The encoder refuses what is not JSON by itself (NaN, a Decimal, a lone surrogate as it is encoded to
    UTF-8) except keys that are not str, checked after it; only a refusal walks the request to name the path.
    """
    try:
        data = _CANONICAL.encode(params).encode()
        if _keys_are_text(params):
            return data
    except (TypeError, ValueError, RecursionError):  # a UnicodeEncodeError is a ValueError
        pass
    raise UndigestibleRequest(*(_json_problem(params) or ("", "cannot be written as canonical JSON")))


def check_plain_json(value: Any, what: str) -> None:
    """:class:`InvalidInput` naming ``what`` unless ``value`` is plain JSON that every store holds.

    For what the ledger stores as JSON besides a request (audit detail, a resolution, evidence detail):
    SQLite would keep a NaN that no JSON reader takes back, and PostgreSQL refuses it, and NUL, inside its write.
    """
    if (found := _json_problem(value)) is not None:
        path, problem = found
        raise InvalidInput(f"{what}{f' at {path}' if path else ''} {problem}")
    if holds_unstorable_text(value):
        raise InvalidInput(f"{what} holds a lone surrogate or NUL, which no store holds")


def request_digest(params: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON form of ``params``."""
    return DIGEST_PREFIX + hashlib.sha256(canonical_json(params)).hexdigest()


def bytes_digest(data: bytes | str) -> str:
    """``sha256:<hex>`` of raw bytes (a str is UTF-8 encoded): for bodies and payloads kept as sent."""
    return DIGEST_PREFIX + hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()
