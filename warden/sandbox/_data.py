"""Where the sandbox's data files live: the top-level ``sandbox/`` directory (profiles, seccomp rule list).

They are data, not code, so people can read and review what a profile binds and what the filter denies. In a
source checkout (and an editable install) the directory sits next to the ``warden`` package; an installed wheel
carries it under ``<prefix>/share/warden/sandbox``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from warden.errors import SandboxUnavailable


def data_dir() -> Path:
    """Return the directory holding ``seccomp.toml`` and ``profiles/``.

    Raises:
        SandboxUnavailable: neither location has the files (a broken install); nothing can be sandboxed.
    """
    candidates = (
        Path(__file__).resolve().parent.parent.parent / "sandbox",
        Path(sys.prefix) / "share" / "warden" / "sandbox",
    )
    for candidate in candidates:
        if (candidate / "seccomp.toml").is_file():
            return candidate
    raise SandboxUnavailable(
        "warden's sandbox data (seccomp.toml, profiles/) is missing; looked in "
        + ", ".join(str(c) for c in candidates),
        hint="reinstall warden (the sandbox/ directory ships with it)",
    )
