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
}
CLONE_NEWUSER = 0x10000000
CLONE_NEWNS = 0x00020000
TIOCSTI = 0x5412
TIOCLINUX = 0x541C


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
    blocks = []
    try:
        for _ in range(CONFIG.get("mem_cap_mb", 1024) // 16):
            blocks.append(bytearray(16 * 1024 * 1024))
    except MemoryError:
        return {"error": "MemoryError", "allocated_mb": 16 * len(blocks)}
    return {"error": None, "allocated_mb": 16 * len(blocks)}


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
