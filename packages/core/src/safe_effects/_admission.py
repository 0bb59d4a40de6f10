"""What refuses a call before anything is recorded: a refusal here writes nothing and sends nothing.

Each check reads only what it is given; :meth:`Ledger.execute` and :meth:`Ledger.prepare` run them once the
request is validated and before the record is inserted.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from ._adapter import EffectRequest, ProviderAdapter, refusal_of
from ._contract import ConcurrentSameKey, ProviderContract
from ._errors import EarlierVersionInDoubt, InvalidInput
from ._keys import SEPARATOR
from ._policies import LeasePolicy
from ._records import EffectRecord
from ._states import EffectStatus as S
from ._store import Store

_log = logging.getLogger("safe_effects")

# a new version of a key waits for the earlier ones that may have acted, or may still be sent by a relay or an
# older worker (EarlierVersionInDoubt): the nearest ten are read, one primary-key read each, only past v1
_EARLIER_VERSIONS_CHECKED = 10
_IN_DOUBT = frozenset({S.UNKNOWN, S.IN_FLIGHT, S.PREPARED})


def answer_margin(contract: ProviderContract, max_skew: timedelta | None) -> timedelta:
    """How long before its lease lapses an attempt must start for a normal answer to come back inside the lease.

    Where only the lease keeps a second send away (no keys, or keys the provider runs twice when the same one
    comes in while the first is in progress, and a lookup's "absent" reopens the intent), a request still out
    when the lease lapses can be taken over, found absent and sent again: its normal response window, plus twice
    the allowed clock skew (two workers each within it of the database may be twice that apart, one judging
    the other's lease). Elsewhere nothing: a resend while the first is live is refused, or never made."""
    keys = contract.idempotency
    if (keys.supported and keys.concurrent_same_key is ConcurrentSameKey.CONFLICT) or (
        not contract.redispatch_when_proven_absent
    ):
        return timedelta(0)
    return contract.normal_response_window + 2 * (max_skew or timedelta(0))


def refuse_short_lease(lease: LeasePolicy, contract: ProviderContract, max_skew: timedelta | None) -> None:
    """A lease that a normal answer to the first attempt can outlast, where that lets a live call be taken over
    and sent again (see :func:`answer_margin`); retries keep to the same margin (``Ledger._dispatch``)."""
    margin = answer_margin(contract, max_skew)
    if lease.duration > margin or not margin:
        return
    skew = margin - contract.normal_response_window
    allowing = f" plus twice the allowed clock skew ({skew.total_seconds():g} s)" if skew else ""
    raise InvalidInput(
        f"the lease ({lease.duration.total_seconds():g} s) must outlast {contract.provider}'s normal "
        f"response window ({contract.normal_response_window.total_seconds():g} s){allowing}: without keys that "
        "refuse a resend while the first call is in progress, and with lookups whose 'absent' sends the intent "
        "again, a call still waiting for its answer would be taken over and sent twice; give the Ledger a "
        "longer LeasePolicy(duration=...)"
    )


def refuse_while_earlier_in_doubt(store: Store, fresh: EffectRecord) -> None:
    """A new version of a key is refused while one of the versions before it may have acted unseen, or is
    prepared and may still be sent (:class:`EarlierVersionInDoubt`); a version already recorded goes on (a
    retry, a reconciliation)."""
    *head, version = fresh.intent_key.parts
    number = int(version[1:])
    # from v1 (the first version by convention; a v1 reads nothing) up to this one, the nearest first
    for earlier_number in range(number - 1, max(number - _EARLIER_VERSIONS_CHECKED, 1) - 1, -1):
        earlier = store.get(fresh.tenant, SEPARATOR.join([*head, f"v{earlier_number}"]))
        if earlier is None or earlier.status not in _IN_DOUBT:
            continue
        if store.get(fresh.tenant, fresh.intent_key) is not None:
            return
        refusal = EarlierVersionInDoubt(
            fresh.tenant, fresh.intent_key, earlier.intent_key, earlier.status.value, earlier.provider
        )
        _log.warning("%s", refusal)
        raise refusal


def version_in_doubt(fresh: EffectRecord, other: Sequence[str] | None) -> EarlierVersionInDoubt:
    """The refusal of ``fresh`` when the database refused its insert: another version of its action is unsettled.

    ``refuse_while_earlier_in_doubt`` reads before the insert, so two processes starting v1 and v2 at once both
    passed it; the index refuses the second insert. ``other`` is that version as read after the refusal
    (intent key, status, provider), None when it settled in between."""
    key, status, provider = other if other is not None else ("another version of this action", "unsettled", "")
    refusal = EarlierVersionInDoubt(fresh.tenant, fresh.intent_key, key, status, provider or fresh.provider)
    _log.warning("%s", refusal)
    return refusal


def refuse_unsendable(store: Store, adapter: ProviderAdapter[Any], request: EffectRequest, fresh: EffectRecord) -> None:
    """A new intent the adapter says it cannot send is refused before anything is recorded: recorded, even
    as rejected, it would hold the key (and name a compensation on its original) against the adapter that
    can send it. An intent already recorded goes on as before: answered from the ledger, or reconciled."""
    why = refusal_of(adapter, request)
    if why is not None and store.get(fresh.tenant, fresh.intent_key) is None:
        raise InvalidInput(f"intent {fresh.intent_key!r}: {why}; nothing was recorded")
