"""The name rules a pin must pass (invariant 12, warden/policy/pins/_names.py): properties and the cases the
review found (a row forged by ``\\n``, ESC, OSC 8, U+202E, trailing-space and case twins)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from warden.escape import char_class
from warden.policy.pins import PinStore, name_skeleton, refused_names
from warden.secrets import Redactor

SPEC = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-."), min_size=1,
               max_size=40)
NONE = Redactor()


@given(name=st.text(min_size=1, max_size=40))
def test_a_name_with_any_flagged_character_is_refused(name: str) -> None:
    if any(char_class(ch) is not None for ch in name) or not name.isascii() or " " in name:
        assert "[names: charset]" in refused_names("tool", [name], NONE)[name]


@given(names=st.lists(SPEC, max_size=8))
def test_spec_names_are_refused_only_as_twins(names: list[str]) -> None:
    refused = refused_names("prompt", names, NONE)
    skeletons = [name_skeleton(n) for n in names]
    for name in names:
        twin = skeletons.count(name_skeleton(name)) > 1
        assert (name in refused) is twin, (name, refused.get(name))


@given(name=SPEC)
def test_the_skeleton_is_a_fixed_point(name: str) -> None:
    assert name_skeleton(name_skeleton(name)) == name_skeleton(name)


@pytest.mark.parametrize("twin", ["Read_File", "read_file ", " read_file", "read_fi1e", "rеad_file", "read\u200b_file",
                                  "ｒｅａｄ_file"])
def test_B08_48_twins_of_a_tool_are_refused_with_it(twin: str) -> None:
    refused = refused_names("tool", ["read_file", twin, "write_file"], NONE)
    assert set(refused) == {"read_file", twin}
    assert "[names: twin]" in refused["read_file"]


@pytest.mark.parametrize("name", ["nl\nFORGED_LINE [approved]", "erase\x1b[2K\x1b[1Gok", "rtl\u202etxt.exe",
                                  "link\x1b]8;;http://evil.invalid/\x1b\\x\x1b]8;;\x1b\\", "tab\there", "del\x7f",
                                  "x" * 129, "", "a/b", "a:b"])
def test_B08_47_names_outside_the_spec_set_are_refused(name: str) -> None:
    assert "[names: charset]" in refused_names("tool", [name], NONE)[name]


def test_resources_are_checked_for_secrets_only() -> None:
    red = Redactor(["canary-Zq8vX2mP"])
    assert refused_names("resource", ["file:///a b", "file:///A B"], red) == {}
    assert "[names: secret]" in refused_names("resource", ["mem://canary-Zq8vX2mP"], red)["mem://canary-Zq8vX2mP"]


def test_refused_names_never_reach_the_store_and_the_rest_stay_usable(state_dir: Path) -> None:
    """Bad input: a refusal names the server and the rule, and hides none of the server's valid tools."""
    store = PinStore(state_dir, redactor=NONE)
    tools = [{"name": n, "inputSchema": {}} for n in ("ok_tool", "Lookup", "lookup", "nl\nx")]
    seen = store.observe_list("srv", "tool", tools, on_new="tofu")
    assert list(seen.digests) == ["ok_tool"]
    assert sorted(seen.rejected) == ["Lookup", "lookup", "nl\nx"]
    assert [e.key for e in store.entries("srv")] == ["ok_tool"]
    messages = {str(d) for d in seen.detections if d.event == "rejected"}
    assert any("server 'srv': tool 'nl\\nx' rejected" in m and "[names: charset]" in m for m in messages)
    assert all(d.findings[0].code == "refused-name" for d in seen.detections if d.event == "rejected")
