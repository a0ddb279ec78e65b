"""Who a root warden's sandbox runs as: the write dirs' owner, or a dedicated uid unique on the machine.

When warden runs as root, a sandbox must not run as root (E1, E2), and RLIMIT_NPROC is counted per real uid
across the whole system (E10). Two cases:

* **The write dirs belong to a user** (a project under ``/home/me``): the sandbox runs as that user's uid, with
  the user's primary group and no supplementary groups. What the server creates there belongs to the directory's
  owner, as if the user had made it; the directory needs no ``chgrp``, and git sees a repository owned by the uid
  it runs as (no "dubious ownership"). The sandbox is no less isolated: it sees only its mounts, its own PID, IPC,
  network and UTS namespaces, no keyring (seccomp) and no setuid bit (seccomp), so the uid it shares with the
  user's own processes reaches nothing of theirs. Their process count is shared, though: RLIMIT_NPROC is set to
  the owner's current thread count plus ``limits.processes`` (:func:`owner_threads`), so the server may start
  that many and the user's desktop does not starve it. Write dirs of two different owners are refused (what the
  server creates can belong to only one of them); so is a write dir owned by one of warden's own sandbox uids
  (left behind by an earlier sandbox: running as it would share a uid a running sandbox may hold).
* **Otherwise** (no write dirs, or root's): each running sandbox gets its own uid, ``UID_BASE + 1 + slot``, all
  in group ``SANDBOX_GID`` (= ``UID_BASE``); a root-owned write dir is usable when it is group-writable for that
  gid (:func:`check_writable_by_sandboxes` says so, with the command). The server never runs as root.

A slot is held by an ``flock`` on ``/run/warden/sandbox-uids/<slot>.lock`` for as long as the sandbox lives: one
directory for the whole machine, so two wardens never hand out the same uid whatever their state directories
(issue 10, why 9: per state directory, they did, and one starved the other's forks). The kernel drops the lock
if warden dies, so a crash leaks nothing; ``/run`` is emptied at boot, when no sandbox can be running.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import pwd
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, final

from warden.errors import LaunchError, SandboxUnavailable

UID_BASE = 0x70000000  # 1879048192: far above login users (1000-59999) and the usual subuid ranges (100000+)
SANDBOX_GID = UID_BASE
SLOTS = 256
SLOT_DIR = Path("/run/warden/sandbox-uids")

UserMode = Literal["write-dir-owner", "dedicated-uid", "user-namespace"]


def _open_slot_dir(directory: Path) -> int:
    """An fd for ``directory`` (created 0700 as needed), checked: a real directory of root's that nobody else can
    write. Everything below is opened relative to the fd, so no symlink swapped in later is followed."""
    try:
        for path in (directory.parent, directory):
            with contextlib.suppress(FileExistsError):
                os.mkdir(path, 0o700)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise SandboxUnavailable(f"cannot open {directory}, where root wardens share their sandbox uids: "
                                 f"{exc.strerror}", hint=f"make {directory.parent} a directory root can write "
                                                         "(it lives in /run, a tmpfs)") from exc
    for path, st in ((directory.parent, os.lstat(directory.parent)), (directory, os.fstat(fd))):
        if st.st_uid != 0 or st.st_mode & 0o022 or not stat.S_ISDIR(st.st_mode):
            os.close(fd)
            raise SandboxUnavailable(f"{path} is not a directory of root's that only root can write "
                                     f"(owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o})",
                                     hint=f"remove it; warden recreates it: rm -rf {path}")
    return fd


@final
class UidSlot:
    """A held uid: ``uid``/``gid`` for the sandbox; :meth:`release` once the sandbox has been reaped."""

    def __init__(self, slot: int, fd: int) -> None:
        self.slot = slot
        self.uid = UID_BASE + 1 + slot
        self.gid = SANDBOX_GID
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, directory: Path = SLOT_DIR) -> UidSlot:
        """Take the lowest slot no sandbox on this machine holds (``directory`` is for tests only).

        Raises:
            SandboxUnavailable: the machine-wide slot directory is unusable.
            LaunchError: all ``SLOTS`` uids are in use by running sandboxes.
        """
        dir_fd = _open_slot_dir(directory)
        try:
            for slot in range(SLOTS):
                fd = os.open(f"{slot}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600,
                             dir_fd=dir_fd)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                return cls(slot, fd)
        finally:
            os.close(dir_fd)
        raise LaunchError(f"all {SLOTS} sandbox uids are in use by running sandboxes on this machine",
                          hint="stop some servers, or run fewer warden sessions at once")

    def release(self) -> None:
        """Give the uid back (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@final
@dataclass(frozen=True, slots=True)
class SandboxUser:
    """The uid and gid one sandbox runs as, and why (``mode`` goes into the launch manifest)."""

    uid: int
    gid: int
    mode: UserMode
    slot: UidSlot | None = None

    @property
    def manifest(self) -> str:
        """The launch manifest's ``user``: the owner's uid is part of the server's identity (a ``chown`` of its
        write dir changes who it runs as); a dedicated uid, different at each launch, is not."""
        return f"write-dir-owner:{self.uid}" if self.mode == "write-dir-owner" else self.mode

    def release(self) -> None:
        if self.slot is not None:
            self.slot.release()


def _owner_gid(uid: int, dir_gid: int) -> int:
    """The owner's primary group (from the host's accounts), else the directory's group; never gid 0 (root's
    group can read what root left group-readable), in which case the sandbox group."""
    try:
        gid = pwd.getpwuid(uid).pw_gid
    except KeyError:
        gid = dir_gid
    return gid if gid != 0 else SANDBOX_GID


def write_dir_owner(paths: Sequence[str]) -> tuple[int, int] | None:
    """``(uid, gid)`` a root warden's sandbox runs as for these write dirs: their owner when it is a user, None
    when they are root's (or there are none) and the sandbox takes a dedicated uid.

    Raises:
        LaunchError: a write dir is missing, the write dirs have different owners, one belongs to a sandbox uid,
            or its owner cannot write it.
    """
    owners: dict[int, tuple[str, os.stat_result]] = {}
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue  # the sandbox plan refuses it, naming what is wrong
        owners.setdefault(st.st_uid, (path, st))
    if len(owners) > 1:
        listed = ", ".join(f"{path} (uid {uid})" for uid, (path, _) in sorted(owners.items()))
        raise LaunchError(f"the write dirs have different owners: {listed}; a server runs as one user, so what it "
                          "creates could belong to only one of them",
                          hint="grant write dirs of one owner to this server, and run another server for the others")
    if not owners:
        return None
    uid, (path, st) = next(iter(owners.items()))
    if uid == 0:
        return None
    if UID_BASE <= uid <= UID_BASE + SLOTS:
        raise LaunchError(f"write dir {path} belongs to warden sandbox uid {uid} (an earlier sandbox made it); "
                          "running as that uid would share it with whichever sandbox holds it now",
                          hint=f"give the directory to its user: chown -R USER {path}")
    if not st.st_mode & stat.S_IWUSR or not st.st_mode & stat.S_IXUSR:
        raise LaunchError(f"write dir {path} is not writable by its owner (uid {uid}, mode "
                          f"{stat.S_IMODE(st.st_mode):04o}), whom the server runs as",
                          hint=f"chmod u+rwx {path}, or grant it in read_dirs instead")
    return uid, _owner_gid(uid, st.st_gid)


def planned_user(write_dirs: Sequence[str], *, privileged: bool) -> SandboxUser:
    """Who a sandbox for ``write_dirs`` will run as, holding nothing (for the launch manifest); a dedicated uid is
    shown as ``UID_BASE``.

    Raises:
        LaunchError: see :func:`write_dir_owner`.
    """
    if not privileged:
        return SandboxUser(os.getuid(), os.getgid(), "user-namespace")
    owner = write_dir_owner(write_dirs)
    if owner is not None:
        return SandboxUser(*owner, "write-dir-owner")
    return SandboxUser(UID_BASE, SANDBOX_GID, "dedicated-uid")


def acquire_user(write_dirs: Sequence[str], *, privileged: bool) -> SandboxUser:
    """Who a sandbox for ``write_dirs`` runs as, holding a uid slot when it is a dedicated uid (release it with
    :meth:`SandboxUser.release` once the sandbox is reaped). A dedicated uid's write dirs are the caller's to check
    (:func:`check_writable_by_sandboxes`), once the sandbox plan has refused what it refuses.

    Raises:
        LaunchError: see :func:`write_dir_owner`; or every dedicated uid is in use.
        SandboxUnavailable: the machine-wide slot directory is unusable.
    """
    planned = planned_user(write_dirs, privileged=privileged)
    if planned.mode != "dedicated-uid":
        return planned
    slot = UidSlot.acquire()
    return SandboxUser(slot.uid, slot.gid, "dedicated-uid", slot)


def owner_threads(uid: int, proc: Path = Path("/proc")) -> int:
    """How many threads run as real uid ``uid`` on the host now (what RLIMIT_NPROC counts for that uid)."""
    total = 0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text(encoding="ascii", errors="replace")
        except OSError:
            continue  # exited meanwhile
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        try:
            if int(fields["Uid"].split()[0]) == uid:
                total += int(fields["Threads"].strip())
        except (KeyError, ValueError, IndexError):
            continue
    return total


def check_writable_by_sandboxes(paths: Iterable[str]) -> None:
    """Refuse root-owned write dirs that no dedicated sandbox uid could write: the server would only meet EACCES.

    A directory qualifies when it is group-writable for ``SANDBOX_GID``, world-writable, or carries a POSIX ACL
    (whose entries warden does not second-guess).

    Raises:
        LaunchError: naming the directory and both fixes.
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
            f"write dir {path} belongs to root, and warden never runs a server as root: it runs as the write "
            f"dir's owner when that is a user, else as a dedicated uid in group {SANDBOX_GID}, which cannot write "
            "here",
            hint=f"give the directory to the user it is for (chown USER {path}), or grant the sandbox group: "
                 f"chgrp {SANDBOX_GID} {path} && chmod g+rwxs {path}")
