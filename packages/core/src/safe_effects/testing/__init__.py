"""Test helpers shipped with safe-effects: a movable clock, the HTTP fake every provider fake builds on, crash
traps, both-sides assertions and fault cassettes (vcrpy, ``safe-effects[testing]``, imported only when used)."""

# the safe_options fixture's type, for annotating a test with it (the plugin's own module is private)
from safe_effects._plugin._options import SafeEffectsOptions

from ._assertions import assert_effect
from ._cassettes import (
    CassetteReplay,
    EffectRule,
    ReplayCall,
    ReplayedRequest,
    ReplayFault,
    ReplayFaultKind,
    fault_cassette,
    write_succeeded,
)
from ._clock import FakeClock
from ._crash_kit import CrashKit, Trap
from ._events import RecordingObserver
from ._generic_fake import (
    FakeDeclined,
    FakeEffect,
    FakeFailure,
    FakeRateLimited,
    FakeRefused,
    FakeServerError,
    FakeTimeout,
    GenericFakeAdapter,
    GenericFakeProvider,
    generic_contract,
)
from ._http_fake import Exchange, FakeHTTPServer, FakeRequest, FakeResponse, Fault, FaultKind
from ._watch import FaultWatch

__all__ = [
    "FakeClock",
    "RecordingObserver",
    "FakeHTTPServer",
    "FakeRequest",
    "FakeResponse",
    "Exchange",
    "Fault",
    "FaultKind",
    "GenericFakeProvider",
    "GenericFakeAdapter",
    "generic_contract",
    "FakeEffect",
    "FakeFailure",
    "FakeTimeout",
    "FakeRefused",
    "FakeRateLimited",
    "FakeDeclined",
    "FakeServerError",
    # the pytest plugin's helpers
    "assert_effect",
    "CrashKit",
    "Trap",
    "FaultWatch",
    "SafeEffectsOptions",
    # fault cassettes
    "fault_cassette",
    "CassetteReplay",
    "ReplayFault",
    "ReplayFaultKind",
    "ReplayCall",
    "ReplayedRequest",
    "EffectRule",
    "write_succeeded",
]
