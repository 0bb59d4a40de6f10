"""When a resolution needs a second operator: amounts at or above a per-currency threshold, read from the summary."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from ._errors import InvalidInput

ENV_THRESHOLDS = "SAFE_EFFECTS_APPROVAL_THRESHOLDS"
ANY_CURRENCY = "*"


_MAX_DIGITS = 30  # far beyond any amount; a longer one is no amount (and int() refuses over 4,300 digits)


def _minor_units(text: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also accepts ``²`` or ``٣``, which ``int()`` then refuses or reads."""
    return text.isascii() and text.isdigit() and len(text) <= _MAX_DIGITS


@dataclass(frozen=True, slots=True)
class ApprovalThresholds:
    """Minor-unit amounts per lower-case currency (``*`` for any other); empty means no two-person rule."""

    limits: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> ApprovalThresholds:
        """Read ``usd=100000,eur=100000`` (amounts in minor units, as the provider's ``amount`` field)."""
        limits: dict[str, int] = {}
        for item in filter(None, (part.strip() for part in text.split(","))):
            currency, sep, amount = item.partition("=")
            currency = currency.strip().lower()
            if not sep or not currency or not _minor_units(amount.strip()):
                raise InvalidInput(f"approval threshold {item!r} must look like usd=100000 (minor units)")
            limits[currency] = int(amount)
        return cls(limits)

    @classmethod
    def configured(cls, *options: str, env: Mapping[str, str] = os.environ) -> ApprovalThresholds:
        """The environment's thresholds tightened by ``options``: a command line can lower them, never raise them."""
        result = cls.parse(env.get(ENV_THRESHOLDS, ""))
        for option in options:
            result = result.stricter(cls.parse(option))
        return result

    def stricter(self, other: ApprovalThresholds) -> ApprovalThresholds:
        """These thresholds, lowered (never raised) by ``other``'s.

        Without any threshold there is no two-person rule, so ``other`` applies as given. Otherwise, for every
        currency either side names (and the ``*`` catch-all), what applies now is this currency's threshold,
        else the ``*`` catch-all, else none ("always needs approval"); what ``other`` proposes for it is its own
        threshold for that currency, else its catch-all; the proposal replaces it only when lower. So
        ``usd=999999999`` cannot lift usd above a ``*=100000`` catch-all, ``eur=...`` cannot switch off the
        fail-safe for a currency without a threshold, and ``*=50`` lowers a named ``usd=100000`` too.
        """
        if not self.limits:
            return ApprovalThresholds(dict(other.limits))
        merged = dict(self.limits)
        for currency in set(self.limits) | set(other.limits):
            applies = self.limits.get(currency, self.limits.get(ANY_CURRENCY))
            proposed = other.limits.get(currency, other.limits.get(ANY_CURRENCY))
            if applies is not None and proposed is not None and proposed < applies:
                merged[currency] = proposed
        return ApprovalThresholds(merged)

    def requires_approval(self, summary: Mapping[str, str]) -> str | None:
        """Why a second operator is needed for a record with this summary, or None.

        Fails safe: an amount that is not an integer, or in a currency without a threshold, needs approval.
        A summary without an amount (an email) never does; a provider package marks a money movement whose
        call names no amount with a non-integer one (stripe_safe: ``"unknown"``), so that it does.
        """
        if not self.limits or "amount" not in summary:
            return None
        amount, currency = summary["amount"].strip(), summary.get("currency", "").strip().lower()
        if not _minor_units(amount):
            return f"amount {amount!r} is not an integer in minor units"
        limit = self.limits.get(currency, self.limits.get(ANY_CURRENCY))
        if limit is None:
            return f"currency {currency or '(none)'!r} has no configured threshold"
        if int(amount) >= limit:
            return f"amount {amount} {currency} is at or above the {limit} {currency} threshold"
        return None
