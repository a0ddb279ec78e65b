"""``warden serve``: four real servers (mcp-server-time, mcp-server-git, server-everything, server-filesystem),
each in its own bwrap sandbox, behind one stdio endpoint, driven by the Python SDK client (both eras), the
TypeScript SDK client and a raw host; ``warden status`` reads what a running serve reports; a ``kill -9`` of one
server's process fails none of a concurrent stream of calls to another, and the killed one comes back."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client, StdioServerParameters

from tests.support import (
    NODE,
    PEERS,
    VENV_BIN,
    WARDEN,
    RawHost,
    audit_records,
    everything_server,
    filesystem_server,
    server_pids,
)

ISOLATION = ("WARDEN_STATE_DIR", "WARDEN_CONFIG", "WARDEN_ORG_POLICY", "XDG_STATE_HOME", "XDG_CONFIG_HOME",
             "PYTHONPATH")
GIT_SAFE = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}
SERVE = [WARDEN, "serve", "--stdio"]


def server_table(name: str, argv: list[str], extra: str = "") -> str:
    return f"\n[servers.{name}]\ncommand = {json.dumps(argv[0])}\nargs = {json.dumps(argv[1:])}\n{extra}"


@pytest.fixture(autouse=True)
def four_servers(trusting: Path, git_repo: Path, fs_root: Path) -> Path:
    with trusting.open("a") as config:
        config.write(server_table("time", [str(VENV_BIN / "mcp-server-time")]))
        config.write(server_table("git", [str(VENV_BIN / "mcp-server-git"), "--repository", str(git_repo)],
                                  f"env = {json.dumps(sorted(GIT_SAFE))}\n"))
        config.write(server_table("everything", everything_server()))
        config.write(server_table("filesystem", filesystem_server(fs_root)))
    return trusting


def calls(git_repo: Path, fs_root: Path) -> list[tuple[str, dict[str, Any]]]:
    return [("time__convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}),
            ("git__git_status", {"repo_path": str(git_repo)}),
            ("everything__echo", {"message": "hi"}),
            ("filesystem__read_text_file", {"path": str(fs_root / "hello.txt")})]


def params() -> StdioServerParameters:
    env = {k: os.environ[k] for k in ISOLATION if k in os.environ} | GIT_SAFE
    return StdioServerParameters(command=SERVE[0], args=SERVE[1:], env=env)


async def approve_all() -> None:
    """Meet every server once through serve, then approve what each showed (some real servers' instructions trip
    the scanner's heuristics, and findings are never trusted on first use)."""
    async with Client(params(), mode="legacy") as client:
        await client.list_tools()
    for name in ("time", "git", "everything", "filesystem"):
        approved = subprocess.run([WARDEN, "pins", "approve", name, "--yes", "--accept-findings"],
                                  capture_output=True, text=True, timeout=60)
        assert approved.returncode == 0, approved.stderr


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_python_sdk_sees_every_namespaced_tool_and_calls_one_of_each(mode: str, git_repo: Path,
                                                                          fs_root: Path) -> None:
    await approve_all()
    async with Client(params(), mode=mode) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        results = [await client.call_tool(name, args) for name, args in calls(git_repo, fs_root)]
        version = client.protocol_version
    assert version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
    assert {"time__get_current_time", "git__git_log", "everything__get-sum", "filesystem__list_directory"} <= names
    assert all(n.split("__", 1)[0] in ("time", "git", "everything", "filesystem") for n in names)
    assert all(not r.is_error for r in results), results
    texts = [r.content[0].text for r in results]  # type: ignore[union-attr]
    assert "Asia/Tokyo" in texts[0]
    assert "README.md" in texts[1]
    assert texts[2] == "Echo: hi"
    assert texts[3] == "hello from the test dir\n"


async def test_typescript_sdk_sees_every_namespaced_tool_and_calls_one_of_each(git_repo: Path,
                                                                              fs_root: Path) -> None:
    await approve_all()
    script = PEERS.parent / "ts_parity_client.mjs"
    out = subprocess.run([NODE, str(script), json.dumps(calls(git_repo, fs_root)), *SERVE], capture_output=True,
                         text=True, env=os.environ | GIT_SAFE, timeout=120, check=True)
    seen = json.loads(out.stdout)
    names = {t["name"] for t in seen["tools"]}
    assert {"time__get_current_time", "git__git_log", "everything__echo", "filesystem__read_text_file"} <= names
    assert len(seen["results"]) == 4
    assert not any(r.get("isError") for r in seen["results"])


async def test_kill_9_of_one_server_fails_no_call_to_another_and_it_comes_back(git_repo: Path,
                                                                              fs_root: Path) -> None:
    await approve_all()
    host = await RawHost.start(SERVE, env=os.environ | GIT_SAFE)
    try:
        await host.initialize()
        with trio.fail_after(30):
            while not (serving := status_json()["serving"]):
                await trio.sleep(0.2)
        assert {s["name"]: s["state"] for s in serving[0]["servers"]} == dict.fromkeys(
            ("time", "git", "everything", "filesystem"), "idle")  # lazy: nothing starts before it is used
        await host.request(1, "tools/list")
        assert any(t["name"] == "git__git_status" for t in (await host.response(1, timeout=60))["result"]["tools"])
        victims = server_pids(host.process.pid, "mcp-server-git")
        assert victims, "the git server's process was not found"
        latencies: list[float] = []
        failures: list[dict[str, Any]] = []
        ids = iter(range(1000, 100000))

        async def stream(seconds: float) -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                started = time.monotonic()
                answer = await host.call(next(ids), "time__get_current_time", {"timezone": "UTC"})
                latencies.append(time.monotonic() - started)
                if "error" in answer or answer["result"].get("isError"):
                    failures.append(answer)

        await stream(2.0)
        normal = sorted(latencies)
        latencies.clear()
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        await stream(3.0)
        assert failures == []
        assert latencies
        print(f"calls to time: normal p99 {normal[int(len(normal) * 0.99) - 1] * 1e3:.1f} ms over {len(normal)}; "
              f"around the kill max {max(latencies) * 1e3:.1f} ms over {len(latencies)}")
        with trio.fail_after(60):
            while True:
                answer = await host.call(next(ids), "git__git_status", {"repo_path": str(git_repo)}, timeout=60)
                if "result" in answer and not answer["result"].get("isError"):
                    break
                await trio.sleep(0.5)
        assert server_pids(host.process.pid, "mcp-server-git")
        await trio.sleep(1.5)  # the status file is rewritten within a second of a change
        serving = status_json()["serving"]
        assert [s["pid"] for s in serving] == [host.process.pid]
        by_name = {s["name"]: s for s in serving[0]["servers"]}
        assert set(by_name) == {"time", "git", "everything", "filesystem"}
        assert by_name["git"]["restarts"] == 1
        assert by_name["git"]["state"] == "running"
        assert by_name["time"]["calls"] >= len(normal)
        assert by_name["time"]["refused"] == 0
        assert by_name["filesystem"]["sandbox"]["kind"] == "bwrap"
        assert by_name["everything"]["era"] == "legacy"
        assert by_name["everything"]["calls"] == 0
        table = subprocess.run([WARDEN, "status"], capture_output=True, text=True, timeout=30)
        assert table.returncode == 0, table.stderr
        assert table.stdout.splitlines()[0].split()[:3] == ["SERVER", "STATE", "ERA"]
        assert any(line.split()[:2] == ["git", "running"] for line in table.stdout.splitlines())
        assert "last error of git" in table.stdout
    finally:
        assert await host.close() == 0
    assert status_json() == {"serving": [], "not_served": ["time", "git", "everything", "filesystem"]}


def status_json() -> dict[str, Any]:
    status = subprocess.run([WARDEN, "status", "--json"], capture_output=True, text=True, timeout=30)
    assert status.returncode == 0, status.stderr
    result: dict[str, Any] = json.loads(status.stdout)
    return result


async def test_reload_keeps_the_old_config_on_a_bad_file_and_restarts_a_changed_server_as_new(
        four_servers: Path, tmp_path: Path) -> None:
    await approve_all()
    good = four_servers.read_text()
    stderr = tmp_path / "stderr.txt"
    with stderr.open("wb") as err:
        host = await RawHost.start(SERVE, env=os.environ | GIT_SAFE, stderr=err)
    try:
        await host.initialize()
        await host.request(1, "tools/list")
        assert any(t["name"] == "time__get_current_time" for t in (await host.response(1, 60))["result"]["tools"])
        four_servers.write_text(good + "\n= broken\n")  # a TOML error on the last line
        with trio.fail_after(30):
            while not audit_records("config.reloaded"):
                await trio.sleep(0.2)
        refused = audit_records("config.reloaded")[-1]
        assert refused["error"].startswith(f"{four_servers}: invalid TOML")
        assert f"(at line {len(good.splitlines()) + 2}, column 1)" in refused["error"]
        answer = await host.call(2, "time__get_current_time", {"timezone": "UTC"})
        assert not answer["result"].get("isError"), answer  # the old config keeps working
        changed = good.replace(f'command = {json.dumps(str(VENV_BIN / "mcp-server-time"))}\nargs = []',
                               f'command = {json.dumps(str(VENV_BIN / "mcp-server-time"))}\n'
                               'args = ["--local-timezone", "UTC"]')
        assert changed != good
        four_servers.write_text(changed)
        with trio.fail_after(30):
            while len(audit_records("config.reloaded")) < 2:
                await trio.sleep(0.2)
        assert audit_records("config.reloaded")[-1]["reason"] == "changed, started again as what it now is: time"
        with trio.fail_after(30):  # hosts are told every list changed
            while not any(m.get("method") == "notifications/tools/list_changed" for m in host.seen[-20:]):
                await host.next_message()
        await host.request(3, "tools/list")
        names = {t["name"] for t in (await host.response(3, 60))["result"]["tools"]}
        assert "git__git_status" in names
        assert "time__get_current_time" not in names  # a new identity waits for approval
        refused_call = await host.call(4, "time__get_current_time", {"timezone": "UTC"}, timeout=60)
        assert "warden pins" in json.dumps(refused_call)
        os.kill(host.process.pid, signal.SIGHUP)  # a reload with nothing changed is recorded too
        with trio.fail_after(30):
            while len(audit_records("config.reloaded")) < 3:
                await trio.sleep(0.2)
        assert audit_records("config.reloaded")[-1]["reason"] == "nothing changed"
        assert await host.close() == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            host.process.kill()
        print(stderr.read_text()[-6000:])
    text = stderr.read_text()
    assert "reload refused, the servers keep running as they were" in text
    assert "Traceback" not in text
