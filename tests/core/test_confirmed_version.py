"""The version at which an original was confirmed, read from a trail that skips the dispatcher's own answer.

An operator's rerun of a compensation may name any version from that one up to the current one; a version
read from a purged record of the same key would let a rerun name a version never shown as confirmed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from safe_effects import AuditEntry, EffectRecord, EffectStatus, IntentKey
from safe_effects._operator import _confirmed_version

S = EffectStatus
KEY = "invoice:inv_5:collect:v1"
PURGED_AT = datetime(2026, 1, 1, tzinfo=UTC)
MADE_AGAIN = PURGED_AT + timedelta(days=1)


def row(version: int, from_status: S | None, to_status: S, at: datetime) -> AuditEntry:
    return AuditEntry(
        tenant="default", intent_key=KEY, at=at, from_status=from_status, to_status=to_status, version=version,
        actor="w",
    )  # fmt: skip


def original(version: int) -> EffectRecord:
    return EffectRecord(
        tenant="default", intent_key=IntentKey.parse(KEY), provider="fake", operation="charge",
        request_digest="sha256:" + "0" * 64, status=S.CONFIRMED, version=version,
        compensated_by="invoice:inv_5:refund:v1", created_at=MADE_AGAIN, updated_at=MADE_AGAIN,
    )  # fmt: skip


def test_a_confirm_by_the_provider_answer_is_the_version_before_the_first_change_from_confirmed() -> None:
    # prepared v1, claimed v2 (audited), answered v3 (no row), named by its compensation v4
    trail = [
        row(2, S.PREPARED, S.IN_FLIGHT, MADE_AGAIN),
        row(4, S.CONFIRMED, S.CONFIRMED, MADE_AGAIN + timedelta(minutes=1)),
    ]
    assert _confirmed_version(trail, original(4)) == 3


def test_a_settled_confirm_has_its_own_row() -> None:
    trail = [
        row(2, S.IN_FLIGHT, S.UNKNOWN, MADE_AGAIN),
        row(3, S.UNKNOWN, S.CONFIRMED, MADE_AGAIN),
        row(4, S.CONFIRMED, S.CONFIRMED, MADE_AGAIN),
    ]
    assert _confirmed_version(trail, original(4)) == 3


def test_rows_of_a_purged_record_of_the_same_key_are_not_read() -> None:
    # the purged one: made and answered at v1-v2 (no rows), named at v3; the one made again confirmed at v3
    before = [row(3, S.CONFIRMED, S.CONFIRMED, PURGED_AT - timedelta(days=1))]
    now = [row(2, S.PREPARED, S.IN_FLIGHT, MADE_AGAIN), row(4, S.CONFIRMED, S.CONFIRMED, MADE_AGAIN)]
    assert _confirmed_version(before + now, original(4)) == 3
    assert _confirmed_version(before, original(4)) is None  # nothing of its own: no version can be vouched for
