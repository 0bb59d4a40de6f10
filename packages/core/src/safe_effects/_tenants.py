"""Tenant ids: validated before they get anywhere near a query or a key."""

from __future__ import annotations

import re

from ._errors import InvalidTenant

DEFAULT_TENANT = "default"
_TENANT = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def check_tenant(tenant: object) -> str:
    """Return ``tenant`` if it is a str of 1-64 chars from ``[A-Za-z0-9_.-]``; else :class:`InvalidTenant`."""
    if not isinstance(tenant, str):
        raise InvalidTenant(f"tenant must be a str, got {type(tenant).__name__}")
    if not _TENANT.fullmatch(tenant):
        raise InvalidTenant(f"tenant {tenant[:80]!r} must be 1-64 characters from [A-Za-z0-9_.-]")
    return tenant
