"""Where warden keeps its state and finds its config; :func:`within`, the one "path lies under" test; and
:func:`absolute_path`, the one check of a path written in a config, policy or profile file.

State (pins, keys, audit log) lives in one directory that no sandbox ever sees: ``--state-dir``, else
``$WARDEN_STATE_DIR``, else ``$XDG_STATE_HOME/warden``, else ``~/.local/state/warden``. The user config is
``--config``, else ``$WARDEN_CONFIG``, else ``$XDG_CONFIG_HOME/warden/warden.toml``, else
``~/.config/warden/warden.toml``. Resolution takes the environment as an argument so it can be tested without
touching ``os.environ``. :func:`read_once` keeps what is read from files that rarely change while they stay so.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from warden.errors import StateError

_T = TypeVar("_T")


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
    problem = private_problem(st, mode=0o700)
    if problem is not None:
        raise StateError(f"state directory {path} {problem}",
                         hint=f"use a state directory you own, with mode 0700 (chmod 700 {path})")
    return path


def private_problem(st: os.stat_result, *, mode: int) -> str | None:
    """Why a file or directory holding warden's secrets (state dir, keys, tokens, pins) is not private to this
    user — another owner, or any group or other permission bit — or None when it is. ``mode`` is what it must be
    (0o700 for a directory, 0o600 for a file), for the message."""
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not by us (uid {os.geteuid()})"
    if st.st_mode & 0o077:
        return f"has mode {stat.S_IMODE(st.st_mode):04o}; it must be {mode:04o}"
    return None


def file_version(path: str | Path) -> tuple[int, int, int, int] | None:
    """What changes whenever a file's content may have: its device, inode, size and mtime (None when it cannot be
    stat-ed). For memoizing what is read or run from a file: a replaced or edited file is read again."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def read_once(cache: dict[tuple[object, ...], _T], files: Sequence[str | Path], read: Callable[[], _T]) -> _T:
    """``read()``, kept in ``cache`` while each of ``files`` stays as it is (:func:`file_version`): data a
    process reads from files that rarely change (the sandbox profiles), one copy for every caller. A file that
    cannot be stat-ed is read every time, so its reader says what is wrong; ``cache`` holds a few entries."""
    key = tuple((str(f), file_version(f)) for f in files)
    if any(version is None for _, version in key):
        return read()
    if key not in cache:
        if len(cache) >= 8:
            cache.clear()
        cache[key] = read()
    return cache[key]


def store_dir(state_dir: Path) -> Path:
    """warden's package store inside ``state_dir`` (see ``warden.intake._store``): the one part of the state
    directory a sandbox may see, one entry at a time and read-only."""
    return state_dir / "store"


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


def read_private_file(path: Path, max_bytes: int, *, what: str = "file") -> bytes | None:
    """Read a file warden keeps in its state directory, or None when it does not exist.

    It must be a regular file (a symlink is not followed), owned by us, with no group or other access, and at most
    ``max_bytes`` long: anything else means someone else wrote or could read it, and is refused, never repaired.

    Raises:
        StateError: naming the file, what is wrong with it and what to check.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StateError(f"{what} {path} is a symlink; refusing it", hint="check who replaced it") from exc
        raise StateError(f"cannot open {what} {path}: {exc.strerror}") from exc
    st = os.fstat(fd)  # checked on the descriptor: a file object cannot even be made of a directory
    if not stat.S_ISREG(st.st_mode) or private_problem(st, mode=0o600) is not None:
        os.close(fd)
        raise StateError(f"{what} {path} is not a private regular file of ours (mode "
                         f"{stat.S_IMODE(st.st_mode):04o}, uid {st.st_uid}); refusing it",
                         hint=f"check who changed it; then chmod 600 {path}")
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise StateError(f"{what} {path} is larger than {max_bytes} bytes; refusing it")
    return data
