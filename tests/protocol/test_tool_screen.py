"""The tool screen of a modern HTTP connection (warden.protocol.tool_screen), sans-IO: a ``tools/list`` page keeps
exactly its callable tools, an invalid tool is reported once and refused by name, and no page, however hostile,
makes it raise."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from warden.protocol.messages import Response, encode_json, encode_result, parse_message
from warden.protocol.tool_screen import ToolScreen

VALID = {"name": "search", "inputSchema": {"type": "object", "properties": {
    "region": {"type": "string", "x-mcp-header": "Region"}}}}
INVALID = {"name": "bad", "inputSchema": {"type": "object", "properties": {
    "a": {"type": "string", "x-mcp-header": "Dup"}, "b": {"type": "string", "x-mcp-header": "dup"}}}}


def page(tools: Any) -> Response:
    parsed = parse_message(encode_result(b"1", encode_json({"tools": tools})))
    assert isinstance(parsed, Response)
    return parsed


def test_HM11_a_page_keeps_its_valid_tools_and_an_invalid_one_is_reported_once_and_refused_by_name() -> None:
    screen = ToolScreen()
    screened, excluded = screen.screen(page([VALID, INVALID]))
    assert [t["name"] for t in json.loads(screened.result)["tools"]] == ["search"]
    assert [name for name, _ in excluded] == ["bad"]
    assert screen.screen(page([VALID, INVALID]))[1] == []  # reported once, not on every listing
    refusal = screen.known("bad")
    assert isinstance(refusal, str)
    assert "excluded" in refusal
    assert screen.known("search") is not None
    assert screen.known("other") is None


def test_HM11_an_untouched_page_is_the_same_object_byte_for_byte() -> None:
    original = page([VALID])
    assert screen_of(original) is original


def screen_of(response: Response) -> Response:
    return ToolScreen().screen(response)[0]


def test_a_name_a_listing_did_not_have_is_listed_for_again_only_after_the_tools_change() -> None:
    screen = ToolScreen()
    assert screen.worth_listing_for("later")
    screen.not_listed("later")
    assert not screen.worth_listing_for("later")
    screen.screen(page([VALID]))  # a new listing: the tools may have changed
    assert screen.worth_listing_for("later")
    assert not screen.worth_listing_for(7)


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                          max_size=4), max_leaves=20)


@given(st.lists(json_values | st.fixed_dictionaries({"name": st.text(max_size=8), "inputSchema": json_values}),
                max_size=6))
def test_HM11_any_page_is_screened_never_an_error_and_keeps_only_what_it_does_not_report(tools: list[Any]) -> None:
    screened, excluded = ToolScreen().screen(page(tools))
    kept = json.loads(screened.result)["tools"]
    gone = {name for name, _ in excluded}
    assert all(not (isinstance(t, dict) and t.get("name") in gone) for t in kept)
    assert len(kept) + sum(1 for t in tools if isinstance(t, dict) and t.get("name") in gone) == len(tools)
