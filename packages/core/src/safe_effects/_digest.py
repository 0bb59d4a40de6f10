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

DIGEST_PREFIX = "sha256:"


def _check(value: Any, path: str) -> None:
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise UndigestibleRequest(path, f"is {value!r}: NaN and Infinity are not JSON")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise UndigestibleRequest(path, f"has a non-string key {key!r} ({type(key).__name__})")
            _check(item, f"{path}.{key}" if path else key)
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check(item, f"{path}[{index}]")
        return
    hint = " (use int minor units or a str)" if type(value).__name__ == "Decimal" else ""
    raise UndigestibleRequest(path, f"is a {type(value).__name__}, which is not JSON{hint}")


def canonical_json(params: Any) -> bytes:
    """The exact bytes the digest is computed over; raises :class:`UndigestibleRequest` naming the path."""
    _check(params, "")
    return json.dumps(params, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def request_digest(params: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON form of ``params``."""
    return DIGEST_PREFIX + hashlib.sha256(canonical_json(params)).hexdigest()


def bytes_digest(data: bytes | str) -> str:
    """``sha256:<hex>`` of raw bytes (a str is UTF-8 encoded): for bodies and payloads kept as sent."""
    return DIGEST_PREFIX + hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()
