"""How an upstream server process is started: the ``Launcher`` interface.

The upstream code asks a launcher for a :class:`Child` and never cares how it was made; the sandbox issue plugs
bubblewrap and container launchers in behind this interface. A launcher also describes itself
(:meth:`Launcher.manifest`), because *how* a server runs (its sandbox profile) is part of its identity for pinning.

A launcher that relies on ``PR_SET_PDEATHSIG`` (bwrap's ``--die-with-parent``) must fork on the trio thread
itself: the signal is tied to the thread that forked, and ``trio.lowlevel.open_process`` forks in a worker thread
that exits when idle (E12). The sandbox launchers do; the unsandboxed launcher below has no death signal to lose.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, final

import trio

from warden.errors import LaunchError

log = logging.getLogger(__name__)


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchSpec:
    """What to run: argv, the environment to give it (already filtered by policy) and its working directory."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None

    def __post_init__(self) -> None:
        if not self.argv or not self.argv[0]:
            raise LaunchError("no command to launch", hint="give the server command after `--`")


class Child(Protocol):
    """A started server: its three pipes and a way to stop the whole thing (every process it made)."""

    @property
    def stdin(self) -> trio.abc.SendStream: ...
    @property
    def stdout(self) -> trio.abc.ReceiveStream: ...
    @property
    def stderr(self) -> trio.abc.ReceiveStream: ...
    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int:
        """Wait for the process to exit and return its exit status (negative: killed by that signal)."""
        ...

    def terminate(self) -> None:
        """Ask the server to stop (SIGTERM, or the launcher's equivalent for the whole sandbox)."""
        ...

    def kill(self) -> None:
        """Stop the server and everything it started, now; no survivors."""
        ...


class Launcher(Protocol):
    """Starts children. Implementations must fail closed: raise rather than start something weaker."""

    def manifest(self, spec: LaunchSpec) -> dict[str, Any]:
        """JSON-able description of how ``spec`` would be isolated (kind, profile, binds, limits, network).

        Deterministic for a given spec and machine: it is hashed into the server's identity, so a change in how a
        server is sandboxed makes it a new, unapproved server.
        """
        ...

    async def launch(self, spec: LaunchSpec) -> Child:
        """Start ``spec`` and return the child, or raise :class:`LaunchError` / ``SandboxUnavailable``."""
        ...


@final
class ProcessChild:
    """Adapts a ``trio.Process`` started in its own session (so a signal reaches its whole process group)."""

    def __init__(self, process: trio.Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        assert process.stderr is not None
        self._process = process
        self._stdin = process.stdin
        self._stdout = process.stdout
        self._stderr = process.stderr

    @property
    def stdin(self) -> trio.abc.SendStream:
        return self._stdin

    @property
    def stdout(self) -> trio.abc.ReceiveStream:
        return self._stdout

    @property
    def stderr(self) -> trio.abc.ReceiveStream:
        return self._stderr

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    async def wait(self) -> int:
        return await self._process.wait()

    def _signal_group(self, sig: signal.Signals) -> None:
        if self._process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, sig)

    def terminate(self) -> None:
        self._signal_group(signal.SIGTERM)

    def kill(self) -> None:
        self._signal_group(signal.SIGKILL)


async def open_child(argv: list[str], *, env: Mapping[str, str], cwd: str | None,
                     pass_fds: tuple[int, ...] = ()) -> trio.Process:
    """Start ``argv`` with three pipes in a new session (forked in one of trio's worker threads).

    Raises:
        LaunchError: the executable is missing or cannot be run.
    """
    try:
        return await trio.lowlevel.open_process(
            argv, stdin=-1, stdout=-1, stderr=-1, env=dict(env), cwd=cwd,
            start_new_session=True, pass_fds=pass_fds, close_fds=True,
        )
    except OSError as exc:
        raise LaunchError(f"cannot start {argv[0]!r}: {exc.strerror or exc}",
                          hint="check the command path and that it is executable") from exc


@final
class UnsafeUnsandboxedLauncher:
    """Runs the server as a plain child process with warden's own rights. No isolation at all.

    Only for servers whose policy says ``sandbox = "none"`` (and an org policy that allows it), and for tests that
    measure a bare baseline. Every launch logs a warning.
    """

    def manifest(self, spec: LaunchSpec) -> dict[str, Any]:
        return {"kind": "none"}

    async def launch(self, spec: LaunchSpec) -> Child:
        log.warning("starting %s WITHOUT a sandbox (policy: sandbox = \"none\")", spec.argv[0])
        process = await open_child(list(spec.argv), env=spec.env, cwd=spec.cwd)
        return ProcessChild(process)
