"""The attack probe: runs INSIDE a warden sandbox and tries to get out. Standard library only (it runs under
/usr/bin/python3 -I -S, which every sandbox has through /usr).

Usage: probe.py battery CONFIG_JSON     run every quick attack, each in its own forked child, print one JSON object
       probe.py ATTACK CONFIG_JSON      run one heavy attack (fork bomb, memory bomb, ...) in this process

Each attack returns a small dict: {"errno": "ENOENT"} when the syscall failed as expected, {"ok": ...} with
what it observed otherwise. A child killed by a signal is reported as {"signal": N}. The tests assert the exact
values; this file only observes.
"""

from __future__ import annotations

import ctypes
import errno
import json
import mmap
import os
import signal
import socket
import subprocess
import sys
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
CONFIG: dict = {}

# x86_64 syscall numbers
NR = {
    "clone": 56, "clone3": 435, "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155,
    "chroot": 161, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442, "ptrace": 101, "process_vm_readv": 310, "pidfd_open": 434, "pidfd_getfd": 438,
    "kcmp": 312, "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298,
    "userfaultfd": 323, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
    "delete_module": 176, "io_uring_setup": 425, "io_uring_enter": 426, "personality": 135,
    "sethostname": 170, "settimeofday": 164, "clock_settime": 227, "socket": 41, "getpid": 39,
    "open_by_handle_at": 304, "name_to_handle_at": 303, "syslog": 103, "swapon": 167, "reboot": 169,
    "chmod": 90, "fchmod": 91, "fchmodat": 268, "fchmodat2": 452, "mknod": 133, "mknodat": 259, "open": 2,
    "openat": 257, "creat": 85, "openat2": 437, "memfd_create": 319, "memfd_secret": 447, "execveat": 322,
}
CLONE_NEWUSER = 0x10000000
CLONE_NEWNS = 0x00020000
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000
MFD_CLOEXEC, MFD_NOEXEC_SEAL, MFD_EXEC = 0x1, 0x8, 0x10
NETLINK = {"route": 0, "sock_diag": 4, "xfrm": 6, "selinux": 7, "audit": 9, "connector": 11, "netfilter": 12,
           "kobject_uevent": 15, "generic": 16}


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _write(path: str, text: str) -> int:
    with open(path, "w") as handle:
        return handle.write(text)


def ename(number: int) -> str:
    return errno.errorcode.get(number, str(number))


def sys_call(name: str, *args: int | bytes | None) -> dict:
    ctypes.set_errno(0)
    converted = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    result = libc.syscall(ctypes.c_long(NR[name]), *converted)
    if result == -1:
        return {"errno": ename(ctypes.get_errno())}
    return {"ok": result}


def sys_call_raise(name: str, *args: object) -> int:
    """``sys_call`` for code that wants an OSError (an exec attempt in a child)."""
    ctypes.set_errno(0)
    converted = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    result = libc.syscall(ctypes.c_long(NR[name]), *converted)
    if result == -1:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return int(result)


def oserror(fn) -> dict:  # type: ignore[no-untyped-def]
    try:
        value = fn()
    except OSError as exc:
        return {"errno": ename(exc.errno or 0)}
    return {"ok": value if isinstance(value, (int, str, bool, list, type(None))) else True}


# ---- attacks: files ------------------------------------------------------------------------------------------

def a_home_secrets() -> dict:
    home = CONFIG["host_home"]
    out = {}
    for rel in (".ssh/id_ed25519", ".aws/credentials", ".netrc", ".config/gh/hosts.yml", ".docker/config.json",
                ".kube/config"):
        path = os.path.join(home, rel)
        out[rel] = oserror(lambda p=path: _read(p))
    return out


def a_etc_shadow() -> dict:
    return oserror(lambda: _read("/etc/shadow"))


def a_root_dir() -> dict:
    return oserror(lambda: os.listdir("/root"))


def a_root_owned_secret() -> dict:
    return oserror(lambda: _read(CONFIG["root_secret"]).decode())


def a_write_paths() -> dict:
    ws = CONFIG["workspace"]
    out = {}
    for name, path in (("usr", "/usr/warden-x"), ("etc", "/etc/warden-x"), ("root", "/warden-x"),
                       ("dev", "/dev/warden-x"), ("ws_parent", os.path.join(os.path.dirname(ws), "warden-x")),
                       ("traversal", os.path.join(ws, "..", "..", "warden-x")),
                       ("readonly_dir", os.path.join(CONFIG["readonly_dir"], "warden-x"))):
        out[name] = oserror(lambda p=path: os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)))
    return out


