"""Where the HTTP endpoint's bearer token comes from: warden's state directory, or a file the operator names.

warden makes its own token with the operating system's CSPRNG (:func:`secrets.token_urlsafe`, 256 bits) and keeps
it in ``<state dir>/http/<host>_<port>.token``, mode 0600, written atomically (temp file, fsync, rename, fsync of
the directory). A later start on the same address reuses it, so a host configured once keeps working. The token
itself is never printed or logged: warden says *where* it is, and the user copies it into the host's config.

A ``--token-file`` is read, not written; like an SSH key it must not be readable by other users.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path
from typing import Final

from warden.durable import fsync_directory, write_new_file
from warden.errors import ConfigError, StateError
from warden.gateway.http_access import MIN_TOKEN_LENGTH, valid_token
from warden.paths import ensure_private_dir, private_problem

__all__ = ["MAX_TOKEN_FILE", "load_or_create_token", "read_token_file", "token_path"]

MAX_TOKEN_FILE: Final = 4096
"""A token file larger than this is not a token file."""


def token_path(state_dir: Path, host: str, port: int) -> Path:
    """Where warden keeps the token of the listener on ``host:port``."""
    safe = "".join(ch if ch.isalnum() or ch in ".-" else "_" for ch in host)
    return state_dir / "http" / f"{safe}_{port}.token"


def _read_private(path: Path, *, what: str, error: type[ConfigError] | type[StateError]) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror}", hint="check the path and its permissions") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{what} {path} is not a regular file", hint="point at a file holding only the token")
        problem = private_problem(st, mode=0o600)
        if problem is not None:
            raise error(f"{what} {path} {problem}: other users could read the token",
                        hint=f"use a token file you own, with mode 0600 (chmod 600 {path})")
        data = os.read(fd, MAX_TOKEN_FILE + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_TOKEN_FILE:
        raise error(f"{what} {path} is larger than {MAX_TOKEN_FILE} bytes", hint="the file must hold only the token")
    try:
        token = data.decode("ascii").strip()
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path} is not ASCII text", hint="the file must hold only the token") from exc
    if not valid_token(token):
        raise error(f"{what} {path} does not hold a usable bearer token",
                    hint=f"it must be at least {MIN_TOKEN_LENGTH} characters of A-Z a-z 0-9 - . _ ~ + / (then =)")
    return token


def read_token_file(path: Path) -> str:
    """The token in an operator-supplied ``--token-file``.

    Raises:
        ConfigError: unreadable, not ours, readable by group or others, too large, or not a usable token.
    """
    return _read_private(path, what="token file", error=ConfigError)


def load_or_create_token(state_dir: Path, host: str, port: int) -> tuple[str, Path]:
    """The token for ``host:port`` and the file it lives in: the existing one, else a new one.

    Raises:
        StateError: the state directory is unsafe, or an existing token file is (wrong owner or mode, not a
            token); warden does not repair a file it did not just create.
    """
    path = token_path(state_dir, host, port)
    ensure_private_dir(state_dir)
    ensure_private_dir(path.parent)
    if path.exists() or path.is_symlink():
        return _read_private(path, what="token file", error=StateError), path
    token = secrets.token_urlsafe(32)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    try:
        write_new_file(tmp, token.encode("ascii") + b"\n")
        os.link(tmp, path)  # never replaces a token another warden wrote in the meantime
    except FileExistsError:
        return _read_private(path, what="token file", error=StateError), path
    except OSError as exc:
        raise StateError(f"cannot write the HTTP token file {path}: {exc.strerror}",
                         hint="check that the state directory is writable") from exc
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    fsync_directory(path.parent)
    return token, path
