"""No executable memfds in a sandbox (issue 11 item 6): ``vm.memfd_noexec = 2`` in the sandbox's PID namespace.

Why: ``memfd_create`` + ``execve("/proc/self/fd/N")`` (or ``execveat(fd, "", AT_EMPTY_PATH)``) runs code that lies
on no mounted file system. Nothing path-based sees it: not the mount namespace, not Landlock (memfds are outside
every hierarchy a ruleset names; checked on this kernel with an exec-only ruleset on ``/``). The kernel's own
answer is ``vm.memfd_noexec``, kept per PID namespace (Linux 6.3+): at 2 every memfd is created sealed
non-executable (``MFD_NOEXEC_SEAL``) and ``MFD_EXEC`` is refused with EACCES, for that namespace and the ones it
creates, and a namespace can never lower it below its parent's. Programs that use memfds for data (shared memory,
sealed buffers) keep working.

Who can set it: the sysctl takes writes only from global root with ``CAP_SYS_ADMIN`` over the namespace, and
applies to the writer's own PID namespace. So a root warden enters the sandbox's PID namespace with ``nsenter``
while bwrap holds the sandbox at ``--block-fd`` (after setup, before the server), writes 2, and reads it back. An
unprivileged warden cannot: its seccomp filter refuses every ``memfd_create`` without ``MFD_NOEXEC_SEAL`` instead
(rule ``no_memfd_noexec`` in ``sandbox/seccomp.toml``), which is stricter for programs that do not ask for the
seal themselves, and closes the same hole.
"""

from __future__ import annotations

import errno
import os
import signal

import trio

from warden.errors import SandboxUnavailable
from warden.sandbox._host import executable
from warden.sandbox._process import last_line, spawn

__all__ = ["NSENTER", "SYSCTL", "can_seal", "data_memfd", "seal_memfds"]

NSENTER = "/usr/bin/nsenter"
SYSCTL = "/proc/sys/vm/memfd_noexec"
_TIMEOUT = 10.0
# Shell builtins only: a `cat` would be one more fork and exec (3-6 ms on a loaded machine) while the sandbox waits.
# dash reads the file a byte at a time and the sysctl ends at the second read, so `read` sees no newline and
# fails; the value it read is echoed all the same, and checked by the caller.
_SCRIPT = f'echo 2 > {SYSCTL} && {{ read -r value < {SYSCTL}; echo "$value"; }}'
_MFD_NOEXEC_SEAL = 0x0008  # linux/memfd.h (Linux 6.3+); os has no name for it before Python 3.12


def data_memfd(name: str) -> int:
    """A close-on-exec memfd for data warden hands a process by fd (a filter, arguments, a file's content),
    sealed non-executable where the kernel can: the same rule warden's sandboxes follow (a warden running inside
    one of them must be able to make its own)."""
    try:
        return os.memfd_create(name, os.MFD_CLOEXEC | _MFD_NOEXEC_SEAL)
    except OSError as exc:
        if exc.errno != errno.EINVAL:  # EINVAL: a kernel before 6.3, which has no such seal
            raise
    return os.memfd_create(name, os.MFD_CLOEXEC)


def can_seal(*, privileged: bool) -> bool:
    """True when warden can set ``vm.memfd_noexec = 2`` in its sandboxes' PID namespaces (root, Linux 6.3+,
    util-linux's nsenter); otherwise the seccomp filter does the job (see the module docstring)."""
    return privileged and os.path.exists(SYSCTL) and executable(NSENTER)


async def seal_memfds(init_pid: int) -> None:
    """Set ``vm.memfd_noexec = 2`` in the PID namespace of the sandbox whose init is ``init_pid`` and check it.

    The sandbox must not run anything yet (bwrap waits on its block fd): nsenter's child joins its namespace for the
    one write. Call from the trio thread (the helper is started with :func:`~warden.sandbox._process.spawn`).

    Raises:
        SandboxUnavailable: the value could not be set or does not read back as 2; the sandbox must not start.
    """
    process = spawn([NSENTER, f"--target={init_pid}", "--pid", "--", "/bin/sh", "-c", _SCRIPT], env={})
    out = bytearray()
    err = bytearray()

    async def drain(stream: trio.abc.ReceiveStream, sink: bytearray) -> None:
        while len(sink) < 4096 and (chunk := await stream.receive_some(4096)):
            sink += chunk

    await process.stdin.aclose()
    with trio.move_on_after(_TIMEOUT) as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain, process.stdout, out)
            nursery.start_soon(drain, process.stderr, err)
        code = await process.wait()
    if scope.cancelled_caught:
        process.send_signal(signal.SIGKILL)
        code = await process.wait()
    for stream in (process.stdout, process.stderr):
        await stream.aclose()
    if code != 0 or out.strip() != b"2":
        detail = last_line(bytes(err)) or f"exit status {code}, read back {bytes(out).strip()[:20]!r}"
        raise SandboxUnavailable(f"cannot make memfds non-executable in the sandbox (vm.memfd_noexec = 2 in its "
                                 f"PID namespace): {detail}", hint="run `warden doctor`")
