"""Issue 3's acceptance through ``warden run`` itself (the lead's proxy, with the sandbox as its default launcher):
server-everything's get-env shows only the allowed variables, server-filesystem cannot write outside its
workspace, mcp-server-fetch cannot reach a loopback listener, mcp-server-time and mcp-server-git (on a read-only
repository) work - and when bwrap is unusable, the host gets a JSON-RPC error and stderr names the missing piece.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import trio

from tests.support import (
    VENV_BIN,
    WARDEN,
    RawHost,
    everything_server,
    filesystem_server,
    sandbox_readable,
    sandbox_writable,
    through_warden,
    write_config,
)


def _text(answer: dict[str, object]) -> str:
    result = answer.get("result")
    assert isinstance(result, dict), answer
    return "\n".join(item.get("text", "") for item in result.get("content", []) if isinstance(item, dict))


async def _host(argv: list[str], env: dict[str, str] | None = None, name: str | None = None) -> RawHost:
    warden_args = ("--name", name) if name else ()
    return await RawHost.start(through_warden(argv, *warden_args), stderr=subprocess.PIPE,
                               env={**os.environ, **(env or {})})


async def _ready(host: RawHost, name: str | None = None) -> None:
    """initialize, then tools/list: what a host does first (and what pins trust-on-first-use). Server
    instructions are not trusted on first use: approve them the way a user would (this suite is about the
    sandbox, not pins)."""
    await host.initialize()
    await host.request("list", "tools/list")
    await host.response("list", timeout=60)
    if name is not None:
        done = subprocess.run([WARDEN, "pins", "approve", name, "--kind", "instructions", "--yes",
                               "--accept-findings"],
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stdout + done.stderr


async def test_get_env_through_warden_run_shows_only_the_allowed_variables(tmp_path: Path) -> None:
    """Covers AU08: a stdio server's credential (``ALLOWED_TOKEN``) reaches it through its environment, and only the
    variables the policy names do."""
    write_config(tmp_path, extra='[servers.everything]\nenv = ["ALLOWED_TOKEN"]\n')
    host = await _host(everything_server(), {"ALLOWED_TOKEN": "tok-1-handed", "SECRET_NOT_ALLOWED": "nope"},
                       name="everything")
    await _ready(host, "everything")
    env = json.loads(_text(await host.call(1, "get-env")))
    assert await host.close() == 0
    # the server has exactly the handed value; the host never sees it (the result-side rule cuts registry values)
    assert env["ALLOWED_TOKEN"] == "[REDACTED:secrets_registry]"
    assert "SECRET_NOT_ALLOWED" not in env
    assert set(env) == {"ALLOWED_TOKEN", "HOME", "LANG", "NODE_ENV", "PATH", "PWD", "TMPDIR"}
    assert env["HOME"] == "/home/mcp"


async def test_filesystem_through_warden_run_cannot_write_outside_its_workspace(tmp_path: Path) -> None:
    workspace = sandbox_writable(Path("/var/tmp") / f"warden-run-ws-{os.getpid()}")
    outside = sandbox_readable(Path("/var/tmp") / f"warden-run-ro-{os.getpid()}")
    outside.mkdir(exist_ok=True)
    try:
        write_config(tmp_path, write_dirs=(str(workspace),), read_dirs=(str(outside),))
        host = await _host([*filesystem_server(workspace), str(outside)])
        await _ready(host)
        inside = await host.call(1, "write_file", {"path": str(workspace / "in.txt"), "content": "ok"})
        refused = await host.call(2, "write_file", {"path": str(outside / "out.txt"), "content": "no"})
        assert await host.close() == 0
        assert "isError" not in inside.get("result", {}) or not inside["result"]["isError"]  # type: ignore[index]
        assert (workspace / "in.txt").read_text() == "ok"
        assert "read-only file system" in _text(refused).lower()
        assert not (outside / "out.txt").exists()
    finally:
        subprocess.run(["rm", "-rf", str(workspace), str(outside)], check=True)


async def test_fetch_through_warden_run_cannot_reach_a_loopback_listener(tmp_path: Path) -> None:
    write_config(tmp_path)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/"
        host = await _host([str(VENV_BIN / "mcp-server-fetch"), "--ignore-robots-txt", "--allow-private-ips"])
        await _ready(host)
        answer = await host.call(1, "fetch", {"url": url, "raw": True}, timeout=60)
        assert await host.close() == 0
        try:
            listener.accept()
            reached = True
        except BlockingIOError:
            reached = False
    finally:
        listener.close()
    assert not reached
    assert answer["result"]["isError"] is True  # type: ignore[index]


async def test_time_and_git_through_warden_run(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e.x",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e.x"}
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, env=env)
    (repo / "a.txt").write_text("a\n")
    subprocess.run(["git", "-C", str(repo), "add", "a.txt"], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "only commit"], check=True, env=env)
    sandbox_readable(repo)
    (repo / "b.txt").write_text("b\n")
    (repo / "b.txt").chmod(0o644)
    # The trusting config makes tmp_path writable, and warden refuses a read-only dir inside a writable one
    # (a sandbox could swap it for a symlink between runs), so the repository lives outside it.
    outside_repo = Path("/var/tmp") / f"warden-run-repo-{os.getpid()}"
    subprocess.run(["cp", "-a", str(repo), str(outside_repo)], check=True)
    try:
        write_config(tmp_path, read_dirs=(str(outside_repo),),
                     extra='[servers.mcp-server-git]\nenv = ["GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", '
                           '"GIT_CONFIG_VALUE_0"]\n')
        git_env = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}
        host = await _host([str(VENV_BIN / "mcp-server-git"), "--repository", str(outside_repo)], git_env)
        await _ready(host)
        log = await host.call(1, "git_log", {"repo_path": str(outside_repo)}, timeout=60)
        add = await host.call(2, "git_add", {"repo_path": str(outside_repo), "files": ["b.txt"]}, timeout=60)
        assert await host.close() == 0
        assert "only commit" in _text(log)
        assert "read-only file system" in _text(add).lower()
        time_host = await _host([str(VENV_BIN / "mcp-server-time")])
        await _ready(time_host)
        now = await time_host.call(1, "get_current_time", {"timezone": "UTC"}, timeout=60)
        assert await time_host.close() == 0
        assert json.loads(_text(now))["timezone"] == "UTC"
    finally:
        subprocess.run(["rm", "-rf", str(outside_repo)], check=True)


async def test_unusable_bwrap_through_warden_run_is_a_json_rpc_error_and_a_named_cause(tmp_path: Path) -> None:
    write_config(tmp_path)
    host = await _host(everything_server(), {"WARDEN_BWRAP": "/nonexistent/bwrap"})
    await host.request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                         "clientInfo": {"name": "t", "version": "1"}})
    answer = await host.response(0)
    await host._stdin.aclose()
    with trio.fail_after(30):
        await host.process.wait()
    assert host.process.stderr is not None
    stderr = b""
    while chunk := await host.process.stderr.receive_some():
        stderr += chunk
    assert "error" in answer, answer
    assert b"WARDEN_BWRAP names /nonexistent/bwrap, which does not exist" in stderr
