"""Consent: in-band through the Python SDK client's elicitation callback, terminal review, refusal."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import mcp.types as t
import pytest
from mcp import Client, StdioServerParameters

from tests.support import FIXTURES, PYTHON, WARDEN, in_terminal
from warden.consent import (
    build_call_confirmation,
    build_pin_consent,
    read_call_confirmation,
    read_pin_consent,
    refusal,
    review,
)
from warden.policy import PinEntry, PinState, PinStore, decide
from warden.policy.pins import arguments_digest, digest

TOOL = {"name": "add", "description": "Adds.\u200b two numbers", "inputSchema": {"type": "object"}}


def _face(state: Path, log: Path) -> StdioServerParameters:
    env = {"WARDEN_STATE_DIR": str(state), "PYTHONPATH": str(FIXTURES.parent.parent)}
    return StdioServerParameters(command=PYTHON, args=[str(FIXTURES / "consent_face.py"), str(state), str(log)],
                                 env=env)


async def test_in_band_consent_through_the_sdk_elicitation_callback(tmp_path: Path, state_dir: Path) -> None:
    """covers: EL06 (warden and the server are named), PX14"""
    seen: list[t.ElicitRequestParams] = []

    async def approve(context: Any, params: t.ElicitRequestParams) -> t.ElicitResult:
        seen.append(params)
        return t.ElicitResult(action="accept", content={"approve": True})

    async with Client(_face(state_dir, tmp_path / "sent.log"), mode="legacy", elicitation_callback=approve) as c:
        result = await c.call_tool("add", {"a": 1})
    assert not result.is_error
    assert result.content[0].text == "added"
    assert len(seen) == 1
    message = seen[0].message
    assert "warden" in message
    assert "'face'" in message
    assert f"digest {digest({**TOOL, 'description': 'Adds two numbers.'})}" in message
    entry = PinStore(state_dir).get("face", "tool", "add")
    assert entry is not None
    assert entry.state is PinState.APPROVED
    assert entry.approved_by == "elicitation"


async def test_declined_consent_approves_nothing(tmp_path: Path, state_dir: Path) -> None:
    async def decline(context: Any, params: t.ElicitRequestParams) -> t.ElicitResult:
        return t.ElicitResult(action="decline")

    async with Client(_face(state_dir, tmp_path / "sent.log"), mode="legacy", elicitation_callback=decline) as c:
        with pytest.raises(Exception, match="is new and not approved"):
            await c.call_tool("add", {})
    assert PinStore(state_dir).get("face", "tool", "add").state is PinState.PENDING  # type: ignore[union-attr]


async def test_PX01_host_without_elicitation_never_receives_one(tmp_path: Path, state_dir: Path) -> None:
    log = tmp_path / "sent.log"
    async with Client(_face(state_dir, log), mode="legacy") as c:
        with pytest.raises(Exception, match="warden pins approve face add"):
            await c.call_tool("add", {})
    assert not log.exists()


def test_pin_consent_params_are_valid_form_elicitation(state_dir: Path) -> None:
    store = PinStore(state_dir)
    store.observe_list("s", "tool", [{**TOOL, "description": "x\x1b[2K<IMPORTANT>y</IMPORTANT>"}], on_new="ask")
    entry = store.get("s", "tool", "add")
    assert entry is not None
    q = build_pin_consent("s", [entry])
    params = t.ElicitRequestFormParams.model_validate(q.params)
    assert "\x1b" not in params.message
    assert "\\x1b[2K" in params.message
    assert "finding: [instruction-marker]" in params.message
    assert read_pin_consent(q, {"action": "accept", "content": {"approve": True}}) == (("tool", "add",
                                                                                       entry.digest),)
    for bad in ({"action": "accept", "content": {"approve": "true"}}, {"action": "accept"}, {"action": "decline"},
                {"action": "cancel", "content": {"approve": True}}, None, "accept"):
        assert read_pin_consent(q, bad) is None
    # whatever the answer says, only the digests that were shown are approved
    smuggled = {"action": "accept", "content": {"approve": True, "items": [["tool", "evil", "sha256:x"]]}}
    assert read_pin_consent(q, smuggled) == q.items


def test_a_launch_to_approve_in_the_host_is_said_in_words() -> None:
    """The host's approval dialog says a launch as the terminal review does (what it runs, sees, writes, its
    network), not as its JSON: before, a new user's dialog held thirty-odd mounts, and the package store's read-only
    binds read like directories of theirs the server was given."""
    store = "/home/me/.local/state/warden/store"
    manifest = {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/me/project"],
                "env": [], "network": "none",
                "sandbox": {"kind": "bwrap", "user": "dedicated-uid",
                            "mounts": [["ro-bind", "/usr", "/usr"], ["bind", "/home/me/project", "/home/me/project"],
                                       ["ro-bind", f"{store}/npm/fs", f"{store}/npm/fs"]]}}
    entry = PinEntry("fs", "server", "", PinState.PENDING, "sha256:" + "0" * 64, manifest, None, None, (),
                     "2026-12-02T00:00:00Z", None, None, None)
    lines = build_pin_consent("fs", [entry], package_store=store).params["message"].splitlines()
    assert lines[4:11] == [
        "   runs npx -y @modelcontextprotocol/server-filesystem /home/me/project",
        "   sandbox bwrap, as a dedicated uid",
        "   sees /home/me/project, read-write",
        "   writes /home/me/project (besides its own private /tmp and home)",
        "   reads system files and its package (from warden's store), read-only",
        "   env nothing from your environment",
        "   network: none: this server cannot reach any network"]
    assert not any('"mounts"' in line or "ro-bind" in line for line in lines)


def test_call_confirmation_binds_the_arguments() -> None:
    q = build_call_confirmation("s", "rm", {"path": "/tmp/x\u202e"}, tool_digest="sha256:ab")
    t.ElicitRequestFormParams.model_validate(q.params)
    assert "/tmp/x<U+202E>" in q.params["message"]
    assert q.arguments_digest == arguments_digest({"path": "/tmp/x\u202e"})
    assert read_call_confirmation(q, {"action": "accept", "content": {"confirm": True}}) == q.arguments_digest
    assert read_call_confirmation(q, {"action": "decline"}) is None


def test_refusal_names_reason_rule_and_command(tmp_path: Path) -> None:
    from tests.policy.helpers import server
    from warden.policy import ToolCallFacts

    err = refusal(decide(ToolCallFacts(server(tmp_path), "add", PinState.PENDING, PinState.APPROVED, {})))
    assert err.message == "tool 'add' of server 's' is new and not approved [built-in default (on_new)]"
    assert err.hint is not None
    assert "warden pins approve s add" in err.hint
    assert err.exit_code == 5


class _Script:
    def __init__(self, answers: list[str]) -> None:
        self.answers = answers
        self.shown: list[str] = []

    def show(self, lines: Sequence[str]) -> None:
        self.shown.extend(lines)

    def ask(self, question: str) -> str:
        self.shown.append(question)
        return self.answers.pop(0)


def test_terminal_review_needs_the_word_for_findings(state_dir: Path) -> None:
    store = PinStore(state_dir)
    store.observe_list("s", "tool", [{"name": "a", "inputSchema": {}}, {**TOOL, "name": "b"},
                                     {"name": "c", "inputSchema": {}}], on_new="ask")
    script = _Script(["o", "a", "y", "r"])  # one by one: 'a' approves a; 'y' is not 'approve' for b; 'r' revokes c
    summary = review(store, "s", script)
    assert [e.key for e in summary.approved] == ["a"]
    assert [e.key for e in summary.skipped] == ["b"]
    assert [e.key for e in summary.revoked] == ["c"]
    assert any("<U+200B> ZERO WIDTH SPACE" in s for s in script.shown)
    summary = review(store, "s", _Script(["approve"]))
    assert [e.key for e in summary.approved] == ["b"]


def test_pins_review_in_a_real_terminal(state_dir: Path) -> None:
    PinStore(state_dir).observe_list("s", "tool", [{"name": "a", "inputSchema": {}}], on_new="ask")
    code, out = in_terminal([WARDEN, "--state-dir", str(state_dir), "pins", "review", "s"], [(b"[a]pprove", b"a")])
    assert code == 0, out
    assert "approved 1, revoked 0, skipped 0" in out
    assert PinStore(state_dir).get("s", "tool", "a").state is PinState.APPROVED  # type: ignore[union-attr]


def test_approving_without_a_terminal_or_yes_is_refused(state_dir: Path) -> None:
    PinStore(state_dir).observe_list("s", "tool", [{"name": "a", "inputSchema": {}}], on_new="ask")
    for verb in (["approve", "s"], ["review"]):
        r = subprocess.run([WARDEN, "--state-dir", str(state_dir), "pins", *verb], capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, timeout=60)
        assert r.returncode == 5
        assert "needs a human at a terminal" in r.stderr
    assert PinStore(state_dir).get("s", "tool", "a").state is PinState.PENDING  # type: ignore[union-attr]
    json.loads((state_dir / "pins.json").read_text())


def test_the_end_of_input_at_a_pins_prompt_quits_or_says_no_never_an_internal_error(state_dir: Path) -> None:
    """Found by a new user: Ctrl-D at `warden pins review` printed "internal error: EOFError" (a bug report)."""
    PinStore(state_dir).observe_list("s", "tool", [{"name": "a", "inputSchema": {}}], on_new="ask")
    code, out = in_terminal([WARDEN, "--state-dir", str(state_dir), "pins", "review", "s"], [(b"[q]uit", b"\x04")])
    assert code == 0, out
    assert "approved 0, revoked 0, skipped 0" in out
    code, out = in_terminal([WARDEN, "--state-dir", str(state_dir), "pins", "approve", "s"], [(b"[y/N]", b"\x04")])
    assert code == 1, out
    assert "nothing approved" in out
    assert "internal error" not in out
    assert PinStore(state_dir).get("s", "tool", "a").state is PinState.PENDING  # type: ignore[union-attr]