def a_workspace_write() -> dict:
    path = os.path.join(CONFIG["workspace"], "written-by-sandbox.txt")
    with open(path, "w") as handle:
        handle.write("hello")
    return {"ok": True}


def a_symlink_escape() -> dict:
    ws = CONFIG["workspace"]
    target = CONFIG["host_canary"]
    out = {}
    link = os.path.join(ws, "abs-link")
    os.symlink(target, link)
    out["absolute"] = oserror(lambda: _write(link, "pwned"))
    rel = os.path.join(ws, "rel-link")
    os.symlink(os.path.relpath(target, ws), rel)
    out["relative"] = oserror(lambda: _write(rel, "pwned"))
    chain1, chain2 = os.path.join(ws, "chain1"), os.path.join(ws, "chain2")
    os.symlink(chain2, chain1)
    os.symlink(target, chain2)
    out["chained"] = oserror(lambda: _write(chain1, "pwned"))
    # The target's directory itself: create a new file there through a directory symlink.
    dlink = os.path.join(ws, "dir-link")
    os.symlink(os.path.dirname(target), dlink)
    out["dir_create"] = oserror(lambda: _write(os.path.join(dlink, "new-file"), "pwned"))
    return out


def a_hardlink() -> dict:
    return oserror(lambda: os.link(CONFIG["readonly_file"], os.path.join(CONFIG["workspace"], "hard")))


def a_metadata() -> dict:
    ro = CONFIG["readonly_file"]
    out = {
        "chmod": oserror(lambda: os.chmod(ro, 0o777)),
        "chown": oserror(lambda: os.chown(ro, os.getuid(), os.getgid())),
        "utime": oserror(lambda: os.utime(ro, (0, 0))),
        "setxattr": oserror(lambda: os.setxattr(ro, "user.x", b"1")),
        "truncate": oserror(lambda: os.truncate(ro, 0)),
        "rename": oserror(lambda: os.rename(ro, ro + ".moved")),
        "unlink": oserror(lambda: os.unlink(ro)),
        "open_write": oserror(lambda: os.open(ro, os.O_WRONLY)),
    }

    def writable_mmap() -> None:
        fd = os.open(ro, os.O_RDONLY)
        try:
            mmap.mmap(fd, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)

    out["mmap_shared_write"] = oserror(writable_mmap)
    return out


# ---- attacks: what a server leaves in its write dirs (B.8 #35, #36) ------------------------------------------

def a_setuid_files() -> dict:
    """Every way to give a file in a write dir the setuid or setgid bit; a plain chmod must still work."""
    ws = CONFIG["workspace"]
    target = os.path.join(ws, "suid-target")
    with open(target, "wb") as handle:
        handle.write(b"#!/bin/sh\n")
    os.chmod(target, 0o755)
    path = target.encode()

    def fchmod(mode: int) -> dict:
        fd = os.open(target, os.O_RDONLY)
        try:
            return sys_call("fchmod", fd, mode)
        finally:
            os.close(fd)

    def created(name: str, call: str, *args: int | bytes) -> dict:
        new = os.path.join(ws, name).encode()
        result = sys_call(call, *[new if a == b"NEW" else a for a in args])
        if "ok" in result:
            mode = os.stat(new).st_mode
            os.close(result["ok"])
            result = {"ok": oct(mode & 0o7777)}
        return result

    out = {
        "chmod_suid": sys_call("chmod", path, 0o4755),
        "chmod_sgid": sys_call("chmod", path, 0o2755),
        "chmod_suid_high_bits": sys_call("chmod", path, (1 << 32) | 0o4755),
        "fchmod_suid": fchmod(0o4755),
        "fchmodat_sgid": sys_call("fchmodat", AT_FDCWD, path, 0o2755),
        "fchmodat2_suid": sys_call("fchmodat2", AT_FDCWD, path, 0o4755, 0),
        "open_creat_suid": created("c1", "open", b"NEW", os.O_CREAT | os.O_WRONLY, 0o4755),
        "openat_creat_sgid": created("c2", "openat", AT_FDCWD, b"NEW", os.O_CREAT | os.O_WRONLY, 0o2755),
        "creat_suid": created("c3", "creat", b"NEW", 0o4755),
        "openat2": sys_call("openat2", AT_FDCWD, path, ctypes.create_string_buffer(24), 24),
        "chmod_plain": sys_call("chmod", path, 0o750),
        "open_creat_plain": created("c4", "open", b"NEW", os.O_CREAT | os.O_WRONLY, 0o644),
    }
    out["mode_after"] = {"ok": oct(os.stat(target).st_mode & 0o7777)}
    return out


