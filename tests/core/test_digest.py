"""Request digests: same request, same digest; any real change, another digest; non-JSON refused by path."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from safe_effects import UndigestibleRequest, bytes_digest, canonical_json, request_digest

LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
JSON = st.recursive(
    LEAF,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=20,
)


def reorder(value: Any) -> Any:
    """The same value with every dict's insertion order reversed."""
    if isinstance(value, dict):
        return {key: reorder(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [reorder(item) for item in value]
    return value


def leaf_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict) and value:  # an empty container is itself a leaf
        return [p for key, item in value.items() for p in leaf_paths(item, (*path, key))]
    if isinstance(value, list) and value:
        return [p for index, item in enumerate(value) for p in leaf_paths(item, (*path, index))]
    return [path]


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: replaced(value[head], rest, new)}
    return [replaced(item, rest, new) if index == head else item for index, item in enumerate(value)]


def test_canonical_form_is_sorted_compact_utf8() -> None:
    params = {"b": 1, "a": [1, 2.5, "é", True, None], "c": {"z": 0, "y": (1, 2)}}
    assert canonical_json(params) == '{"a":[1,2.5,"é",true,null],"b":1,"c":{"y":[1,2],"z":0}}'.encode()
    assert request_digest(params) == "sha256:" + hashlib.sha256(canonical_json(params)).hexdigest()


@pytest.mark.parametrize(("first", "second"), [(1, 1.0), (True, 1), (False, 0), (0.0, -0.0), ("1", 1), (None, 0)])
def test_values_equal_in_python_but_different_in_json_hash_apart(first: Any, second: Any) -> None:
    assert request_digest({"amount": first}) != request_digest({"amount": second})


def test_tuples_and_lists_are_the_same_array() -> None:
    assert request_digest({"items": (1, 2)}) == request_digest({"items": [1, 2]})


@given(JSON)
def test_dict_key_order_never_changes_the_digest(params: Any) -> None:
    assert request_digest(reorder(params)) == request_digest(params)


@given(JSON, st.data())
def test_changing_any_leaf_changes_the_digest(params: Any, data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(leaf_paths(params)))
    old = params
    for step in path:
        old = old[step]
    new = data.draw(LEAF.filter(lambda value: canonical_json(value) != canonical_json(old)))
    assert request_digest(replaced(params, path, new)) != request_digest(params)


class Opaque:
    pass


def _nested(depth: int) -> list[Any]:
    """A list inside a list, ``depth`` times, built without recursion."""
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def _holding_itself() -> dict[str, Any]:
    value: dict[str, Any] = {}
    value["loop"] = value
    return value


@pytest.mark.parametrize(
    ("params", "path", "problem"),
    [
        ({"items": [{"price": 1}, {"price": 2}, {"price": Decimal("1.50")}]}, "items[2].price", "int minor units"),
        ({"amount": float("nan")}, "amount", "NaN and Infinity"),
        ({"amount": float("inf")}, "amount", "NaN and Infinity"),
        ({"a": [1, [2, float("-inf")]]}, "a[1][1]", "NaN and Infinity"),
        ({"at": datetime(2024, 1, 1, tzinfo=UTC)}, "at", "datetime"),
        ({"blob": b"x"}, "blob", "bytes"),
        ({"tags": {"a"}}, "tags", "set"),
        ({"meta": {"x": Opaque()}}, "meta.x", "Opaque"),
        ({"meta": {1: "one"}}, "meta", "non-string key 1"),
        ({("a", "b"): 1}, "", "non-string key"),
        (Decimal(1), "", "Decimal"),
        ({"text": "caf\udce9"}, "text", "lone surrogate"),
        (_nested(100_000), "", "nested too deeply"),
        # what json's encoder would coerce or take without a word, checked apart from it
        ({"items": [{"price": 1}, ({2: "two"},)]}, "items[1][0]", "non-string key 2"),
        ({"meta": {True: "yes"}}, "meta", "non-string key True"),
        ({"meta": {None: "none"}}, "meta", "non-string key None"),
        ({"caf\udce9": 1}, "", "key with a lone surrogate"),
        (_holding_itself(), "", "nested too deeply"),
        ({"n": 10**5000}, "n", "more digits than Python writes"),
    ],
    ids=lambda value: type(value).__name__ if not isinstance(value, str) else value[:20],
)
def test_non_json_values_are_refused_by_path(params: Any, path: str, problem: str) -> None:
    with pytest.raises(UndigestibleRequest, match=problem) as caught:
        request_digest(params)
    assert caught.value.path == path
    assert (path or "<root>") in str(caught.value)


def test_bytes_digest_hashes_raw_bytes_and_utf8_text_alike() -> None:
    assert bytes_digest("é") == bytes_digest("é".encode()) == "sha256:" + hashlib.sha256("é".encode()).hexdigest()
    assert bytes_digest(b"a") != bytes_digest(b"a ")
