"""B.8 rows that need a sandbox of their own: resource bombs (19-23), lifetime escapes (25-28) and terminal
injection under a real pty (11). Each runs the probe through the production launcher from a root warden and from
an unprivileged one, except where noted.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.security.harness import (
    IS_ROOT,
    SYSTEM_PYTHON,
    USER_PARENT,
    World,
    make_world,
    probe_argv,
    run_probe,
    sandbox_processes,
    user_command,
)
from warden.launcher import LaunchSpec
from warden.sandbox import make_launcher
from warden.sandbox._bwrap_binary import locate_bwrap

pytestmark = pytest.mark.skipif(not IS_ROOT, reason="these attacks drive a root warden and an unprivileged one "
                                                    "(setpriv): they need root")
PARENTS = ["root", "user"]


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    with make_world() as built:
        yield built


def _wait_for(condition: object, *, attempts: int = 300) -> bool:
    """Poll ``condition()`` every 50 ms until true (no wall-clock assertion: a bound on attempts)."""
    import time

    for _ in range(attempts):
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


# ---- 19-23: resource exhaustion --------------------------------------------------------------------------------

@pytest.mark.parametrize("parent", PARENTS)
def test_B08_19_fork_bomb_stops_at_the_process_limit(world: World, parent: str) -> None:
    outcome = run_probe(world, parent, "forkbomb", limits={"processes": 32}, fork_cap=400)
    result = outcome.result()
    assert result["errno"] == "EAGAIN"
    assert 8 <= result["forked"] < 32  # RLIMIT_NPROC counts the sandbox's own processes (bwrap init, probe)
    assert outcome.rc == 0


@pytest.mark.parametrize("parent", PARENTS)
def test_B08_20_memory_bomb_hits_the_data_limit(world: World, parent: str) -> None:
    """tmp_size_mb = 8: with memory bounded per process only (the unprivileged warden here), the three tmpfs
    mounts come out of each process's RLIMIT_DATA (128 - 3 x 8 = 104 MiB)."""
    outcome = run_probe(world, parent, "membomb", limits={"memory_mb": 128, "tmp_size_mb": 8}, mem_cap_mb=1024)
    result = outcome.result()
    assert result["error"] == "MemoryError"
    assert 16 <= result["allocated_mb"] < (128 if parent == "root" else 104)


def test_B08_38_memory_mb_bounds_the_whole_sandbox_processes_and_tmpfs(world: World) -> None:
    """memory_mb = 256 with a root warden (a memory cgroup per sandbox here): four children of 96 MiB each (each
    under RLIMIT_DATA, 384 MiB together) and a filler writing up to 200 MiB into each of /tmp, /dev/shm and $HOME
    (600 MiB; the tmpfs sizes alone would allow 768). Whatever the OOM killer chose, what the sandbox still holds
    at the end fits in 256 MiB, and the limit did act."""
    outcome = run_probe(world, "root", "memhog", limits={"memory_mb": 256}, hogs=4, hog_mb=96, fill_cap_mb=200,
                        timeout=120)
    result = outcome.result()
    alive = sum(hog["mb"] for hog in result["hogs"] if hog["status"] == "alive")
    held = alive + sum(result["tmpfs_mb"].values())
    assert held <= 256, result
    killed = [hog for hog in result["hogs"] if hog["status"] == f"signal:{signal.SIGKILL}"]
    assert killed or result["filler"]["status"] == f"signal:{signal.SIGKILL}", result
    assert sum(hog["mb"] for hog in result["hogs"]) + sum(result["tmpfs_mb"].values()) < 384 + 600
    assert outcome.rc == 0  # the probe that reports (oom_score_adj 0) was never the one killed


def test_B08_38_an_unprivileged_warden_bounds_memory_per_process_and_says_so(world: World) -> None:
    """No memory cgroup an unprivileged warden can use here (cgroup v1, root's hierarchy): memory_mb = 256 with
    the default 256 MiB tmpfs mounts is refused, naming the cause; with 32 MiB ones each process gets
    256 - 96 = 160 MiB, which one allocation of 176 MiB overruns."""
    refused = run_probe(world, "user", "membomb", limits={"memory_mb": 256}, mem_cap_mb=32)
    assert refused.error is not None
    assert refused.error["type"] == "LaunchError"
    assert refused.error["message"] == (
        "memory_mb = 256 leaves -512 MiB for a process once /tmp, $HOME and /dev/shm (256 MiB each) are full, and "
        "memory is bounded per process only on this machine")
    assert refused.error["hint"].startswith("raise memory_mb to at least 800 or lower tmp_size_mb")
    outcome = run_probe(world, "user", "membomb", limits={"memory_mb": 256, "tmp_size_mb": 32}, mem_cap_mb=176,
                        block_mb=176)
    assert outcome.result() == {"error": "MemoryError", "allocated_mb": 0}


