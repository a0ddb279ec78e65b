"""Landlock exec shim: runs INSIDE the sandbox (``/usr/bin/python3 -I -S``), restricts itself, then execs the rest.

Usage: landlock.py RULES_JSON -- PROGRAM ARGS...
RULES_JSON: {"read": [paths], "write": [paths], "devices": [paths]}

A second, kernel-enforced allow-list on top of the mount namespace (sandbox-and-audit.md B.5, B.7): file access
only beneath the listed paths, no TCP bind/connect at all (ABI >= 4), and no abstract unix sockets or signals
outside the sandbox's own Landlock domain (ABI >= 6). Standard library only, no warden imports: it runs under
the system interpreter inside the sandbox, and it is copied in by bwrap from a file descriptor. Any failure is
fatal (exit 126) so the ready marker never appears and warden refuses the launch.
"""

import ctypes
import json
import os
import struct
import sys

_CREATE, _ADD_RULE, _RESTRICT = 444, 445, 446
_PATH_BENEATH = 1
FS = {"execute": 1 << 0, "write_file": 1 << 1, "read_file": 1 << 2, "read_dir": 1 << 3, "remove_dir": 1 << 4,
      "remove_file": 1 << 5, "make_char": 1 << 6, "make_dir": 1 << 7, "make_reg": 1 << 8, "make_sock": 1 << 9,
      "make_fifo": 1 << 10, "make_block": 1 << 11, "make_sym": 1 << 12, "refer": 1 << 13, "truncate": 1 << 14,
      "ioctl_dev": 1 << 15}
FILE_RIGHTS = FS["execute"] | FS["write_file"] | FS["read_file"] | FS["truncate"] | FS["ioctl_dev"]
NET_BIND_TCP, NET_CONNECT_TCP = 1, 2
SCOPE_ABSTRACT_UNIX, SCOPE_SIGNAL = 1, 2

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def die(message: str) -> None:
    sys.stderr.write(f"warden landlock shim: {message}\n")
    sys.stderr.flush()
    os._exit(126)


def handled_for(abi: int) -> int:
    handled = (1 << 13) - 1
    if abi >= 2:
        handled |= FS["refer"]
    if abi >= 3:
        handled |= FS["truncate"]
    if abi >= 5:
        handled |= FS["ioctl_dev"]
    return handled


def main() -> None:
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        die("usage: landlock.py RULES_JSON -- PROGRAM ARGS...")
    rules = json.loads(sys.argv[1])
    argv = sys.argv[3:]
    abi = libc.syscall(ctypes.c_long(_CREATE), None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 1:
        die(f"Landlock is not available (errno {ctypes.get_errno()})")
    handled = handled_for(abi)
    attr = struct.pack("=Q", handled)
    if abi >= 4:
        attr += struct.pack("=Q", NET_BIND_TCP | NET_CONNECT_TCP)
    if abi >= 6:
        attr += struct.pack("=Q", SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL)
    buffer = ctypes.create_string_buffer(attr, len(attr))
    ruleset = libc.syscall(ctypes.c_long(_CREATE), buffer, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        die(f"landlock_create_ruleset failed (errno {ctypes.get_errno()})")
    read = FS["execute"] | FS["read_file"] | FS["read_dir"]
    device = read | FS["write_file"] | (FS["ioctl_dev"] & handled)
    for group, access in (("read", read), ("devices", device), ("write", handled)):
        for path in rules.get(group, []):
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # not in this sandbox (an optional /etc file): nothing to allow
            allowed = access & handled
            if not os.path.isdir(path):
                allowed &= FILE_RIGHTS
            rule = ctypes.create_string_buffer(struct.pack("=Qi", allowed, fd), 12)
            if libc.syscall(ctypes.c_long(_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(_PATH_BENEATH), rule,
                            ctypes.c_uint32(0)) < 0:
                die(f"landlock_add_rule({path}) failed (errno {ctypes.get_errno()})")
            os.close(fd)
    if libc.prctl(ctypes.c_int(38), ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0),
                  ctypes.c_ulong(0)) != 0:  # PR_SET_NO_NEW_PRIVS (bwrap set it already)
        die("prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.syscall(ctypes.c_long(_RESTRICT), ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
        die(f"landlock_restrict_self failed (errno {ctypes.get_errno()})")
    os.close(ruleset)
    try:
        os.execv(argv[0], argv)  # noqa: S606 - an exec shim: replacing itself is its job
    except OSError as exc:
        die(f"cannot exec {argv[0]}: {exc.strerror}")


if __name__ == "__main__":
    main()
