"""Decode what the SDK puts on the wire: nested form fields (``metadata[k]=v``) and Search API queries."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl

_SEGMENT = re.compile(r"\[([^\]]*)\]")
_QUOTED = r"'((?:[^'\\]|\\.)*)'"
_CLAUSE = re.compile(rf"\s*(?:metadata\[{_QUOTED}\]|([a-z_]+))\s*:\s*{_QUOTED}\s*")
_ESCAPE = re.compile(r"\\(.)")


def _listify(node: Any) -> Any:
    """Dicts whose keys are 0..n-1 were encoded lists (``expand[0]=a``): turn them back into lists."""
    if not isinstance(node, dict):
        return node
    items = {k: _listify(v) for k, v in node.items()}
    if items and all(k.isdigit() for k in items) and sorted(int(k) for k in items) == list(range(len(items))):
        return [items[str(i)] for i in range(len(items))]
    return items


def decode_form(body: bytes) -> dict[str, Any]:
    """``a=1&metadata[k]=v&expand[0]=x`` → ``{"a": "1", "metadata": {"k": "v"}, "expand": ["x"]}``."""
    return _decode(parse_qsl(body.decode(), keep_blank_values=True))


def decode_query(query: Mapping[str, list[str]]) -> dict[str, Any]:
    """A GET query string's nested fields, as :func:`decode_form` decodes a body (``expand[0]=x``)."""
    return _decode((name, value) for name, values in query.items() for value in values)


def _decode(pairs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for name, value in pairs:
        head, _, rest = name.partition("[")
        path = [head, *_SEGMENT.findall("[" + rest)] if rest else [head]
        node = root
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return dict(_listify(root))


def flat_query(query: Mapping[str, list[str]]) -> dict[str, str]:
    """A GET query string with one value per name (the SDK never repeats one)."""
    return {name: values[0] for name, values in query.items() if values}


def parse_search(query: str) -> list[tuple[str | None, str, str]]:
    """``metadata['k']:'v' AND status:'succeeded'`` → ``[("metadata", "k", "v"), (None, "status", ...)]``.

    Raises ValueError for anything else (OR, negation, ranges): the fake supports exact AND matches only.
    """
    clauses: list[tuple[str | None, str, str]] = []
    for text in re.split(r"\s+AND\s+", query.strip()):
        match = _CLAUSE.fullmatch(text)
        if match is None:
            raise ValueError(f"unsupported search clause {text!r}")
        key, field, value = match.groups()
        if key is not None:
            clauses.append(("metadata", _ESCAPE.sub(r"\1", key), _ESCAPE.sub(r"\1", value)))
        else:
            clauses.append((None, field, _ESCAPE.sub(r"\1", value)))
    return clauses
