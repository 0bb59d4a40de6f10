"""Every exception safe-effects raises, drawn once.

    SafeEffectsError
    ├── InvalidInput                  bad input: nothing was written
    │   ├── InvalidIntentKey          empty part, separator/control char, too long
    │   ├── UndigestibleRequest       a request value that is not JSON (names its path)
    │   ├── InvalidTenant             a tenant id outside [A-Za-z0-9_.-]{1,64}
    │   ├── UnknownTenant             a tenant not in the ledger's allow-list
    │   └── MissingIntentKey          a mutating call without an intent key
    ├── IntentConflict                same intent key, other request digest
    ├── EarlierVersionInDoubt         a new key version while an earlier one may have acted: not recorded
    ├── IllegalTransition             a state change the state machine forbids
    ├── StaleRecord                   the record moved on since it was read (conditional update lost)
    ├── LedgerUnavailable             the ledger's database did not answer (or refuses writes for now)
    │   └── ClockSkewed               this worker's clock disagrees with the database's: nothing written
    ├── LedgerClosed                  the ledger (or its store) was closed: open a new one
    ├── IntentNotFound                no record for (tenant, intent key)
    ├── EffectOutcome                 the caller's answer when an effect did not simply succeed
    │   ├── EffectUnknown             the provider may have acted: reconcile, never retry blindly
    │   ├── EffectRejected            the provider refused definitively: no effect
    │   ├── EffectDeferred            retryable refusals exhausted before any effect: safe to try later
    │   ├── EffectInProgress          another worker holds the intent; it did not finish in time
    │   └── LeaseLost                 a late answer, kept as evidence, did not settle the intent as it said
    ├── StoreNotReady                 the store is not set up for this release or role (migrate, grant)
    │   ├── MigrationsPending         schema migrations this release needs are not applied yet
    │   └── StorePermissionDenied     the database refused this role a statement (names the grant to ask for)
    ├── ApprovalError                 the two-person rule refused an operator action
    ├── UnguardedCall                 a wrapped client's call the ledger cannot guard (a raw request): refused
    └── MissingDependency             an optional extra is not installed
Each class carries a stable ``code`` for logs, metrics and the CLI's JSON output.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # _records imports _keys, which imports this module
    from ._records import EffectRecord


class SafeEffectsError(Exception):
    """Base class: catch this to catch everything the library raises on purpose."""

    code = "safe_effects_error"

    def __reduce__(self) -> tuple[object, ...]:
        """Pickled by message and attributes, not by re-running ``__init__``: most subclasses take keyword-only
        fields, which ``Exception``'s own pickling drops, so a worker process's ``EffectUnknown`` (a process
        pool, a job runner's result backend) came back as a ``TypeError``. A provider's exception that does not
        survive pickling itself (an SDK's error with required keywords) is left behind as None: the message
        names its class and code."""
        state = dict(self.__dict__)
        if "provider_error" in state and not _round_trips(state["provider_error"]):
            state["provider_error"] = None
        return (_unpickled, (type(self), self.args), state)


def _round_trips(value: object) -> bool:
    try:
        pickle.loads(pickle.dumps(value))
    except Exception:  # whatever pickling raises, the value does not travel
        return False
    return True


def _unpickled(kind: type[SafeEffectsError], args: tuple[object, ...]) -> SafeEffectsError:
    """An instance of ``kind`` with ``args``, made without its ``__init__`` (see ``__reduce__``), but with that of
    its first base outside the library, a built-in exception (``ImportError`` keeps its message in ``msg``)."""
    error = kind.__new__(kind)
    outside = next(base for base in kind.__mro__ if not issubclass(base, SafeEffectsError))
    outside.__init__(error, *args)  # a built-in exception's, which takes *args
    return error


class InvalidInput(SafeEffectsError, ValueError):
    """The caller passed something the ledger cannot accept; the ledger was not touched."""

    code = "invalid_input"


class InvalidIntentKey(InvalidInput):
    """An intent key (or one of its parts) is malformed."""

    code = "invalid_intent_key"


class UndigestibleRequest(InvalidInput):
    """A request parameter is not plain JSON, so no stable digest can be computed."""

    code = "undigestible_request"

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"request parameter {path or '<root>'} {problem}")


class InvalidTenant(InvalidInput):
    """A tenant id that is empty, too long or has characters outside [A-Za-z0-9_.-]."""

    code = "invalid_tenant"


class UnknownTenant(InvalidInput):
    """A well-formed tenant id that this ledger was not configured to serve."""

    code = "unknown_tenant"


class MissingIntentKey(InvalidInput):
    """A mutating call arrived without an intent key and without an explicit opt-out."""

    code = "missing_intent_key"


class IntentConflict(SafeEffectsError):
    """The intent key is already recorded with a different request digest: refused before sending.

    ``record`` is the recorded intent when the ledger raised it: a job tells from its status what to do (done
    when confirmed; in doubt, like :class:`EffectUnknown`, when unknown or in flight; a new version when
    rejected, nothing having gone out; when prepared, nothing went out yet, but a relay may still send it:
    withdraw it first, as :class:`EarlierVersionInDoubt` asks).
    """

    code = "intent_conflict"

    def __init__(
        self,
        tenant: str,
        intent_key: str,
        recorded_digest: str,
        new_digest: str,
        *,
        recorded_as: str | None = None,
        differs_in: Sequence[str] | None = None,
        next_key: str | None = None,
        reached_provider: str | None = None,
        withdraw_first: bool = False,
        record: EffectRecord | None = None,
    ) -> None:
        """``recorded_as`` says what the key holds (``stripe payment_intents.create, confirmed``): a conflict is
        as often another operation under a reused key as other parameters. ``next_key`` is the one to suggest.
        ``differs_in`` names what the record shows that differs from this call (``operation``, summary fields
        such as ``stripe_account``); empty when only parameters the record does not keep differ.
        ``reached_provider`` ("reached", "may have reached") says the recorded request went out: then this call
        is as likely a retry whose request was built anew (a deploy that changed how it is built, a fresh MIME
        boundary, a timestamp), and a new key would make the action twice, so that comes first and no key is
        suggested. ``withdraw_first`` (a prepared record) says the new key waits for this one's withdrawal.

        The message quotes neither digest: an unkeyed SHA-256 of low-entropy params (a templated email to one
        address) confirms a guess of them, and worker logs reach more people than the database does. The
        digests stay attributes, and on the record, for whoever may read the ledger."""
        self.tenant = tenant
        self.intent_key = intent_key
        self.recorded_digest = recorded_digest
        self.new_digest = new_digest
        self.record = record
        self.differs_in = tuple(differs_in or ())
        holds = f" for {recorded_as}" if recorded_as else ""
        if reached_provider is None:
            suggested = repr(next_key) if next_key else "the next version of this key"
            advice = f"A key names one action: give a new or corrected action a new key, e.g. {suggested}"
            if withdraw_first:  # prepared: the new version is refused while this one may still be sent
                advice = (
                    f"{advice}, once this one is withdrawn (`safe-effects resolve {intent_key} --as rejected`): "
                    "nothing went out under it yet, but a relay or an older worker may still send it"
                )
        else:
            advice = (
                f"The recorded request {reached_provider} the provider: if this call is that same action with its "
                "request built anew (a deploy that changed how it is built, a fresh MIME boundary, a new "
                "timestamp), do not give it a new key, which would make it twice: build the request as the "
                "first call did, or treat the action as done (or, while it is unknown, in doubt). Only another "
                "action takes a new key"
            )
        if differs_in is None:
            where = ""
        elif differs_in:
            where = f" (of what the record shows, this call differs in: {', '.join(differs_in)})"
        else:
            where = " (nothing the record shows differs: parameters it does not keep do)"
        super().__init__(
            f"intent {intent_key!r} (tenant {tenant!r}) was recorded{holds} with another request digest than "
            f"this call's: same key, other parameters or operation{where}. {advice}"
        )


class EarlierVersionInDoubt(SafeEffectsError):
    """A new version of an intent key (``...:v2``) while an earlier one (``...:v1``) is unknown, in flight or
    prepared; since migration 6 also a version recorded while a later one is (``earlier`` is then that one).

    The earlier one may have acted at its provider, or (prepared) may still be sent by an outbox relay or an
    older worker, so the new one could do the same thing twice: the forensics review charged an invoice twice
    this way (v1 lost its answer, the app sent v2, a lookup then found v1's charge). Refused before anything is
    recorded or sent; settle the earlier version first, or withdraw a prepared one.
    """

    code = "earlier_version_in_doubt"

    def __init__(self, tenant: str, intent_key: str, earlier: str, earlier_status: str, provider: str) -> None:
        self.tenant, self.intent_key, self.earlier, self.earlier_status = tenant, intent_key, earlier, earlier_status
        if earlier_status == "prepared":
            why = f"that one may still be sent to {provider} (an outbox relay, an older worker)"
            settle = f"Withdraw {earlier!r} first (`safe-effects resolve ... --as rejected`), or send it instead"
        else:
            why = f"that one may have acted at {provider}"
            settle = (
                f"Settle {earlier!r} first (retry it with its own request, run `safe-effects reconcile`, or have an "
                "operator resolve it), then send this one only if it did not act"
            )
        later = _version(earlier) > _version(intent_key)  # a stale job's v1 while v2 is in doubt
        what = "an earlier version, recorded" if later else "a new version"
        super().__init__(
            f"intent {intent_key!r} (tenant {tenant!r}) is {what} while {earlier!r} is {earlier_status}: "
            f"{why}, so this one could do it twice; nothing was recorded or sent. {settle}"
        )


def _version(intent_key: str) -> int:
    """The number of a key's ``vN`` part; 0 where there is none (a description instead of a key)."""
    last = intent_key.rpartition(":")[2]
    return int(last[1:]) if last[:1] == "v" and last[1:].isdigit() else 0


class IllegalTransition(SafeEffectsError):
    """The state machine does not allow this change; nothing was written."""

    code = "illegal_transition"

    def __init__(self, source: str, target: str, intent_key: str | None = None, *, why: str | None = None) -> None:
        self.source = source
        self.target = target
        self.intent_key = intent_key
        where = f" for intent {intent_key!r}" if intent_key else ""
        super().__init__(f"illegal transition {source} -> {target}{where}" + (f": {why}" if why else ""))


class StaleRecord(SafeEffectsError):
    """A conditional update found the record in another state or version than expected."""

    code = "stale_record"


class LedgerUnavailable(SafeEffectsError):
    """The ledger's database did not answer (connection lost, server restarting, timeout, disk error).

    Raised before a dispatch it means nothing was sent by this call. A provider's answer the ledger could not
    record is never reported this way: that call ends in :class:`EffectUnknown`, and the intent is reconciled.
    """

    code = "ledger_unavailable"


class ClockSkewed(LedgerUnavailable):
    """This worker's clock is further from the ledger database's than ``Ledger(max_clock_skew=...)`` allows.

    Leases, key replay windows and event windows compare timestamps that different processes wrote, each by
    its own clock: a clock that is off lets a worker take over a live call or replay a key its provider has
    forgotten. So the ledger refuses the call before it writes or sends anything, until the clock is right
    again (fix the host's time sync). ``offset`` is the measured difference in seconds (worker minus database).
    """

    code = "clock_skewed"

    def __init__(self, message: str, *, offset: float) -> None:
        super().__init__(message)
        self.offset = offset


class LedgerClosed(SafeEffectsError, RuntimeError):
    """The ledger or its store was closed: a call after ``close()`` is refused before anything is read, written
    or sent. Not an outage: retrying on this object never succeeds; a new ``Ledger.open`` does."""

    code = "ledger_closed"


class StoreNotReady(SafeEffectsError):
    """The store cannot serve this release or role as it stands: a set-up step to take (migrate, grant, another
    schema), not an outage to wait out. The refused statement changed nothing."""

    code = "store_not_ready"


class MigrationsPending(StoreNotReady):
    """The store lacks schema migrations this release needs (``versions``): refused up front, rather than
    failing later on a column or table the store does not have yet."""

    code = "migrations_pending"

    def __init__(self, versions: Sequence[int], *, where: str = "the ledger's store") -> None:
        self.versions = tuple(versions)
        super().__init__(
            f"{where} lacks schema migration(s) {', '.join(map(str, self.versions))}: run `safe-effects migrate` "
            "first (or store.migrate(), which Ledger.open runs; docs/operations.md, Store schema, says what each "
            "one locks)"
        )


class StorePermissionDenied(StoreNotReady):
    """The database refused this role a statement the call needs; the message says which grant to ask for,
    or which role must run the step."""

    code = "store_permission_denied"


class LedgerCorrupt(StoreNotReady):
    """The ledger's database reports damaged data: a malformed SQLite file, a PostgreSQL page or index that
    fails its checks. Neither an outage a retry outlasts nor a set-up step: an operator restores the ledger
    from a backup (docs/operations.md, "Backups and restores"). The statement that met it changed nothing, and
    a claim that meets it has sent nothing; a provider's answer that could not be recorded is
    :class:`EffectUnknown`, as for any write that fails."""

    code = "ledger_corrupt"


class IntentNotFound(SafeEffectsError, LookupError):
    """No record exists for this tenant and intent key."""

    code = "intent_not_found"


class EffectOutcome(SafeEffectsError):
    """Raised to the caller when an effect ended in anything but a plain confirmation."""

    code = "effect_outcome"

    def __init__(self, message: str, *, intent_key: str, record: EffectRecord | None = None) -> None:
        self.intent_key = intent_key
        self.record = record
        super().__init__(message)


class EffectUnknown(EffectOutcome):
    """The provider may or may not have acted; the intent waits for reconciliation."""

    code = "effect_unknown"


class EffectRejected(EffectOutcome):
    """The provider refused definitively; there is no effect. ``provider_error`` is the original."""

    code = "effect_rejected"

    def __init__(
        self,
        message: str,
        *,
        intent_key: str,
        record: EffectRecord | None = None,
        provider_error: BaseException | None = None,
    ) -> None:
        self.provider_error = provider_error
        super().__init__(message, intent_key=intent_key, record=record)


class EffectDeferred(EffectOutcome):
    """Retryable refusals (rate limit, connection refused, refused credentials) outlasted the retry budget;
    nothing happened, and the same intent may be tried again (after ``retry_after`` seconds, when set)."""

    code = "effect_deferred"

    def __init__(
        self,
        message: str,
        *,
        intent_key: str,
        record: EffectRecord | None = None,
        retry_after: float | None = None,
        provider_error: BaseException | None = None,
    ) -> None:
        self.retry_after = retry_after
        self.provider_error = provider_error
        super().__init__(message, intent_key=intent_key, record=record)


class EffectInProgress(EffectOutcome):
    """Another worker holds a live lease on this intent and did not finish within the wait bound."""

    code = "effect_in_progress"


class LeaseLost(EffectOutcome):
    """A worker finished after its lease was taken over, and its answer, kept as evidence, did not settle the
    intent as it said (``record`` is the intent as it stands: unknown, in flight again, or settled otherwise)."""

    code = "lease_lost"


class ApprovalError(SafeEffectsError):
    """An operator action broke the two-person rule or lacked what it needs."""

    code = "approval_error"


class UnguardedCall(SafeEffectsError, NotImplementedError):
    """A wrapped client's method that the ledger cannot guard, such as Stripe's ``raw_request`` POST or SES's
    bulk send: refused before anything is recorded or sent; the message names what to call instead."""

    code = "unguarded_call"


class MissingDependency(SafeEffectsError, ImportError):
    """An optional dependency is not installed; the message says which extra to install."""

    code = "missing_dependency"

    def __init__(self, module: str, extra: str, *, distribution: str = "safe-effects") -> None:
        super().__init__(f"{module} is not installed: pip install '{distribution}[{extra}]'")
