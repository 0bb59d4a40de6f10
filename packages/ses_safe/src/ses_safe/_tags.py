"""The SES message tags that carry an intent to the provider and back in every published event."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from safe_effects import IntentKey, InvalidInput

INTENT_TAG = "safe-effects-intent"
TENANT_TAG = "safe-effects-tenant"
RESERVED_TAGS = frozenset({INTENT_TAG, TENANT_TAG})
_KEEP = re.compile(r"[A-Za-z0-9-]")


class ReservedTagName(InvalidInput):
    """The caller's own tags use a name this package writes; sending would make the event ambiguous."""

    code = "reserved_tag_name"


def tenant_tag(tenant: str) -> str:
    """Tenant ids allow ``.`` and ``_``, SES tags do not: escape both injectively like ``to_tag_safe``."""
    return "".join(char if _KEEP.fullmatch(char) else f"_{ord(char):02x}" for char in tenant)


def intent_tag(intent_key: IntentKey) -> str:
    """The tag value (and ledger provider key) for an intent."""
    return intent_key.to_tag_safe()


def check_caller_tags(caller_tags: Sequence[Any] | None) -> None:
    """Refuse a caller tag that would shadow ours, before anything is recorded or sent."""
    for entry in caller_tags or ():
        if isinstance(entry, Mapping) and entry.get("Name") in RESERVED_TAGS:
            raise ReservedTagName(f"message tag {entry['Name']!r} is written by ses_safe; rename yours")


def with_intent_tags(caller_tags: Sequence[Any] | None, *, tenant: str, tag: str) -> list[Any]:
    """The caller's tags plus ours (the intent tag value is the ledger's provider key)."""
    return [*(caller_tags or ()), {"Name": INTENT_TAG, "Value": tag}, {"Name": TENANT_TAG, "Value": tenant_tag(tenant)}]


def first_tag(tags: object, name: str) -> str | None:
    """The first value of ``name`` in an event's ``mail.tags`` (``{name: [values]}``), if well-formed."""
    if not isinstance(tags, Mapping):
        return None
    values = tags.get(name)
    if isinstance(values, list) and values and isinstance(values[0], str):
        return values[0]
    return None