def a_special_files() -> dict:
    """FIFOs, sockets and device nodes in a write dir (a host program that opens one blocks or talks to the
    server); regular files made with mknod stay allowed."""
    ws = CONFIG["workspace"]

    def mknod(name: str, mode: int, dev: int = 0, at: bool = False) -> dict:
        path = os.path.join(ws, name).encode()
        if at:
            return sys_call("mknodat", AT_FDCWD, path, mode, dev)
        return sys_call("mknod", path, mode, dev)

    return {
        "mkfifo": oserror(lambda: os.mkfifo(os.path.join(ws, "fifo"))),
        "mknod_fifo": mknod("fifo2", 0o010644),
        "mknodat_fifo": mknod("fifo3", 0o010644, at=True),
        "mknod_socket": mknod("sock", 0o140644),
        "mknod_char": mknod("null", 0o020666, os.makedev(1, 3)),
        "mknodat_block": mknod("blk", 0o060666, os.makedev(7, 0), at=True),
        "mknod_fifo_high_bits": mknod("fifo4", (1 << 32) | 0o010644),
        "mknod_regular": mknod("reg1", 0o100644),
        "mknod_regular_type_0": mknod("reg2", 0o644),
        "left_behind": {"ok": sorted(n for n in os.listdir(ws) if n in ("fifo", "fifo2", "fifo3", "sock", "null",
                                                                         "blk", "fifo4"))},
    }


# ---- attacks: kernel surface (B.8 #39, #40) ------------------------------------------------------------------

def _exec_in_child(run) -> dict:  # type: ignore[no-untyped-def]
    """Run ``run()`` (an exec attempt) in a forked child: {"errno"} if it failed, {"ran": status} if it ran."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            run()
        except OSError as exc:
            os.write(write_end, ename(exc.errno or 0).encode())
        os._exit(99)
    os.close(write_end)
    failure = os.read(read_end, 100).decode()
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    return {"errno": failure} if failure else {"ran": os.waitstatus_to_exitcode(status)}


def a_memfd() -> dict:
    """Fileless code: a memfd holding /usr/bin/true, run through /proc/self/fd and through execveat."""
    program = _read("/usr/bin/true")
    out: dict = {"memfd_secret": sys_call("memfd_secret", 0)}
    for label, flags in (("plain", 0), ("cloexec", MFD_CLOEXEC), ("exec_flag", MFD_EXEC),
                         ("noexec_seal", MFD_NOEXEC_SEAL), ("exec_flag_high_bits", (1 << 32) | MFD_EXEC)):
        created = sys_call("memfd_create", b"probe", flags)
        if "ok" not in created:
            out[label] = {"create": created}
            continue
        fd = created["ok"]
        os.write(fd, program)

        def execveat(fd: int = fd) -> None:
            sys_call_raise("execveat", fd, b"", ctypes.c_void_p(0), ctypes.c_void_p(0), AT_EMPTY_PATH)

        out[label] = {
            "create": {"ok": True},
            "proc_self_fd": _exec_in_child(lambda fd=fd: os.execv(f"/proc/self/fd/{fd}", ["probe"])),
            "execveat": _exec_in_child(execveat),
            "fchmod_x": oserror(lambda fd=fd: os.fchmod(fd, 0o755)),
        }
        os.close(fd)
    return out


def a_netlink() -> dict:
    out = {name: oserror(lambda p=proto: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, p).close())
           for name, proto in NETLINK.items()}
    out["audit_dgram"] = oserror(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 9).close())
    out["route_high_bits"] = sys_call("socket", socket.AF_NETLINK, socket.SOCK_RAW, (1 << 32) | 9)
    out["family_high_bits"] = sys_call("socket", (1 << 32) | socket.AF_NETLINK, socket.SOCK_RAW, 9)
    return out


def a_fingerprints() -> dict:
    """What the sandbox can learn about the host: boot id, the init's command line, the mount table."""
    with open("/proc/self/mountinfo") as handle:
        mounts = [line.split(" - ")[0].split()[3:5] for line in handle]
    return {
        "boot_id": oserror(lambda: _read("/proc/sys/kernel/random/boot_id").decode().strip()),
        "init_cmdline": oserror(lambda: _read("/proc/1/cmdline").decode(errors="replace").split("\0")),
        "mount_roots": {"ok": mounts},
    }


