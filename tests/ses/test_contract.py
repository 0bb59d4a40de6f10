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


def test_public_api() -> None:
    assert ses_safe.__all__ == [
        "adapter_from_env",
        "client",
        "SafeSESClient",
        "SafeSESv2Client",
        "INTENT_KWARG",
        "boundary_config",
        "SesAdapter",
        "SendPayload",
        "PROVIDER",
        "CONTRACTS",
        "send_contract",
        "classify",
        "FINAL_CODES",
        "RETRYABLE_CODES",
        "INTENT_TAG",
        "TENANT_TAG",
        "intent_tag",
        "tenant_tag",
        "ingest_event",
        "unwrap",
        "IngestOutcome",
        "IngestResult",
        "SQSEventPoller",
        "MissingConfigurationSet",
        "ReservedTagName",
    ]
    assert ses_safe.testing.__all__ == [
        "MotoFaultProxy",
        "is_send",
        "moto_sent_messages",
        "reset_moto",
        "ses_event",
        "sns_envelope",
        "intent_tags",
    ]
    for name in ses_safe.__all__:
        assert getattr(ses_safe, name) is not None
