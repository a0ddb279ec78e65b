"""Canonical hashing: RFC 8785 + SHA-256 over whole definitions."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warden.errors import RemoteProtocolError
from warden.policy.pins import arguments_digest, canonical_json, digest

json_scalars = st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=20) | st.floats(
    allow_nan=False, allow_infinity=False, width=64)
json_values = st.recursive(json_scalars, lambda kids: st.lists(kids, max_size=4)
                           | st.dictionaries(st.text(max_size=8), kids, max_size=4), max_leaves=20)


def _shuffled(value: Any, rnd: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: _shuffled(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rnd) for v in value]
    return value


@settings(max_examples=150, deadline=None)
@given(json_values, st.integers(0, 2**32), st.sampled_from([None, 0, 1, 4]), st.sampled_from([(",", ":"),
                                                                                                (" , ", " : ")]))
def test_digest_ignores_key_order_and_whitespace(value: Any, seed: int, indent: int | None,
                                                 seps: tuple[str, str]) -> None:
    text = json.dumps(_shuffled(value, random.Random(seed)), indent=indent, separators=seps)
    assert digest(json.loads(text)) == digest(value)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_paths(v, (*prefix, i)))
    return out


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {k: (_replace(v, rest, new) if k == head else v) for k, v in value.items()}
    return [(_replace(v, rest, new) if i == head else v) for i, v in enumerate(value)]


@settings(max_examples=150, deadline=None)
@given(json_values, st.data())
def test_digest_changes_with_any_value(value: Any, data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(_paths(value)))
    old = value
    for p in path:
        old = old[p]
    new = data.draw(json_values.filter(lambda v: canonical_json(v) != canonical_json(old)))
    assert digest(_replace(value, path, new)) != digest(value)


def test_digest_covers_every_field_of_a_tool() -> None:
    """covers: DESIGN invariant 4 (name, title, description, schemas, annotations, icons, _meta)."""
    tool = {"name": "add", "title": "Add", "description": "Adds.", "inputSchema": {"type": "object"},
            "outputSchema": {"type": "object"}, "annotations": {"readOnlyHint": False},
            "icons": [{"src": "https://x/i.png"}], "_meta": {"k": 1}, "futureField": 1}
    base = digest(tool)
    for key in tool:
        assert digest({k: v for k, v in tool.items() if k != key}) != base, key
    assert digest({**tool, "annotations": {"readOnlyHint": True}}) != base


def test_known_vector() -> None:
    assert canonical_json({"b": [1, 2.5, "é"], "a": None}) == b'{"a":null,"b":[1,2.5,"\xc3\xa9"]}'
    assert digest({}) == "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"


@pytest.mark.parametrize("bad", [2**60, float("nan"), "\ud800", {1: "x"}, object()])
def test_uncanonicalizable_values_are_the_peers_fault(bad: Any) -> None:
    with pytest.raises(RemoteProtocolError, match="cannot be canonicalized"):
        digest({"v": bad})


def test_arguments_digest_absent_equals_empty() -> None:
    assert arguments_digest(None) == arguments_digest({}) != arguments_digest({"a": 1})
