"""The container launcher with podman from apt (issue 3, Build 2): the same real servers answer, with
``--network none`` asserted; where the engine cannot run, warden refuses with the engine's own error.

This host's cgroups are hybrid (v1 controllers plus a v2 mount), which crun refuses; the workaround from
test-peers.md 6.4 (a private mount namespace without /sys/fs/cgroup/unified) lives in this harness only, as the
engine_path wrapper below. warden itself runs whatever engine it is given.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sandbox.conftest import IS_ROOT
from tests.sandbox.mcp import McpSession, mcp_session
from tests.sandbox.test_real_servers import EVERYTHING, FILESYSTEM, GIT_SAFE, _git_repo
from tests.security.harness import probe_argv, run_in_process
from tests.support import VENV_BIN, sandbox_writable
from warden.errors import SandboxUnavailable
from warden.launcher import LaunchSpec
from warden.sandbox import SandboxSettings, make_launcher

PODMAN = shutil.which("podman")
pytestmark = pytest.mark.skipif(not IS_ROOT, reason="rootful podman and the cgroup workaround (unshare -m) need root")


@pytest.fixture(scope="module")
def podman() -> Iterator[str]:
    """A wrapper that runs podman in a private mount namespace without the cgroup v2 mount (harness only)."""
    if PODMAN is None:
        pytest.skip("podman is not installed (tests/system-packages.txt installs it); the refusal is tested below")
    directory = Path(os.environ.get("TMPDIR", "/tmp")) / f"warden-podman-{os.getpid()}"
    directory.mkdir(exist_ok=True)
    wrapper = directory / "podman"
    wrapper.write_text("#!/bin/sh\nexec unshare -m --propagation private sh -c "
                       "'umount /sys/fs/cgroup/unified 2>/dev/null; exec \"$0\" \"$@\"' " f"{PODMAN} \"$@\"\n")
    wrapper.chmod(0o755)
    yield str(wrapper)
    shutil.rmtree(directory, ignore_errors=True)


def container(engine_path: str, **fields: object) -> SandboxSettings:
    return SandboxSettings.model_validate({"kind": "container", "engine_path": engine_path, **fields})


async def test_engine_that_cannot_run_is_refused_with_its_own_error(state_dir: Path) -> None:
    if PODMAN is None:
        launcher = make_launcher(SandboxSettings(kind="container"), state_dir=state_dir,
                                 host_env={"PATH": "/nonexistent"})
        with pytest.raises(SandboxUnavailable, match="the container engine podman is not installed"):
            await launcher.launch(LaunchSpec(argv=("/usr/bin/true",)))
        return
    if not Path("/sys/fs/cgroup/unified").is_dir():
        pytest.skip("this host's cgroups are not hybrid, so plain podman can run here")
    launcher = make_launcher(container(PODMAN), state_dir=state_dir)
    with pytest.raises(SandboxUnavailable, match=r"podman could not start the container \(exit 126\): Error: OCI "
                                                 r"runtime error: crun: cgroups in hybrid mode not supported"):
        await launcher.launch(LaunchSpec(argv=(str(VENV_BIN / "mcp-server-time"),)))


async def test_container_has_no_network(state_dir: Path, podman: str) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    try:
        outcome = await run_in_process(container(podman), probe_argv("network", {
            "tcp_port": listener.getsockname()[1], "udp_port": 9}), state_dir=state_dir)
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()
    assert outcome.error is None, outcome.error
    result = outcome.result()
    assert result["interfaces"] == {"ok": ["lo"]}
    assert result["tcp_v4"] == {"errno": "ECONNREFUSED"}
    assert result["tcp_external"] == {"errno": "ENETUNREACH"}


async def test_server_everything_in_a_container_sees_only_the_allowed_environment(state_dir: Path,
                                                                                   podman: str) -> None:
    launcher = make_launcher(container(podman), state_dir=state_dir)
    spec = LaunchSpec(argv=("node", str(EVERYTHING), "stdio"), env={"ALLOWED_TOKEN": "tok-123"})
    async with mcp_session(launcher, spec) as session:
        env = json.loads(McpSession.text(await session.call_tool("get-env")))
    assert env["ALLOWED_TOKEN"] == "tok-123"
    assert env["HOME"] == "/home/mcp"
    # podman adds HOSTNAME and TERM itself; nothing of the host's environment is there
    assert set(env) <= {"ALLOWED_TOKEN", "HOME", "LANG", "NODE_ENV", "PATH", "PWD", "TMPDIR", "HOSTNAME", "TERM"}


async def test_server_filesystem_in_a_container_writes_only_its_workspace(state_dir: Path, host_dir: Path,
                                                                          podman: str) -> None:
    workspace = sandbox_writable(host_dir / "ws")
    reference = host_dir / "ref"
    reference.mkdir()
    settings = container(podman, write_dirs=[str(workspace)], read_dirs=[str(reference)])
    spec = LaunchSpec(argv=("node", str(FILESYSTEM), str(workspace), str(reference)))
    async with mcp_session(make_launcher(settings, state_dir=state_dir), spec) as session:
        written = await session.call_tool("write_file", {"path": str(workspace / "note.txt"), "content": "hi"})
        refused = await session.call_tool("write_file", {"path": str(reference / "evil.txt"), "content": "x"})
    assert not written.get("isError"), written
    assert (workspace / "note.txt").read_text() == "hi"
    assert refused.get("isError") is True
    assert "read-only file system" in McpSession.text(refused).lower()
    assert not (reference / "evil.txt").exists()


async def test_B08_07_a_container_keeps_the_workspaces_git_read_only(state_dir: Path, host_dir: Path,
                                                                      podman: str) -> None:
    """The write dir's protected entries are read-only volumes in a container too (``.git`` here, made writable
    for the sandbox's group like the rest of the workspace, and the git dir a gitfile three levels down names),
    and the rest of the workspace stays writable."""
    workspace = sandbox_writable(host_dir / "ws")
    git = sandbox_writable(workspace / ".git")
    linked = sandbox_writable(workspace / "gitdirs" / "lib.git")
    (sandbox_writable(workspace / "a" / "b" / "lib") / ".git").write_text("gitdir: ../../../gitdirs/lib.git\n")
    for config in (git / "config", linked / "config"):
        config.write_text("[core]\n\tbare = false\n")
        config.chmod(0o664)
    settings = container(podman, write_dirs=[str(workspace)])
    spec = LaunchSpec(argv=("node", str(FILESYSTEM), str(workspace)))
    async with mcp_session(make_launcher(settings, state_dir=state_dir), spec) as session:
        planted = [await session.call_tool("write_file", {"path": str(config),
                                                          "content": "[core]\n\tfsmonitor = /tmp/pwn\n"})
                   for config in (git / "config", linked / "config")]
        written = await session.call_tool("write_file", {"path": str(workspace / "note.txt"), "content": "hi"})
    for refused in planted:
        assert refused.get("isError") is True, refused
        assert "read-only file system" in McpSession.text(refused).lower()
    assert (git / "config").read_text() == (linked / "config").read_text() == "[core]\n\tbare = false\n"
    assert not written.get("isError"), written
    assert (workspace / "note.txt").read_text() == "hi"


async def test_mcp_server_time_in_a_container(state_dir: Path, podman: str) -> None:
    launcher = make_launcher(container(podman), state_dir=state_dir)
    async with mcp_session(launcher, LaunchSpec(argv=(str(VENV_BIN / "mcp-server-time"),))) as session:
        result = await session.call_tool("get_current_time", {"timezone": "UTC"})
    assert json.loads(McpSession.text(result))["timezone"] == "UTC"


async def test_mcp_server_git_in_a_container_on_a_read_only_repository(state_dir: Path, host_dir: Path,
                                                                       podman: str) -> None:
    repo = _git_repo(host_dir / "repo")
    (repo / "new.txt").write_text("x\n")
    settings = container(podman, read_dirs=[str(repo)])
    spec = LaunchSpec(argv=(str(VENV_BIN / "mcp-server-git"), "--repository", str(repo)), env=GIT_SAFE)
    async with mcp_session(make_launcher(settings, state_dir=state_dir), spec) as session:
        log = await session.call_tool("git_log", {"repo_path": str(repo)})
        add = await session.call_tool("git_add", {"repo_path": str(repo), "files": ["new.txt"]})
    assert "first commit" in McpSession.text(log)
    assert add.get("isError") is True
    assert "read-only file system" in McpSession.text(add).lower()


def test_container_manifest_says_how_it_runs(state_dir: Path) -> None:
    launcher = make_launcher(container("/usr/bin/podman"), state_dir=state_dir)
    manifest = launcher.manifest(LaunchSpec(argv=(str(VENV_BIN / "mcp-server-time"),)))
    assert (manifest["kind"], manifest["engine"], manifest["network"], manifest["rootfs"]) == (
        "container", "podman", "none", "skeleton")
