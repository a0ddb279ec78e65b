"""Small file helpers for the audit log: private files, full writes, atomic replace, the signing key.

Every file is opened ``O_CLOEXEC`` (a sandboxed child must never inherit one) and created 0600 inside a 0700
directory. Atomic replace is the Tessera/PostgreSQL sequence: write a temporary file, fsync it, rename it over the
target, fsync the directory; a crash at any point leaves either the old or the new file, never a mix.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Final

from warden.audit._note import Ed25519Signer, NoteError, parse_skey
from warden.errors import StateError

__all__ = [
    "KEY_FILE",
    "fsync_dir",
    "open_private",
    "pwrite_all",
    "read_all",
    "read_private_text",
    "replace_file",
    "write_new_file",
]

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


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset``; a short write is retried, a zero-length one is an error (ENOSPC)."""
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        if n <= 0:  # pragma: no cover - the kernel reports ENOSPC/EIO as an OSError instead
            raise OSError(28, "short write")
        view = view[n:]
        offset += n


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


def fsync_dir(dir_fd: int) -> None:
    os.fsync(dir_fd)


def replace_file(dir_fd: int, name: str, data: bytes) -> None:
    """Atomically replace ``name`` (in the directory ``dir_fd``) with ``data`` and make that durable.

    The temporary name is fixed: callers hold the log lock, so a leftover from a crashed writer is removed first.
    """
    tmp = name + ".tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp, dir_fd=dir_fd)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
    try:
        pwrite_all(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    os.fsync(dir_fd)


def write_new_file(path: Path, data: bytes) -> None:
    """Create ``path`` exclusively (0600), write, fsync it and its directory. Fails if it exists."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN_FLAGS, 0o600)
    try:
        pwrite_all(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


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
