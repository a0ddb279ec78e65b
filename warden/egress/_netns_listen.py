"""Open the proxy's listening socket inside a sandbox's network namespace, and hand it back to warden.

Run by :func:`warden.egress.open_sandbox_listener` as ``python -I -S _netns_listen.py NETNS_FD REPLY_FD PORT``,
stdlib only, single-threaded (``setns`` into a user namespace refuses a threaded caller). It joins the user
namespace that owns the sandbox's network namespace when that is not its own (warden as a normal user: bwrap's
user namespace, which the caller's uid owns), then the network namespace, binds ``127.0.0.1:PORT`` there, and
sends the listening socket over ``REPLY_FD`` (SCM_RIGHTS). The socket keeps its namespace when this process
exits: warden accepts the sandbox's connections on it from the host side, so no unix socket, bridge process or
route is ever added to the sandbox. Exit 0 on success; otherwise one line on stderr and exit 1.
"""

import ctypes
import fcntl
import os
import socket
import sys

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
NS_GET_USERNS = 0xB701


def _setns(fd: int, kind: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, kind) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def main() -> int:
    netns_fd, reply_fd, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    try:
        userns_fd = fcntl.ioctl(netns_fd, NS_GET_USERNS)
        own = os.stat("/proc/self/ns/user")
        theirs = os.fstat(userns_fd)
        if (own.st_dev, own.st_ino) != (theirs.st_dev, theirs.st_ino):
            _setns(userns_fd, CLONE_NEWUSER)
        os.close(userns_fd)
        _setns(netns_fd, CLONE_NEWNET)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", port))
        listener.listen(128)
        reply = socket.socket(fileno=reply_fd)
        reply.sendmsg([b"L"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, listener.fileno().to_bytes(4, sys.byteorder))])
    except OSError as exc:
        sys.stderr.write(f"cannot listen in the sandbox's network namespace: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
