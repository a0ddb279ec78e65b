"""``warden doctor``'s checks: can the default sandbox run here, and what protects it.

Every check returns a :class:`Check` row (never raises), so one broken piece does not hide the others. The last
check starts a real sandbox with the production launcher and asks it what it sees (uid, capabilities, seccomp,
whether it can make a user namespace): the strongest evidence there is that the default sandbox works.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import trio

from warden.audit import ENTRIES_RESERVE, fallocate_supported
from warden.egress import PROXY_PORT, EgressDecision, EgressRules, EgressTally, SandboxEgress
from warden.errors import WardenError
from warden.launcher import LaunchSpec
from warden.paths import private_problem
from warden.policy import SandboxSettings
from warden.sandbox import _host
from warden.sandbox._bwrap import BwrapLauncher
from warden.sandbox._bwrap_binary import FIXED_VERSION, MITIGATION, locate_bwrap
from warden.sandbox._cgroup import MemoryCgroups, find_memory_cgroups
from warden.sandbox._data import data_dir
from warden.sandbox._memfd import NSENTER, SYSCTL, can_seal
from warden.sandbox._plan import PRLIMIT, SETPRIV
from warden.sandbox._seccomp import compile_filter, load_rules
from warden.sandbox._uids import SLOTS, UID_BASE

Status = Literal["ok", "warn", "fail", "info"]
_CANARY = ("id -u; grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; "
           "if /usr/bin/unshare -U /usr/bin/true 2>/dev/null; then echo userns=yes; else echo userns=no; fi; "
           "ls /proc | grep -c '^[0-9]'")


@dataclass(frozen=True, slots=True)
class Check:
    """One row: what was checked, how it went, and the detail (what was found, or what to do)."""

    name: str
    status: Status
    detail: str
    blocking: bool = False  # a failure here means the default sandbox cannot run


def check_bwrap(env: Mapping[str, str]) -> list[Check]:
    try:
        binary = locate_bwrap(env)
    except WardenError as exc:
        return [Check("bwrap", "fail", f"{exc.message} -- {exc.hint}", blocking=True)]
    rows = [Check("bwrap", "ok", f"{binary.path} (bubblewrap {binary.version_text}, from {binary.source}, "
                                 "not setuid)")]
    fixed = ".".join(str(v) for v in FIXED_VERSION)
    if binary.has_symlink_fix:
        rows.append(Check("bwrap CVE-2026-87766", "ok", f"{binary.version_text} >= {fixed}: fixed upstream"))
    else:
        rows.append(Check("bwrap CVE-2026-87766", "warn",
                          f"bubblewrap {binary.version_text} predates {fixed} (setup can follow symlinks planted "
                          f"in sandbox-writable directories); mitigation in force: {MITIGATION}"))
    return rows


def _accounts_in_sandbox_range(passwd: str) -> list[str]:
    clashes = []
    for line in passwd.splitlines():
        fields = line.split(":")
        if len(fields) > 3 and fields[2].isdigit() and UID_BASE <= int(fields[2]) <= UID_BASE + SLOTS:
            clashes.append(f"{fields[0]} ({fields[2]})")
    return clashes


def check_userns() -> Check:
    if os.geteuid() == 0:
        try:
            with open("/etc/passwd", encoding="utf-8", errors="replace") as handle:
                clashes = _accounts_in_sandbox_range(handle.read())
        except OSError:
            clashes = []
        if clashes:
            return Check("user namespaces", "fail",
                         f"accounts use warden's sandbox uids {UID_BASE}..{UID_BASE + SLOTS}: {', '.join(clashes)}; "
                         "a sandbox would run as them", blocking=True)
        return Check("user namespaces", "info",
                     f"not needed: warden runs as root, so each sandbox runs as a dedicated uid "
                     f"({UID_BASE + 1}..{UID_BASE + SLOTS}, no account uses them) with no capabilities, "
                     "switched by setpriv inside bwrap")
    facts = _host.userns_facts()
    blocker = facts.blocker()
    if blocker is not None:
        return Check("user namespaces", "fail", f"{blocker}: bwrap cannot isolate an unprivileged warden; "
                                                "allow user namespaces or run warden as root", blocking=True)
    detail = f"user.max_user_namespaces={facts.max_user_namespaces}"
    if facts.apparmor_restrict:
        detail += "; AppArmor restricts unprivileged user namespaces (bwrap needs its profile)"
    return Check("user namespaces", "ok", detail)


def check_seccomp() -> Check:
    if not _host.seccomp_supported():
        return Check("seccomp", "fail", "the kernel has no seccomp filters", blocking=True)
    try:
        rules = load_rules(data_dir() / "seccomp.toml")
        program = compile_filter(rules, network=False)
    except WardenError as exc:
        return Check("seccomp", "fail", f"{exc.message} -- {exc.hint}", blocking=True)
    return Check("seccomp", "ok", f"{len(rules.rule)} rules from sandbox/seccomp.toml compiled by libseccomp "
                                  f"({len(program) // 8} BPF instructions), passed to bwrap by fd")


def check_landlock() -> Check:
    abi = _host.landlock_abi()
    if abi == 0:
        return Check("Landlock", "info", "not available in this kernel (an optional extra layer; not applied)")
    return Check("Landlock", "info", f"ABI {abi} available; applied to servers whose policy sets "
                                     "landlock = \"require\" (an extra layer; off by default)")


def check_shims() -> Check:
    missing = [path for path in (PRLIMIT, SETPRIV) if not _host.executable(path)]
    if missing:
        return Check("exec shims", "fail", f"missing {', '.join(missing)}: apt-get install util-linux",
                     blocking=True)
    return Check("exec shims", "ok", f"{PRLIMIT} (rlimits) and {SETPRIV} (uid drop) inside the sandbox")


def check_memory() -> Check:
    """Whether ``memory_mb`` bounds whole sandboxes here (a memory cgroup per sandbox) or each process only."""
    place = find_memory_cgroups()
    if isinstance(place, MemoryCgroups):
        return Check("sandbox memory", "ok", f"memory_mb bounds each sandbox as a whole, its tmpfs mounts included: "
                                             f"{place.describe()}")
    return Check("sandbox memory", "warn",
                 f"memory is bounded per process only: {place.reason}; so the tmpfs sizes (/tmp, $HOME, /dev/shm: "
                 "3 x tmp_size_mb) are taken out of each process's RLIMIT_DATA. To bound whole sandboxes, run "
                 "warden as root, or in a cgroup that hands the memory controller to sub-cgroups (cgroup v2: "
                 "memory in its cgroup.subtree_control)")


def check_memfd() -> Check:
    """How the sandbox is kept from running code out of a memfd (see ``warden.sandbox._memfd``)."""
    if can_seal(privileged=os.geteuid() == 0):
        return Check("memfd exec", "ok", "vm.memfd_noexec = 2 in each sandbox's PID namespace: every memfd is "
                                         "sealed non-executable and MFD_EXEC is refused")
    if os.geteuid() != 0:
        why = "an unprivileged warden cannot set vm.memfd_noexec"
    elif not os.path.exists(SYSCTL):
        why = "this kernel has no vm.memfd_noexec (Linux 6.3+)"
    else:
        why = f"{NSENTER} is missing (apt-get install util-linux)"
    return Check("memfd exec", "ok", f"the seccomp filter refuses every memfd without MFD_NOEXEC_SEAL, so none is "
                                     f"executable ({why}; a program that makes unsealed memfds gets EACCES)")


def check_engines(env: Mapping[str, str]) -> list[Check]:
    rows = []
    for engine in ("podman", "docker"):
        path = shutil.which(engine, path=env.get("PATH") or os.defpath)
        if path is None:
            rows.append(Check(engine, "info", "not installed (only needed for sandbox = \"container\")"))
            continue
        try:
            done = subprocess.run([path, "--version"], capture_output=True, timeout=20, check=False)
            version = done.stdout.decode("utf-8", "replace").strip() or done.stderr.decode("utf-8", "replace")
        except (OSError, subprocess.SubprocessError) as exc:
            version = f"does not run: {exc}"
        rows.append(Check(engine, "info", f"{path}: {version.splitlines()[0] if version else 'no version'}"))
    return rows


def check_state_dir(state_dir: Path) -> Check:
    try:
        st = state_dir.lstat()
    except FileNotFoundError:
        return Check("state dir", "info", f"{state_dir} does not exist yet; warden creates it with mode 0700")
    except OSError as exc:
        return Check("state dir", "fail", f"{state_dir}: {exc.strerror}")
    if not stat.S_ISDIR(st.st_mode):
        return Check("state dir", "fail", f"{state_dir} is not a directory")
    problem = private_problem(st, mode=0o700)
    if problem is not None:
        return Check("state dir", "fail", f"{state_dir} {problem} (chmod 700 {state_dir})")
    return Check("state dir", "ok", f"{state_dir} (0700, ours; never bound into a sandbox)")


async def check_canary(state_dir: Path, env: Mapping[str, str]) -> Check:
    """Start a real default sandbox and read back what it sees."""
    launcher = BwrapLauncher(SandboxSettings(), state_dir=state_dir, host_env=env)
    try:
        child = await launcher.launch(LaunchSpec(argv=("/bin/sh", "-c", _CANARY)))
    except WardenError as exc:
        return Check("default sandbox", "fail", f"{exc.message} -- {exc.hint}", blocking=True)
    output = b""
    with trio.move_on_after(30):
        while chunk := await child.stdout.receive_some():
            output += chunk
    await child.stdin.aclose()
    with trio.move_on_after(10) as scope:
        code = await child.wait()
    if scope.cancelled_caught:
        child.kill()
        code = await child.wait()
    lines = output.decode("utf-8", "replace").split()
    fields = dict(zip(lines[1:-2:2], lines[2:-2:2], strict=False))
    if code != 0 or not lines:
        return Check("default sandbox", "fail", f"the canary exited {code}: {output[-500:]!r}", blocking=True)
    uid = lines[0]
    problems = []
    if uid == "0":
        problems.append("runs as uid 0")
    if fields.get("CapEff:") != "0000000000000000":
        problems.append(f"CapEff {fields.get('CapEff:')}")
    if fields.get("Seccomp:") != "2":
        problems.append("no seccomp filter")
    if fields.get("NoNewPrivs:") != "1":
        problems.append("NoNewPrivs not set")
    if "userns=yes" in lines:
        problems.append("can create user namespaces")
    if problems:
        return Check("default sandbox", "fail", "started, but " + ", ".join(problems), blocking=True)
    return Check("default sandbox", "ok",
                 f"started: uid {uid}, no capabilities, seccomp filter on, no_new_privs, no user namespaces, "
                 f"no network, {lines[-1]} processes visible")


class _NoRecords:
    async def decided(self, decision: EgressDecision) -> int | None:
        await trio.lowlevel.checkpoint()
        return None

    def closed(self, decision: EgressDecision, index: int | None, tally: EgressTally) -> None:
        pass


async def check_egress(state_dir: Path, env: Mapping[str, str]) -> Check:
    """Start a sandbox with an allow-list: the proxy must get its listener into the sandbox's network namespace
    (as root: setns; as a user: joining bwrap's user namespace first), or servers with ``network.allow`` fail."""
    egress = SandboxEgress(EgressRules.parse(["doctor.invalid:443"]))
    launcher = BwrapLauncher(SandboxSettings(), state_dir=state_dir, host_env=env, egress=egress)
    async with trio.open_nursery() as nursery:
        await nursery.start(egress.serve, _NoRecords())
        try:
            child = await launcher.launch(LaunchSpec(argv=("/bin/sh", "-c", "exit 0")))
            code = await child.wait()
        except WardenError as exc:
            return Check("egress proxy", "fail", f"{exc.message} -- {exc.hint}: servers with network.allow will not "
                                                 "start (servers without network are unaffected)")
        finally:
            nursery.cancel_scope.cancel()
    if code != 0:
        return Check("egress proxy", "fail", f"a sandbox with an allow-list exited {code}")
    return Check("egress proxy", "ok", f"network.allow works: the proxy listens on 127.0.0.1:{PROXY_PORT} inside each "
                                       "such sandbox, which has no other way out, and decides on the resolved address")


def check_audit_reserve(state_dir: Path) -> Check:
    """Whether the state dir's file system can hold the audit log's disk reserve (``warden.audit._reserve``)."""
    try:
        fd = os.open(state_dir, os.O_TMPFILE | os.O_RDWR, 0o600)
    except OSError as exc:
        return Check("audit disk reserve", "info", f"not checked: cannot make a file in {state_dir} ({exc.strerror})")
    try:
        supported = fallocate_supported(fd)
    finally:
        os.close(fd)
    if not supported:
        return Check("audit disk reserve", "warn",
                     f"the file system of {state_dir} cannot preallocate (no fallocate): a full disk fails the audit "
                     "log, and with it every call, without a record of why. Put the state dir on a local file "
                     "system (--state-dir, WARDEN_STATE_DIR)")
    return Check("audit disk reserve", "ok",
                 f"{ENTRIES_RESERVE // (1024 * 1024)} MiB kept allocated past the audit log's end: a full disk pauses "
                 "audited actions (refused with the reason, audit.paused recorded) instead of silencing the log")


async def run_checks(state_dir: Path, env: Mapping[str, str]) -> list[Check]:
    """All checks, in the order doctor prints them. ``state_dir`` must be warden's (private) state directory."""
    state = check_state_dir(state_dir)
    rows = [*check_bwrap(env), check_userns(), check_seccomp(), check_landlock(), check_shims(), check_memory(),
            check_memfd(), *check_engines(env), state]
    if state.status == "ok":
        rows.append(check_audit_reserve(state_dir))
    if not any(row.blocking for row in rows) and state.status != "fail":
        rows.append(await check_canary(state_dir, env))
        if rows[-1].status == "ok":
            rows.append(await check_egress(state_dir, env))
    return rows
