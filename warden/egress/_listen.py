"""The proxy's door into one sandbox: a listening socket on ``127.0.0.1:3128`` of the sandbox's own network
namespace, made by a short helper process (``_netns_listen.py``) and handed back over a socketpair.

Why this and not a unix socket bound into the sandbox with a bridge inside: nothing is added to the sandbox. The
workload keeps its seccomp rule against AF_UNIX sockets with no exception for a bridge, no host path is visible
to it, there is no in-sandbox process it could kill or take over, and no secret to leak, since nothing but the
sandbox's own namespace can reach the socket (it has no address on the host at all). Call it while the sandbox's
init still waits on its block fd: the namespace is then fresh and nothing hostile runs in it yet.
"""

from __future__ import annotations

import array
import os
import socket
import sys
from pathlib import Path

import trio

from warden.errors import SandboxUnavailable

_HELPER = Path(__file__).with_name("_netns_listen.py")
_TIMEOUT = 10.0


async def open_sandbox_listener(sandbox_pid: int, port: int) -> socket.socket:
    """A listening TCP socket on ``127.0.0.1:port`` inside the network namespace of process ``sandbox_pid``.

    Raises:
        SandboxUnavailable: the namespace cannot be entered or the port not bound (the launch must fail).
    """
    try:
        netns = os.open(f"/proc/{sandbox_pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise SandboxUnavailable(f"cannot open the sandbox's network namespace: {exc.strerror}",
                                 hint="run `warden doctor`") from exc
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with trio.move_on_after(_TIMEOUT):
            done = await trio.run_process(
                [sys.executable, "-I", "-S", str(_HELPER), str(netns), str(theirs.fileno()), str(port)],
                pass_fds=(netns, theirs.fileno()), capture_stderr=True, check=False, env={})
            theirs.close()
            if done.returncode != 0:
                message = done.stderr.decode("utf-8", "replace").strip().splitlines()
                raise SandboxUnavailable(message[-1] if message else "the egress listener helper failed",
                                         hint="egress needs setns into the sandbox's namespaces; run `warden doctor`")
            return _receive_listener(ours)
        raise SandboxUnavailable("the egress listener helper did not finish in time",
                                 hint="the system may be overloaded; try again")
    finally:
        os.close(netns)
        theirs.close()
        ours.close()


def _receive_listener(ours: socket.socket) -> socket.socket:
    fds = array.array("i")
    ours.setblocking(False)
    try:
        _, ancillary, _, _ = ours.recvmsg(1, socket.CMSG_SPACE(fds.itemsize))
    except BlockingIOError as exc:
        raise SandboxUnavailable("the egress listener helper sent no socket", hint="run `warden doctor`") from exc
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    if len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise SandboxUnavailable("the egress listener helper sent no socket", hint="run `warden doctor`")
    listener = socket.socket(fileno=fds[0])
    if listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) != 1:
        listener.close()
        raise SandboxUnavailable("the egress listener helper sent something else than a listening socket")
    return listener
