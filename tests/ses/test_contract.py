"""The SES contract as data, and the public surface pinned so it changes only on purpose."""

from __future__ import annotations

from datetime import UTC, datetime

import ses_safe
import ses_safe.testing
from safe_effects import LookupKind


def test_every_send_operation_has_a_contract_without_idempotency_or_replay() -> None:
    now = datetime.now(UTC)
    for operation in ("ses.send_email", "ses.send_raw_email", "sesv2.send_email"):
        contract = ses_safe.send_contract(operation)
        assert contract == ses_safe.CONTRACTS[operation]
        assert not contract.idempotency.supported
        assert contract.idempotency.retention is None
        assert not contract.can_replay(now, now)
        assert not contract.redispatch_when_proven_absent
        assert contract.forced_sdk_settings["retries.total_max_attempts"] == "1"
        assert all(source.startswith("https://docs.aws.amazon.com/") for source in contract.sources)


def test_no_lookup_can_prove_absence() -> None:
    contract = ses_safe.send_contract("sesv2.send_email")
    assert {m.kind for m in contract.lookups} == {LookupKind.EVENT_STREAM, LookupKind.RETRIEVE}
    assert not any(m.proves_absence for m in contract.lookups)
