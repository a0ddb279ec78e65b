"""Who a sandbox runs as (issue 10, build item 4; why 4 and 9): a root warden runs the server as its write dirs'
owner, so the directory needs no chgrp, what the server makes belongs to that owner and git works there; otherwise
as a dedicated uid that no other sandbox on the machine holds, whatever the wardens' state directories. An
unprivileged warden's sandbox runs in its own user namespace as the user.

Everything runs under the real bwrap; the owners are real uids (UNPRIV_UID and a second test uid), the wardens
real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import trio

from tests.sandbox.conftest import IS_ROOT
from tests.security.harness import ROOT, SYSTEM_PYTHON, UNPRIV_UID, run_as_user, user_command
from tests.support import held_uid_slots
from warden.errors import LaunchError, SandboxUnavailable
from warden.launcher import LaunchSpec
from warden.policy import PROTECTED_NAMES
from warden.sandbox import SandboxSettings, make_launcher
from warden.sandbox._uids import SANDBOX_GID, UID_BASE, UidSlot, owner_threads

#: A git server's policy: ``.git`` left out of the protected names, so it may commit (the default keeps it read-only).
GIT_SERVER = tuple(name for name in PROTECTED_NAMES if name != ".git")

OTHER_UID = UNPRIV_UID + 1  # a second owner, for the "two owners" refusal
root_only = pytest.mark.skipif(not IS_ROOT, reason="a root warden chooses the sandbox uid; as a user it is the user")
GIT = "/usr/bin/git"


def _owned_dir(path: Path, uid: int, mode: int = 0o755) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, uid, uid)
    path.chmod(mode)
    return path


async def _run(settings: SandboxSettings, state_dir: Path, script: str) -> tuple[int, str]:
    launcher = make_launcher(settings, state_dir=state_dir)
    child = await launcher.launch(LaunchSpec(argv=("/bin/sh", "-c", script)))
    out = b""
    async with trio.open_nursery() as nursery:
        async def drain_err() -> None:
            while await child.stderr.receive_some():
                pass
        nursery.start_soon(drain_err)
        while chunk := await child.stdout.receive_some():
            out += chunk
    return await child.wait(), out.decode()


@root_only
async def test_write_dir_of_a_user_needs_no_chgrp_and_what_the_server_makes_is_theirs(state_dir: Path,
                                                                                        host_dir: Path) -> None:
    project = _owned_dir(host_dir / "project", UNPRIV_UID)
    settings = SandboxSettings(write_dirs=(str(project),))
    rc, out = await _run(settings, state_dir, f"id -u; id -g; id -G; touch {project}/made; mkdir {project}/sub")
    assert rc == 0, out
    assert out.split() == [str(UNPRIV_UID), str(UNPRIV_UID), str(UNPRIV_UID)]  # no supplementary groups
    for made in (project / "made", project / "sub"):
        assert (made.stat().st_uid, made.stat().st_gid) == (UNPRIV_UID, UNPRIV_UID)
    assert make_launcher(settings, state_dir=state_dir).manifest(
        LaunchSpec(argv=("/bin/true",)))["user"] == f"write-dir-owner:{UNPRIV_UID}"
    assert held_uid_slots() == []  # an owner's sandbox takes no dedicated uid


@root_only
async def test_chown_of_the_write_dir_changes_the_identity(state_dir: Path, host_dir: Path) -> None:
    project = _owned_dir(host_dir / "project", UNPRIV_UID)
    launcher = make_launcher(SandboxSettings(write_dirs=(str(project),)), state_dir=state_dir)
    before = launcher.manifest(LaunchSpec(argv=("/bin/true",)))
    os.chown(project, OTHER_UID, OTHER_UID)
    fresh = make_launcher(SandboxSettings(write_dirs=(str(project),)), state_dir=state_dir)
    after = fresh.manifest(LaunchSpec(argv=("/bin/true",)))
    assert (before["user"], after["user"]) == (f"write-dir-owner:{UNPRIV_UID}", f"write-dir-owner:{OTHER_UID}")
    with pytest.raises(LaunchError, match=r"would now differ from the one pinned when warden started \(user changed"):
        launcher.manifest(LaunchSpec(argv=("/bin/true",)))


@root_only
async def test_git_works_in_a_users_repository_and_in_a_read_only_one_of_root(state_dir: Path,
                                                                               host_dir: Path) -> None:
    repo = _owned_dir(host_dir / "repo", UNPRIV_UID)
    subprocess.run([GIT, "init", "-q", str(repo)], check=True)
    (repo / "a.txt").write_text("a\n")
    subprocess.run(["chown", "-R", f"{UNPRIV_UID}:{UNPRIV_UID}", str(repo)], check=True)
    theirs = host_dir / "theirs"  # root's repository, granted read-only
    subprocess.run([GIT, "init", "-q", str(theirs)], check=True)
    subprocess.run([GIT, "-C", str(theirs), "-c", "user.name=r", "-c", "user.email=r@x", "commit", "-q",
                    "--allow-empty", "-m", "root's"], check=True)
    subprocess.run(["chmod", "-R", "a+rX", str(theirs)], check=True)
    settings = SandboxSettings(write_dirs=(str(repo),), read_dirs=(str(theirs),), protected_names=GIT_SERVER)
    rc, out = await _run(settings, state_dir,
                         f"{GIT} -C {repo} add a.txt && {GIT} -C {repo} -c user.name=s -c user.email=s@x commit -q "
                         f"-m first && {GIT} -C {repo} log --format=%s && {GIT} -C {theirs} log --format=%s 2>&1")
    assert rc == 0, out
    assert out.split("\n")[:2] == ["first", "root's"]
    objects = [p for p in (repo / ".git" / "objects").rglob("*") if p.is_file()]
    assert objects
    assert {p.stat().st_uid for p in objects} == {UNPRIV_UID}
    # The host's own git still refuses the sandbox-owned repository (nothing on the host was weakened).
    host = subprocess.run([GIT, "-C", str(repo), "status"], capture_output=True, text=True, check=False,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(host_dir)})
    assert host.returncode == 128
    assert "dubious ownership" in host.stderr


@root_only
async def test_write_dirs_of_two_owners_are_refused(state_dir: Path, host_dir: Path) -> None:
    mine = _owned_dir(host_dir / "mine", UNPRIV_UID)
    yours = _owned_dir(host_dir / "yours", OTHER_UID)
    launcher = make_launcher(SandboxSettings(write_dirs=(str(mine), str(yours))), state_dir=state_dir)
    with pytest.raises(LaunchError) as info:
        await launcher.launch(LaunchSpec(argv=("/bin/true",)))
    assert info.value.message == (
        f"the write dirs have different owners: {mine} (uid {UNPRIV_UID}), {yours} (uid {OTHER_UID}); a server "
        "runs as one user, so what it creates could belong to only one of them")
    assert info.value.hint == "grant write dirs of one owner to this server, and run another server for the others"
    with pytest.raises(LaunchError, match="different owners"):
        launcher.manifest(LaunchSpec(argv=("/bin/true",)))
    assert held_uid_slots() == []


@root_only
async def test_write_dir_of_a_sandbox_uid_or_unwritable_by_its_owner_is_refused(state_dir: Path,
                                                                                 host_dir: Path) -> None:
    leftover = _owned_dir(host_dir / "leftover", UID_BASE + 7)
    with pytest.raises(LaunchError, match=f"write dir {leftover} belongs to warden sandbox uid {UID_BASE + 7}"):
        await make_launcher(SandboxSettings(write_dirs=(str(leftover),)), state_dir=state_dir).launch(
            LaunchSpec(argv=("/bin/true",)))
    frozen = _owned_dir(host_dir / "frozen", UNPRIV_UID, mode=0o555)
    with pytest.raises(LaunchError) as info:
        await make_launcher(SandboxSettings(write_dirs=(str(frozen),)), state_dir=state_dir).launch(
            LaunchSpec(argv=("/bin/true",)))
    assert info.value.message == (f"write dir {frozen} is not writable by its owner (uid {UNPRIV_UID}, mode 0555), "
                                  "whom the server runs as")
    assert info.value.hint == f"chmod u+rwx {frozen}, or grant it in read_dirs instead"


@root_only
async def test_root_owned_write_dir_is_refused_naming_both_fixes(state_dir: Path, host_dir: Path) -> None:
    private = _owned_dir(host_dir / "private", 0)
    with pytest.raises(LaunchError) as info:
        await make_launcher(SandboxSettings(write_dirs=(str(private),)), state_dir=state_dir).launch(
            LaunchSpec(argv=("/bin/true",)))
    assert info.value.message.startswith(f"write dir {private} belongs to root, and warden never runs a server as "
                                         "root")
    assert info.value.hint == (f"give the directory to the user it is for (chown USER {private}), or grant the "
                               f"sandbox group: chgrp {SANDBOX_GID} {private} && chmod g+rwxs {private}")
    assert held_uid_slots() == []


@root_only
async def test_owner_process_limit_counts_from_what_the_owner_already_runs(state_dir: Path, host_dir: Path) -> None:
    project = _owned_dir(host_dir / "project", UNPRIV_UID)
    sleepers = [subprocess.Popen(user_command("/bin/sleep", "60")) for _ in range(3)]
    try:
        with trio.fail_after(10):
            while owner_threads(UNPRIV_UID) < 3:
                await trio.sleep(0.01)
        settings = SandboxSettings.model_validate({"write_dirs": [str(project)], "limits": {"processes": 40}})
        rc, out = await _run(settings, state_dir, "grep '^Max processes' /proc/self/limits")
        assert rc == 0, out
        soft = int(out.split()[2])
        assert 3 + 40 <= soft <= owner_threads(UNPRIV_UID) + 40 + 1  # +1: the sandbox's own sh, counted or not
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()


_WARDEN = textwrap.dedent("""
    import json, os, sys, trio
    from pathlib import Path
    from warden.launcher import LaunchSpec
    from warden.sandbox import SandboxSettings, make_launcher

    async def main():
        launcher = make_launcher(SandboxSettings(), state_dir=Path(sys.argv[1]))
        child = await launcher.launch(LaunchSpec(argv=("/bin/sh", "-c", "id -u; read line")))
        line = b""
        while not line.endswith(b"\\n"):
            line += await child.stdout.receive_some(100)
        print(json.dumps({"uid": int(line)}), flush=True)
        sys.stdin.readline()  # hold the sandbox until the test has seen both
        await child.stdin.send_all(b"x\\n")
        print(json.dumps({"rc": await child.wait()}), flush=True)

    trio.run(main)
