"""Where warden keeps its state and finds its config; :func:`within`, the one "path lies under" test; and
:func:`absolute_path`, the one check of a path written in a config, policy or profile file.

State (pins, keys, audit log) lives in one directory that no sandbox ever sees: ``--state-dir``, else
``$WARDEN_STATE_DIR``, else ``$XDG_STATE_HOME/warden``, else ``~/.local/state/warden``. The user config is
``--config``, else ``$WARDEN_CONFIG``, else ``$XDG_CONFIG_HOME/warden/warden.toml``, else
``~/.config/warden/warden.toml``. Resolution takes the environment as an argument so it can be tested without
touching ``os.environ``.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Mapping
from pathlib import Path

from warden.errors import StateError


def _home(env: Mapping[str, str]) -> Path:
    home = env.get("HOME")
    return Path(home) if home else Path.home()


def resolve_state_dir(explicit: str | None, env: Mapping[str, str]) -> Path:
    """Return the state directory path (not created); see the module docstring for the order."""
    if explicit:
        return Path(explicit).absolute()
    if env.get("WARDEN_STATE_DIR"):
        return Path(env["WARDEN_STATE_DIR"]).absolute()
    base = env.get("XDG_STATE_HOME") or str(_home(env) / ".local" / "state")
    return Path(base).absolute() / "warden"


def resolve_config_path(explicit: str | None, env: Mapping[str, str]) -> Path:
    """Return the user config path (which may not exist); see the module docstring for the order."""
    if explicit:
        return Path(explicit).absolute()
    if env.get("WARDEN_CONFIG"):
        return Path(env["WARDEN_CONFIG"]).absolute()
    base = env.get("XDG_CONFIG_HOME") or str(_home(env) / ".config")
    return Path(base).absolute() / "warden" / "warden.toml"


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) if needed and check it is a private directory of ours.

    A state directory that another user can write, or that we do not own, would let someone else forge an
    approval or rewrite the audit log, so it is refused rather than repaired: warden does not chmod a directory it
    did not create.

    Raises:
        StateError: the path is not a directory, is not owned by us, or is group/world accessible.
    """
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.lstat()
    except OSError as exc:
        raise StateError(f"cannot create state directory {path}: {exc.strerror}",
                         hint="pass --state-dir or set WARDEN_STATE_DIR to a writable directory") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise StateError(f"state path {path} is not a directory (symlinks are not followed)",
                         hint="point --state-dir at a real directory")
    if st.st_uid != os.geteuid():
        raise StateError(f"state directory {path} is owned by uid {st.st_uid}, not by us (uid {os.geteuid()})",
                         hint="use a state directory you own")
    if st.st_mode & 0o077:
        raise StateError(f"state directory {path} has mode {stat.S_IMODE(st.st_mode):04o}; it must be 0700",
                         hint=f"run: chmod 700 {path}")
    return path


def within(path: str, base: str) -> bool:
    """True when normalised absolute ``path`` is ``base`` or lies below it (component-wise, not by prefix)."""
    if base == "/":
        return path.startswith("/")
    base = base.rstrip("/")
    return path == base or path.startswith(base + "/")


def absolute_path(value: str) -> str:
    """Check a path written in a config, policy or sandbox profile, and return it normalized.

    It must be absolute, hold no NUL or newline, and have no ``..`` component: a reader of the file must see where
    it points without resolving anything. (Symlinks are still resolved, and checked, where the path is used.)

    Raises:
        ValueError: naming what is wrong (pydantic validators turn it into a ``file:line`` error).
    """
    if not value.startswith("/"):
        raise ValueError(f"{value!r} must be an absolute path")
    if "\0" in value or "\n" in value:
        raise ValueError(f"{value!r} contains a NUL or newline")
    if ".." in value.split("/"):
        raise ValueError(f"{value!r} must not contain '..'")
    return "/" + posixpath.normpath(value).lstrip("/")
