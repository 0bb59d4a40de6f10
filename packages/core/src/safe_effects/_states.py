"""Effect states and the one table of allowed transitions."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from ._errors import IllegalTransition, InvalidInput


class EffectStatus(StrEnum):
    PREPARED = "prepared"  # intent recorded, nothing sent
    IN_FLIGHT = "in_flight"  # a worker holds a lease; the request may be on the wire
    CONFIRMED = "confirmed"  # the provider acted; provider result id recorded
    REJECTED = "rejected"  # the provider refused definitively; no effect
    UNKNOWN = "unknown"  # the provider may have acted; only reconciliation moves it on
    COMPENSATED = "compensated"  # a linked compensating intent was confirmed


S = EffectStatus

TRANSITIONS: Mapping[EffectStatus, frozenset[EffectStatus]] = {
    # claimed by a worker; UNKNOWN again when an intent reopened by a lookup is retried after the key window
    # that made the reopen safe has closed; REJECTED when an operator withdraws it (nothing was sent: an intent
    # the application has given up on, say one superseded by a new version, would otherwise stay open for good)
    S.PREPARED: frozenset({S.IN_FLIGHT, S.UNKNOWN, S.REJECTED}),
    # outcome of a dispatch; PREPARED when retryable refusals ran out before anything happened
    S.IN_FLIGHT: frozenset({S.CONFIRMED, S.REJECTED, S.UNKNOWN, S.PREPARED}),
    # reconciliation: lookup or operator settles it; IN_FLIGHT for a same-key replay; PREPARED when the
    # provider proves absence and its contract allows a redispatch
    S.UNKNOWN: frozenset({S.CONFIRMED, S.REJECTED, S.IN_FLIGHT, S.PREPARED}),
    # only through a separate, linked compensating intent; CONFIRMED again to name that compensation
    # (compensated_by) before it is sent, so one original never gets two compensations
    S.CONFIRMED: frozenset({S.COMPENSATED, S.CONFIRMED}),
    # an operator's correction, only on the provider's own evidence that it acted (a late answer or event)
    S.REJECTED: frozenset({S.CONFIRMED}),
    S.COMPENSATED: frozenset(),
}

TERMINAL: frozenset[EffectStatus] = frozenset({S.CONFIRMED, S.REJECTED, S.COMPENSATED})
UNSETTLED: frozenset[EffectStatus] = frozenset({S.PREPARED, S.IN_FLIGHT, S.UNKNOWN})


def check_transition(source: EffectStatus, target: EffectStatus, intent_key: str | None = None) -> None:
    """Raise :class:`IllegalTransition` unless ``source -> target`` is in :data:`TRANSITIONS`."""
    if target not in TRANSITIONS[source]:
        raise IllegalTransition(source.value, target.value, intent_key)


def settled_status(to: object) -> EffectStatus:
    """``to`` (an EffectStatus or its text) as what an unknown intent is settled to: confirmed or rejected."""
    if isinstance(to, str) and to in (S.CONFIRMED, S.REJECTED):
        return EffectStatus(to)
    raise InvalidInput(f"an unknown intent is settled as confirmed or rejected, not {to!r}")


def resolvable(status: EffectStatus, to: EffectStatus) -> bool:
    """Whether a record in ``status`` may be settled as ``to``: an unknown one either way; a prepared one only
    to rejected, withdrawn before anything was sent; a rejected one only to confirmed, as a correction (the
    caller checks the provider's evidence that it acted)."""
    return (
        status is S.UNKNOWN
        or (status is S.PREPARED and to is S.REJECTED)
        or (status is S.REJECTED and to is S.CONFIRMED)
    )
