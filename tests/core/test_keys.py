"""Intent keys: what is refused, and the tag-safe mapping that must never merge two keys."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from safe_effects import EffectRecord, IntentKey, InvalidIntentKey

TAG = re.compile(r"[A-Za-z0-9_-]{1,256}")


def decode_tag(tag: str) -> str:
    """Invert the escaped form of ``to_tag_safe``: proof that the mapping loses nothing."""
    out: list[str] = []
    i = 0
    while i < len(tag):
        if tag[i] == "-":
            out.append(":")
            i += 1
        elif tag.startswith("__", i):
            out.append(chr(int(tag[i + 2 : i + 8], 16)))
            i += 8
        elif tag[i] == "_":
            out.append(chr(int(tag[i + 1 : i + 3], 16)))
            i += 3
        else:
            out.append(tag[i])
            i += 1
    return "".join(out)


def test_build_and_parse_agree() -> None:
    key = IntentKey.build("order", "o_1", "ship", "parcel_2", version="v3")
    assert key == "order:o_1:ship:parcel_2:v3"
    assert key.parts == ("order", "o_1", "ship", "parcel_2", "v3")
    assert IntentKey.parse(str(key)) == key
    assert IntentKey.parse(key) is key
    assert IntentKey.build("invoice", "inv_42", "collect") == "invoice:inv_42:collect:v1"


@pytest.mark.parametrize(
    ("parts", "version", "message"),
    [
        (("", "1", "pay"), "v1", "object_type is empty"),
        (("invoice", "", "pay"), "v1", "object_id is empty"),
        (("invoice", "a:b", "pay"), "v1", "separator"),
        (("invoice", "1", "pay", "q:x"), "v1", "separator"),
        (("invoice", "1\x00", "pay"), "v1", "control or whitespace"),
        (("invoice", "1\n", "pay"), "v1", "control or whitespace"),
        (("invoice", "a b", "pay"), "v1", "control or whitespace"),
        (("invoice", "1", "pay\u200b"), "v1", "control or whitespace"),
        (("invoice", "x" * 250, "pay"), "v1", "the limit is 255"),
        (("invoice", "1", "pay"), "1", "must look like 'v1'"),
        (("invoice", "1", "pay"), "V1", "must look like 'v1'"),
        (("invoice", "1", "pay"), "v", "must look like 'v1'"),
        (("invoice", "1", "pay"), "v1a", "must look like 'v1'"),
        (("invoice", "1", "pay"), "v1\n", "version"),
        (("invoice", "1", "pay"), "", "version"),
    ],
)
def test_build_refuses_malformed_parts(parts: tuple[str, ...], version: str, message: str) -> None:
    with pytest.raises(InvalidIntentKey, match=re.escape(message)):
        IntentKey.build(*parts, version=version)


def test_build_takes_the_version_as_an_int_too() -> None:
    assert IntentKey.build("invoice", "inv_42", "collect", version=2) == "invoice:inv_42:collect:v2"
    assert IntentKey.build("invoice", "inv_42", "collect", version=12) == IntentKey.build(
        "invoice", "inv_42", "collect", version="v12"
    )


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (-1, "version must be an int from 1 to 9223372036854775807"),
        (0, "version must be an int from 1 to 9223372036854775807"),
        ("v0", "version='v0' must look like 'v1', 'v2', ... (from v1, no leading zeros)"),
        ("v01", "version='v01' must look like 'v1', 'v2', ... (from v1, no leading zeros)"),
        pytest.param(10**5000, "version must be an int from 1 to 9223372036854775807", id="too-long-to-write"),
        (True, "version must be an int like 2 or a str like 'v2', got bool"),
        (2.0, "version must be an int like 2 or a str like 'v2', got float"),
    ],
)
def test_build_refuses_other_versions_saying_what_it_takes(version: object, message: str) -> None:
    with pytest.raises(InvalidIntentKey, match=re.escape(message)):
        IntentKey.build("invoice", "inv_42", "collect", version=version)  # type: ignore[arg-type]


def test_build_refuses_non_str_parts_saying_what_it_takes() -> None:
    with pytest.raises(
        InvalidIntentKey, match=r"object_id must be a str, got int 42: pass ids as text \(str\(1001\)\)"
    ):
        IntentKey.build("invoice", 42, "pay")  # type: ignore[arg-type]
    with pytest.raises(
        InvalidIntentKey, match=r"qualifier\[0\] must be a str, got int 2.*only version= also takes an int"
    ):
        IntentKey.build("invoice", "inv_42", "pay", 2)  # type: ignore[arg-type]  # the version, passed as a qualifier


@pytest.mark.parametrize(
    "value",
    [
        "",
        "a:b:v1",
        "a:b:c:1",
        "a::c:v1",
        "a::c:d:v1",  # an empty part among five: the one-match fast path must refuse what the part checks do
        ":a:b:c:v1",
        "a:b:c::v1",
        "a:b:c:v1:",
        "a:b c:d:v1",
        "a:b:c\t:v1",
        "x" * 252 + ":b:c:v1",
        "a:b:c:v0",  # versions count from 1
        "a:b:c:v01",  # a second key for v1: what refuses a v2 while v1 is in doubt reads v1 by number
        "a:b:c:v007",
        "\ud800:b:c:v1",
        42,
        None,
    ],
)
def test_parse_refuses_malformed_keys(value: object) -> None:
    with pytest.raises(InvalidIntentKey):
        IntentKey.parse(value)


@pytest.mark.parametrize("value", ["a:b c:d:v1", "x" * 252 + ":b:c:v1", "a::c:v1", "a:b:c:v01", "not a key", 42])
def test_the_plain_constructor_checks_as_parse_does(value: object) -> None:
    """``IntentKey("...")`` once made an unchecked key: written and sent, its record then failed every read."""
    with pytest.raises(InvalidIntentKey):
        IntentKey(value)


def test_a_stored_key_is_taken_as_written() -> None:
    """An earlier release allowed ``v01``: its records must stay readable to be settled."""
    assert IntentKey.stored("a:b:c:v01") == "a:b:c:v01"
    assert isinstance(IntentKey.stored("a:b:c:v01"), IntentKey)


def test_parse_accepts_the_longest_key() -> None:
    longest = "x" * 248 + ":b:c:v1"
    assert len(longest) == 255
    assert IntentKey.parse(longest) == longest


def record_fields(intent_key: str) -> dict[str, str]:
    return {
        "tenant": "default",
        "intent_key": intent_key,
        "provider": "p",
        "operation": "o",
        "request_digest": "d",
        "status": "prepared",
        "created_at": "2024-01-01T00:00:00Z",
        "updated_at": "2024-01-01T00:00:00Z",
    }


def test_records_validate_their_keys() -> None:
    with pytest.raises(ValidationError, match="needs at least 4 parts"):
        EffectRecord.model_validate(record_fields("not-a-key"))


def test_records_and_keys_round_trip_through_json() -> None:
    """JSON holds no IntentKey instances: a key arrives as a string and is parsed (and checked) like one. Its
    schema says so (json-or-python): pydantic-core before 2.10, which the pydantic>=2.7 floor allows, refused
    an isinstance check in JSON mode, so this round trip failed there."""
    assert TypeAdapter(IntentKey).core_schema["type"] == "json-or-python"
    record = EffectRecord.model_validate(record_fields("invoice:inv_1:collect:v1"))
    again = EffectRecord.model_validate_json(record.model_dump_json())
    assert again == record
    assert type(again.intent_key) is IntentKey
    with pytest.raises(ValidationError, match="needs at least 4 parts"):
        EffectRecord.model_validate_json(record.model_dump_json().replace("invoice:inv_1:collect:v1", "not-a-key"))


def test_tag_safe_examples() -> None:
    assert IntentKey.parse("invoice:inv_42:collect:v1").to_tag_safe() == "invoice-inv_5f42-collect-v1"
    assert IntentKey.parse("a:b-c:d:v1").to_tag_safe() == "a-b_2dc-d-v1"
    assert IntentKey.parse("a:é:€:v1").to_tag_safe() == "a-_e9-__0020ac-v1"
    long_key = IntentKey.parse("€" * 40 + ":b:c:v1")
    assert long_key.to_tag_safe().startswith("_h")
    assert len(long_key.to_tag_safe()) == 66


# any printable, non-space character but the separator; a few lookalikes of the escape syntax made common
PART_CHAR = st.one_of(
    st.sampled_from("aZ09_-h.é€𝄞"),
    st.characters(codec="utf-8").filter(lambda c: c.isprintable() and not c.isspace() and c != ":"),
)
PART = st.text(PART_CHAR, min_size=1, max_size=40)


@st.composite
def intent_keys(draw: st.DrawFn) -> IntentKey:
    parts = draw(st.lists(PART, min_size=3, max_size=6))
    version = f"v{draw(st.integers(1, 10**6))}"
    key = ":".join([*parts, version])
    assume(len(key) <= 255)
    return IntentKey.build(*parts, version=version)


@given(intent_keys())
def test_tag_safe_is_in_the_tag_charset_and_decodes_back(key: IntentKey) -> None:
    tag = key.to_tag_safe()
    assert TAG.fullmatch(tag)
    if tag.startswith("_h"):
        assert re.fullmatch(r"_h[0-9a-f]{64}", tag)
    else:
        assert decode_tag(tag) == key


@given(intent_keys(), intent_keys())
@example(IntentKey.parse("a:b_2dc:d:v1"), IntentKey.parse("a:b-c:d:v1"))
@example(IntentKey.parse("a:b-c:d:v1"), IntentKey.parse("a:b:c:d:v1"))
@example(IntentKey.parse("a:_e9:c:v1"), IntentKey.parse("a:é:c:v1"))
def test_no_two_keys_share_a_tag(first: IntentKey, second: IntentKey) -> None:
    assume(first != second)
    assert first.to_tag_safe() != second.to_tag_safe()
