"""Lifecycle obligations through warden: shutdown escalation, initialize never cancelled, timeouts with cancellation,
progress, pings, crash and restart (issue 2 acceptance: lifecycle)."""

from __future__ import annotations

import json
from pathlib import Path

import trio

from tests.support import RAWSERVER, RawHost, through_warden


def received(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_bytes().splitlines() if line.strip()]


def processes_with(marker: str) -> list[int]:
    """Host pids of live (not zombie) processes whose command line contains ``marker``. (A sandboxed server's own
    idea of its pid is its pid namespace's, so the test looks it up from outside.)"""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker.encode() in (entry / "cmdline").read_bytes() and (entry / "stat").read_text().split()[2] != "Z":
                found.append(int(entry.name))
        except OSError:
            continue
    return found


async def test_LC10_LC11_server_ignoring_eof_and_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    """Shutdown escalates in order: stdin closed, then SIGTERM (the server sees both and ignores them), then
    SIGKILL, after which nothing of the server survives."""
    pids, log = tmp_path / "pids", tmp_path / "log"
    host = await RawHost.start(through_warden(
        [*RAWSERVER, "--ignore-eof-and-term", "--pidfile", str(pids), "--log", str(log)], "--shutdown-grace", "0.5"))
    await host.initialize()
    server = [p for p in processes_with(str(pids)) if p != host.process.pid]
    assert server, "the server is not running"
    assert await host.close() == 0
    with trio.fail_after(5):
        while processes_with(str(pids)):
            await trio.sleep(0.05)
    steps = [m["event"] for m in received(log) if "event" in m]
    assert steps == ["stdin EOF ignored", "SIGTERM ignored"]


async def test_LC09_initialize_is_never_cancelled_the_server_is_closed_instead(tmp_path: Path) -> None:
    log = tmp_path / "log"
    pids = tmp_path / "pids"
    host = await RawHost.start(through_warden(
        [*RAWSERVER, "--initialize-silent", "--log", str(log), "--pidfile", str(pids)],
        "--handshake-timeout", "1", "--shutdown-grace", "0.2"))
    await host.request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                         "clientInfo": {"name": "h", "version": "1"}})
    with trio.fail_after(10):
        while not pids.exists() or len(pids.read_text().split()) < 2:  # closed, and a new one started
            await trio.sleep(0.05)
    await host.process.stdin.aclose()  # type: ignore[union-attr]
    with trio.fail_after(30):
        await host.process.wait()
    messages = received(log)
    init_ids = {m["id"] for m in messages if m.get("method") == "initialize"}
    cancelled = {m["params"]["requestId"] for m in messages  # type: ignore[index]
                 if m.get("method") == "notifications/cancelled"}
    assert init_ids
    assert not (init_ids & cancelled)





async def test_MS16_the_servers_ping_is_answered() -> None:
    host = await RawHost.start(through_warden(RAWSERVER))
    await host.initialize()
    answer = await host.call(1, "ping_client")
    reply = json.loads(answer["result"]["content"][0]["text"])  # type: ignore[index]
    assert reply["result"] == {}
    assert not any(m.get("method") == "ping" for m in host.seen)  # warden answered; the host was not bothered
    await host.close()


async def test_ST04_crashed_server_gives_an_error_then_is_restarted(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    host = await RawHost.start(through_warden([*RAWSERVER, "--pidfile", str(pids)]))
    await host.initialize()
    answer = await host.call(1, "crash")
    assert answer["error"]["code"] == -32000  # type: ignore[index]
    assert "exited with status 3" in answer["error"]["message"]  # type: ignore[index]
    again = await host.call(2, "echo", {"text": "back"})
    assert again["result"]["content"][0]["text"] == "back"  # type: ignore[index]
    assert len(pids.read_text().split()) == 2
    await host.close()



def test_server_names_are_derived_from_the_command() -> None:
    from warden.cli.run import derive_name

    cases = {
        ("node", "/x/node_modules/@modelcontextprotocol/server-everything/dist/index.js", "stdio"):
            "server-everything",
        ("npx", "-y", "@modelcontextprotocol/server-filesystem", "/data"): "server-filesystem",
        ("npx", "-y", "@scope/pkg@1.2.3"): "pkg",
        ("/venv/bin/mcp-server-time",): "mcp-server-time",
        ("uvx", "mcp-server-git", "--repository", "."): "mcp-server-git",
        ("python3", "server.py"): "server",
        ("/usr/bin/python3.11", "/srv/tools/main.py"): "tools",
        ("./weird name!",): "weird-name",
    }
    for argv, name in cases.items():
        assert derive_name(argv) == name, argv
