"""Unit tests of the write-quota measurement (``warden/sandbox/_quota.py``) and of where sandbox memory cgroups go
(``warden/sandbox/_cgroup.py``). The quota is measured on real files and a real process holding a deleted file;
the cgroup placement is decided from real-format ``/proc/self/cgroup`` and mountinfo text, and proven here on
this machine's own cgroupfs. The cgroup v2 branch cannot run on this host (its memory controller is bound to v1):
it is exercised on a directory laid out like a cgroup v2 one, which is a stand-in and says so.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from tests.security.harness import SYSTEM_PYTHON, UNPRIV_UID, user_command
from warden.errors import SandboxUnavailable
from warden.launcher import LaunchSpec
from warden.sandbox import BwrapChild, SandboxSettings
from warden.sandbox._bwrap import BwrapLauncher
from warden.sandbox._bwrap_binary import BwrapBinary, locate_bwrap
from warden.sandbox._cgroup import MemoryCgroups, NoMemoryCgroups, SandboxCgroup, find_memory_cgroups, locate
from warden.sandbox._quota import ENTRY_MIN_BYTES, QuotaUnmeasurable, WriteQuota, measure, sandbox_pids

IS_ROOT = os.geteuid() == 0
MB = 1024 * 1024
V1_MEMORY = isinstance(found := find_memory_cgroups(), MemoryCgroups) and found.version == 1


def test_quota_counts_allocated_bytes_and_a_block_per_entry(tmp_path: Path) -> None:
    before = measure([str(tmp_path)])
    (tmp_path / "data").write_bytes(b"\x01" * MB)
    sparse = tmp_path / "sparse"
    with open(sparse, "wb") as handle:
        handle.truncate(1024 * MB)  # a 1 GiB hole costs the disk nothing
    for i in range(100):
        (tmp_path / f"empty-{i}").touch()
    grown = measure([str(tmp_path)]) - before
    assert MB + 101 * ENTRY_MIN_BYTES <= grown <= MB + 102 * ENTRY_MIN_BYTES + 64 * 1024


def test_quota_counts_a_hard_link_once_and_never_follows_a_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big").write_bytes(b"\x02" * (4 * MB))
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "file").write_bytes(b"\x03" * MB)
    before = measure([str(ws)])
    os.link(ws / "file", ws / "alias")
    (ws / "link").symlink_to(outside / "big")
    (ws / "dirlink").symlink_to(outside)
    assert measure([str(ws)]) - before == 2 * ENTRY_MIN_BYTES  # two symlinks; the second name of an inode is free


def test_quota_sees_a_deleted_file_a_process_holds_open(tmp_path: Path) -> None:
    script = ("import os, sys, time\n"
              f"f = open({str(tmp_path / 'hidden')!r}, 'wb')\n"
              f"os.unlink({str(tmp_path / 'hidden')!r})\n"
              "f.write(b'x' * (8 << 20)); f.flush()\n"
              "sys.stdout.write('ready\\n'); sys.stdout.flush()\n"
              "time.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == b"ready\n"
        walked = measure([str(tmp_path)])
        with_holder = measure([str(tmp_path)], [holder.pid])
        assert with_holder - walked >= 8 * MB
    finally:
        holder.kill()
        holder.wait()


def test_quota_check_reports_growth_past_the_limit(tmp_path: Path) -> None:
    quota = WriteQuota.start([str(tmp_path)], 1)
    assert quota.check(list) is None
    (tmp_path / "data").write_bytes(b"\x04" * (2 * MB))
    reason = quota.check(list)
    assert reason is not None
    assert reason.startswith("write quota exceeded: its write dirs grew by 2.0 MiB")
    assert reason.endswith("more than limits.write_quota_mb = 1")
    assert quota.exceeded == reason


@pytest.mark.skipif(not IS_ROOT, reason="mounting a private tmpfs (no other writer on it) needs root")
def test_quota_walks_only_when_the_free_space_says_it_may_be_needed(tmp_path: Path) -> None:
    """An idle or slow-writing server is not walked every second: the file system's free space bounds how much its
    write dirs can have grown. A drop past half the headroom makes the next check walk."""
    mount = tmp_path / "fs"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(mount)], check=True)
    try:
        quota = WriteQuota.start([str(mount)], 100)
        assert quota.walks == 1
        (mount / "small").write_bytes(b"\x01" * MB)
        assert quota.check(list) is None
        assert quota.walks == 1  # 1 MiB cannot be past the quota: no walk
        (mount / "more").write_bytes(b"\x01" * (60 * MB))
        assert quota.check(list) is None
        assert quota.walks == 2  # 61 MiB dropped, more than half of the 100 MiB headroom: walked, still under
        (mount / "over").write_bytes(b"\x01" * (45 * MB))
        assert quota.check(list) is not None
        assert quota.walks == 3
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


@pytest.mark.skipif(not IS_ROOT, reason="needs a second uid (setpriv) to make a directory warden cannot read")
def test_a_directory_warden_cannot_read_makes_the_quota_unmeasurable(tmp_path: Path) -> None:
    """An unprivileged warden against a directory its server made unreadable (mode 0300: writable, not
    listable): what it holds cannot be counted, so the quota counts as passed."""
    ws = Path("/var/tmp") / f"quota-unreadable-{os.getpid()}"
    ws.mkdir()
    try:
        (ws / "hidden").mkdir()
        (ws / "hidden" / "data").write_bytes(b"x" * MB)
        for path in (ws, ws / "hidden", ws / "hidden" / "data"):
            os.chown(path, UNPRIV_UID, UNPRIV_UID)
        (ws / "hidden").chmod(0o300)
        code = ("from warden.sandbox._quota import measure, QuotaUnmeasurable\n"
                f"try:\n    measure([{str(ws)!r}])\nexcept QuotaUnmeasurable as exc:\n    print(exc.message)\n")
        done = subprocess.run(user_command(SYSTEM_PYTHON, "-c", code), capture_output=True, text=True, timeout=60,
                              check=True)
        assert done.stdout.strip() == (f"cannot read {ws}/hidden (in a write dir) to measure the write quota: "
                                       "Permission denied")
    finally:
        subprocess.run(["rm", "-rf", str(ws)], check=True)
    assert issubclass(QuotaUnmeasurable, Exception)


HYBRID_CGROUP = "4:memory:/process_api/abc\n3:pids:/\n0::/\n"
HYBRID_MOUNTS = ("35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
                 "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n")


def test_cgroup_v1_memory_goes_under_warden_s_own_memory_cgroup() -> None:
    assert locate(HYBRID_CGROUP, HYBRID_MOUNTS) == MemoryCgroups(1, Path("/sys/fs/cgroup/memory/process_api/abc"))


def test_cgroup_v1_mounted_at_a_subtree_root_is_translated() -> None:
    """In a container the v1 hierarchy is often mounted with its root at the container's own cgroup."""
    mounts = "35 31 0:32 /process_api /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
    assert locate(HYBRID_CGROUP, mounts) == MemoryCgroups(1, Path("/sys/fs/cgroup/memory/abc"))
    elsewhere = "35 31 0:32 /other /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
    assert isinstance(locate(HYBRID_CGROUP, elsewhere), NoMemoryCgroups)