@pytest.mark.parametrize("parent", PARENTS)
def test_B08_21_cpu_spin_is_killed_by_sigxcpu(world: World, parent: str) -> None:
    outcome = run_probe(world, parent, "cpuspin", limits={"cpu_seconds": 1})
    assert not outcome.timed_out
    assert outcome.rc == 128 + signal.SIGXCPU  # bwrap reports a signal death as 128 + N


@pytest.mark.parametrize("parent", PARENTS)
def test_B08_22_disk_fill_stops_at_tmpfs_size_and_file_size(world: World, parent: str) -> None:
    """Python ignores SIGXFSZ, so RLIMIT_FSIZE shows up as EFBIG rather than a kill (E11's shell saw 153)."""
    outcome = run_probe(world, parent, "diskfill", limits={"tmp_size_mb": 4, "file_size_mb": 8}, fill_cap_mb=32)
    result = outcome.result()
    assert result["tmp"]["errno"] == "ENOSPC"
    assert result["tmp"]["written_mb"] <= 4
    assert result["home"]["errno"] == "ENOSPC"
    assert result["home"]["written_mb"] <= 4
    assert result["workspace"] == {"errno": "EFBIG", "written_mb": 8}
    big = world.workspaces[parent] / "big"
    assert big.stat().st_size == 8 * 1024 * 1024
    big.unlink()


@pytest.mark.parametrize("parent", PARENTS)
@pytest.mark.parametrize(("how", "extra"), [("files", {}), ("unlinked", {}), ("mapped", {}),
                                            ("tiny", {"files": 6000})])
def test_B08_37_the_write_quota_stops_the_server(world: World, parent: str, how: str,
                                                  extra: dict[str, int]) -> None:
    """write_quota_mb = 16 against 48 MiB written into the workspace: as files, as a file deleted but held open,
    as a deleted file held only by a shared mapping, and as 6,000 empty files (4 KiB each, 23 MiB). The probe
    then waits 120 s; warden must kill it well before (the harness gives up after 60) and say why."""
    outcome = run_probe(world, parent, "writefill", limits={"write_quota_mb": 16}, how=how, fill_cap_mb=48,
                        timeout=60, **extra)
    try:
        assert outcome.error is None, outcome.error
        assert not outcome.timed_out, "the write quota never stopped the server"
        assert outcome.rc == 128 + signal.SIGKILL
        assert "not stopped" not in outcome.stdout  # killed while writing or while waiting, never let go on
        assert outcome.stop_reason is not None
        assert outcome.stop_reason.startswith("write quota exceeded: its write dirs grew by ")
        assert outcome.stop_reason.endswith(" MiB, more than limits.write_quota_mb = 16")
    finally:
        for path in world.workspaces[parent].iterdir():
            if path.name.startswith(("fill-", "tiny")):
                subprocess.run(["rm", "-rf", str(path)], check=True)


@pytest.mark.parametrize("parent", PARENTS)
def test_B08_23_descriptor_flood_stops_at_the_open_files_limit(world: World, parent: str) -> None:
    outcome = run_probe(world, parent, "fdflood", limits={"open_files": 64})
    result = outcome.result()
    assert result["errno"] == "EMFILE"
    assert 50 <= result["opened"] < 64


# ---- 25-28: lifetime ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("parent", PARENTS)
def test_B08_25_daemonized_children_do_not_outlive_the_server(world: World, parent: str) -> None:
    token = f"1000.{secrets.randbelow(10**9)}"
    outcome = run_probe(world, parent, "daemonize", token=token)
    assert outcome.result() == {"ok": "daemonized"}
    assert outcome.rc == 0
    assert sandbox_processes(token) == []  # gone by the time wait() returned


def _start_parent(world: World, parent: str, token: str) -> subprocess.Popen[bytes]:
    settings = world.settings(parent)
    job = {"settings": settings.model_dump(mode="json"), "argv": probe_argv("sleep", world.config(parent, token=token)),
           "env": {}, "state_dir": str(world.states[parent]), "stdin": "", "timeout": 600,
           "host_env": {"PATH": "/usr/bin:/bin", "HOME": tempfile.gettempdir()}}
    job_file = world.base / f"job-{token}.json"
    job_file.write_text(json.dumps(job))
    job_file.chmod(0o644)
    command = ([sys.executable, str(USER_PARENT), str(job_file)] if parent == "root"
               else user_command(SYSTEM_PYTHON, str(USER_PARENT), str(job_file)))
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.mark.parametrize("parent", PARENTS)
def test_B08_26_killing_warden_kills_the_sandbox(world: World, parent: str) -> None:
    token = f"token-{secrets.token_hex(8)}"
    warden = _start_parent(world, parent, token)
    try:
        assert _wait_for(lambda: len(sandbox_processes(token)) >= 1), warden.stderr.read1() if warden.stderr else b""
        warden.send_signal(signal.SIGKILL)
        assert warden.wait() == -signal.SIGKILL
        assert _wait_for(lambda: sandbox_processes(token) == []), sandbox_processes(token)
    finally:
        warden.kill()
        warden.wait()


