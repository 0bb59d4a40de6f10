"""The ``ledger=`` a wrapper is built with, checked at construction rather than at its first write."""

from __future__ import annotations

from ._errors import InvalidInput
from ._ledger import Ledger


def check_ledger(ledger: object, where: str) -> Ledger:
    """Return ``ledger`` if it is a :class:`Ledger`; else :class:`InvalidInput` naming ``where`` it was passed.

    ``None`` (an unset setting) would otherwise pass construction and fail the first send with an
    ``AttributeError``, far from the mistake.
    """
    if not isinstance(ledger, Ledger):
        raise InvalidInput(
            f"{where} needs ledger=Ledger.open(store_url) (a safe_effects.Ledger), got {type(ledger).__name__}"
        )
    return ledger