# ---- attacks: privileges -------------------------------------------------------------------------------------

def a_status() -> dict:
    fields = {}
    with open("/proc/self/status") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            if key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp", "Uid", "Gid"):
                fields[key] = value.strip()
    return {"ok": fields}


def a_setuid_binaries() -> dict:
    out = {}
    suid_id = os.path.join(CONFIG["readonly_dir"], "suid-id")  # setuid root, prints its effective uid
    for path, args in (("/usr/bin/su", ["root", "-c", "id -u"]), ("/usr/bin/mount", ["-t", "tmpfs", "x", "/tmp"]),
                       (suid_id, ["-u"])):
        if not os.path.exists(path) or not os.stat(path).st_mode & 0o4000:
            out[path] = {"missing": True}
            continue
        done = subprocess.run([path, *args], capture_output=True, stdin=subprocess.DEVNULL, timeout=20)
        out[path] = {"rc": done.returncode, "stdout": done.stdout.decode(errors="replace").strip()}
    return out


def a_namespaces() -> dict:
    def libc_unshare(flags: int) -> dict:
        ctypes.set_errno(0)
        if libc.unshare(ctypes.c_int(flags)) == -1:
            return {"errno": ename(ctypes.get_errno())}
        return {"ok": True}

    out = {
        "unshare_user": libc_unshare(CLONE_NEWUSER),
        "unshare_mount": libc_unshare(CLONE_NEWNS),
        "clone_newuser": sys_call("clone", CLONE_NEWUSER | signal.SIGCHLD, 0, 0, 0, 0),
        "clone3": sys_call("clone3", 0, 0),
        "setns": sys_call("setns", 0, 0),
        "mount": sys_call("mount", None, None, None, 0, None),
        "umount2": sys_call("umount2", None, 0),
        "pivot_root": sys_call("pivot_root", None, None),
        "chroot": sys_call("chroot", None),
        "open_tree": sys_call("open_tree", -100, None, 0),
        "move_mount": sys_call("move_mount", -1, None, -1, None, 0),
        "fsopen": sys_call("fsopen", None, 0),
        "fspick": sys_call("fspick", -100, None, 0),
        "mount_setattr": sys_call("mount_setattr", -1, None, 0, None, 0),
    }
    done = subprocess.run(["/usr/bin/unshare", "-U", "true"], capture_output=True, timeout=20)
    out["unshare_cmd"] = {"rc": done.returncode}
    return out


def a_tty() -> dict:
    out = {"dev_tty": oserror(lambda: os.open("/dev/tty", os.O_RDWR))}
    for fd in (0, 1, 2):
        out[f"tiocsti_{fd}"] = oserror(lambda f=fd: __import__("fcntl").ioctl(f, TIOCSTI, b"Z"))
    out["tioclinux"] = oserror(lambda: __import__("fcntl").ioctl(0, TIOCLINUX, b"\x0c"))
    out["setsid_pgrp"] = {"ok": os.getsid(0) == os.getpgrp()}
    return out


def a_processes() -> dict:
    pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    host_pid = CONFIG["host_pid"]
    out = {
        "pids": {"ok": pids},
        "ptrace_init": sys_call("ptrace", 16, 1, 0, 0),  # PTRACE_ATTACH
        "process_vm_readv": sys_call("process_vm_readv", 1, 0, 0, 0, 0, 0),
        "pidfd_getfd": sys_call("pidfd_getfd", 0, 0, 0),
        "kcmp": sys_call("kcmp", 1, 1, 0, 0, 0),
        "proc1_mem_write": oserror(lambda: os.open("/proc/1/mem", os.O_WRONLY)),
        "host_pid_environ": oserror(lambda: _read(f"/proc/{host_pid}/environ")),
        "kill_host_pid": oserror(lambda: os.kill(host_pid, 0)),
        "sysrq": oserror(lambda: _write("/proc/sysrq-trigger", "h")),
        "proc_sys_write": oserror(lambda: _write("/proc/sys/kernel/hostname", "pwned")),
    }
    init = {}
    with open("/proc/1/status") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            if key in ("CapEff", "CapPrm", "CapBnd", "Seccomp", "NoNewPrivs", "Uid"):
                init[key] = value.strip()
    out["init_status"] = {"ok": init}
    return out


