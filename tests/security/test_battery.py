"""The attack battery (sandbox-and-audit.md B.8): a probe runs inside the production launcher - from a root warden
and from an unprivileged warden - and every attack must fail with the exact errno or signal asserted here.

One sandbox per parent runs the quick attacks (each in its own forked child, so a SIGSYS kill cannot hide the
rest); the listeners, sockets and files it attacks are real and belong to this test. The numbers in the test
names are the rows of the B.8 table. Rows 35-42 extend it for issue 11: 35 setuid/setgid files and 36 FIFOs,
sockets and devices in write dirs, 37 the write quota, 38 memory for the whole sandbox, 39 memfd_secret and
fileless (memfd) exec, 40 netlink, 41 host fingerprints (boot id, init command line, mountinfo), 42 the audit
log's disk reserve (tests/audit/test_audit_reserve.py); tests/sandbox/test_hardening_through_warden_run.py runs
each class through ``warden run`` with a hostile server.
"""

from __future__ import annotations

import errno
import os
import re
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.security.harness import IS_ROOT, ROOT, UNPRIV_UID, World, make_world, run_probe
from warden.sandbox._bwrap_binary import locate_bwrap
from warden.sandbox._uids import SANDBOX_GID, UID_BASE

pytestmark = pytest.mark.skipif(not IS_ROOT, reason="the battery drives a root warden and an unprivileged one "
                                                    "(setpriv): it needs root")

ZERO_CAPS = "0000000000000000"


@dataclass
class Battery:
    parent: str
    results: dict[str, Any]
    listeners: dict[str, bool]
    canary_text: str
    world: World

    def __getitem__(self, key: str) -> Any:
        value = self.results[key]
        assert "exception" not in value, f"the probe crashed in {key}: {value}"
        return value


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    with make_world() as built:
        yield built


@pytest.fixture(scope="module", params=["root", "user"])
def battery(request: pytest.FixtureRequest, world: World) -> Battery:
    # An inheritable descriptor in warden itself (a leaked file, say): it must not reach the sandbox (B.8 #17).
    leaked = os.open(world.canary, os.O_RDONLY)
    os.set_inheritable(leaked, True)
    try:
        outcome = run_probe(world, request.param, "battery")
    finally:
        os.close(leaked)
    assert outcome.error is None, outcome.error
    assert outcome.rc == 0, outcome.stderr
    return Battery(request.param, outcome.result(), world.listeners_untouched(), world.canary.read_text(), world)


# ---- 1-3: host files --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("secret", [".ssh/id_ed25519", ".aws/credentials", ".netrc", ".config/gh/hosts.yml",
                                    ".docker/config.json", ".kube/config"])
def test_B08_01_home_secrets_are_not_in_the_sandbox(battery: Battery, secret: str) -> None:
    assert battery["home_secrets"][secret] == {"errno": "ENOENT"}


def test_B08_02_etc_shadow_and_root_home_are_not_bound(battery: Battery) -> None:
    assert battery["etc_shadow"] == {"errno": "ENOENT"}
    assert battery["root_dir"] == {"errno": "ENOENT"}


def test_B08_02_root_owned_0600_file_stays_unreadable_even_from_a_root_warden(battery: Battery) -> None:
    """E2: with a root parent, uid 0 in a user namespace would still be host root; warden's dedicated uid is not."""
    assert battery["root_owned_secret"] == {"errno": "EACCES"}


@pytest.mark.parametrize("target", ["usr", "etc", "root", "dev", "ws_parent", "traversal", "readonly_dir"])
def test_B08_03_writes_outside_the_workspace_fail_read_only(battery: Battery, target: str) -> None:
    assert battery["write_paths"][target] == {"errno": "EROFS"}


def test_B08_03_the_workspace_itself_is_writable(battery: Battery) -> None:
    assert battery["workspace_write"] == {"ok": True}
    written = battery.world.workspaces[battery.parent] / "written-by-sandbox.txt"
    assert written.read_text() == "hello"
    expected_owner = UNPRIV_UID if battery.parent == "user" else None
    owner = written.stat().st_uid
    if expected_owner is not None:
        assert owner == expected_owner
    else:
        assert UID_BASE < owner <= UID_BASE + 256
        assert written.stat().st_gid == SANDBOX_GID


