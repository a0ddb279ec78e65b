"""Nothing a sandboxed server can write changes a pin or an approval (DESIGN invariant 5).

The hostile fixture ``rugpull_statewriter.py`` is told exactly where warden's state directory is (argv and env, as
if it had guessed) and tries to replace, append to and plant files in it. It runs in warden's bwrap sandbox
(``warden.sandbox.make_launcher``). Afterwards the pin store must be byte-for-byte unchanged, the state dir must
hold no new file, and the approval must still be exactly what the human approved.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import trio

from tests.support import FIXTURES, PYTHON
from warden.launcher import Launcher, LaunchSpec
from warden.policy import PinState, PinStore
from warden.policy.pins import digest
from warden.sandbox import SandboxSettings, make_launcher

TOOL = {"name": "add", "description": "Adds.", "inputSchema": {"type": "object"}}


def _snapshot(state: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(state.iterdir())}


async def _ask_report(launcher: Launcher, spec: LaunchSpec) -> list[dict[str, str]]:
    child = await launcher.launch(spec)
    try:
        with trio.fail_after(60):
            await child.stdin.send_all(b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"report"}}\n')
            buf = b""
            while b"\n" not in buf:
                chunk = await child.stdout.receive_some(65536)
                assert chunk, "the fixture exited before answering"
                buf += chunk
    finally:
        child.kill()
        with trio.move_on_after(10):
            await child.wait()
    reply = json.loads(buf.split(b"\n", 1)[0])
    report: list[dict[str, str]] = json.loads(reply["result"]["content"][0]["text"])
    return report


async def test_DESIGN5_sandboxed_server_cannot_touch_pins(tmp_path: Path, state_dir: Path) -> None:
    store = PinStore(state_dir)
    store.observe_list("writer", "tool", [TOOL], on_new="ask")
    store.approve("writer", "tool", "add")
    before = _snapshot(state_dir)
    app = tmp_path / "app"
    app.mkdir()
    shutil.copy(FIXTURES / "rugpull_statewriter.py", app / "server.py")
    settings = SandboxSettings(read_dirs=(str(app),))
    launcher = make_launcher(settings, state_dir=state_dir)
    spec = LaunchSpec(argv=(PYTHON, str(app / "server.py"), str(state_dir)),
                      env={"WARDEN_STATE_DIR": str(state_dir), "XDG_STATE_HOME": str(state_dir.parent)}, cwd=str(app))
    report = await _ask_report(launcher, spec)
    assert report, "the fixture made no attempt"
    assert any(str(state_dir) in r["attempt"] for r in report)
    assert all(r["result"].startswith("failed") for r in report), report
    after = _snapshot(state_dir)
    launcher_own = {k for k in after.keys() - before.keys() if k.startswith("sandbox")}  # the launcher's uid slots
    assert {k: v for k, v in after.items() if k not in launcher_own} == before
    assert "pins.lock.evil" not in after
    assert "forged.tmp" not in after
    fresh = PinStore(state_dir)
    assert fresh.state("writer", "tool", "add", digest(TOOL)) is PinState.APPROVED
    assert fresh.get("writer", "tool", "add").approved_by == "terminal"  # type: ignore[union-attr]


async def test_unsandboxed_attempt_is_what_the_sandbox_prevents(tmp_path: Path, state_dir: Path) -> None:
    """The control experiment: the same fixture without a sandbox does reach the state dir, so the test above
    fails if the sandbox stops hiding it. (The store then refuses the planted symlink-free forgery only if it is
    malformed; a well-formed one is exactly why the state dir must never be visible to a server.)"""
    store = PinStore(state_dir)
    store.observe_list("writer", "tool", [TOOL], on_new="ask")
    launcher = make_launcher(SandboxSettings(kind="none"), state_dir=state_dir)
    spec = LaunchSpec(argv=(PYTHON, str(FIXTURES / "rugpull_statewriter.py"), str(state_dir)), env={})
    report = await _ask_report(launcher, spec)
    assert any(r["result"] == "succeeded" for r in report if str(state_dir) in r["attempt"])
    assert os.path.exists(state_dir / "pins.lock.evil")
