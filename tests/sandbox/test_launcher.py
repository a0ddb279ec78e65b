"""The bwrap launcher as the proxy uses it: exit statuses, terminate and kill (no survivors), uid slots, the
manifest, and DESIGN invariant 10 (no secret in any argv)."""

from __future__ import annotations

import json
import os
import secrets
import signal
from pathlib import Path

import pytest
import trio

from tests.sandbox.conftest import IS_ROOT
from tests.security.harness import probe_argv, sandbox_processes
from tests.support import held_uid_slots, sandbox_writable
from warden.errors import LaunchError
from warden.launcher import LaunchSpec
from warden.sandbox import BwrapChild, SandboxSettings, make_launcher
from warden.sandbox._uids import SANDBOX_GID, UID_BASE


async def _read_line(child: BwrapChild) -> dict[str, object]:
    data = b""
    with trio.fail_after(30):
        while b"\n" not in data:
            chunk = await child.stdout.receive_some()
            assert chunk, "the sandbox closed stdout"
            data += chunk
    return json.loads(data.split(b"\n", 1)[0])  # type: ignore[no-any-return]


async def test_exit_status_is_the_server_s(state_dir: Path) -> None:
    launcher = make_launcher(SandboxSettings(), state_dir=state_dir)
    child = await launcher.launch(LaunchSpec(argv=("/bin/sh", "-c", "exit 7")))
    assert await child.wait() == 7
    assert child.returncode == 7


async def test_terminate_sends_sigterm_to_the_server(state_dir: Path) -> None:
    launcher = make_launcher(SandboxSettings(), state_dir=state_dir)
    child = await launcher.launch(LaunchSpec(argv=tuple(probe_argv("wait_stdin", {}))))
    assert isinstance(child, BwrapChild)
    await child.stdin.send_all(b"hello\n")
    assert (await _read_line(child))["echo"] == "hello"
    child.terminate()
    assert await child.wait() == 128 + signal.SIGTERM


async def test_kill_leaves_no_survivors(state_dir: Path) -> None:
    """The server starts detached helpers (setsid, SIGTERM ignored) and keeps running; kill() ends all of them."""
    token = f"1000.{secrets.randbelow(10**9)}"
    script = (f"trap '' TERM HUP; setsid /usr/bin/sleep {token} & /usr/bin/sleep {token} & "
              f"echo '{{\"up\": 1}}'; exec /usr/bin/sleep {token}")
    launcher = make_launcher(SandboxSettings(), state_dir=state_dir)
    child = await launcher.launch(LaunchSpec(argv=("/bin/sh", "-c", script)))
    assert isinstance(child, BwrapChild)
    assert (await _read_line(child)) == {"up": 1}
    assert len(sandbox_processes(token)) >= 3  # three sleepers (plus bwrap and its init, whose argv has the script)
    child.kill()
    assert await child.wait() == 128 + signal.SIGKILL
    assert sandbox_processes(token) == []
    with pytest.raises(ProcessLookupError):  # bwrap reaped the sandbox's init: not even a zombie is left
        os.kill(child.sandbox_pid, 0)


async def test_a_restart_that_would_mount_another_dir_than_the_pinned_one_is_refused(state_dir: Path,
                                                                                      host_dir: Path) -> None:
    """The manifest is the server's pinned identity: re-pointing a read_dirs symlink while warden runs must not
    slip a different mount into the server's next start."""
    for name in ("approved", "other"):
        (host_dir / name).mkdir()
    link = host_dir / "data"
    link.symlink_to(host_dir / "approved")
    launcher = make_launcher(SandboxSettings(read_dirs=(str(link),)), state_dir=state_dir)
    spec = LaunchSpec(argv=("/bin/sh", "-c", "exit 0"))
    approved = str(host_dir / "approved")
    assert ["ro-bind", approved, approved] in launcher.manifest(spec)["mounts"]
    child = await launcher.launch(spec)
    assert await child.wait() == 0
    link.unlink()
    link.symlink_to(host_dir / "other")
    with pytest.raises(LaunchError, match=r"the sandbox for '/bin/sh' would now differ from the one pinned when "
                                          r"warden started \(mounts changed\)"):
        await launcher.launch(spec)


async def test_no_secret_in_any_command_line_or_bwrap_s_environment(state_dir: Path) -> None:
    """DESIGN invariant 10: env values travel through --args FD, never an argv; bwrap itself runs with no env."""
    secret = f"s3cret-{secrets.token_hex(8)}"
    launcher = make_launcher(SandboxSettings(), state_dir=state_dir)
    child = await launcher.launch(LaunchSpec(argv=tuple(probe_argv("wait_stdin", {})), env={"API_TOKEN": secret}))
    assert isinstance(child, BwrapChild)
    try:
        await child.stdin.send_all(b"x\n")
        await _read_line(child)
        bwrap_cmdline = Path(f"/proc/{child.pid}/cmdline").read_bytes()
        assert secret.encode() not in bwrap_cmdline
        assert b"--args" in bwrap_cmdline
        assert Path(f"/proc/{child.pid}/environ").read_bytes() == b""
        for pid in (child.sandbox_pid, *[int(p) for p in Path(f"/proc/{child.sandbox_pid}/task/"
                                                               f"{child.sandbox_pid}/children").read_text().split()]):
            assert secret.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
    finally:
        child.kill()
        await child.wait()