# ---- 4-6: links and metadata -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["absolute", "relative", "chained", "dir_create"])
def test_B08_04_symlink_escapes_find_nothing_and_leave_the_host_file_alone(battery: Battery, kind: str) -> None:
    assert battery["symlink_escape"][kind] == {"errno": "ENOENT"}
    assert battery.canary_text == "original"
    assert not (battery.world.canary.parent / "new-file").exists()


def test_B08_05_hard_link_to_a_read_only_file_crosses_a_mount(battery: Battery) -> None:
    assert battery["hardlink"] == {"errno": "EXDEV"}


@pytest.mark.parametrize(("operation", "expected"), [
    ("chmod", "EROFS"), ("chown", "EROFS"), ("utime", "EROFS"), ("setxattr", "EROFS"), ("rename", "EROFS"),
    ("unlink", "EROFS"), ("truncate", "EACCES"), ("open_write", "EACCES"), ("mmap_shared_write", "EACCES"),
])
def test_B08_06_metadata_changes_on_read_only_paths_fail(battery: Battery, operation: str, expected: str) -> None:
    """truncate/open-for-write meet the file's own mode (root's 0644) before the read-only mount."""
    assert battery["metadata"][operation] == {"errno": expected}
    assert battery.world.readonly_file.read_text() == "public"


# ---- 8-10: privileges and namespaces --------------------------------------------------------------------------

def test_B08_08_setuid_binaries_do_not_raise_privileges(battery: Battery) -> None:
    """A setuid-root program the server can run (the world puts one in its read-only dir) runs with the
    server's own uid, and the system's su/mount gain nothing where present."""
    status = battery["status"]["ok"]
    assert status["NoNewPrivs"] == "1"
    outcomes = battery["setuid_binaries"]
    suid_id = outcomes.pop(str(battery.world.readonly / "suid-id"))
    assert suid_id == {"rc": 0, "stdout": status["Uid"].split()[1]}  # its effective uid: the server's, not 0
    assert suid_id["stdout"] != "0"
    for path, outcome in outcomes.items():
        if outcome.get("missing"):
            continue
        assert outcome["rc"] != 0, path
        assert outcome["stdout"] != "0", path


def test_B08_09_no_capabilities_and_never_uid_0(battery: Battery) -> None:
    status = battery["status"]["ok"]
    for field in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert status[field] == ZERO_CAPS, field
    assert status["Seccomp"] == "2"
    uids = {int(u) for u in status["Uid"].split()}
    if battery.parent == "root":
        assert len(uids) == 1
        assert UID_BASE < uids.pop() <= UID_BASE + 256
    else:
        assert uids == {UNPRIV_UID}
    identity = battery["identity"]["ok"]
    assert identity["groups"] == [] or identity["groups"] == [identity["gid"]]


@pytest.mark.parametrize(("call", "expected"), [
    ("unshare_user", "EPERM"), ("unshare_mount", "EPERM"), ("clone_newuser", "EPERM"), ("clone3", "ENOSYS"),
    ("setns", "EPERM"), ("mount", "EPERM"), ("umount2", "EPERM"), ("pivot_root", "EPERM"), ("chroot", "EPERM"),
    ("open_tree", "ENOSYS"), ("move_mount", "ENOSYS"), ("fsopen", "ENOSYS"), ("fspick", "ENOSYS"),
    ("mount_setattr", "ENOSYS"),
])
def test_B08_10_namespace_and_mount_syscalls_are_refused(battery: Battery, call: str, expected: str) -> None:
    assert battery["namespaces"][call] == {"errno": expected}


def test_B08_10_unshare_command_fails(battery: Battery) -> None:
    assert battery["namespaces"]["unshare_cmd"]["rc"] != 0


# ---- 11-13: terminals and other processes ---------------------------------------------------------------------

def test_B08_11_no_controlling_terminal_and_tiocsti_is_filtered(battery: Battery) -> None:
    tty = battery["tty"]
    assert tty["dev_tty"] == {"errno": "ENXIO"}
    for fd in (0, 1, 2):
        assert tty[f"tiocsti_{fd}"] == {"errno": "EPERM"}
    assert tty["tioclinux"] == {"errno": "EPERM"}
    assert tty["setsid_pgrp"] == {"ok": True}


@pytest.mark.parametrize(("call", "expected"), [
    ("ptrace_init", "EPERM"), ("process_vm_readv", "EPERM"), ("pidfd_getfd", "EPERM"), ("kcmp", "EPERM"),
    ("host_pid_environ", "ENOENT"), ("kill_host_pid", "ESRCH"), ("proc_sys_write", "EACCES"),
])
def test_B08_12_other_processes_are_out_of_reach(battery: Battery, call: str, expected: str) -> None:
    assert battery["processes"][call] == {"errno": expected}


