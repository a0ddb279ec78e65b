"""Isolation for upstream servers: bubblewrap and container launchers, limits, seccomp, ``doctor`` checks.

The proxy calls :func:`make_launcher` for every stdio upstream and gets a :class:`warden.launcher.Launcher`.
Nothing here falls back to a weaker sandbox: a missing piece raises :class:`warden.errors.SandboxUnavailable`
(or :class:`warden.errors.LaunchError` for a bad command or an unsafe policy), and the server does not start.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from warden.launcher import Launcher
from warden.sandbox._bwrap import BwrapChild, BwrapLauncher
from warden.sandbox._container import ContainerChild, ContainerLauncher
from warden.sandbox._none import UnsafeUnsandboxedLauncher
from warden.sandbox.settings import Limits, SandboxSettings

__all__ = [
    "BwrapChild",
    "BwrapLauncher",
    "ContainerChild",
    "ContainerLauncher",
    "Limits",
    "SandboxSettings",
    "UnsafeUnsandboxedLauncher",
    "make_launcher",
]


def make_launcher(settings: SandboxSettings, *, state_dir: Path,
                  host_env: Mapping[str, str] | None = None) -> Launcher:
    """The launcher for one server's ``settings``: bwrap (default), a container engine, or none.

    ``kind = "none"`` returns :class:`UnsafeUnsandboxedLauncher`; whether that is allowed is the
    policy layer's decision, made before this call. ``host_env`` (default: warden's environment) is where
    commands, ``npx``/``uvx`` installs, bwrap and the container engine are looked up; it never reaches the
    server, whose environment is ``LaunchSpec.env`` (passed exactly, through ``--args FD``) plus the sandbox's own
    ``PATH``, ``HOME`` and ``TMPDIR`` (which replace any the policy passes) and the profile's few variables
    (``LANG``, ``NODE_ENV`` / ``PYTHONDONTWRITEBYTECODE``).

    Call ``launch()`` from the trio thread that outlives the server: bwrap's ``--die-with-parent`` is tied to
    the forking thread (E12). ``Launcher.launch`` raises ``SandboxUnavailable`` (a piece is missing: bwrap,
    namespaces, seccomp, util-linux, the engine) or ``LaunchError`` (a bad command, an unsafe or broken policy
    path); nothing weaker is ever started instead.
    """
    if settings.kind == "none":
        return UnsafeUnsandboxedLauncher()
    if settings.kind == "container":
        return ContainerLauncher(settings, state_dir=state_dir, host_env=host_env)
    return BwrapLauncher(settings, state_dir=state_dir, host_env=host_env)
