"""A refund sent as the compensation of an intent must refund that intent's payment: linked to a refund of
another payment, the original would be marked compensated while its money stayed taken."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from safe_effects import EffectRecord, InvalidInput

REFUND = "refunds.create"
# what a refund's params name as the payment it refunds, by the id prefixes Stripe gives that kind of object
_PREFIXES = {"payment_intent": ("pi_",), "charge": ("ch_", "py_")}


def _kind(object_id: str) -> str | None:
    return next((param for param, prefixes in _PREFIXES.items() if object_id.startswith(prefixes)), None)


def check_refund_target(
    original: EffectRecord, params: Mapping[str, Any], intent_of_charge: Callable[[str], object]
) -> None:
    """Refuse (:class:`InvalidInput`) a refund of a PaymentIntent or Charge other than the one ``original`` made.

    A named object of the other kind than the original's is compared through the charge's ``payment_intent``
    (``intent_of_charge`` reads it): a PaymentIntent's refund by its charge is the same payment. An original
    that made neither (no id recorded, an invoice paid) leaves nothing to compare.
    """
    made = original.provider_result_id
    kind = _kind(made or "")
    if made is None or kind is None:
        return
    for param in _PREFIXES:
        named = params.get(param)
        if not isinstance(named, str):
            continue
        if param == kind:
            same = named == made
        else:
            charge, intent = (named, made) if param == "charge" else (made, named)
            same = intent_of_charge(charge) == intent
        if not same:
            raise InvalidInput(
                f"{REFUND} as the compensation of {original.intent_key!r} refunds {param} {named}, but that intent "
                f"made {kind} {made}: linked to it, a refund of another payment would mark it compensated while "
                "its money stays taken; nothing was recorded or sent"
            )