# ---- attacks: network and IPC --------------------------------------------------------------------------------

def a_network() -> dict:
    port = CONFIG["tcp_port"]
    udp_port = CONFIG["udp_port"]

    def tcp(host: str, family: int) -> None:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect((host, port))

    def udp() -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            return sock.sendto(b"pwned", ("127.0.0.1", udp_port))

    def dns() -> None:
        socket.getaddrinfo("example.com", 443)

    out = {
        "tcp_v4": oserror(lambda: tcp("127.0.0.1", socket.AF_INET)),
        "tcp_v6": oserror(lambda: tcp("::1", socket.AF_INET6)),
        "tcp_mapped": oserror(lambda: tcp("::ffff:127.0.0.1", socket.AF_INET6)),
        "tcp_external": oserror(lambda: tcp("192.0.2.1", socket.AF_INET)),
        "udp_v4": oserror(udp),
        "raw_inet": oserror(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)),
        "packet": oserror(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)),
        "vsock": oserror(lambda: socket.socket(40, socket.SOCK_STREAM)),
        "interfaces": {"ok": sorted(name for _, name in socket.if_nameindex())},
    }
    try:
        dns()
        out["dns"] = {"ok": True}
    except socket.gaierror as exc:
        out["dns"] = {"gaierror": exc.errno}
    return out


def a_unix_sockets() -> dict:
    def connect(address: str | bytes) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(address)

    out = {
        "socket_unix": oserror(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)),
        "host_pathname": oserror(lambda: connect(CONFIG["unix_path"])),
        "host_abstract": oserror(lambda: connect(b"\0" + CONFIG["unix_abstract"].encode())),
        "socketpair_dgram": oserror(lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)),
        "socketpair_stream": oserror(lambda: [s.close() for s in socket.socketpair()] and None),
        "socket_high_bits": sys_call("socket", (1 << 32) | socket.AF_UNIX, socket.SOCK_STREAM, 0),
        "io_uring_setup": sys_call("io_uring_setup", 1, ctypes.create_string_buffer(120)),
        "io_uring_enter": sys_call("io_uring_enter", 0, 0, 0, 0, 0, 0),
        "path_visible": {"ok": os.path.exists(CONFIG["unix_path"])},
    }
    return out


def a_sysvipc() -> dict:
    with open("/proc/sysvipc/shm") as handle:
        shm = [line.split() for line in handle.readlines()[1:]]
    with open("/proc/sysvipc/msg") as handle:
        msg = [line.split() for line in handle.readlines()[1:]]
    keys = [int(row[0]) for row in shm + msg]
    return {"ok": keys}


def a_kernel_surface() -> dict:
    return {
        "keyctl": sys_call("keyctl", 0, -1, 0, 0, 0),
        "add_key": sys_call("add_key", None, None, None, 0, 0),
        "request_key": sys_call("request_key", None, None, None, 0),
        "bpf": sys_call("bpf", 0, None, 0),
        "perf_event_open": sys_call("perf_event_open", None, 0, -1, -1, 0),
        "userfaultfd": sys_call("userfaultfd", 0),
        "kexec_load": sys_call("kexec_load", 0, 0, None, 0),
        "kexec_file_load": sys_call("kexec_file_load", -1, -1, 0, None, 0),
        "init_module": sys_call("init_module", None, 0, None),
        "finit_module": sys_call("finit_module", -1, None, 0),
        "delete_module": sys_call("delete_module", None, 0),
        "open_by_handle_at": sys_call("open_by_handle_at", -1, None, 0),
        "syslog": sys_call("syslog", 3, None, 0),
        "swapon": sys_call("swapon", None, 0),
        "reboot": sys_call("reboot", 0, 0, 0, None),
    }


