"""Durable private files: full writes, atomic replace, exclusive create, and the lock a read-modify-write holds.

Every file is opened ``O_CLOEXEC | O_NOFOLLOW`` (a sandboxed child must never inherit one, and a planted symlink
is never followed) and created 0600. Atomic replace is the Tessera/PostgreSQL sequence: write a temporary file,
fsync it, rename it over the target, fsync the directory; a crash at any point leaves either the old or the new
file, never a mix. The audit log, the pin store and the HTTP token all write through these.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from warden.errors import StateError

__all__ = ["exclusive_lock", "fsync_directory", "pwrite_all", "replace_file", "replace_path", "write_new_file"]

_CREATE: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset``; a short write is retried, a zero-length one is an error (ENOSPC)."""
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        if n <= 0:  # pragma: no cover - the kernel reports ENOSPC/EIO as an OSError instead
            raise OSError(28, "short write")
        view = view[n:]
        offset += n


def fsync_directory(path: Path) -> None:
    """Make the entries of directory ``path`` (a create, rename or link in it) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(dir_fd: int, name: str, data: bytes) -> None:
    """Atomically replace ``name`` (in the directory ``dir_fd``) with ``data`` and make that durable.

    The temporary name is fixed: callers hold a lock on the directory's state, so a leftover from a crashed
    writer is removed first.
    """
    tmp = name + ".tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp, dir_fd=dir_fd)
    fd = os.open(tmp, _CREATE, 0o600, dir_fd=dir_fd)
    try:
        pwrite_all(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    os.fsync(dir_fd)


def replace_path(path: Path, data: bytes) -> None:
    """:func:`replace_file` for ``path`` (its directory opened for the call): the same lock rule applies.

    Raises:
        OSError: the write failed; the old file, if any, is intact.
    """
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        replace_file(dir_fd, path.name, data)
    finally:
        os.close(dir_fd)


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the lock file ``path`` (created 0600, never through a symlink) for a
    read-modify-write of the state beside it; closing the descriptor releases it, even if the holder dies.

    Raises:
        StateError: the lock file cannot be opened.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise StateError(f"cannot open {path}: {exc.strerror}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_new_file(path: Path, data: bytes) -> None:
    """Create ``path`` exclusively (0600), write, fsync it and its directory. Fails if it exists."""
    fd = os.open(path, _CREATE, 0o600)
    try:
        pwrite_all(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_directory(path.parent)