@pytest.mark.parametrize("parent", PARENTS)
def test_B08_28_kill_minus_one_reaches_only_the_sandbox(world: World, parent: str) -> None:
    outcome = run_probe(world, parent, "killall")
    result = outcome.result()
    assert result["kill"] == {"ok": None}  # it signalled something: its own sibling
    assert result["sibling_status"] == -signal.SIGKILL
    assert world.sleeper.poll() is None  # the host process (same uid as the unprivileged warden) lives


async def test_B08_27_a_sandbox_launched_for_a_thread_that_exits_keeps_running(world: World) -> None:
    """E12 regression: PR_SET_PDEATHSIG fires when the *thread* that forked exits. warden forks on the trio thread,
    so a caller in a short-lived thread does not doom the sandbox."""
    launcher = make_launcher(world.settings("root"), state_dir=world.states["root"])
    spec = LaunchSpec(argv=tuple(probe_argv("wait_stdin", world.config("root"))))
    token = trio.lowlevel.current_trio_token()
    box: dict[str, object] = {}

    def short_lived() -> None:
        box["child"] = trio.from_thread.run(launcher.launch, spec, trio_token=token)

    thread = threading.Thread(target=short_lived)
    thread.start()
    await trio.to_thread.run_sync(thread.join)
    assert not thread.is_alive()
    child = box["child"]
    await child.stdin.send_all(b"still-alive?\n")  # type: ignore[attr-defined]
    line = b""
    with trio.fail_after(30):
        while b"\n" not in line:
            chunk = await child.stdout.receive_some()  # type: ignore[attr-defined]
            assert chunk, "the sandbox died with the thread"
            line += chunk
    assert json.loads(line)["echo"] == "still-alive?"
    await child.stdin.aclose()  # type: ignore[attr-defined]
    assert await child.wait() == 0  # type: ignore[attr-defined]


def test_B08_27_control_die_with_parent_really_is_per_thread() -> None:
    """The hazard the previous test guards against is real on this machine: bwrap started from a thread that then
    exits is SIGKILLed at once."""
    bwrap = locate_bwrap(dict(os.environ)).path
    box: dict[str, subprocess.Popen[bytes]] = {}

    def start() -> None:
        status_r, status_w = os.pipe()
        box["p"] = subprocess.Popen([bwrap, "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib64", "/lib64",
                                     "--symlink", "usr/lib", "/lib", "--die-with-parent", "--unshare-pid",
                                     "--json-status-fd", str(status_w), "/usr/bin/sleep", "1000"],
                                    pass_fds=(status_w,))
        os.close(status_w)
        # bwrap reports the child pid after it armed PR_SET_PDEATHSIG (E12's race is over by then).
        with os.fdopen(status_r, "rb") as status:
            box["child"] = json.loads(status.readline())["child-pid"]

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    try:
        assert box["p"].wait(timeout=30) == -signal.SIGKILL
    finally:
        # bwrap's own --die-with-parent does not reach the pid namespace's init it forked (warden kills through
        # that init instead, B08-26): end it here, so no sandboxed sleep outlives the test.
        with contextlib.suppress(ProcessLookupError, KeyError):
            os.kill(box["child"], signal.SIGKILL)
        if box["p"].poll() is None:
            box["p"].kill()
            box["p"].wait()


# ---- 11 under a real terminal ------------------------------------------------------------------------------------

@pytest.mark.parametrize("parent", PARENTS)
def test_B08_11_tiocsti_from_a_sandbox_never_reaches_warden_s_terminal(world: World, parent: str) -> None:
    settings = world.settings(parent)
    job = {"settings": settings.model_dump(mode="json"), "argv": probe_argv("tty", world.config(parent)),
           "env": {}, "state_dir": str(world.states[parent]), "stdin": "", "timeout": 60,
           "host_env": {"PATH": "/usr/bin:/bin", "HOME": tempfile.gettempdir()}}
    job_file = world.base / f"tty-{parent}.json"
    job_file.write_text(json.dumps(job))
    job_file.chmod(0o644)
    command = ([sys.executable, str(USER_PARENT), str(job_file)] if parent == "root"
               else user_command(SYSTEM_PYTHON, str(USER_PARENT), str(job_file)))
    pid, master = pty.fork()
    if pid == 0:  # pragma: no cover - the child execs at once
        os.execv(command[0], command)
    output = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's last user left
            break
        if not chunk:
            break
        output += chunk
    os.close(master)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status), output
    assert os.WEXITSTATUS(status) == 0, output
    assert b"Z" not in output  # an injected keystroke would be echoed by the terminal
    answer = json.loads(output.decode().strip().splitlines()[-1])
    tty = json.loads(answer["stdout"].strip().splitlines()[-1])
    assert tty["dev_tty"] == {"errno": "ENXIO"}
    assert [tty[f"tiocsti_{fd}"] for fd in (0, 1, 2)] == [{"errno": "EPERM"}] * 3
    assert Path(job_file).exists()
