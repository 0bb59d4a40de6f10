"""An operator's resolution checked against the provider itself, where its adapter is at hand.

An operator who found nothing in a dashboard may have searched the wrong account, or searched before the
provider's index caught up; resolved as rejected, the intent's job moves on to a new key and sends again. So a
resolution (and the approval that applies one) first looks the effect up, and refuses what the lookup
contradicts. ``--no-lookup`` (no adapters) leaves the decision to the operator's evidence alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from ._adapter import LookupResult, LookupStatus, ProviderAdapter
from ._contract import ProviderContract
from ._errors import InvalidInput
from ._records import EffectRecord
from ._response_window import may_still_run
from ._states import EffectStatus

_SKIP = "--no-lookup skips this check"


def refuse_what_the_provider_holds(
    adapters: Mapping[str, ProviderAdapter[Any]] | None,
    record: EffectRecord,
    to: EffectStatus,
    provider_result_id: str | None,
    *,
    now: datetime,
    max_skew: timedelta | None,
    asked_by: str | None = None,
) -> str:
    """What a lookup at ``record``'s provider showed, or why none was made (no adapter for the provider, or a
    prepared record: never sent, nothing to find).

    :class:`InvalidInput` when the lookup contradicts settling it as ``to``: a rejection of an effect it finds,
    or while the request may still be running (its normal response window, ``max_skew`` the ledger's allowed
    clock skew) or its index may not show it yet (within the lookup's lag of the send); a confirmation of one
    it refused (once the request can no longer be running), or naming another object than it finds.
    ``asked_by`` names who asked for the resolution when another operator approves it: the approver cannot
    change what was asked, only decline it, and the advice says so."""
    if adapters is None:
        return "not looked up (no adapters: --no-lookup)"
    if record.status is EffectStatus.PREPARED:
        return "not looked up: prepared, never sent"
    adapter = _adapter(adapters, record.provider)
    if adapter is None:
        return f"not looked up: no adapter for provider {record.provider!r} here"
    try:
        found = adapter.lookup(record)
    except Exception as failed:  # a provider down, a key revoked: the operator decides whether to wait
        raise InvalidInput(
            f"intent {record.intent_key!r}: the lookup at {record.provider} failed ({type(failed).__name__}: "
            f"{failed}); try again later, or pass --no-lookup to decide on your evidence alone"
        ) from failed
    contract = adapter.contract_for(record.operation)
    running = may_still_run(record, contract, max_skew, now)
    if to is EffectStatus.REJECTED:
        _refuse_rejecting(contract, record, found, now, running, asked_by=asked_by)
    elif to is EffectStatus.CONFIRMED:
        _refuse_confirming(record, found, provider_result_id, running, asked_by=asked_by)
    shown = f" {found.provider_result_id}" if found.provider_result_id else ""
    return f"looked up at {record.provider} ({found.method}): {found.status.value}{shown}"


def _instead(resolution: str, asked_by: str | None) -> str:
    """What to do instead: ``resolution`` for the resolving operator; an approver declines so that the one who
    asked can ask again."""
    return resolution if asked_by is None else f"decline the request, and {asked_by} may then {resolution}"


def _adapter(adapters: Mapping[str, ProviderAdapter[Any]], provider: str) -> ProviderAdapter[Any] | None:
    try:
        return adapters.get(provider)
    except InvalidInput as unbuilt:  # registered, but not configured here (its API key not set, say)
        raise InvalidInput(
            f"{unbuilt}; a resolution looks the effect up at the provider first: configure it, or pass "
            "--no-lookup to decide on your evidence alone"
        ) from unbuilt


def _refuse_rejecting(
    contract: ProviderContract,
    record: EffectRecord,
    found: LookupResult,
    now: datetime,
    running: str | None,
    *,
    asked_by: str | None,
) -> None:
    key, provider = record.intent_key, record.provider
    if found.status is LookupStatus.FOUND:
        raise InvalidInput(
            f"intent {key!r} cannot be resolved as rejected: a lookup at {provider} ({found.method}) found "
            f"{found.provider_result_id or 'it'}, so it acted; "
            f"{_instead('resolve it as confirmed with that id', asked_by)}, or check at the provider ({_SKIP})"
        )
    lags = [m.lag for m in contract.lookups if m.lag is not None]
    sent = record.dispatched_at or record.first_dispatched_at
    if found.status is LookupStatus.INCONCLUSIVE and lags and sent is not None and now < sent + max(lags):
        raise InvalidInput(
            f"intent {key!r} cannot be resolved as rejected yet: a lookup at {provider} ({found.method}) found "
            f"nothing, but it may lag up to {max(lags)} behind and the intent was sent at {sent}; look again "
            f"after {sent + max(lags)} ({_SKIP})"
        )
    if running:  # the shorter wait, named when the lag is not the longer one
        raise InvalidInput(
            f"intent {key!r} cannot be resolved as rejected yet: {running}, and until then a lookup at {provider} "
            f"({found.method}: {found.status.value}) shows the state before it; look again after that ({_SKIP})"
        )


def _refuse_confirming(
    record: EffectRecord,
    found: LookupResult,
    provider_result_id: str | None,
    running: str | None,
    *,
    asked_by: str | None,
) -> None:
    key, provider = record.intent_key, record.provider
    if found.status is LookupStatus.REFUSED and not running:  # a refusal seen while it runs may be an earlier one
        raise InvalidInput(
            f"intent {key!r} cannot be resolved as confirmed: a lookup at {provider} ({found.method}) found it "
            f"refused{f' ({found.provider_result_id})' if found.provider_result_id else ''}, so nothing was done; "
            f"{_instead('resolve it as rejected', asked_by)}, or check at the provider ({_SKIP})"
        )
    if found.status is LookupStatus.FOUND and found.provider_result_id not in (None, provider_result_id):
        raise InvalidInput(
            f"intent {key!r} cannot be confirmed as {provider_result_id!r}: a lookup at {provider} "
            f"({found.method}) found {found.provider_result_id}; "
            f"{_instead('resolve it with that --provider-id', asked_by)} ({_SKIP})"
        )
