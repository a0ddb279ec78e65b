"""Isolation for upstream servers: bubblewrap and container launchers, limits, seccomp, ``doctor`` checks.

The proxy calls :func:`make_launcher` for every stdio upstream and gets a :class:`warden.launcher.Launcher`.
Nothing here falls back to a weaker sandbox: a missing piece raises :class:`warden.errors.SandboxUnavailable`
(or :class:`warden.errors.LaunchError` for a bad command or an unsafe policy), and the server does not start.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from warden.egress import SandboxEgress
from warden.errors import LaunchError
from warden.launcher import Launcher
from warden.policy import Limits, SandboxSettings
from warden.sandbox._bwrap import BwrapChild, BwrapLauncher
from warden.sandbox._cgroup import MemoryCgroups as _MemoryCgroups
from warden.sandbox._cgroup import find_memory_cgroups as _find_memory_cgroups
from warden.sandbox._container import ContainerChild, ContainerLauncher
from warden.sandbox._data import data_dir as _data_dir
from warden.sandbox._none import UnsafeUnsandboxedLauncher
from warden.sandbox._plan import check_dirs as _check_dirs
from warden.sandbox._plan import process_memory_mb as _process_memory_mb
from warden.sandbox._profiles import load_profiles as _load_profiles
from warden.sandbox._uids import SANDBOX_GID
from warden.sandbox._uids import check_writable_by_sandboxes as _check_writable_by_sandboxes
from warden.sandbox._uids import planned_user as _planned_user

__all__ = [
    "SANDBOX_GID",
    "BwrapChild",
    "BwrapLauncher",
    "ContainerChild",
    "ContainerLauncher",
    "Limits",
    "SandboxSettings",
    "UnsafeUnsandboxedLauncher",
    "check_sandbox_settings",
    "make_launcher",
    "manifest_notes",
]

PER_PROCESS_MEMORY: Final = (
    "memory_mb bounds each process of this sandbox, not the sandbox as a whole (no memory cgroup warden can use on "
    "this machine, see `warden doctor`); the tmpfs sizes are taken out of each process's budget")


def manifest_notes(sandbox_manifest: Mapping[str, Any]) -> tuple[str, ...]:
    """What someone reading the audit log must know about a launched sandbox: each limit of its policy that this
    machine enforces only in a weaker form (recorded with ``server.launched``; nothing weaker ever goes unsaid)."""
    if sandbox_manifest.get("kind") == "bwrap" and sandbox_manifest.get("memory_scope") == "process":
        return (PER_PROCESS_MEMORY,)
    return ()


def make_launcher(settings: SandboxSettings, *, state_dir: Path,
                  host_env: Mapping[str, str] | None = None, egress: SandboxEgress | None = None) -> Launcher:
    """The launcher for one server's ``settings``: bwrap (default), a container engine, or none.

    ``kind = "none"`` returns :class:`UnsafeUnsandboxedLauncher`; whether that is allowed is the
    policy layer's decision, made before this call. ``host_env`` (default: warden's environment) is where
    commands, bwrap and the container engine are looked up (``npx``/``uvx``/``pipx run`` packages come from warden's
    store in ``state_dir``, see :mod:`warden.intake`); it never reaches the
    server, whose environment is ``LaunchSpec.env`` (passed exactly, through ``--args FD``) plus the sandbox's own
    ``PATH``, ``HOME`` and ``TMPDIR`` (which replace any the policy passes) and the profile's few variables
    (``LANG``, ``NODE_ENV`` / ``PYTHONDONTWRITEBYTECODE``).

    Call ``launch()`` from the trio thread that outlives the server: bwrap's ``--die-with-parent`` is tied to
    the forking thread (E12). ``Launcher.launch`` raises ``SandboxUnavailable`` (a piece is missing: bwrap,
    namespaces, seccomp, util-linux, the engine) or ``LaunchError`` (a bad command, an unsafe or broken policy
    path); nothing weaker is ever started instead. ``egress`` (a network allow-list) is enforced by bwrap sandboxes
    only: any other kind with it raises ``LaunchError`` (the policy refuses that launch first).
    """
    if egress is not None and settings.kind != "bwrap":
        raise LaunchError(f"a network allow-list is enforced in bwrap sandboxes only, not kind {settings.kind!r}",
                          hint='use sandbox kind "bwrap", or remove network.allow')
    if settings.kind == "none":
        return UnsafeUnsandboxedLauncher()
    if settings.kind == "container":
        return ContainerLauncher(settings, state_dir=state_dir, host_env=host_env)
    return BwrapLauncher(settings, state_dir=state_dir, host_env=host_env, egress=egress)


def check_sandbox_settings(settings: SandboxSettings, *, state_dir: Path) -> None:
    """Apply, without launching anything, every check a launch makes of ``settings`` alone (no runtime, no
    package): the read and write dirs (the very function the sandbox plan calls) and, for bwrap, whether the tmpfs
    sizes leave a process any memory where this machine bounds memory per process only, and, when warden is root,
    whether the uid the sandbox would run as can own and write its write dirs (:mod:`._uids`). ``warden policy check``
    and ``warden import`` call this, so they refuse exactly what ``warden run`` refuses. A server with
    ``kind = "none"`` binds nothing, so nothing is checked.

    Raises:
        LaunchError: the first problem, naming the directory or limit and the fix.
        SandboxUnavailable: warden's sandbox profiles cannot be found.
    """
    if settings.kind == "none":
        return
    scratch = _load_profiles(_data_dir() / "profiles").base.scratch
    _check_dirs(settings, state_dir=str(state_dir), scratch_tmp=scratch.tmp, scratch_home=scratch.home)
    if settings.kind == "bwrap":
        per_process = not isinstance(_find_memory_cgroups(), _MemoryCgroups)
        _process_memory_mb(settings.limits, "process" if per_process else "sandbox")
        user = _planned_user(settings.write_dirs, privileged=os.geteuid() == 0)
        if user.mode == "dedicated-uid":
            _check_writable_by_sandboxes(settings.write_dirs)
