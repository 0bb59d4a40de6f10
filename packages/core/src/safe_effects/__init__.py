"""safe-effects: a durable effect ledger that stops double charges and duplicate sends."""

from ._adapter import LOOKUP_ERROR, EffectRequest, LookupResult, LookupStatus, Outcome, ProviderAdapter, Verdict
from ._adapter_registry import ENTRY_POINT_GROUP, RegisteredAdapters, load_adapters
from ._approvals import Approval, ApprovalState
from ._clock import Clock, system_clock
from ._clock_skew import DEFAULT_MAX_CLOCK_SKEW
from ._contract import (
    ConcurrentSameKey,
    IdempotencyContract,
    LookupKind,
    LookupMethod,
    ParameterMatching,
    ProviderContract,
)
from ._crash import CrashPlan, CrashPoint, SimulatedCrash
from ._deploy_check import DeployCheck
from ._digest import bytes_digest, canonical_json, request_digest
from ._errors import (
    ApprovalError,
    ClockSkewed,
    EarlierVersionInDoubt,
    EffectDeferred,
    EffectInProgress,
    EffectOutcome,
    EffectRejected,
    EffectUnknown,
    IllegalTransition,
    IntentConflict,
    IntentNotFound,
    InvalidInput,
    InvalidIntentKey,
    InvalidTenant,
    LeaseLost,
    LedgerClosed,
    LedgerCorrupt,
    LedgerUnavailable,
    MigrationsPending,
    MissingDependency,
    MissingIntentKey,
    SafeEffectsError,
    StaleRecord,
    StoreNotReady,
    StorePermissionDenied,
    UndigestibleRequest,
    UnguardedCall,
    UnknownTenant,
)
from ._evidence_rules import OCCURRED_AT
from ._keys import IntentKey
from ._ledger import Ledger, LedgerOptions
from ._ledger_check import check_ledger
from ._metrics import PrometheusObserver, StoreCollector
from ._observer import NullObserver, Observer
from ._operator import Decision, Operator
from ._policies import LeasePolicy, RetryPolicy
from ._postgres import PostgresStore
from ._purge import PurgeReport, purge_settled
from ._reconciler import ReconcileItem, Reconciler, ReconcileReport
from ._records import AuditEntry, EffectRecord, Evidence, EvidenceVerdict, Receipt, Resolution
from ._sqlite import SQLiteStore
from ._states import TERMINAL, TRANSITIONS, UNSETTLED, EffectStatus, check_transition
from ._store import Store
from ._store_url import open_store
from ._tenants import DEFAULT_TENANT, check_tenant
from ._text import holds_unstorable_text
from ._thresholds import ApprovalThresholds

__all__ = [
    # the executor
    "Ledger",
    "LedgerOptions",
    "check_ledger",
    "RetryPolicy",
    "LeasePolicy",
    "Observer",
    "NullObserver",
    "CrashPlan",
    "CrashPoint",
    "SimulatedCrash",
    # stores
    "Store",
    "SQLiteStore",
    "PostgresStore",
    "open_store",
    # keys, digests, tenants
    "IntentKey",
    "request_digest",
    "bytes_digest",
    "canonical_json",
    "DEFAULT_TENANT",
    "check_tenant",
    "holds_unstorable_text",
    # records and states
    "EffectStatus",
    "TRANSITIONS",
    "TERMINAL",
    "UNSETTLED",
    "check_transition",
    "EffectRecord",
    "AuditEntry",
    "Evidence",
    "EvidenceVerdict",
    "OCCURRED_AT",
    "Receipt",
    "Resolution",
    # provider seam
    "ProviderContract",
    "IdempotencyContract",
    "LookupMethod",
    "LookupKind",
    "ParameterMatching",
    "ConcurrentSameKey",
    "ProviderAdapter",
    "EffectRequest",
    "Verdict",
    "Outcome",
    "LookupResult",
    "LookupStatus",
    "LOOKUP_ERROR",
    "DeployCheck",
    "Clock",
    "system_clock",
    "DEFAULT_MAX_CLOCK_SKEW",
    # operations: reconciler, operator actions, two-person rule, metrics, purge
    "Reconciler",
    "ReconcileReport",
    "ReconcileItem",
    "Operator",
    "Decision",
    "Approval",
    "ApprovalState",
    "ApprovalThresholds",
    "PrometheusObserver",
    "StoreCollector",
    "purge_settled",
    "PurgeReport",
    "load_adapters",
    "RegisteredAdapters",
    "ENTRY_POINT_GROUP",
    # errors
    "SafeEffectsError",
    "InvalidInput",
    "InvalidIntentKey",
    "UndigestibleRequest",
    "InvalidTenant",
    "UnknownTenant",
    "MissingIntentKey",
    "IntentConflict",
    "EarlierVersionInDoubt",
    "IllegalTransition",
    "StaleRecord",
    "IntentNotFound",
    "EffectOutcome",
    "EffectUnknown",
    "EffectRejected",
    "EffectDeferred",
    "EffectInProgress",
    "LeaseLost",
    "LedgerUnavailable",
    "ClockSkewed",
    "LedgerClosed",
    "StoreNotReady",
    "MigrationsPending",
    "StorePermissionDenied",
    "LedgerCorrupt",
    "ApprovalError",
    "UnguardedCall",
    "MissingDependency",
]
