"""Issue 5 through ``warden run``: what a call leaves in the audit log, and write-ahead proven at the server."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support import RAWSERVER, WARDEN, RawHost, through_warden, write_config


def audit_json(*args: str, env: dict[str, str] | None = None) -> list[dict[str, object]]:
    out = subprocess.run([WARDEN, "audit", "show", "--json", *args], capture_output=True, text=True, timeout=60,
                         env=env, check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def received(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_bytes().splitlines() if line.strip()] if log.exists() else []


async def test_a_call_is_decided_durably_then_its_outcome_recorded(tmp_path: Path) -> None:
    write_config(tmp_path)
    host = await RawHost.start(through_warden(RAWSERVER))
    await host.initialize()
    await host.request(1, "tools/list")
    await host.response(1)
    assert (await host.call(2, "echo", {"text": "hello"}))["result"]
    denied = await host.call(3, "nope")
    assert denied["error"]["code"] == -32602  # type: ignore[index]
    assert await host.close() == 0
    verify = subprocess.run([WARDEN, "audit", "verify"], capture_output=True, text=True, timeout=60)
    assert verify.returncode == 0, verify.stderr
    records = audit_json()
    events = [r["event"] for r in records]
    assert events[0] == "audit.opened"
    assert events[-1] == "audit.closed"
    assert "policy.loaded" in events
    assert "server.launched" in events
    decided = [r for r in records if r["event"] == "call.decided"]
    assert [(r["target"], r["decision"]) for r in decided] == [("echo", "allow"), ("nope", "deny")]
    allowed = decided[0]
    assert allowed["consent"] == "tofu"
    assert allowed["target_digest"]
    assert allowed["request_digest"]
    assert allowed["arguments"]["detail"] == "hash"  # type: ignore[index]
    assert [r["client"] for r in decided] == ["rawhost 1", "rawhost 1"]  # who asked: self-reported clientInfo
    outcome = next(r for r in records if r["event"] == "call.outcome")
    assert outcome["decision_index"] == allowed["index"]
    assert outcome["outcome"] == "ok"
    assert int(outcome["index"]) > int(allowed["index"])  # type: ignore[arg-type]


async def test_a_2026_hosts_decisions_carry_the_name_it_gives_on_each_request(tmp_path: Path) -> None:
    """A 2026 host has no initialize: its clientInfo travels in every request's _meta, and each decision records
    the one that request carried (cut to 256 characters: the host's word, not warden's)."""
    write_config(tmp_path)
    host = await RawHost.start(through_warden(RAWSERVER))
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    await host.request(1, "tools/list", {"_meta": meta})
    await host.response(1)
    await host.request(2, "tools/call", {"name": "echo", "arguments": {"text": "hi"}, "_meta": {
        **meta, "io.modelcontextprotocol/clientInfo": {"name": "agent-" + "x" * 300, "version": "2"}}})
    assert "result" in await host.response(2)
    await host.request(3, "tools/call", {"name": "echo", "arguments": {"text": "hi"}, "_meta": meta})
    assert "result" in await host.response(3)
    assert await host.close() == 0
    decided = [r for r in audit_json() if r["event"] == "call.decided"]
    assert [r.get("client") for r in decided] == [("agent-" + "x" * 300)[:256], None]


@pytest.fixture
def small_state_fs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """warden's state dir on its own 4 MiB tmpfs, so the test can fill it (ENOSPC) while warden runs."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root); warden's refusal is covered by tests/audit")
    mount = tmp_path.parent / f"{tmp_path.name}-statefs"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mount)], check=True)
    monkeypatch.setenv("WARDEN_STATE_DIR", str(mount / "state"))
    try:
        yield mount  # type: ignore[misc]
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


async def test_write_ahead_a_call_the_log_cannot_record_never_reaches_the_server(
        tmp_path: Path, small_state_fs: Path) -> None:
    """The disk fills up under a running warden. Calls go on while the audit log's reserve (1 MiB kept allocated,
    see warden/audit/_reserve.py) is whole; the first call whose record would eat into it is refused and never
    reaches the server, and so is every call after it while the disk stays full."""
    write_config(tmp_path, extra='[servers.rawserver]\naudit_arguments = "full"\n')
    log = tmp_path / "received.jsonl"
    host = await RawHost.start(through_warden([*RAWSERVER, "--log", str(log)]))
    await host.initialize()
    assert (await host.call(1, "echo", {"text": "recorded"}))["result"]
    assert sum(m.get("method") == "tools/call" for m in received(log)) == 1
    filler = small_state_fs / "filler"
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True, check=False)
    answered = ["recorded"]
    refused: dict[str, object] = {}
    for n in range(2, 60):  # ~50 KB records: the reserve's edge is about twenty calls away
        text = f"call {n} " + "x" * 50_000
        answer = await host.call(n, "echo", {"text": text})
        if "error" in answer:
            refused = answer
            break
        answered.append(text)
    assert refused, "the log never refused a call on a full disk"
    assert "audit log" in refused["error"]["message"]  # type: ignore[index]
    later = await host.call(100, "echo", {"text": "still refused"})
    assert "error" in later  # paused until the disk has room again
    await host.close()
    calls = [m for m in received(log) if m.get("method") == "tools/call"]
    assert [c["params"]["arguments"]["text"] for c in calls] == answered  # type: ignore[index]
