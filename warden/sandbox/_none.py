"""``sandbox = "none"``: the server as a plain child process with warden's own rights. No isolation at all.

Only for servers whose policy says so (and an org policy that allows it), and for tests that measure a bare
baseline. It is started like every sandboxed server (:func:`~warden.sandbox._process.spawn`, in its own session)
so that stopping it reaches every process it made.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from typing import Any, final

from warden.launcher import Child, LaunchSpec
from warden.sandbox._process import PipedChild, spawn

log = logging.getLogger(__name__)


@final
class UnsandboxedChild(PipedChild):
    """A plain child in its own session: a signal goes to its whole process group."""

    async def wait(self) -> int:
        return await self._process.wait()

    def terminate(self) -> None:
        self._signal_group(signal.SIGTERM)

    def kill(self) -> None:
        self._signal_group(signal.SIGKILL)

    def _signal_group(self, sig: signal.Signals) -> None:
        if self._process.returncode is not None:
            return  # reaped: the pid may belong to someone else now
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, sig)


@final
class UnsafeUnsandboxedLauncher:
    """Runs the server without a sandbox; every launch logs a warning."""

    def manifest(self, spec: LaunchSpec) -> dict[str, Any]:
        return {"kind": "none"}

    async def launch(self, spec: LaunchSpec) -> Child:
        log.warning("starting %s WITHOUT a sandbox (policy: sandbox = \"none\")", spec.argv[0])
        process = spawn(spec.argv, env=spec.env, cwd=spec.cwd)
        return UnsandboxedChild(process, process.stderr)
