"""Assert both sides of an effect at once, the provider's count and the ledger's record; a failure shows both."""

from __future__ import annotations

from safe_effects._keys import IntentKey
from safe_effects._ledger import Ledger
from safe_effects._records import EffectRecord
from safe_effects._states import EffectStatus
from safe_effects._tenants import DEFAULT_TENANT


def _ledger_side(record: EffectRecord | None) -> str:
    if record is None:
        return "no record"
    resolution = record.resolution.method if record.resolution is not None else None
    return (
        f"{record.status.value}, provider_result_id={record.provider_result_id!r}, attempts={record.attempt_count}, "
        f"resolution={resolution!r}, last_error={record.last_error_class!r}/{record.last_error_code!r}"
    )


def assert_effect(
    ledger: Ledger,
    intent_key: IntentKey | str,
    *,
    status: EffectStatus | str,
    provider_effects: int,
    expected_effects: int = 1,
    tenant: str = DEFAULT_TENANT,
) -> EffectRecord:
    """The ledger holds ``intent_key`` in ``status`` and the provider did ``expected_effects``; returns the record.

    Whatever is expected, a ``confirmed`` record with other than exactly one provider effect fails: that is
    the one outcome the ledger exists to rule out, so no ``expected_effects`` can make it pass.
    """
    want = EffectStatus(status)
    record = ledger.store.get(tenant, IntentKey.parse(intent_key))
    broken = record is not None and record.status is EffectStatus.CONFIRMED and provider_effects != 1
    if not broken and record is not None and record.status is want and provider_effects == expected_effects:
        return record
    invariant = f"\n  never confirmed with {provider_effects} provider effects: exactly one" if broken else ""
    raise AssertionError(
        f"effect check failed for intent {str(intent_key)!r} (tenant {tenant!r}):\n"
        f"  provider side: {provider_effects} effect(s), expected {expected_effects}\n"
        f"  ledger side:   {_ledger_side(record)}; expected {want.value}{invariant}"
    )
