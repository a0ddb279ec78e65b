"""``warden pins list|show|diff|approve|revoke``: output names hidden characters; nothing raw reaches the terminal."""

from __future__ import annotations

from pathlib import Path

from tests.policy.helpers import warden
from warden.policy import PinState, PinStore

EVIL = {"name": "add", "description": "Adds.\x1b]0;pwned\x07\x1b[2K\u202e<IMPORTANT>", "inputSchema": {}}


def _cli(state: Path, *args: str) -> tuple[int, str, str]:
    r = warden("--state-dir", str(state), "pins", *args)
    return r.returncode, r.stdout, r.stderr


def test_list_show_diff_approve_revoke(state_dir: Path) -> None:
    store = PinStore(state_dir)
    store.observe_list("s", "tool", [{"name": "add", "description": "Adds.", "inputSchema": {}}], on_new="ask")
    store.observe_list("s", "prompt", [{"name": "add", "description": "prompt named add"}], on_new="ask")
    code, out, _ = _cli(state_dir, "list")
    assert code == 0
    assert "s                    tool               pending" in out
    code, _, err = _cli(state_dir, "approve", "s", "add", "--yes")
    assert code == 5
    assert "names several kinds" in err
    code, out, _ = _cli(state_dir, "approve", "s", "add", "--kind", "tool", "--yes")
    assert code == 0
    assert "approved: server 's' tool 'add'" in out
    store.observe_list("s", "tool", [EVIL], on_new="ask")
    code, out, _ = _cli(state_dir, "diff", "s", "add", "--kind", "tool")
    assert code == 0
    assert "\x1b" not in out
    assert "\u202e" not in out
    assert "\\x1b]0;pwned\\x07" in out
    assert "<U+202E>" in out
    assert "|" in out
    assert '"Adds."' in out
    code, out, _ = _cli(state_dir, "show", "s", "add", "--kind", "tool")
    assert "\x1b" not in out
    assert "hidden characters in the current definition" in out
    assert "[ansi-escape]" in out
    assert "[bidi-control]" in out
    code, _, err = _cli(state_dir, "revoke", "s", "--yes")
    assert code == 5
    assert "has no identity pin" in err
    code, out, err = _cli(state_dir, "revoke", "s", "add", "--kind", "tool", "--yes")
    assert code == 0
    assert "revoked: server 's' tool 'add'" in out
    assert store.get("s", "tool", "add").state is PinState.REVOKED  # type: ignore[union-attr]
    code, _, err = _cli(state_dir, "show", "nope")
    assert code == 5
    assert "no pins for server 'nope'" in err


def test_revoking_the_server_identity_refuses_the_server(state_dir: Path) -> None:
    store = PinStore(state_dir)
    store.observe_server("s", {"command": "x"}, on_new="tofu")
    code, out, _ = _cli(state_dir, "revoke", "s", "--yes")
    assert code == 0
    assert "revoked: server 's' server identity" in out
    assert store.get("s", "server", "").state is PinState.REVOKED  # type: ignore[union-attr]