def test_no_memory_controller_is_said_plainly() -> None:
    found = locate("3:pids:/\n", HYBRID_MOUNTS)
    assert found == NoMemoryCgroups("this kernel has no memory controller (/proc/self/cgroup names none)")
    assert locate(HYBRID_CGROUP, "") == NoMemoryCgroups("the cgroup v1 memory hierarchy is not mounted")


def test_cgroup_v2_needs_memory_delegated_to_sub_cgroups(tmp_path: Path) -> None:
    """Stand-in (this host's memory controller is on v1): a directory with the two files a v2 cgroup has."""
    own = tmp_path / "user.slice" / "app.scope"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpu memory pids\n")
    (own / "cgroup.subtree_control").write_text("\n")
    mounts = f"41 31 0:38 / {tmp_path} rw,relatime - cgroup2 cgroup2 rw\n"
    cgroup = "0::/user.slice/app.scope\n"
    assert locate(cgroup, mounts) == NoMemoryCgroups(
        f"warden's cgroup {own} does not hand the memory controller to sub-cgroups (cgroup v2: memory is not in "
        "its cgroup.subtree_control)")
    (own / "cgroup.subtree_control").write_text("memory pids\n")
    assert locate(cgroup, mounts) == MemoryCgroups(2, own)
    (own / "cgroup.controllers").write_text("cpu\n")
    (own / "cgroup.subtree_control").write_text("\n")
    assert locate(cgroup, mounts) == NoMemoryCgroups(
        "the memory controller is not available to warden's cgroup /user.slice/app.scope (cgroup v2, not in its "
        "cgroup.controllers)")


@pytest.mark.skipif(not IS_ROOT, reason="only root can make cgroups on this machine (cgroup v1, no delegation)")
def test_this_machine_gives_a_root_warden_memory_cgroups_and_a_sandbox_cgroup_holds_its_limit() -> None:
    place = find_memory_cgroups()
    assert isinstance(place, MemoryCgroups)
    assert place.version == 1
    cgroup = place.create(256 * MB)
    try:
        assert (cgroup.path / "memory.limit_in_bytes").read_text().strip() == str(256 * MB)
        assert cgroup.path.name.startswith(f"warden-{os.getpid()}-")
    finally:
        cgroup.remove()
    assert not cgroup.path.exists()
    assert not [p for p in place.parent.iterdir() if p.name.startswith(f"warden-probe-{os.getpid()}-")]


