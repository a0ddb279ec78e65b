"""The one list pager: every rule that ends a list, and hypothesis cursor sequences (a repeat anywhere ends it)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from warden.errors import RemoteProtocolError, WardenError
from warden.protocol.paging import ListLimits, ListRefused, Pager


def page(n: int, cursor: Any = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"tools": [{"name": f"t{i}"} for i in range(n)], **extra}
    if cursor is not None:
        body["nextCursor"] = cursor
    return body


def test_MS15_follows_every_page() -> None:
    pager = Pager("srv", "tools/list", modern=False)
    assert pager.params({"x": 1}) == {"x": 1}
    assert not pager.add(page(2, "a"), 100)
    assert pager.params({}) == {"cursor": "a"}
    assert pager.add(page(1), 50)
    assert [t["name"] for t in pager.items] == ["t0", "t1", "t0"]


def test_MS14_empty_cursor_is_a_cursor_for_a_2026_server_only() -> None:
    legacy = Pager("srv", "tools/list", modern=False)
    assert legacy.add(page(1, ""), 10)
    modern = Pager("srv", "tools/list", modern=True)
    assert not modern.add(page(1, "", ttlMs=5, cacheScope="public"), 10)
    assert modern.params({}) == {"cursor": ""}
    assert modern.add(page(1, ttlMs=3, cacheScope="public"), 10)
    assert modern.ttl == 3
    assert not modern.private


def test_two_alternating_cursors_end_the_list_naming_server_and_rule() -> None:
    """covers: issue 11 item 3 — A, B, A is a cycle (the old check only compared with the last cursor)."""
    pager = Pager("hostile", "tools/list", modern=False)
    assert not pager.add(page(3, "A"), 10)
    assert not pager.add(page(3, "B"), 10)
    with pytest.raises(ListRefused) as caught:
        pager.add(page(3, "A"), 10)
    assert isinstance(caught.value, WardenError)
    assert isinstance(caught.value, RemoteProtocolError)
    assert "hostile: tools/list refused" in caught.value.message
    assert "repeats" in caught.value.message
    assert pager.items == []


@pytest.mark.parametrize(("limits", "rule", "setting"), [
    (ListLimits(max_items=5), "more than 5 entries", "--list-max-items"),
    (ListLimits(max_bytes=250), "larger than 250 bytes", "--list-max-bytes"),
    (ListLimits(max_pages=2), "more than 2 pages", None),
])
def test_caps(limits: ListLimits, rule: str, setting: str | None) -> None:
    pager = Pager("big", "prompts/list", modern=False, limits=limits)

    def read_all() -> None:
        for i in range(10):
            pager.add({"prompts": [{"name": "p"}] * 2, "nextCursor": f"c{i}"}, 100)

    with pytest.raises(ListRefused) as caught:
        read_all()
    assert rule in caught.value.message
    assert (setting in (caught.value.hint or "")) if setting else "fault of the server" in (caught.value.hint or "")


@pytest.mark.parametrize("bad", [{"nextCursor": "x"}, {"tools": None}, {"tools": {}}])
def test_a_page_without_its_list_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ListRefused, match="has no 'tools' list"):
        Pager("srv", "tools/list", modern=False).add(bad, 10)


@pytest.mark.parametrize("cursor", [1, True, [], {}])
def test_a_cursor_that_is_not_a_string_is_refused(cursor: Any) -> None:
    with pytest.raises(ListRefused, match="not a string"):
        Pager("srv", "tools/list", modern=False).add(page(1, cursor), 10)


def test_unknown_result_type_of_a_2026_page() -> None:
    with pytest.raises(RemoteProtocolError, match="resultType"):
        Pager("srv", "tools/list", modern=True).add(page(1, resultType="mystery"), 10)


@given(st.lists(st.text(max_size=3), max_size=30))
def test_any_cursor_sequence_ends_at_the_first_repeat(cursors: list[str]) -> None:
    pager = Pager("srv", "resources/list", modern=True)
    seen: set[str] = set()
    for cursor in cursors:
        if cursor in seen:
            with pytest.raises(ListRefused):
                pager.add({"resources": [], "nextCursor": cursor}, 1)
            return
        assert not pager.add({"resources": [], "nextCursor": cursor}, 1)
        seen.add(cursor)
    assert pager.add({"resources": []}, 1)