@pytest.mark.skipif(not IS_ROOT, reason="uid slots exist only for a root warden")
async def test_each_sandbox_of_a_root_warden_gets_its_own_uid(state_dir: Path, host_dir: Path) -> None:
    workspace = sandbox_writable(host_dir / "ws")
    launcher = make_launcher(SandboxSettings(write_dirs=(str(workspace),)), state_dir=state_dir)
    spec = LaunchSpec(argv=tuple(probe_argv("wait_stdin", {})))
    first, second = await launcher.launch(spec), await launcher.launch(spec)
    uids = []
    for child in (first, second):
        assert isinstance(child, BwrapChild)
        await child.stdin.send_all(b"x\n")
        pid = (await _read_line(child))["pid"]
        assert 1 < pid < 10  # its own PID namespace (after bwrap's init and a root warden's memfd helper)
        children = Path(f"/proc/{child.sandbox_pid}/task/{child.sandbox_pid}/children").read_text().split()
        status = Path(f"/proc/{children[0]}/status").read_text()
        uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
        uids.append(int(uid_line.split()[1]))
    assert len(set(uids)) == 2
    assert all(UID_BASE < uid <= UID_BASE + 256 for uid in uids)
    for child in (first, second):
        await child.stdin.aclose()
        assert await child.wait() == 0
    third = await launcher.launch(LaunchSpec(argv=("/bin/sh", "-c", f"umask; touch {workspace}/f; id -u")))
    out = b""
    while chunk := await third.stdout.receive_some():
        out += chunk
    assert await third.wait() == 0
    assert out.split()[0] == b"0002"  # files the sandbox makes stay group-writable for the next sandbox uid
    assert UID_BASE < int(out.split()[1]) <= UID_BASE + 256
    assert held_uid_slots() == []  # every slot was given back
    assert (workspace / "f").stat().st_gid == SANDBOX_GID


@pytest.mark.skipif(not IS_ROOT, reason="uid slots exist only for a root warden")
async def test_slot_is_given_back_when_the_launch_is_refused(state_dir: Path) -> None:
    from warden.errors import LaunchError

    launcher = make_launcher(SandboxSettings(read_dirs=("/nonexistent-dir",)), state_dir=state_dir)
    with pytest.raises(LaunchError):
        await launcher.launch(LaunchSpec(argv=("/usr/bin/true",)))
    assert held_uid_slots() == []


def test_manifest_names_what_the_server_can_see(state_dir: Path) -> None:
    launcher = make_launcher(SandboxSettings(), state_dir=state_dir)
    spec = LaunchSpec(argv=("/usr/bin/python3", "-c", "pass"), env={"TOKEN": "value-not-in-manifest"})
    manifest = launcher.manifest(spec)
    assert manifest == launcher.manifest(spec)
    assert (manifest["kind"], manifest["network"], manifest["profile"]) == ("bwrap", "none", "python")
    assert "TOKEN" in manifest["env_names"]
    assert "value-not-in-manifest" not in json.dumps(manifest)
    assert launcher.manifest(LaunchSpec(argv=spec.argv, env={"OTHER": "value-not-in-manifest"})) != manifest
    assert len(manifest["seccomp_sha256"]) == 64


@pytest.mark.skipif(not IS_ROOT, reason="dedicated sandbox uids exist only for a root warden")
async def test_write_dir_no_sandbox_uid_can_write_is_refused_with_the_fix(state_dir: Path, host_dir: Path) -> None:
    from warden.errors import LaunchError

    private = host_dir / "private"
    private.mkdir(mode=0o755)
    private.chmod(0o755)
    launcher = make_launcher(SandboxSettings(write_dirs=(str(private),)), state_dir=state_dir)
    with pytest.raises(LaunchError, match=f"write dir {private} belongs to root, and warden never runs a server "
                                          "as root") as info:
        await launcher.launch(LaunchSpec(argv=("/usr/bin/true",)))
    assert info.value.hint.endswith(f"or grant the sandbox group: chgrp {SANDBOX_GID} {private} && chmod g+rwxs "
                                    f"{private}")
    sandbox_writable(private)
    child = await launcher.launch(LaunchSpec(argv=("/bin/sh", "-c", f"touch {private}/ok")))
    assert await child.wait() == 0
    assert (private / "ok").exists()


def test_init_pidfd_is_only_taken_for_bwrap_s_own_child() -> None:
    """The sandbox's init may be gone (setup failed, bwrap reaped it) before warden opens a pidfd, and its pid may
    then belong to someone else: only a live child of bwrap is ever signalled."""
    import subprocess

    from warden.sandbox._bwrap import _open_init_pidfd

    child = subprocess.Popen(["/usr/bin/sleep", "60"])
    try:
        fd = _open_init_pidfd(child.pid, os.getpid())
        assert fd is not None
        os.close(fd)
        assert _open_init_pidfd(child.pid, os.getpid() + 1) is None  # not the expected parent's child
    finally:
        child.kill()
        child.wait()
    assert _open_init_pidfd(child.pid, os.getpid()) is None  # reaped: gone