def test_B08_12_init_memory(battery: Battery) -> None:
    """Root parent: the sandbox's init is root-owned, so its memory is closed to the sandbox uid. Unprivileged
    parent: init is the same uid with no capabilities and the same seccomp filter, so writing its memory gains
    nothing; the test pins that down instead of pretending the write fails."""
    processes = battery["processes"]
    init = processes["init_status"]["ok"]
    assert init["CapEff"] == ZERO_CAPS
    assert init["Seccomp"] == "2"
    assert init["NoNewPrivs"] == "1"
    if battery.parent == "root":
        assert processes["proc1_mem_write"] == {"errno": "EACCES"}
    else:
        assert "ok" in processes["proc1_mem_write"]
        assert init["CapBnd"] == ZERO_CAPS
        assert {int(u) for u in init["Uid"].split()} == {UNPRIV_UID}


def test_B08_13_proc_shows_only_the_sandbox(battery: Battery) -> None:
    pids = battery["processes"]["pids"]["ok"]
    assert pids[0] == 1  # bwrap's init; the server comes next (after the pids a root warden's memfd helper used)
    assert len(pids) < 10
    expected = "ENOENT" if not Path("/proc/sysrq-trigger").exists() else "EROFS"
    assert battery["processes"]["sysrq"] == {"errno": expected}


# ---- 14, 16: network and unix sockets -------------------------------------------------------------------------

@pytest.mark.parametrize(("target", "expected"), [
    ("tcp_v4", "ECONNREFUSED"), ("tcp_v6", "ECONNREFUSED"), ("tcp_mapped", "ECONNREFUSED"),
    ("tcp_external", "ENETUNREACH"), ("raw_inet", "EPERM"), ("packet", "EAFNOSUPPORT"), ("vsock", "EAFNOSUPPORT"),
])
def test_B08_14_no_network(battery: Battery, target: str, expected: str) -> None:
    assert battery["network"][target] == {"errno": expected}
    assert battery.listeners["tcp"], "the host's TCP listener was reached"


def test_B08_14_udp_and_dns_go_nowhere(battery: Battery) -> None:
    network = battery["network"]
    assert network["interfaces"] == {"ok": ["lo"]}
    assert battery.listeners["udp"], "a datagram reached the host's UDP socket"
    assert network["dns"] == {"gaierror": -2}  # EAI_NONAME: no resolver, no hosts entry


@pytest.mark.parametrize(("target", "expected"), [
    ("socket_unix", "EAFNOSUPPORT"), ("host_pathname", "EAFNOSUPPORT"), ("host_abstract", "EAFNOSUPPORT"),
    ("socketpair_dgram", "EPERM"), ("socket_high_bits", "EAFNOSUPPORT"), ("io_uring_setup", "ENOSYS"),
    ("io_uring_enter", "ENOSYS"),
])
def test_B08_16_unix_sockets_and_io_uring_are_refused(battery: Battery, target: str, expected: str) -> None:
    assert battery["unix_sockets"][target] == {"errno": expected}
    assert battery.listeners["unix"]
    assert battery.listeners["abstract"]


def test_B08_16_stream_socketpairs_still_work_for_event_loops(battery: Battery) -> None:
    """asyncio and libuv make AF_UNIX stream pairs at start-up; they reach nothing, so they stay allowed."""
    sockets = battery["unix_sockets"]
    assert sockets["socketpair_stream"] == {"ok": None}
    assert sockets["path_visible"] == {"ok": False}


# ---- 17, 18: descriptors and environment ----------------------------------------------------------------------

def test_B08_17_only_stdio_is_inherited(battery: Battery) -> None:
    fds = battery["fds"]["ok"]
    assert sorted(int(fd) for fd in fds) == [0, 1, 2]
    assert all(target.startswith("pipe:") for target in fds.values())


def test_B08_18_environment_is_exactly_the_allowed_one(battery: Battery) -> None:
    env = battery["env"]["ok"]
    workspace = str(battery.world.workspaces[battery.parent])
    assert env == {"HOME": "/home/mcp", "PATH": "/usr/local/bin:/usr/bin:/bin", "TMPDIR": "/tmp",
                   "LANG": "C.UTF-8", "PROBE_ALLOWED": "yes", "PYTHONDONTWRITEBYTECODE": "1",
                   "PYTHONNOUSERSITE": "1", "PWD": workspace}


