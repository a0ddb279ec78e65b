"""Real peers through ``warden run`` give the same answers as directly (issue 2, first acceptance bullet).

The Python SDK client (``mcp`` 2.3.0) connects in ``mode="legacy"`` and ``mode="auto"``; through warden, ``auto``
negotiates 2026-07-28 with warden even when the real server is legacy, so these tests also cover era translation.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from tests.support import NODE, PEERS, VENV_BIN, WARDEN, everything_server, filesystem_server, through_warden
from warden.cli.run import derive_name

ISOLATION = ("WARDEN_STATE_DIR", "WARDEN_CONFIG", "WARDEN_ORG_POLICY", "XDG_STATE_HOME", "XDG_CONFIG_HOME")
# The sandboxed git server runs as another uid than the repo's owner; git refuses such repos unless told.
GIT_SAFE = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}


@pytest.fixture(autouse=True)
def git_env_allowed(trusting: Path) -> None:
    with trusting.open("a") as config:
        config.write(f"\n[servers.mcp-server-git]\nenv = {json.dumps(sorted(GIT_SAFE))}\n")


def params(argv: list[str]) -> StdioServerParameters:
    env = {k: os.environ[k] for k in ISOLATION if k in os.environ} | GIT_SAFE
    return StdioServerParameters(command=argv[0], args=argv[1:], env=env)


def comparable(result: Any) -> dict[str, Any]:
    dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    dumped.pop("_meta", None)
    return dumped


async def session_view(argv: list[str], mode: str, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    async with Client(params(argv), mode=mode) as client:
        tools = await client.list_tools()
        results = [comparable(await client.call_tool(name, args)) for name, args in calls]
        return {"version": client.protocol_version,
                "tools": sorted((comparable(t) for t in tools.tools), key=lambda t: t["name"]),
                "results": results}


def servers(git_repo: Path, fs_root: Path) -> dict[str, tuple[list[str], list[tuple[str, dict[str, Any]]]]]:
    return {
        "time": ([str(VENV_BIN / "mcp-server-time")],
                 [("convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"})]),
        "git": ([str(VENV_BIN / "mcp-server-git"), "--repository", str(git_repo)],
                [("git_status", {"repo_path": str(git_repo)}), ("git_diff_unstaged", {"repo_path": str(git_repo)})]),
        "everything": (everything_server(), [("echo", {"message": "hi"}), ("get-sum", {"a": 2, "b": 3})]),
        "filesystem": (filesystem_server(fs_root), [("list_directory", {"path": str(fs_root)}),
                                                    ("read_text_file", {"path": str(fs_root / "hello.txt")})]),
    }


async def approve_all(argv: list[str]) -> None:
    """Meet the server once through warden, then approve everything it showed, findings included (some real
    servers' instructions trip the scanner's heuristics, and findings are never trusted on first use)."""
    async with Client(params(through_warden(argv)), mode="legacy") as client:
        await client.list_tools()
    approved = subprocess.run([WARDEN, "pins", "approve", derive_name(argv), "--yes", "--accept-findings"],
                              capture_output=True, text=True, timeout=60)
    assert approved.returncode == 0, approved.stderr


@pytest.mark.parametrize("mode", ["legacy", "auto"])
@pytest.mark.parametrize("server", ["time", "git", "everything", "filesystem"])
async def test_python_sdk_gets_the_same_answers_through_warden(server: str, mode: str, git_repo: Path,
                                                               fs_root: Path) -> None:
    argv, calls = servers(git_repo, fs_root)[server]
    await approve_all(argv)
    direct = await session_view(argv, mode, calls)
    proxied = await session_view(through_warden(argv), mode, calls)
    assert proxied["tools"] == direct["tools"]
    assert proxied["results"] == direct["results"]
    assert all(not r.get("isError") for r in proxied["results"])
    if mode == "legacy":
        assert proxied["version"] == direct["version"] == "2025-11-25"
    else:
        assert proxied["version"] == "2026-07-28"  # warden serves 2026 hosts whatever the server's era




@pytest.mark.parametrize("server", ["time", "git", "everything", "filesystem"])
async def test_typescript_sdk_legacy_gets_the_same_answers_through_warden(server: str, git_repo: Path,
                                                                          fs_root: Path) -> None:
    script = PEERS.parent / "ts_parity_client.mjs"
    argv, calls = servers(git_repo, fs_root)[server]
    await approve_all(argv)

    def run(cmd: list[str]) -> dict[str, Any]:
        out = subprocess.run([NODE, str(script), json.dumps(calls), *cmd], capture_output=True, text=True,
                             env=os.environ | GIT_SAFE,
                             timeout=60, check=True)
        return json.loads(out.stdout)

    direct, proxied = run(argv), run(through_warden(argv))
    assert proxied == direct
    assert proxied["results"]
    assert not any(r.get("isError") for r in proxied["results"])
