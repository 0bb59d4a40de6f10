"""ses_safe: boto3 SES and SESv2 clients whose sends go through the safe-effects ledger exactly once."""

from ._adapter import SendPayload, SesAdapter
from ._classify import CREDENTIAL_CODES, FINAL_CODES, RETRYABLE_CODES, classify
from ._client import (
    INTENT_KWARG,
    ClientOptions,
    MissingConfigurationSet,
    SafeEffectsMarker,
    SafeSESClient,
    SafeSESv2Client,
    SendResponse,
    boundary_config,
    client,
)
from ._contract import CONTRACTS, PROVIDER, send_contract
from ._events import IngestOutcome, IngestResult, UntrustedTopic, event_verdict, ingest_event, unwrap
from ._from_env import adapter_from_env
from ._poller import SQSEventPoller
from ._publishing import CONFIRMING_EVENTS, REJECTING_EVENTS, EventPublishing, check_event_publishing
from ._sns_signature import SnsCertificateUnavailable, SnsSignatureInvalid, SnsSignatures
from ._tags import INTENT_TAG, TENANT_TAG, ReservedTagName, intent_tag, tenant_tag

__all__ = [
    "adapter_from_env",
    # clients
    "client",
    "SafeSESClient",
    "SafeSESv2Client",
    "ClientOptions",
    "SendResponse",
    "SafeEffectsMarker",
    "INTENT_KWARG",
    "boundary_config",
    # provider seam
    "SesAdapter",
    "SendPayload",
    "PROVIDER",
    "CONTRACTS",
    "send_contract",
    "classify",
    "FINAL_CODES",
    "RETRYABLE_CODES",
    "CREDENTIAL_CODES",
    # tags
    "INTENT_TAG",
    "TENANT_TAG",
    "intent_tag",
    "tenant_tag",
    # events
    "ingest_event",
    "event_verdict",
    "unwrap",
    "IngestOutcome",
    "IngestResult",
    "SQSEventPoller",
    "SnsSignatures",
    "check_event_publishing",
    "EventPublishing",
    "CONFIRMING_EVENTS",
    "REJECTING_EVENTS",
    # errors
    "MissingConfigurationSet",
    "ReservedTagName",
    "UntrustedTopic",
    "SnsSignatureInvalid",
    "SnsCertificateUnavailable",
]