def a_personality() -> dict:
    return {"read_implies_exec": sys_call("personality", 0x0400000), "query_linux": sys_call("personality", 0)}


def a_uts_time() -> dict:
    return {
        "hostname": {"ok": socket.gethostname()},
        "sethostname": sys_call("sethostname", ctypes.create_string_buffer(b"pwned"), 5),
        "settimeofday": sys_call("settimeofday", ctypes.create_string_buffer(16), None),
        "clock_settime": sys_call("clock_settime", 0, ctypes.create_string_buffer(16)),
    }


def a_x32() -> dict:
    libc.syscall(ctypes.c_long(0x40000000 | NR["getpid"]))
    return {"ok": "x32 syscall returned"}


def a_int80() -> dict:
    """i386 getpid through `int 0x80` from this 64-bit process: the i386 ABI is not in the filter -> SIGSYS."""
    code = b"\xb8\x14\x00\x00\x00\xcd\x80\xc3"  # mov eax, 20 (getpid); int 0x80; ret
    page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    return {"ok": ctypes.CFUNCTYPE(ctypes.c_int)(address)()}


def a_env() -> dict:
    return {"ok": dict(os.environ)}


def a_identity() -> dict:
    return {"ok": {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "groups": os.getgroups(),
                   "cwd": os.getcwd(), "passwd": _read("/etc/passwd").decode()}}


BATTERY = {name[2:]: fn for name, fn in globals().items() if name.startswith("a_")}


def run_battery() -> dict:
    # Inherited descriptors first, before this process opens anything of its own.
    # readlink opens nothing, so the answer is not disturbed by the looking.
    fds = {}
    for fd in range(4096):
        try:
            fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
    results: dict = {"fds": {"ok": fds}}
    for name, fn in BATTERY.items():
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            try:
                payload = json.dumps(fn()).encode()
            except Exception as exc:  # report, do not hide: the test shows it
                payload = json.dumps({"exception": f"{type(exc).__name__}: {exc}"}).encode()
            os.write(write_end, payload)
            os._exit(0)
        os.close(write_end)
        chunks = []
        while chunk := os.read(read_end, 65536):
            chunks.append(chunk)
        os.close(read_end)
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            results[name] = {"signal": os.WTERMSIG(status)}
        else:
            results[name] = json.loads(b"".join(chunks) or b"null")
    return results


# ---- heavy attacks (one per sandbox) -------------------------------------------------------------------------

def h_forkbomb() -> dict:
    children = []
    error = None
    for _ in range(CONFIG.get("fork_cap", 400)):
        try:
            pid = os.fork()
        except OSError as exc:
            error = ename(exc.errno or 0)
            break
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return {"forked": len(children), "errno": error}


