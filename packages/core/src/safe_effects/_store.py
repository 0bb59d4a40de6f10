"""The store seam: the few operations the ledger needs from a database. One module per backend."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from typing import Any, Protocol

from ._approvals import Approval, ApprovalState
from ._records import AuditEntry, EffectRecord, Evidence, EvidenceVerdict
from ._states import EffectStatus


def kind_of(connection: Any) -> str:
    """A caller's connection named for a refusal: ``module.Class`` tells psycopg's ``Connection`` from
    sqlite3's or SQLAlchemy's, where the bare class name is ``Connection`` for all three."""
    kind = type(connection)
    return f"{kind.__module__}.{kind.__qualname__}"


class Store(Protocol):
    """Durable home of effect records, their audit trail and evidence.

    Every state change is a conditional update on (status, version); a lost race raises :class:`StaleRecord`
    and writes nothing. The audit trail holds what the record alone cannot tell: each change is appended to
    it in the same transaction, except an intent's creation and a write made with ``audited=False`` (the
    dispatcher's own answer), which the record's columns describe in full (``updated_by``, ``updated_at``,
    ``resolution``) until the next, audited, change.
    """

    def migrate(self) -> list[int]:
        """Apply pending schema migrations; idempotent and safe from two processes at once. Returns the
        versions this call applied: none when another process applied them first."""
        ...

    def pending_migrations(self) -> list[int]:
        """Migration versions not applied yet (every one of them on an empty store); changes nothing. Both this
        and :meth:`migrate` refuse another tool's ``schema_migrations`` table as :class:`StoreNotReady`."""
        ...

    def close(self) -> None: ...

    def database_time(self) -> datetime | None:
        """The database server's clock now, which workers on several hosts must agree with (see
        :class:`ClockSkewed`); None for a store whose writers all share one host's clock."""
        ...

    def insert_if_absent(self, record: EffectRecord, *, connection: Any = None) -> tuple[EffectRecord, bool]:
        """Insert ``record`` unless (tenant, intent_key) exists; its ``created_at`` and ``updated_by`` say who
        made it and when (no audit row).

        Returns the stored row and whether this call created it. With ``connection`` (the caller's own
        sqlite3 / psycopg connection) the insert joins the caller's transaction and is not committed here.
        """
        ...

    def get(self, tenant: str, intent_key: str) -> EffectRecord | None: ...

    def transition(
        self,
        record: EffectRecord,
        to: EffectStatus,
        *,
        now: datetime,
        actor: str,
        reason: str | None = None,
        changes: Mapping[str, Any] | None = None,
        detail: Mapping[str, Any] | None = None,
        before_commit: Callable[[], None] | None = None,
        audited: bool = True,
        approval: Approval | None = None,
    ) -> EffectRecord:
        """Move ``record`` to ``to`` if it is still at ``record.status`` and ``record.version``.

        ``changes`` sets other fields (names of :class:`EffectRecord` fields); ``updated_by`` becomes ``actor``.
        ``before_commit`` runs inside the transaction just before COMMIT (a crash point). ``audited=False``
        appends no audit row (``reason`` and ``detail`` are then not kept). ``approval``, a pending approval
        as this change decides it (its ``state``, ``decided_by``, ``decision_reason``, ``resolved_at``), is
        written in the same transaction if it is still pending: an approval is never marked applied without
        its change, nor the reverse. Raises IllegalTransition or StaleRecord (the record moved, or the
        approval was decided meanwhile); either way nothing is written.
        """
        ...

    def list_by_status(
        self,
        statuses: Collection[EffectStatus],
        *,
        tenant: str | None = None,
        provider: str | None = None,
        updated_before: datetime | None = None,
        limit: int = 100,
        after: tuple[datetime, str, str] | None = None,
        key_prefix: str | None = None,
    ) -> list[EffectRecord]:
        """Records in ``statuses``, least recently updated first, through the (status, updated_at) index.

        The order is (updated_at, tenant, intent_key); ``after`` is such a triple (the last record of the
        previous page) and returns only the records after it, so a caller can page through every record.
        ``key_prefix`` keeps the intents whose key starts with it (``invoice:inv_43:``: every action and
        version of one invoice), compared exactly, case included.
        """
        ...

    def find_by_provider_key(self, provider: str, provider_key: str) -> list[EffectRecord]:
        """Records whose provider key (idempotency key, tag, custom arg) is ``provider_key``, oldest first.

        A list: a provider key need not carry the tenant (SES tags), so two tenants may share one.
        """
        ...

    def audit_trail(self, tenant: str, intent_key: str) -> list[AuditEntry]: ...

    def add_evidence(self, evidence: Evidence) -> bool:
        """Store evidence once per (provider, source, event_id); False when it was already there."""
        ...

    def evidence_for(
        self, tenant: str, intent_key: str, *, verdicts: Collection[EvidenceVerdict] | None = None
    ) -> list[Evidence]:
        """The intent's evidence, oldest first; only of ``verdicts`` when given (an intent sent to a thousand
        recipients gathers an acceptance each, which most decisions need not read)."""
        ...

    def status_counts(self, statuses: Collection[EffectStatus]) -> list[tuple[str, str, EffectStatus, int]]:
        """(tenant, provider, status, count) for every non-empty group in ``statuses``.

        Served by the (status, updated_at) index: the cost follows the records in those statuses, not the
        ledger's size. The unsettled ones (prepared, in_flight, unknown) are few, cheap enough for a metrics
        scrape; counting a settled status reads most of the ledger's history.
        """
        ...

    def oldest_dispatched(self, status: EffectStatus) -> dict[str, datetime]:
        """Per provider, the earliest first dispatch among records in ``status`` (the update time of one never
        dispatched): how long the oldest has been in doubt, whatever was written to it since."""
        ...

    def earliest_lease_expiry(self) -> dict[str, datetime]:
        """Per provider, the earliest lease expiry among in-flight records: once past, a worker died mid-call
        and the record waits for a caller's retry or a reconciler to take it over."""
        ...

    def reconciler_cursor(self, name: str) -> tuple[datetime, str, str] | None:
        """Where the reconciler named ``name`` last stopped, a :meth:`list_by_status` position; None if unset."""
        ...

    def save_reconciler_cursor(self, name: str, position: tuple[datetime, str, str] | None) -> None:
        """Keep ``position`` for ``name``; None forgets it, so that reconciler starts again from the oldest."""
        ...

    def purge(
        self,
        *,
        statuses: Collection[EffectStatus],
        updated_before: datetime,
        limit: int = 1000,
        keys: Collection[tuple[str, str]] | None = None,
    ) -> int:
        """Delete up to ``limit`` records in ``statuses`` last updated before the cut-off; returns the count.

        With ``keys`` ((tenant, intent_key) pairs, at most ``limit``), only those: the ones a caller listed and
        checked, each still in ``statuses`` and before the cut-off. Without, the first ``limit`` in list order.
        """
        ...

    # -- pending approvals (two-person rule) -------------------------------------------------------------

    def add_approval(self, approval: Approval) -> tuple[Approval, bool]:
        """Store a pending approval unless one is already pending for the intent.

        Returns the stored approval (with its id) and True, or the one already pending and False.
        """
        ...

    def approvals(
        self,
        *,
        tenant: str | None = None,
        intent_key: str | None = None,
        state: ApprovalState | None = None,
        limit: int = 100,
    ) -> list[Approval]:
        """Approvals, oldest request first, optionally for one intent and in one state."""
        ...

    def decide_approval(
        self, approval: Approval, *, state: ApprovalState, decided_by: str, reason: str | None, now: datetime
    ) -> bool:
        """Move ``approval`` to ``state`` if it is still in ``approval.state``; False when someone else moved it."""
        ...
