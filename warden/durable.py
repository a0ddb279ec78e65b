"""Durable private files: full writes, atomic replace, exclusive create.

Every file is opened ``O_CLOEXEC | O_NOFOLLOW`` (a sandboxed child must never inherit one, and a planted symlink
is never followed) and created 0600. Atomic replace is the Tessera/PostgreSQL sequence: write a temporary file,
fsync it, rename it over the target, fsync the directory; a crash at any point leaves either the old or the new
file, never a mix. The audit log, the pin store and the HTTP token all write through these.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Final

__all__ = ["fsync_directory", "pwrite_all", "replace_file", "write_new_file"]

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


def write_new_file(path: Path, data: bytes) -> None:
    """Create ``path`` exclusively (0600), write, fsync it and its directory. Fails if it exists."""
    fd = os.open(path, _CREATE, 0o600)
    try:
        pwrite_all(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_directory(path.parent)