""")


@root_only
async def test_two_wardens_with_different_state_dirs_never_share_a_sandbox_uid(tmp_path: Path) -> None:
    wardens = []
    for name in ("one", "two", "three"):
        state = tmp_path / name
        state.mkdir(mode=0o700)
        wardens.append(subprocess.Popen([sys.executable, "-c", _WARDEN, str(state)], cwd=ROOT, text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE))
    try:
        uids = [json.loads(w.stdout.readline())["uid"] for w in wardens]  # type: ignore[union-attr]
        assert len(set(uids)) == 3, uids
        assert all(UID_BASE < uid <= UID_BASE + 256 for uid in uids)
        for warden in wardens:
            warden.stdin.write("go\n")  # type: ignore[union-attr]
            warden.stdin.flush()  # type: ignore[union-attr]
            assert json.loads(warden.stdout.readline()) == {"rc": 0}  # type: ignore[union-attr]
    finally:
        for warden in wardens:
            warden.kill()
            warden.wait()
    assert not any(p.name.endswith(".lock") for p in tmp_path.rglob("*"))  # nothing per state directory


def test_slot_directory_must_be_roots_alone(tmp_path: Path) -> None:
    directory = tmp_path / "run" / "sandbox-uids"
    if not IS_ROOT:
        with pytest.raises(SandboxUnavailable, match="is not a directory of root's that only root can write"):
            UidSlot.acquire(directory)
        return
    slot = UidSlot.acquire(directory)
    assert (slot.slot, slot.uid, slot.gid) == (0, UID_BASE + 1, SANDBOX_GID)
    second = UidSlot.acquire(directory)
    assert second.slot == 1  # a second warden (another open file) does not get slot 0
    slot.release()
    second.release()
    directory.chmod(0o777)
    with pytest.raises(SandboxUnavailable) as info:
        UidSlot.acquire(directory)
    assert info.value.message == (f"{directory} is not a directory of root's that only root can write (owner uid 0, "
                                  "mode 0777)")
    directory.chmod(0o700)
    directory.rename(tmp_path / "run" / "elsewhere")
    directory.symlink_to(tmp_path / "run" / "elsewhere")
    with pytest.raises(SandboxUnavailable, match=f"cannot open {directory}, where root wardens share"):
        UidSlot.acquire(directory)


def _user_dirs(host_dir: Path) -> tuple[Path, Path]:
    state = _owned_dir(host_dir / "state", UNPRIV_UID, mode=0o700)
    project = _owned_dir(host_dir / "project", UNPRIV_UID)
    return state, project


@pytest.mark.skipif(not IS_ROOT, reason="the harness starts the unprivileged warden with setpriv, which needs root")
def test_unprivileged_warden_writes_as_the_user_and_git_works(host_dir: Path) -> None:
    state, project = _user_dirs(host_dir)
    subprocess.run([GIT, "init", "-q", str(project)], check=True)
    subprocess.run(["chown", "-R", f"{UNPRIV_UID}:{UNPRIV_UID}", str(project)], check=True)
    script = (f"id -u; touch {project}/made && {GIT} -C {project} add made && "
              f"{GIT} -C {project} -c user.name=s -c user.email=s@x commit -q -m first && "
              f"{GIT} -C {project} log --format=%s")
    outcome = run_as_user(SandboxSettings(write_dirs=(str(project),), protected_names=GIT_SERVER),
                          ["/bin/sh", "-c", script], state_dir=state)
    assert outcome.error is None
    assert outcome.rc == 0, outcome.stderr
    assert outcome.stdout.split() == [str(UNPRIV_UID), "first"]
    assert (project / "made").stat().st_uid == UNPRIV_UID


_USER_WARDEN = textwrap.dedent("""
    import json, os, sys, trio
    from pathlib import Path
    from warden.launcher import LaunchSpec
    from warden.sandbox import SandboxSettings, make_launcher

    async def main():
        launcher = make_launcher(SandboxSettings(), state_dir=Path(sys.argv[1]),
                                 host_env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"})
        child = await launcher.launch(LaunchSpec(argv=("/bin/sh", "-c", "readlink /proc/self/ns/user; read line")))
        line = b""
        while not line.endswith(b"\\n"):
            line += await child.stdout.receive_some(100)
        print(json.dumps({"userns": line.decode().strip()}), flush=True)
        sys.stdin.readline()
        await child.stdin.send_all(b"x\\n")
        print(json.dumps({"rc": await child.wait()}), flush=True)

    trio.run(main)
""")


@pytest.mark.skipif(not IS_ROOT, reason="the harness starts the unprivileged warden with setpriv, which needs root")
def test_unprivileged_wardens_sandboxes_each_have_their_own_user_namespace(host_dir: Path) -> None:
    """RLIMIT_NPROC is counted per user namespace and uid: a sandbox in its own namespace has its own count."""
    wardens = []
    for name in ("one", "two"):
        state = _owned_dir(host_dir / name, UNPRIV_UID, mode=0o700)
        wardens.append(subprocess.Popen(user_command(SYSTEM_PYTHON, "-c", _USER_WARDEN, str(state)), text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE))
    try:
        spaces = [json.loads(w.stdout.readline())["userns"] for w in wardens]  # type: ignore[union-attr]
        assert len(set(spaces)) == 2, spaces
        assert os.readlink("/proc/self/ns/user") not in spaces
        for warden in wardens:
            warden.stdin.write("go\n")  # type: ignore[union-attr]
            warden.stdin.flush()  # type: ignore[union-attr]
            assert json.loads(warden.stdout.readline()) == {"rc": 0}  # type: ignore[union-attr]
    finally:
        for warden in wardens:
            warden.kill()
            warden.wait()
