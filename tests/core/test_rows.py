"""Row encoding shared by both stores: what a write binds, and how often it converts a timestamp."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

from safe_effects import EffectRecord, EffectStatus
from safe_effects._rows import Codec, json_text, row_encoder

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def _counting_codec(seen: list[datetime]) -> Codec:
    def time_out(value: datetime) -> str:
        seen.append(value)
        return value.isoformat()

    return Codec(time_out=time_out, time_in=datetime.fromisoformat, json_out=json_text, json_in=json.loads)


def _claimed(now: datetime) -> EffectRecord:
    return EffectRecord(
        tenant="default",
        intent_key="invoice:inv_1:collect:v1",
        provider="fake",
        operation="charge",
        request_digest="sha256:" + "0" * 64,
        status=EffectStatus.IN_FLIGHT,
        lease_expires_at=now + timedelta(seconds=30),
        created_at=now,
        updated_at=now,
        first_dispatched_at=now,
        dispatched_at=now,
    )


def test_a_timestamp_bound_to_several_columns_is_converted_once() -> None:
    seen: list[datetime] = []
    encoder = row_encoder(EffectRecord, _counting_codec(seen))
    row = dict(zip(encoder.columns, encoder.values(_claimed(NOW)), strict=True))
    assert sorted(seen) == [NOW, NOW + timedelta(seconds=30)]  # one conversion per distinct timestamp
    assert row["created_at"] == row["updated_at"] == row["first_dispatched_at"] == row["dispatched_at"]
    assert row["created_at"] == NOW.isoformat()
    assert row["lease_expires_at"] == (NOW + timedelta(seconds=30)).isoformat()


def test_the_remembered_conversion_is_never_given_for_another_timestamp() -> None:
    seen: list[datetime] = []
    encoder = row_encoder(EffectRecord, _counting_codec(seen))
    encoder.values(_claimed(NOW))
    equal_instant = NOW.astimezone(timezone(timedelta(hours=2)))  # same instant, other object and zone
    later = _claimed(NOW).model_copy(update={"updated_at": NOW + timedelta(seconds=1), "created_at": equal_instant})
    row = dict(zip(encoder.columns, encoder.values(later), strict=True))
    assert row["updated_at"] == (NOW + timedelta(seconds=1)).isoformat()
    assert row["created_at"] == NOW.isoformat()  # converted to UTC, not taken for the other object
    assert row["dispatched_at"] == NOW.isoformat()


def test_an_encoder_of_any_field_list_binds_plain_values_in_its_order() -> None:
    record = _claimed(NOW)
    codec = _counting_codec([])
    assert row_encoder(EffectRecord, codec, ("status",)).values(record) == ["in_flight"]
    row = row_encoder(EffectRecord, codec, ("intent_key", "status", "workflow_id", "tenant")).values(record)
    assert row == ["invoice:inv_1:collect:v1", "in_flight", None, "default"]
    # exact str, not the IntentKey or StrEnum subclasses: drivers bind those only through slower paths
    assert [type(value) for value in row] == [str, str, type(None), str]
