"""The audit log's disk reserve (issue 11 item 5): a full disk pauses warden, with a record saying why, instead
of silencing the log.

Without it, the first append that meets ``ENOSPC`` fails the log for good (``AuditLogFailed``): every later call
is refused, but the log never says that the disk filled up, and a server that can write to the same file system
(its write dirs) could pick the moment. So the log keeps :data:`ENTRIES_RESERVE` bytes of ``entries.log`` and
:data:`HASHES_RESERVE` bytes of ``hashes.bin`` allocated beyond their ends (``fallocate`` with
``FALLOC_FL_KEEP_SIZE``: real blocks, invisible in the file size, so the format and recovery are unchanged), and
tops them up before each batch. When the top-up fails for lack of space, the batch is not written; instead one
``audit.paused`` record goes into the reserve (blocks already allocated: no write can fail for space), and every
later batch is refused with :class:`~warden.audit._errors.AuditDiskFull` (the gateway refuses the call with that
message) until the disk has a whole reserve free again (:data:`RESUME_FREE`) and the top-up succeeds; then
``audit.resumed`` is appended and batches flow again. Nothing is lost that was acknowledged:
a paused batch was never acknowledged, and the refusal itself is the caller's answer.

Checkpoints: ``checkpoints.log`` keeps a reserve of its own (:data:`NOTES_RESERVE`); when it cannot be topped up,
the checkpoint is simply published later (records stay durable without one). Publishing also replaces the small
``state`` and ``checkpoint`` copies; if that meets a full disk they lag behind ``checkpoints.log`` (recovery and
the next publication catch them up) instead of failing the log. Nothing is published while paused.
A file system without ``fallocate`` (some network and FUSE ones) cannot hold a reserve: the log works as before
(a full disk fails it for good) and ``warden doctor`` says so.
"""

from __future__ import annotations

import ctypes
import errno
import os
from typing import Final, final

__all__ = ["ENTRIES_RESERVE", "HASHES_RESERVE", "NOTES_RESERVE", "RESUME_FREE", "DiskReserve",
           "fallocate_supported", "out_of_space"]

ENTRIES_RESERVE: Final = 1024 * 1024  # a paused notice is a few hundred bytes; room for many, and for recovery notes
HASHES_RESERVE: Final = 64 * 1024
NOTES_RESERVE: Final = 64 * 1024  # a signed checkpoint frame is about 300 bytes
#: Free space the disk must have again before a paused log resumes: a whole reserve.
RESUME_FREE: Final = ENTRIES_RESERVE + HASHES_RESERVE + NOTES_RESERVE
_FALLOC_FL_KEEP_SIZE: Final = 0x01

_libc = ctypes.CDLL(None, use_errno=True)
_fallocate = _libc.fallocate
_fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
_fallocate.restype = ctypes.c_int


def _keep_allocated(fd: int, offset: int, length: int) -> int:
    """``fallocate(fd, FALLOC_FL_KEEP_SIZE, offset, length)``: 0, or the errno."""
    while True:
        if _fallocate(fd, _FALLOC_FL_KEEP_SIZE, offset, length) == 0:
            return 0
        code = ctypes.get_errno()
        if code != errno.EINTR:
            return code


def out_of_space(exc: OSError) -> bool:
    """An error that means the disk (or the user's quota) is full, and nothing worse."""
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


def fallocate_supported(fd: int) -> bool:
    """Whether the file system of ``fd`` can preallocate beyond a file's end (for ``warden doctor``)."""
    return _keep_allocated(fd, os.fstat(fd).st_size, 1) not in (errno.EOPNOTSUPP, errno.ENOSYS)


@final
class DiskReserve:
    """Keeps the reserve allocated past the ends of the two files a batch appends to (under the log's lock).

    Stateless on purpose: the allocation is read back from ``st_blocks`` before each batch, so what another warden
    process appended (or a recovery cut off, which frees preallocated blocks) is always taken into account.
    """

    def __init__(self, entries_fd: int, hashes_fd: int, notes_fd: int) -> None:
        self._entries = entries_fd
        self._hashes = hashes_fd
        self._notes = notes_fd
        self.supported = True

    def make_room(self, entries_end: int, entries_len: int, hashes_end: int, hashes_len: int) -> bool:
        """Ensure that after appending ``*_len`` bytes at ``*_end`` of entries.log and hashes.bin their reserves
        are still allocated beyond.

        Returns False when the disk has no room for that (``ENOSPC``, ``EDQUOT``): nothing may be written but the
        paused notice. Any other error is raised as ``OSError`` (the log fails, as for any write error).
        """
        return self._room(self._entries, entries_end, entries_len, ENTRIES_RESERVE) and \
            self._room(self._hashes, hashes_end, hashes_len, HASHES_RESERVE)

    def room_for_checkpoint(self, notes_end: int, frame_len: int) -> bool:
        """As :meth:`make_room`, for one checkpoint frame appended to checkpoints.log."""
        return self._room(self._notes, notes_end, frame_len, NOTES_RESERVE)

    def _room(self, fd: int, end: int, length: int, reserve: int) -> bool:
        if not self.supported or os.fstat(fd).st_blocks * 512 >= end + length + reserve:
            return True
        code = _keep_allocated(fd, end, length + 2 * reserve)
        if code in (errno.EOPNOTSUPP, errno.ENOSYS):
            self.supported = False
            return True
        if code in (errno.ENOSPC, errno.EDQUOT):
            return False
        if code:
            raise OSError(code, os.strerror(code))
        return True
