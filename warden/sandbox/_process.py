"""Start a child process on the trio thread itself, with three pipes and a pidfd.

Why not ``trio.lowlevel.open_process``: it forks from a trio worker thread, and a worker thread exits after ten
idle seconds. ``PR_SET_PDEATHSIG``, which ``bwrap --die-with-parent`` relies on, fires when the *thread* that
forked dies (E12): a sandbox started that way is SIGKILLed about ten seconds after the last thread job. So the
fork happens here, synchronously, on the calling thread (a few hundred microseconds: ``subprocess`` uses
vfork), and waiting uses a pidfd watched by trio. Call :func:`spawn` only from the thread that runs trio.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from typing import final

import trio

from warden.errors import LaunchError


@final
class SpawnedProcess:
    """A started child: its pipes as trio streams, its pid, and a race-free way to signal and reap it."""

    def __init__(self, popen: subprocess.Popen[bytes], pidfd: int, stdin: trio.lowlevel.FdStream,
                 stdout: trio.lowlevel.FdStream, stderr: trio.lowlevel.FdStream) -> None:
        self._popen = popen
        self._pidfd: int | None = pidfd
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    async def wait(self) -> int:
        """Wait until the process exits, reap it and return its status (negative: killed by that signal)."""
        if self._popen.returncode is None and self._pidfd is not None:
            await trio.lowlevel.wait_readable(self._pidfd)
        code = self._popen.wait()
        self._close_pidfd()
        return code

    def send_signal(self, sig: signal.Signals) -> None:
        """Signal the process through its pidfd (never a recycled pid); a no-op once it has been reaped."""
        if self._pidfd is None or self._popen.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._pidfd, sig)

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            trio.lowlevel.notify_closing(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None


def spawn(argv: Sequence[str], *, env: Mapping[str, str], cwd: str | None = None,
          pass_fds: Sequence[int] = (), umask: int = -1, executable: str | None = None) -> SpawnedProcess:
    """Fork and exec ``argv`` on this thread in a new session, stdin/stdout/stderr piped, only ``pass_fds`` kept.

    ``executable`` runs that file with ``argv`` as its command line (``argv[0]`` then need not be its path: a
    sandbox's init shows ``bwrap``, not where warden's bwrap lives on the host).

    Raises:
        LaunchError: the executable cannot be started.
    """
    pipes: list[int] = []
    try:
        in_r, in_w = os.pipe2(os.O_CLOEXEC)
        pipes += [in_r, in_w]
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        pipes += [out_r, out_w]
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        pipes += [err_r, err_w]
        popen = subprocess.Popen(
            list(argv), stdin=in_r, stdout=out_w, stderr=err_w, env=dict(env), cwd=cwd,
            start_new_session=True, close_fds=True, pass_fds=tuple(pass_fds), umask=umask, executable=executable)
    except OSError as exc:
        for fd in pipes:
            os.close(fd)
        raise LaunchError(f"cannot start {(executable or argv[0])!r}: {exc.strerror or exc}",
                          hint="check that the program exists and is executable") from exc
    for fd in (in_r, out_w, err_w):
        os.close(fd)
    try:
        pidfd = os.pidfd_open(popen.pid)
    except OSError as exc:  # pragma: no cover - pidfd_open exists on every kernel warden supports (5.3+)
        popen.kill()
        popen.wait()
        raise LaunchError(f"pidfd_open failed: {exc.strerror}", hint="warden needs Linux 5.3 or later") from exc
    return SpawnedProcess(popen, pidfd, trio.lowlevel.FdStream(in_w), trio.lowlevel.FdStream(out_r),
                          trio.lowlevel.FdStream(err_r))


# Written to stderr by the last shim inside a sandbox, right before it execs the server: everything before it
# (bwrap's setup, the seccomp filter, prlimit, setpriv) has succeeded. Record separators make it unmistakable.
READY_MARKER = b"\x1ewarden-sandbox-ready\x1e"
READY_SHIM = ("/bin/sh", "-c", "printf '\\036warden-sandbox-ready\\036' >&2 && exec \"$@\"", "warden-ready")
#: Prefix under which the server's own variables travel through the shims before :data:`READY_SHIM` (see
#: :func:`ready_shim`). ``WARDEN_`` names are never passed to a server, so none can collide.
HELD_ENV_PREFIX = "WARDEN_HELD_"


def ready_shim(held: Sequence[str] = ()) -> tuple[str, ...]:
    """:data:`READY_SHIM`, restoring first each of ``held`` (shell names) from its :data:`HELD_ENV_PREFIX` copy.

    The shims before it (prlimit; setpriv, which runs as root with CAP_SETUID when warden is root; the Landlock
    shim) must not see the server's variables: ``LD_PRELOAD``, ``LD_AUDIT``, ``GCONV_PATH``, ``LOCPATH`` and the
    like make the dynamic loader and libc run code or parse files of the server's choosing inside them, before
    the uid drop, the rlimits and Landlock are in place. So the server's variables reach the sandbox under the
    prefix and this last shim, which runs as the server's uid with every limit set, puts them back and removes
    the copies right before it execs the server. Only names go into its script, never values.
    """
    if not held:
        return READY_SHIM
    restore = " ".join(f'{name}="${HELD_ENV_PREFIX}{name}"' for name in held)
    copies = " ".join(HELD_ENV_PREFIX + name for name in held)
    script = (f"export {restore} && unset {copies} && printf '\\036warden-sandbox-ready\\036' >&2 && "
              'exec "$@"')
    return ("/bin/sh", "-c", script, "warden-ready")
_MAX_PREAMBLE = 64 * 1024


class PipedChild:
    """What every child from :func:`spawn` shares: its pipes (a sandbox's stderr after the launcher's setup
    preamble) and its exit status. Launchers add how to stop the whole thing (``terminate``, ``kill``, ``wait``)."""

    def __init__(self, process: SpawnedProcess, stderr: trio.abc.ReceiveStream) -> None:
        self._process = process
        self._stderr = stderr
        self._stop_reason: str | None = None

    @property
    def stop_reason(self) -> str | None:
        """Why warden stopped the server (set by a launcher that enforces a limit), else None."""
        return self._stop_reason

    @property
    def stdin(self) -> trio.abc.SendStream:
        return self._process.stdin

    @property
    def stdout(self) -> trio.abc.ReceiveStream:
        return self._process.stdout

    @property
    def stderr(self) -> trio.abc.ReceiveStream:
        return self._stderr

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.returncode


@final
class PrefixedReceiveStream(trio.abc.ReceiveStream):
    """A receive stream that first yields ``prefix`` (bytes already read past the ready marker)."""

    def __init__(self, prefix: bytes, stream: trio.abc.ReceiveStream) -> None:
        self._prefix = prefix
        self._stream = stream

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._prefix:
            await trio.lowlevel.checkpoint()
            size = len(self._prefix) if max_bytes is None else max_bytes
            chunk, self._prefix = self._prefix[:size], self._prefix[size:]
            return chunk
        return bytes(await self._stream.receive_some(max_bytes))

    async def aclose(self) -> None:
        self._prefix = b""
        await self._stream.aclose()

    def close(self) -> None:
        self._prefix = b""
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()


async def wait_ready(stream: trio.abc.ReceiveStream, timeout: float) -> tuple[bool, bytes, bytes]:
    """Read ``stream`` (a sandbox's stderr) until :data:`READY_MARKER`, EOF or ``timeout`` seconds.

    Returns (ready, what came before the marker, what came after it in the same reads). Never reads more than
    64 KiB before giving up: a setup that chatters that much has failed.
    """
    buffer = b""
    with trio.move_on_after(timeout):
        while len(buffer) < _MAX_PREAMBLE:
            index = buffer.find(READY_MARKER)
            if index >= 0:
                return True, buffer[:index], buffer[index + len(READY_MARKER):]
            chunk = await stream.receive_some(_MAX_PREAMBLE)
            if not chunk:
                break
            buffer += chunk
    index = buffer.find(READY_MARKER)
    if index >= 0:
        return True, buffer[:index], buffer[index + len(READY_MARKER):]
    return False, buffer, b""


def last_line(text: bytes) -> str:
    """The last non-empty line of ``text``, decoded leniently: the part of a tool's stderr that names the error."""
    lines = [line.strip() for line in text.decode("utf-8", "replace").splitlines() if line.strip()]
    return lines[-1] if lines else ""
