"""Small file helpers for the audit log: private files, reads, the signing key (writes: :mod:`warden.durable`).

Every file is opened ``O_CLOEXEC`` (a sandboxed child must never inherit one) and created 0600 inside a 0700
directory.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final

from warden.audit._note import Ed25519Signer, NoteError, parse_skey
from warden.errors import StateError

__all__ = ["KEY_FILE", "load_signer", "open_private", "read_all", "read_private_text"]

#: Where the log's signing key lives, relative to the state dir: outside ``audit/``, so copying the log for a
#: forensic review never copies the key.
KEY_FILE: Final = Path("keys") / "audit-signing.key"
_OPEN_FLAGS: Final = os.O_CLOEXEC | os.O_NOFOLLOW


def open_private(path: Path, flags: int) -> int:
    """Open (creating 0600 if asked) without following symlinks, and refuse a file another user could touch."""
    fd = os.open(path, flags | _OPEN_FLAGS, 0o600)
    try:
        _check_private(path, os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_private(path: Path, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise StateError(f"{path} is not a regular file", hint="remove it; warden recreates its state files")
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise StateError(f"{path} has owner {st.st_uid} and mode {stat.S_IMODE(st.st_mode):04o}; "
                         f"it must be ours and 0600", hint=f"run: chmod 600 {path}")


def read_all(fd: int, offset: int, length: int) -> bytes:
    """Read exactly ``length`` bytes at ``offset`` (fewer only at end of file)."""
    chunks: list[bytes] = []
    while length > 0:
        chunk = os.pread(fd, min(length, 1 << 24), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        length -= len(chunk)
    return b"".join(chunks)


def read_private_text(path: Path, limit: int = 1 << 16) -> str:
    fd = open_private(path, os.O_RDONLY)
    try:
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise StateError(f"{path} is larger than {limit} bytes", hint="this is not a file warden wrote")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StateError(f"{path} is not UTF-8 text", hint="this is not a file warden wrote") from exc


def load_signer(path: Path) -> Ed25519Signer:
    """Read the log's Ed25519 signing key (``PRIVATE+KEY+…``), refusing a file others can read."""
    try:
        text = read_private_text(path)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise StateError(f"cannot read the audit signing key {path}: {exc.strerror}",
                         hint="check the state directory's permissions") from exc
    try:
        return parse_skey(text)
    except NoteError as exc:
        raise StateError(f"{path} is not a valid audit signing key: {exc}",
                         hint="restore the key from a backup; a new key needs a new log") from exc