# ---- 23, 29-31: IPC, seccomp bypasses, kernel surface, uts/time ------------------------------------------------

def test_B08_23_host_sysv_ipc_is_invisible(battery: Battery) -> None:
    assert battery.world.shm_key is not None
    assert battery["sysvipc"] == {"ok": []}


def test_B08_29_x32_syscall_kills_with_sigsys(battery: Battery) -> None:
    assert battery.results["x32"] == {"signal": signal.SIGSYS}


def test_B08_29_i386_int80_syscall_kills_with_sigsys(battery: Battery) -> None:
    """The host runs i386 code through int 0x80 (checked below, outside any sandbox); inside, the filter's
    architecture check kills the process instead of letting the unfiltered i386 table through."""
    assert _host_int80_works()
    assert battery.results["int80"] == {"signal": signal.SIGSYS}


def test_B08_29_personality_change_is_refused(battery: Battery) -> None:
    assert battery["personality"] == {"read_implies_exec": {"errno": "EPERM"}, "query_linux": {"ok": 0}}


@pytest.mark.parametrize("call", ["keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
                                  "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
                                  "open_by_handle_at", "syslog", "swapon", "reboot"])
def test_B08_30_kernel_attack_surface_is_refused(battery: Battery, call: str) -> None:
    assert battery["kernel_surface"][call] == {"errno": "EPERM"}


def test_B08_31_hostname_is_private_and_clocks_cannot_be_set(battery: Battery) -> None:
    uts = battery["uts_time"]
    assert uts["hostname"] == {"ok": "mcp-sandbox"}
    assert uts["sethostname"] == {"errno": "EPERM"}
    assert uts["settimeofday"] == {"errno": "EPERM"}
    assert uts["clock_settime"] == {"errno": "EPERM"}


# ---- 35, 36: what a server can leave in its write dirs -----------------------------------------------------

@pytest.mark.parametrize("attempt", ["chmod_suid", "chmod_sgid", "chmod_suid_high_bits", "fchmod_suid",
                                     "fchmodat_sgid", "fchmodat2_suid", "open_creat_suid", "openat_creat_sgid",
                                     "creat_suid"])
def test_B08_35_setuid_and_setgid_files_cannot_be_made_in_a_write_dir(battery: Battery, attempt: str) -> None:
    """A setuid file owned by a sandbox uid, left where a host user may run it, is refused at every door: the
    chmod family and a creating open with the bit in its mode (flatpak refuses the same)."""
    assert battery["setuid_files"][attempt] == {"errno": "EPERM"}
    made = battery.world.workspaces[battery.parent]
    for path in made.iterdir():
        assert not path.stat().st_mode & 0o6000, path


def test_B08_35_plain_modes_still_work_and_openat2_falls_back(battery: Battery) -> None:
    """openat2's mode sits in a struct seccomp cannot read: ENOSYS sends libc back to openat (filtered above)."""
    files = battery["setuid_files"]
    assert files["chmod_plain"] == {"ok": 0}
    assert files["open_creat_plain"] == {"ok": "0o644"}
    assert files["mode_after"] == {"ok": "0o750"}
    assert files["openat2"] == {"errno": "ENOSYS"}


@pytest.mark.parametrize("attempt", ["mkfifo", "mknod_fifo", "mknodat_fifo", "mknod_socket", "mknod_char",
                                     "mknodat_block", "mknod_fifo_high_bits"])
def test_B08_36_fifos_sockets_and_devices_cannot_be_made_in_a_write_dir(battery: Battery, attempt: str) -> None:
    assert battery["special_files"][attempt] == {"errno": "EPERM"}
    assert battery["special_files"]["left_behind"] == {"ok": []}


def test_B08_36_mknod_of_a_regular_file_still_works(battery: Battery) -> None:
    files = battery["special_files"]
    assert files["mknod_regular"] == {"ok": 0}
    assert files["mknod_regular_type_0"] == {"ok": 0}


# ---- 39-41: kernel surface and host fingerprints ----------------------------------------------------------------

def test_B08_39_memfd_secret_is_refused(battery: Battery) -> None:
    assert battery["memfd"]["memfd_secret"] == {"errno": "ENOSYS"}


@pytest.mark.parametrize("flags", ["exec_flag", "exec_flag_high_bits"])
def test_B08_39_an_executable_memfd_cannot_be_created(battery: Battery, flags: str) -> None:
    assert battery["memfd"][flags] == {"create": {"errno": "EACCES"}}


