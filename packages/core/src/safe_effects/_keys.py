"""Intent keys name the customer-visible action, never an attempt: ``invoice:inv_42:collect:v1``."""

from __future__ import annotations

import hashlib
import re
from typing import Any, Self

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

from ._errors import InvalidIntentKey

SEPARATOR = ":"
MAX_KEY_LENGTH = 255  # Stripe's Idempotency-Key limit, the strictest provider we wrap
MAX_TAG_LENGTH = 256  # SES tag values
# from v1, without leading zeros: "v01" beside "v1" would be a second key for one version of the action, and
# what refuses a new version while an earlier one is in doubt (EarlierVersionInDoubt) reads versions by number
_VERSION = re.compile(r"v[1-9][0-9]*")
# the common case in one match: printable ASCII parts without spaces or separators, then a version part
_PLAIN_KEY = re.compile(r"[!-9;-~]+(?::[!-9;-~]+){2,}:v[1-9][0-9]*")
_TAG_SAFE = re.compile(r"[A-Za-z0-9]")


def _check_part(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidIntentKey(
            f"intent key part {name} must be a str, got {type(value).__name__} {value!r:.40}: pass ids as text "
            "(str(1001)); only version= also takes an int (version=2)"
        )
    if not value:
        raise InvalidIntentKey(f"intent key part {name} is empty")
    if SEPARATOR in value:
        raise InvalidIntentKey(f"intent key part {name}={value!r} contains the separator {SEPARATOR!r}")
    for char in value:
        if not char.isprintable() or char.isspace():
            raise InvalidIntentKey(
                f"intent key part {name}={value!r} contains a control or whitespace character {char!r}"
            )
    return value


_MAX_VERSION = 2**63  # plenty for counted versions, and far within what Python writes as text (4,300 digits)
_VERSION_HINT = "'v1', 'v2', ... (from v1, no leading zeros)"


def _version_part(version: object) -> str:
    """``2`` or ``"v2"`` as the key's last part ``"v2"``: versions are counted, so an int is the natural bump."""
    part = version
    if isinstance(version, int) and not isinstance(version, bool):
        if not 1 <= version < _MAX_VERSION:  # not printed: Python refuses to write an int of 4,300+ digits
            raise InvalidIntentKey(f"intent key part version must be an int from 1 to {_MAX_VERSION - 1}")
        part = f"v{version}"
    if not isinstance(part, str):
        raise InvalidIntentKey(
            f"intent key part version must be an int like 2 or a str like 'v2', got {type(version).__name__}"
        )
    if not _VERSION.fullmatch(part):
        raise InvalidIntentKey(f"intent key part version={version!r} must look like {_VERSION_HINT} or be an int")
    return part


def _checked_key(value: object) -> str:
    """``value`` if it is a well-formed key, else :class:`InvalidIntentKey` naming what is wrong."""
    if not isinstance(value, str):
        raise InvalidIntentKey(f"intent key must be a str, got {type(value).__name__}")
    if not _PLAIN_KEY.fullmatch(value):  # what the part checks below accept, mostly decided in one match
        parts = value.split(SEPARATOR)
        if len(parts) < 4:
            raise InvalidIntentKey(f"intent key {value[:80]!r} needs at least 4 parts object_type:object_id:action:vN")
        names = ["object_type", "object_id", "action"] + [f"qualifier[{i}]" for i in range(len(parts) - 4)]
        for name, part in zip(names, parts[:-1], strict=True):
            _check_part(name, part)
        if not _VERSION.fullmatch(parts[-1]):
            raise InvalidIntentKey(f"intent key {value[:80]!r} must end in a version part like {_VERSION_HINT}")
    if len(value) > MAX_KEY_LENGTH:
        raise InvalidIntentKey(f"intent key is {len(value)} characters, the limit is {MAX_KEY_LENGTH}")
    return str(value)  # a str subclass's own methods must not come along


class IntentKey(str):
    """A validated intent key: ``object_type:object_id:action:vN`` (a str, so it stores and logs as one).

    Build it with :meth:`build` from business parts, or :meth:`parse` a stored one; ``IntentKey(text)`` checks
    as :meth:`parse` does, so every instance is a valid key. Extra qualifier parts between action and version
    (``order:o_1:ship:parcel_2:v1``) are allowed for multi-step actions.
    """

    __slots__ = ()

    def __new__(cls, value: object) -> Self:
        return str.__new__(cls, _checked_key(value))

    @classmethod
    def build(cls, object_type: str, object_id: str, action: str, *qualifiers: str, version: str | int = "v1") -> Self:
        """Join business parts into a key; each part is checked, the version is ``"v2"`` or ``2``."""
        parts = [
            _check_part("object_type", object_type),
            _check_part("object_id", object_id),
            _check_part("action", action),
        ]
        parts += [_check_part(f"qualifier[{i}]", q) for i, q in enumerate(qualifiers)]
        parts.append(_version_part(version))
        return cls(SEPARATOR.join(parts))

    @classmethod
    def parse(cls, value: object) -> Self:
        """Validate an existing key string (or pass an IntentKey through)."""
        if isinstance(value, cls):
            return value
        return cls(value)

    @classmethod
    def stored(cls, text: str) -> Self:
        """A key read back from the ledger, taken as written: an earlier release may have allowed what this one
        refuses for new intents (``v01``), and such a record must stay readable to be settled."""
        return str.__new__(cls, text)

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(self.split(SEPARATOR))

    def next_version(self) -> Self:
        """The same key one version up (``...:v1`` -> ``...:v2``): the usual key for a corrected action."""
        *head, version = self.parts
        return type(self)(SEPARATOR.join([*head, f"v{int(version[1:]) + 1}"]))

    def to_tag_safe(self) -> str:
        """Map to ``[A-Za-z0-9_-]{1,256}`` (SES tags) without ever mapping two keys to one value.

        Letters and digits stay, ``:`` becomes ``-``, every other character becomes ``_`` plus its code
        point as 2 hex digits (``__`` plus 6 for wider ones). The output decodes back uniquely, so the
        mapping is injective. A key whose escaped form exceeds 256 chars maps to ``_h`` + its SHA-256
        (``_h`` never appears in an escaped form because ``h`` is not a hex digit).
        """
        out: list[str] = []
        for char in self:
            if _TAG_SAFE.fullmatch(char):
                out.append(char)
            elif char == SEPARATOR:
                out.append("-")
            elif ord(char) <= 0xFF:
                out.append(f"_{ord(char):02x}")
            else:
                out.append(f"__{ord(char):06x}")
        escaped = "".join(out)
        if len(escaped) <= MAX_TAG_LENGTH:
            return escaped
        return "_h" + hashlib.sha256(self.encode()).hexdigest()

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        # an IntentKey passes as it is (records are built from parsed keys on the hot path); a str is parsed.
        # JSON holds no instances: pydantic-core before 2.10 refused an isinstance check in JSON mode
        parse = core_schema.no_info_after_validator_function(cls.parse, core_schema.str_schema())
        return core_schema.json_or_python_schema(
            json_schema=parse,
            python_schema=core_schema.union_schema([core_schema.is_instance_schema(cls), parse]),
            serialization=core_schema.to_string_ser_schema(),
        )