@pytest.mark.skipif(not IS_ROOT, reason="a cgroup left by a dead warden is made as root here")
def test_a_cgroup_left_by_a_dead_warden_is_swept() -> None:
    place = find_memory_cgroups()
    assert isinstance(place, MemoryCgroups)
    dead = subprocess.Popen(["/bin/true"])
    dead.wait()
    left = place.parent / f"warden-{dead.pid}-feedfacecafe"
    left.mkdir()
    cgroup = place.create(64 * MB)
    cgroup.remove()
    assert not left.exists()


def _memory_cgroup_of(pid: int) -> str:
    with open(f"/proc/{pid}/cgroup", encoding="ascii") as handle:
        return next(line.split(":", 2)[2] for line in handle.read().splitlines()
                    if "memory" in line.split(":", 2)[1].split(","))


async def _launch_sleeper(launcher: BwrapLauncher) -> BwrapChild:
    child = await launcher.launch(LaunchSpec(argv=("/bin/sh", "-c", "echo up; exec /usr/bin/sleep 60")))
    assert isinstance(child, BwrapChild)
    with trio.fail_after(30):
        assert await child.stdout.receive_some() == b"up\n"
    return child


async def _sandbox_in_its_cgroup(child: BwrapChild, *, bwrap_too: bool) -> None:
    """The sandbox's init and server (and, when it was born there, bwrap) share one cgroup of this warden's."""
    try:
        own = _memory_cgroup_of(os.getpid())
        pids = sandbox_pids(child.sandbox_pid)
        assert len(pids) >= 2  # the init, the server
        if bwrap_too:
            pids.append(child.pid)
        else:
            assert _memory_cgroup_of(child.pid) == own
        places = {_memory_cgroup_of(pid) for pid in pids}
        assert len(places) == 1
        place = places.pop()
        assert place.startswith(own.rstrip("/") + f"/warden-{os.getpid()}-")
    finally:
        child.kill()
        await child.wait()


@pytest.mark.skipif(not IS_ROOT or not V1_MEMORY, reason="a sandbox cgroup needs root here; the self-join is v1's")
async def test_bwrap_starts_inside_its_v1_cgroup_with_its_own_name_and_an_empty_environment(state_dir: Path) -> None:
    """bwrap is born in the sandbox's cgroup (no migration by pid), so its init and the server are too; the join
    shim leaves no trace: the sandbox's init (a clone of bwrap) still shows ``bwrap`` and no host path or variable."""
    child = await _launch_sleeper(BwrapLauncher(SandboxSettings(), state_dir=state_dir))
    assert Path(f"/proc/{child.pid}/cmdline").read_bytes().split(b"\0", 1)[0] == b"bwrap"
    assert Path(f"/proc/{child.sandbox_pid}/cmdline").read_bytes().split(b"\0", 1)[0] == b"bwrap"
    assert Path(f"/proc/{child.pid}/environ").read_bytes() == b""
    await _sandbox_in_its_cgroup(child, bwrap_too=True)


@pytest.mark.skipif(not IS_ROOT or not V1_MEMORY, reason="a sandbox cgroup needs root here")
async def test_a_bwrap_by_another_name_is_moved_into_its_cgroup_by_pid(state_dir: Path, tmp_path: Path) -> None:
    """The shim can only exec a program named ``bwrap`` (dash's exec sets argv[0] to the name); any other name
    takes the migration by pid of the sandbox's init, which the server follows (bwrap itself stays outside)."""
    found = locate_bwrap(os.environ)
    renamed = tmp_path / "bwrap-pinned"
    renamed.symlink_to(found.path)
    bwrap = BwrapBinary(path=str(renamed), version=found.version, source="WARDEN_BWRAP")
    child = await _launch_sleeper(BwrapLauncher(SandboxSettings(), state_dir=state_dir, bwrap=bwrap))
    await _sandbox_in_its_cgroup(child, bwrap_too=False)


@pytest.mark.skipif(not IS_ROOT or not V1_MEMORY, reason="a sandbox cgroup needs root here")
@pytest.mark.parametrize("target", ["unwritable", "plain file"])
async def test_a_bwrap_that_did_not_join_its_cgroup_never_starts_the_server(
        state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    """Fail closed: a join that fails ends the launch, and one that silently joined nothing (the tasks path was
    not the cgroup's) is caught by the membership check while the sandbox is still held at its block fd."""
    tasks = tmp_path / ("gone/tasks" if target == "unwritable" else "tasks")
    if target == "plain file":
        tasks.write_text("")
    real = SandboxCgroup.join_env

    def wrong_tasks(self: SandboxCgroup, bwrap: str) -> dict[str, str] | None:
        env = real(self, bwrap)
        assert env is not None
        return {**env, "WARDEN_CGROUP_TASKS": str(tasks)}

    monkeypatch.setattr(SandboxCgroup, "join_env", wrong_tasks)
    launcher = BwrapLauncher(SandboxSettings(), state_dir=state_dir)
    with pytest.raises(SandboxUnavailable, match="memory cgroup"):
        await launcher.launch(LaunchSpec(argv=("/bin/sh", "-c", "exit 0")))