@pytest.mark.parametrize("flags", ["plain", "cloexec", "noexec_seal"])
def test_B08_39_no_memfd_can_be_executed(battery: Battery, flags: str) -> None:
    """memfd + execve("/proc/self/fd/N") and execveat(fd, "", AT_EMPTY_PATH) run code that is on no mounted
    file system (Landlock does not see memfds either). A root warden sets vm.memfd_noexec = 2 in the sandbox's PID
    namespace, so every memfd is sealed non-executable; an unprivileged warden cannot set that sysctl, so its
    filter refuses every memfd that does not ask for MFD_NOEXEC_SEAL itself."""
    memfd = battery["memfd"][flags]
    if battery.parent == "user" and flags != "noexec_seal":
        assert memfd == {"create": {"errno": "EACCES"}}
        return
    assert memfd == {"create": {"ok": True}, "proc_self_fd": {"errno": "EACCES"}, "execveat": {"errno": "EACCES"},
                     "fchmod_x": {"errno": "EPERM"}}


@pytest.mark.parametrize("protocol", ["sock_diag", "xfrm", "selinux", "audit", "connector", "netfilter",
                                      "kobject_uevent", "generic", "audit_dgram", "route_high_bits",
                                      "family_high_bits"])
def test_B08_40_netlink_sockets_other_than_route_are_refused(battery: Battery, protocol: str) -> None:
    assert battery["netlink"][protocol] == {"errno": "EAFNOSUPPORT"}


def test_B08_40_route_netlink_sees_only_the_sandbox_s_own_network(battery: Battery) -> None:
    """NETLINK_ROUTE stays: getaddrinfo, if_nameindex and node's os.networkInterfaces() need it, and in the
    sandbox's network namespace it lists nothing but lo (B08-14 checks that list)."""
    assert battery["netlink"]["route"] == {"ok": None}
    assert battery["network"]["interfaces"] == {"ok": ["lo"]}


def test_B08_41_the_sandbox_has_its_own_boot_id(battery: Battery) -> None:
    host = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    seen = battery["fingerprints"]["boot_id"]["ok"]
    assert seen != host
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", seen)


def test_B08_41_the_init_command_line_names_no_host_path(battery: Battery) -> None:
    """bwrap's own path (here inside warden's virtualenv) would tell the server where warden is installed; the
    sandbox's init is bwrap, so it shows ``bwrap``. (The server's own argv follows it: that is the server's.)"""
    cmdline = battery["fingerprints"]["init_cmdline"]["ok"]
    assert cmdline[0] == "bwrap"
    assert locate_bwrap(dict(os.environ)).path not in cmdline
    shims = cmdline[:cmdline.index("warden-ready")]
    assert not [arg for arg in shims if str(ROOT) in arg or str(battery.world.base) in arg]


def _bwrap_own(root: str, point: str) -> bool:
    """mountinfo roots bwrap itself makes: its tmpfs root, devtmpfs nodes, procfs covers, its bind-data files."""
    return (point == "/" and root == "/newroot") or \
        (point.startswith(("/dev/", "/proc/")) and root == "/" + point.rsplit("/", 1)[1]) or \
        (point == "/proc/sys/kernel/random/boot_id" and root.startswith("/bindfile"))


def test_B08_41_mountinfo_shows_no_host_path_beyond_the_mount_points(battery: Battery) -> None:
    """A bind's source appears in mountinfo; warden binds every path at its own place (and recreates a symlink
    such as /etc/localtime instead of binding its target), so each source is the mount point itself. What
    remains is documented in sandbox/README.md."""
    for root, point in battery["fingerprints"]["mount_roots"]["ok"]:
        assert root in (point, "/") or _bwrap_own(root, point), (root, point)


def _host_int80_works() -> bool:
    import ctypes
    import mmap

    page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(b"\xb8\x14\x00\x00\x00\xcd\x80\xc3")
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    return bool(ctypes.CFUNCTYPE(ctypes.c_int)(address)() == os.getpid())


def test_errno_names_are_real() -> None:
    """Guard against a typo in the expectations above silently comparing against a non-errno."""
    for name in ("ENOENT", "EACCES", "EROFS", "EXDEV", "EPERM", "ENOSYS", "ENXIO", "ESRCH", "ECONNREFUSED",
                 "ENETUNREACH", "EAFNOSUPPORT"):
        assert isinstance(getattr(errno, name), int)