def h_membomb() -> dict:
    """Allocate CONFIG["block_mb"]-MiB blocks (16 by default) up to CONFIG["mem_cap_mb"]."""
    block = CONFIG.get("block_mb", 16)
    blocks = []
    try:
        for _ in range(CONFIG.get("mem_cap_mb", 1024) // block):
            blocks.append(bytearray(block * 1024 * 1024))
    except MemoryError:
        return {"error": "MemoryError", "allocated_mb": block * len(blocks)}
    return {"error": None, "allocated_mb": block * len(blocks)}


def _hog(out_fd: int, megabytes: int) -> None:
    """A child that allocates (and touches) ``megabytes`` in 16 MiB steps, reporting each step, then waits."""
    with open("/proc/self/oom_score_adj", "w") as handle:
        handle.write("1000")  # the OOM killer takes these first, never the reporting parent
    held = []
    for _ in range(megabytes // 16):
        held.append(bytearray(b"\x01") * (16 * 1024 * 1024))
        os.write(out_fd, b"16\n")
    os.write(out_fd, b"done\n")
    time.sleep(600)


def _filler(out_fd: int, cap_mb: int) -> None:
    """A child that fills /tmp, /dev/shm and $HOME in 4 MiB writes, reporting each, until each is full or capped."""
    with open("/proc/self/oom_score_adj", "w") as handle:
        handle.write("1000")
    chunk = b"\x02" * (4 * 1024 * 1024)
    for directory in ("/tmp", "/dev/shm", os.environ["HOME"]):
        written = 0
        try:
            with open(os.path.join(directory, "fill"), "wb") as handle:
                while written < cap_mb * 1024 * 1024:
                    handle.write(chunk)
                    handle.flush()
                    written += len(chunk)
                    os.write(out_fd, f"{directory}:4\n".encode())
        except OSError as exc:
            os.write(out_fd, f"{directory}:errno:{ename(exc.errno or 0)}\n".encode())
    os.write(out_fd, b"done\n")


def _watch(fn, *args: int) -> tuple[int, list[str]]:  # type: ignore[no-untyped-def]
    """Fork ``fn(write_fd, *args)``; return its pid and every line it reported before it finished or died."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            fn(write_end, *args)
        finally:
            os._exit(0)
    os.close(write_end)
    lines: list[str] = []
    buffer = b""
    while True:
        chunk = os.read(read_end, 4096)
        if not chunk:
            break
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        lines += [line.decode() for line in complete]
        if lines and lines[-1] == "done":
            break
    os.close(read_end)
    return pid, lines


def _status(pid: int, *, wait: bool) -> str:
    done, status = os.waitpid(pid, 0 if wait else os.WNOHANG)
    if done == 0:
        return "alive"
    return f"signal:{os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit:{os.WEXITSTATUS(status)}"


def h_memhog() -> dict:
    """The whole sandbox against memory_mb: CONFIG["hogs"] children of CONFIG["hog_mb"] each, then a filler
    child writing up to CONFIG["fill_cap_mb"] into each tmpfs. This process stays small and reports: what each
    child got, which died (the OOM killer), and what the tmpfs mounts hold at the end."""
    hogs = [_watch(_hog, CONFIG["hog_mb"]) for _ in range(CONFIG["hogs"])]
    filler_pid, filler_lines = _watch(_filler, CONFIG["fill_cap_mb"])
    filler_status = _status(filler_pid, wait=True)
    report = []
    for pid, lines in hogs:
        report.append({"mb": 16 * lines.count("16"), "status": _status(pid, wait=False)})
    tmpfs = {}
    for directory in ("/tmp", "/dev/shm", os.environ["HOME"]):
        try:
            tmpfs[directory] = os.stat(os.path.join(directory, "fill")).st_blocks * 512 // (1024 * 1024)
        except OSError:
            tmpfs[directory] = 0
    for (pid, _), hog in zip(hogs, report, strict=True):
        if hog["status"] == "alive":
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    errors = [line for line in filler_lines if "errno" in line]
    return {"hogs": report, "filler": {"status": filler_status, "errors": errors}, "tmpfs_mb": tmpfs}


def h_cpuspin() -> dict:
    while True:
        pass


def h_diskfill() -> dict:
    out = {}
    for name, directory in (("tmp", "/tmp"), ("home", os.environ["HOME"])):
        written = 0
        try:
            with open(os.path.join(directory, "fill"), "wb") as handle:
                while written < CONFIG["fill_cap_mb"] * 1024 * 1024:
                    handle.write(b"\0" * 1024 * 1024)
                    handle.flush()
                    written += 1024 * 1024
            out[name] = {"written_mb": written // (1024 * 1024)}
        except OSError as exc:
            out[name] = {"errno": ename(exc.errno or 0), "written_mb": written // (1024 * 1024)}
        os.unlink(os.path.join(directory, "fill"))
    written = 0
    try:
        with open(os.path.join(CONFIG["workspace"], "big"), "wb") as handle:
            while written < CONFIG["fill_cap_mb"] * 1024 * 1024:
                handle.write(b"\0" * 1024 * 1024)
                handle.flush()
                written += 1024 * 1024
        out["workspace"] = {"written_mb": written // (1024 * 1024)}
    except OSError as exc:
        out["workspace"] = {"errno": ename(exc.errno or 0), "written_mb": written // (1024 * 1024)}
    return out


def h_writefill() -> dict:
    """Grow the workspace past the write quota in CONFIG["how"], then stay alive (warden must stop it):
    files (1 MiB each), unlinked (one file deleted but held open), mapped (deleted, held only by a shared
    mapping), tiny (thousands of empty files)."""
    ws, cap = CONFIG["workspace"], CONFIG["fill_cap_mb"]
    how = CONFIG["how"]
    chunk = b"\x03" * (1024 * 1024)
    keep = []
    if how == "files":
        for i in range(cap):
            with open(os.path.join(ws, f"fill-{i}"), "wb") as handle:
                handle.write(chunk)
    elif how == "unlinked":
        path = os.path.join(ws, "hidden")
        handle = open(path, "wb")  # noqa: SIM115 - held open on purpose
        os.unlink(path)
        for _ in range(cap):
            handle.write(chunk)
        handle.flush()
        keep.append(handle)
    elif how == "mapped":
        path = os.path.join(ws, "mapped")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        os.ftruncate(fd, cap * 1024 * 1024)
        mapping = mmap.mmap(fd, cap * 1024 * 1024, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        os.close(fd)
        os.unlink(path)
        for offset in range(0, cap * 1024 * 1024, 4096):
            mapping[offset] = 3
        mapping.flush()
        keep.append(mapping)
    elif how == "tiny":
        directory = os.path.join(ws, "tiny")
        os.mkdir(directory)
        for i in range(CONFIG["files"]):
            os.close(os.open(os.path.join(directory, str(i)), os.O_CREAT | os.O_WRONLY, 0o600))
    sys.stdout.write(json.dumps({"wrote": how}) + "\n")
    sys.stdout.flush()
    time.sleep(CONFIG.get("linger", 120))
    return {"ok": "not stopped"}


def h_fdflood() -> dict:
    fds = []
    try:
        while len(fds) < 100000:
            fds.append(os.open("/dev/null", os.O_RDONLY))
    except OSError as exc:
        return {"errno": ename(exc.errno or 0), "opened": len(fds)}
    return {"errno": None, "opened": len(fds)}


def h_daemonize() -> dict:
    """Double fork + setsid, nohup-style SIGHUP/SIGTERM-ignoring sleeper, plain background child; then exit.

    Every sleeper's argv carries CONFIG["token"] (a unique duration like 1000.123456) so the test can look
    for survivors on the host.
    """
    token = CONFIG["token"]
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv("/usr/bin/sleep", ["sleep", token])
        os._exit(0)
    subprocess.Popen(["/usr/bin/sh", "-c", f"trap '' HUP TERM; /usr/bin/sleep {token}; :"], start_new_session=True)
    subprocess.Popen(["/usr/bin/sleep", token])
    return {"ok": "daemonized"}


def h_killall() -> dict:
    """kill(-1, SIGKILL) with a sibling inside: it may reach only this sandbox's own processes."""
    sibling = subprocess.Popen(["/usr/bin/sleep", "1000"])
    outcome = oserror(lambda: os.kill(-1, signal.SIGKILL))
    sibling.wait()
    return {"kill": outcome, "sibling_status": sibling.returncode}


def h_sleep() -> dict:
    """Stay alive (for kill-the-parent tests); CONFIG["token"] is in this process's command line."""
    sys.stdout.write(json.dumps({"ready": True}) + "\n")
    sys.stdout.flush()
    time.sleep(1000)
    return {"ok": "woke"}


def h_wait_stdin() -> dict:
    """Answer one line per input line (so the test can check the sandbox is alive), until EOF."""
    for line in sys.stdin:
        sys.stdout.write(json.dumps({"echo": line.strip(), "pid": os.getpid()}) + "\n")
        sys.stdout.flush()
    return {"ok": "eof"}


def h_tty() -> dict:
    return a_tty()


def h_network() -> dict:
    return a_network()


def h_landlock() -> dict:
    """What the Landlock layer adds on top of the mount namespace (compare runs with landlock off / require)."""
    def bind_tcp() -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))

    ws = CONFIG["workspace"]
    return {
        "bind_tcp": oserror(bind_tcp),
        "list_root": oserror(lambda: sorted(os.listdir("/"))[:1]),
        "signal_init": oserror(lambda: os.kill(1, 0)),
        "read_etc": oserror(lambda: len(_read("/etc/passwd")) > 0),
        "write_workspace": oserror(lambda: _write(os.path.join(ws, "landlock.txt"), "ok")),
        "write_tmp": oserror(lambda: _write("/tmp/landlock.txt", "ok")),
        "exec_usr": {"ok": subprocess.run(["/usr/bin/true"], check=False).returncode},
    }


HEAVY = {name[2:]: fn for name, fn in globals().items() if name.startswith("h_")}


def main() -> None:
    global CONFIG
    mode = sys.argv[1]
    CONFIG = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    result = run_battery() if mode == "battery" else HEAVY[mode]()
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
