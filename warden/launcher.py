"""How an upstream server process is started: the ``Launcher`` interface.

The upstream code asks a launcher for a :class:`Child` and never cares how it was made; the sandbox issue plugs
bubblewrap and container launchers in behind this interface. A launcher also describes itself
(:meth:`Launcher.manifest`), because *how* a server runs (its sandbox profile) is part of its identity for pinning.

A launcher that relies on ``PR_SET_PDEATHSIG`` (bwrap's ``--die-with-parent``) must fork on the trio thread
itself: the signal is tied to the thread that forked, and ``trio.lowlevel.open_process`` forks in a worker thread
that exits when idle (E12). Every launcher in :mod:`warden.sandbox` forks with ``warden.sandbox._process.spawn``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, final

import trio

from warden.errors import LaunchError


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
    @property
    def stop_reason(self) -> str | None:
        """Why warden itself stopped the server (a limit it enforces, such as the write quota), else None."""
        ...

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
