"""Real MCP servers work inside warden's bwrap sandbox, and the sandbox shows: only the allowed environment, a
writable workspace and nothing else writable, a read-only repository, no network.

The servers are the real peers (npm packages from tests/peers, Python packages from the venv), launched through
``make_launcher`` exactly as the proxy does (covers: ST01), and spoken to with newline-delimited JSON-RPC.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path

import pytest
import trio

from tests.sandbox.mcp import McpSession, mcp_session
from tests.support import PEERS, VENV_BIN, sandbox_writable
from warden.launcher import LaunchSpec
from warden.sandbox import SandboxSettings, make_launcher

EVERYTHING = PEERS / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
FILESYSTEM = PEERS / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
GIT_SAFE = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}


@pytest.mark.parametrize("landlock", ["off", "require"])
async def test_ST01_server_everything_sees_only_the_allowed_environment(state_dir: Path, landlock: str) -> None:
    launcher = make_launcher(SandboxSettings(landlock=landlock), state_dir=state_dir)  # type: ignore[arg-type]
    spec = LaunchSpec(argv=("node", str(EVERYTHING), "stdio"), env={"ALLOWED_TOKEN": "tok-123"})
    async with mcp_session(launcher, spec) as session:
        result = await session.call_tool("get-env")
    env = json.loads(McpSession.text(result))
    assert env == {"ALLOWED_TOKEN": "tok-123", "HOME": "/home/mcp", "LANG": "C.UTF-8", "NODE_ENV": "production",
                   "PATH": "/usr/local/bin:/usr/bin:/bin", "PWD": "/home/mcp", "TMPDIR": "/tmp"}


async def test_server_filesystem_writes_its_workspace_and_nothing_else(state_dir: Path, host_dir: Path) -> None:
    workspace = sandbox_writable(host_dir / "ws")
    reference = host_dir / "ref"  # the server may write here by its own rules; the sandbox says no
    reference.mkdir()
    (reference / "readme.txt").write_text("read me")
    settings = SandboxSettings(write_dirs=(str(workspace),), read_dirs=(str(reference),))
    spec = LaunchSpec(argv=("node", str(FILESYSTEM), str(workspace), str(reference)))
    async with mcp_session(make_launcher(settings, state_dir=state_dir), spec) as session:
        written = await session.call_tool("write_file", {"path": str(workspace / "note.txt"), "content": "hi"})
        assert not written.get("isError"), written
        read = await session.call_tool("read_text_file", {"path": str(reference / "readme.txt")})
        assert McpSession.text(read) == "read me"
        refused = await session.call_tool("write_file", {"path": str(reference / "evil.txt"), "content": "x"})
        outside = await session.call_tool("write_file", {"path": str(host_dir / "evil.txt"), "content": "x"})
    assert (workspace / "note.txt").read_text() == "hi"
    assert refused.get("isError") is True
    assert "read-only file system" in McpSession.text(refused).lower()
    assert not (reference / "evil.txt").exists()
    assert outside.get("isError") is True  # the server's own rule, and the sandbox would say ENOENT anyway
    assert not (host_dir / "evil.txt").exists()


@pytest.mark.parametrize("landlock", ["off", "require"])
async def test_mcp_server_time_answers(state_dir: Path, landlock: str) -> None:
    launcher = make_launcher(SandboxSettings(landlock=landlock), state_dir=state_dir)  # type: ignore[arg-type]
    async with mcp_session(launcher, LaunchSpec(argv=(str(VENV_BIN / "mcp-server-time"),))) as session:
        result = await session.call_tool("get_current_time", {"timezone": "UTC"})
    assert json.loads(McpSession.text(result))["timezone"] == "UTC"


def _git_repo(path: Path) -> Path:
    path.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(path), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True, env=env)
    (path / "hello.txt").write_text("hello\n")
    subprocess.run(["git", "-C", str(path), "add", "hello.txt"], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "commit", "-q", "-m", "first commit"], check=True, env=env)
    return path


async def test_mcp_server_git_reads_a_read_only_repository(state_dir: Path, host_dir: Path) -> None:
    repo = _git_repo(host_dir / "repo")
    (repo / "new.txt").write_text("untracked\n")
    head_before = (repo / ".git" / "HEAD").read_text()
    settings = SandboxSettings(read_dirs=(str(repo),))
    spec = LaunchSpec(argv=(str(VENV_BIN / "mcp-server-git"), "--repository", str(repo)), env=GIT_SAFE)
    async with mcp_session(make_launcher(settings, state_dir=state_dir), spec) as session:
        log = await session.call_tool("git_log", {"repo_path": str(repo)})
        status = await session.call_tool("git_status", {"repo_path": str(repo)})
        add = await session.call_tool("git_add", {"repo_path": str(repo), "files": ["new.txt"]})
    assert "first commit" in McpSession.text(log)
    assert "new.txt" in McpSession.text(status)
    assert add.get("isError") is True
    assert "read-only file system" in McpSession.text(add).lower()
    assert (repo / ".git" / "HEAD").read_text() == head_before
    tracked = subprocess.run(["git", "-C", str(repo), "ls-files"], capture_output=True, text=True, check=True,
                             env={"PATH": "/usr/bin:/bin", "HOME": str(host_dir)})
    assert tracked.stdout.split() == ["hello.txt"]


async def test_mcp_server_fetch_cannot_reach_a_loopback_listener(state_dir: Path) -> None:
    accepted: list[bytes] = []

    async def handler(stream: trio.SocketStream) -> None:
        accepted.append(await stream.receive_some(1024))
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nContent-Type: text/plain\r\n\r\nsecret")

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        url = f"http://127.0.0.1:{port}/"
        # Control: the server reaches the listener when it is not sandboxed, so the refusal below is the sandbox's.
        bare = make_launcher(SandboxSettings(kind="none"), state_dir=state_dir)
        argv = (str(VENV_BIN / "mcp-server-fetch"), "--ignore-robots-txt", "--allow-private-ips")
        async with mcp_session(bare, LaunchSpec(argv=argv, env={"PATH": os.environ["PATH"]})) as session:
            control = await session.call_tool("fetch", {"url": url, "raw": True})
        assert "secret" in McpSession.text(control)
        assert len(accepted) == 1
        sandboxed = make_launcher(SandboxSettings(), state_dir=state_dir)
        async with mcp_session(sandboxed, LaunchSpec(argv=argv)) as session:
            result = await session.call_tool("fetch", {"url": url, "raw": True})
        nursery.cancel_scope.cancel()
    assert result.get("isError") is True
    assert "secret" not in McpSession.text(result)
    assert len(accepted) == 1  # still only the control's request


async def test_node_modules_bin_entries_run_the_installed_package_offline(state_dir: Path) -> None:
    argv = (str(PEERS / ".bin" / "mcp-server-everything"), "stdio")
    launcher = make_launcher(SandboxSettings(), state_dir=state_dir)
    manifest = launcher.manifest(LaunchSpec(argv=argv, cwd=str(PEERS.parent)))
    assert manifest["profile"] == "node"
    assert ["ro-bind", str(PEERS), str(PEERS)] in manifest["mounts"]
    async with mcp_session(launcher, LaunchSpec(argv=argv, cwd=str(PEERS.parent))) as session:
        tools = await session.request("tools/list")
    assert "get-env" in [tool["name"] for tool in tools["tools"]]
