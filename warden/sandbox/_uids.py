"""Dedicated sandbox uids for a root warden: one uid per running sandbox, from a reserved range.

When warden runs as root, a sandbox must not run as root (E1, E2), and RLIMIT_NPROC is counted per real uid
across the whole system (E10). So each running sandbox gets its own uid, ``UID_BASE + 1 + slot``; all share the
group ``SANDBOX_GID`` (= ``UID_BASE``), which is how a policy grants a write directory to "any sandbox": the
directory is group-writable for that gid. A slot is held by an ``flock`` on a file in warden's state directory
for as long as the sandbox lives; the kernel drops the lock if warden dies, so a crash leaks nothing.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import final

from warden.errors import LaunchError
from warden.paths import ensure_private_dir

UID_BASE = 0x70000000  # 1879048192: far above login users (1000-59999) and the usual subuid ranges (100000+)
SANDBOX_GID = UID_BASE
SLOTS = 256


@final
class UidSlot:
    """A held uid: ``uid``/``gid`` for the sandbox; :meth:`release` once the sandbox has been reaped."""

    def __init__(self, slot: int, fd: int) -> None:
        self.slot = slot
        self.uid = UID_BASE + 1 + slot
        self.gid = SANDBOX_GID
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, state_dir: Path) -> UidSlot:
        """Take the lowest free slot.

        Raises:
            StateError: the state directory is unusable.
            LaunchError: all ``SLOTS`` uids are in use by running sandboxes.
        """
        directory = ensure_private_dir(state_dir / "sandbox-uids")
        for slot in range(SLOTS):
            fd = os.open(directory / f"{slot}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return cls(slot, fd)
        raise LaunchError(f"all {SLOTS} sandbox uids are in use by running sandboxes",
                          hint="stop some servers, or run fewer warden sessions at once")

    def release(self) -> None:
        """Give the uid back (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def check_writable_by_sandboxes(paths: Iterable[str]) -> None:
    """Refuse write dirs that no sandbox uid could write: the server would only meet EACCES later.

    A directory qualifies when it is group-writable for ``SANDBOX_GID``, world-writable, or carries a POSIX ACL
    (whose entries warden does not second-guess).

    Raises:
        LaunchError: naming the directory and the command that grants the group.
    """
    for path in paths:
        try:
            st = os.stat(path)
        except OSError as exc:
            raise LaunchError(f"write dir {path}: {exc.strerror}", hint="create it or fix the policy") from exc
        if st.st_mode & stat.S_IWOTH:
            continue
        if st.st_gid == SANDBOX_GID and st.st_mode & stat.S_IWGRP and st.st_mode & stat.S_IXGRP:
            continue
        try:
            os.getxattr(path, "system.posix_acl_access")
            continue
        except OSError as exc:
            if exc.errno not in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
                raise LaunchError(f"write dir {path}: {exc.strerror}", hint="check the directory") from exc
        raise LaunchError(
            f"write dir {path} is not writable by warden's sandbox users (warden runs as root, so servers run as "
            f"dedicated uids in group {SANDBOX_GID})",
            hint=f"grant the group: chgrp {SANDBOX_GID} {path} && chmod g+rwxs {path}")
