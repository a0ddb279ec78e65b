"""The write quota (issue 11 item 5): how much a server may add to the host's disks through its write dirs.

Nothing else bounds it: the write dirs are host directories, RLIMIT_FSIZE (``file_size_mb``) bounds one file, not
how many, and a full disk stops every program on it (warden's own audit log included). So warden measures what
the write dirs hold while the server runs and stops the server once they have grown by more than
``limits.write_quota_mb`` since its first launch in this warden.

What is counted (:func:`measure`), so that no cheap trick hides bytes from the count:

- every entry under the write dirs, without following symlinks, charged its allocated size (``st_blocks``: a
  sparse file costs what it occupies) and at least one 4 KiB block (a million empty files cost 4 GiB of quota,
  not nothing: they cost the host inodes and warden walking time); each inode once (hard links);
- files the sandbox has deleted but still holds open (``/proc/PID/fd``) or mapped (``/proc/PID/maps``, charged
  the mapping's length), on a write dir's file system: a walk never meets them, the disk still holds them.

A directory warden cannot read (an unprivileged warden, against a directory the server made unreadable) cannot
be measured: that counts as passing the quota.

How it is enforced (:class:`WriteQuota`): a check about every second while the server runs (more rarely for big
trees: never more often than 4x the time a walk took). A check first reads the free space of the write dirs' file
systems (``statvfs``, microseconds; free inodes count 4 KiB each, as entries do): the write dirs cannot have grown
by more than that shrank, so while the drop since the last walk is under half the headroom left, nothing is
walked; otherwise, and at least every :data:`MAX_WALK_INTERVAL` seconds, the write dirs are walked. An idle server
with a large write dir thus costs a walk every 30 s, not every second; what another program frees on the same file
system meanwhile can delay a detection by up to those 30 s. Between two walks a server can write what the disk
accepts in that time. Once over, the whole sandbox is killed, the reason becomes the server's exit reason
(audited as ``server.exited``), and the launcher refuses to start the server again until warden restarts (the
bytes are still there: a new launch would be over at once).
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, final

import trio

from warden.errors import LaunchError

__all__ = ["ENTRY_MIN_BYTES", "QuotaGate", "QuotaUnmeasurable", "WriteQuota", "measure", "sandbox_pids",
           "wait_enforcing"]

log = logging.getLogger(__name__)

#: The least one entry costs: one file system block (and an inode, and a directory entry).
ENTRY_MIN_BYTES: Final = 4096
INTERVAL: Final = 1.0
#: The longest warden goes without walking the write dirs, whatever the free space says.
MAX_WALK_INTERVAL: Final = 30.0
_MB: Final = 1024 * 1024


class QuotaUnmeasurable(LaunchError):
    """A write dir (or a sandbox process's open files) cannot be read, so its size cannot be known."""


def _walk(root: str, seen: set[tuple[int, int]]) -> int:
    total = 0
    stack = [root]
    try:
        st = os.lstat(root)
    except OSError as exc:
        raise QuotaUnmeasurable(f"cannot measure write dir {root}: {exc.strerror}",
                                hint="check the write dir's permissions") from exc
    total += max(st.st_blocks * 512, ENTRY_MIN_BYTES)
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            continue  # removed while warden walked it: its bytes are gone too
        except OSError as exc:
            raise QuotaUnmeasurable(f"cannot read {directory} (in a write dir) to measure the write quota: "
                                    f"{exc.strerror}", hint="restore the directory's permissions") from exc
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise QuotaUnmeasurable(f"cannot stat {entry.path} to measure the write quota: {exc.strerror}",
                                        hint="restore the directory's permissions") from exc
            if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                key = (st.st_dev, st.st_ino)
                if key in seen:
                    continue
                seen.add(key)
            total += max(st.st_blocks * 512, ENTRY_MIN_BYTES)
            if stat.S_ISDIR(st.st_mode):
                stack.append(entry.path)
    return total


def sandbox_pids(init_pid: int) -> list[int]:
    """The host pids of every process of the sandbox whose init is ``init_pid`` (the init first).

    Every process of a PID namespace descends from its init (orphans are re-parented to it), so the children
    links from the init reach them all; one that forks meanwhile is met at the next measurement.
    """
    found = [init_pid]
    queue = [init_pid]
    while queue:
        pid = queue.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as handle:
                    children = [int(p) for p in handle.read().split()]
            except (OSError, ValueError):
                continue
            for child in children:
                if child not in found:
                    found.append(child)
                    queue.append(child)
    return found


def _unlinked_in_use(pids: Iterable[int], devices: set[int], seen: set[tuple[int, int]]) -> int:
    """Bytes of files on ``devices`` that the processes hold open or mapped after deleting them."""
    total = 0
    mapped: dict[tuple[int, int], int] = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except FileNotFoundError:
            continue  # exited meanwhile
        except OSError as exc:
            raise QuotaUnmeasurable(f"cannot list the open files of sandbox process {pid}: {exc.strerror}",
                                    hint="run `warden doctor`") from exc
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue  # closed meanwhile, or not a file (a pipe's inode is on pipefs, never ours)
            if st.st_nlink == 0 and stat.S_ISREG(st.st_mode) and st.st_dev in devices:
                key = (st.st_dev, st.st_ino)
                if key not in seen:
                    seen.add(key)
                    total += max(st.st_blocks * 512, ENTRY_MIN_BYTES)
        try:
            with open(f"/proc/{pid}/maps", encoding="ascii", errors="replace") as handle:
                maps = handle.read()
        except OSError:
            continue
        for line in maps.splitlines():
            if not line.endswith(" (deleted)"):
                continue
            fields = line.split()
            if len(fields) < 6:
                continue
            try:
                start, end = (int(x, 16) for x in fields[0].split("-"))
                major, minor = (int(x, 16) for x in fields[3].split(":"))
                inode = int(fields[4])
            except ValueError:
                continue
            device = os.makedev(major, minor)
            if device in devices and (device, inode) not in seen:
                mapped[(device, inode)] = max(mapped.get((device, inode), 0), end - start)
    return total + sum(mapped.values())


def free_bytes(write_dirs: Sequence[str]) -> int | None:
    """What the file systems holding ``write_dirs`` (each once) have free, in quota terms: free bytes plus
    :data:`ENTRY_MIN_BYTES` per free inode (so empty files, which take inodes and no blocks, show as a drop);
    None if one cannot be read."""
    seen: set[int] = set()
    total = 0
    for root in write_dirs:
        try:
            device = os.stat(root).st_dev
            if device in seen:
                continue
            seen.add(device)
            info = os.statvfs(root)
        except OSError:
            return None
        total += info.f_bfree * info.f_frsize + info.f_ffree * ENTRY_MIN_BYTES
    return total


def measure(write_dirs: Sequence[str], pids: Iterable[int] = ()) -> int:
    """What the write dirs cost the host's disks now, in bytes (see the module docstring for what counts).

    Raises:
        QuotaUnmeasurable: something in them, or a sandbox process's descriptors, cannot be read.
    """
    seen: set[tuple[int, int]] = set()
    total = sum(_walk(root, seen) for root in write_dirs)
    devices = set()
    for root in write_dirs:
        try:
            devices.add(os.stat(root).st_dev)
        except OSError:
            continue
    return total + _unlinked_in_use(pids, devices, seen)


@final
@dataclass(slots=True)
class WriteQuota:
    """One server's quota: its write dirs, the bytes they held before its first launch, and whether it passed.

    ``exceeded`` is set the first time a measurement is over (or impossible) and stays: the launcher refuses to
    start the server again.
    """

    write_dirs: tuple[str, ...]
    quota_bytes: int
    baseline: int
    exceeded: str | None = None
    walks: int = 0  # how many times the write dirs were walked (the baseline's included)
    _cost: float = field(default=0.0)
    _grown: int = 0
    _free_at_walk: int | None = None
    _walked_at: float = 0.0

    @classmethod
    def start(cls, write_dirs: Sequence[str], quota_mb: int) -> WriteQuota:
        """Measure the baseline of ``write_dirs`` (as the policy names them; resolved here, as the sandbox plan
        resolves them) before the server's first launch. Blocks: a big tree takes a while.

        Raises:
            QuotaUnmeasurable: the write dirs cannot be measured, so the quota could not be enforced.
        """
        began = time.monotonic()
        roots = tuple(os.path.realpath(p) for p in write_dirs)
        free = free_bytes(roots)
        baseline = measure(roots)
        quota = cls(roots, quota_mb * _MB, baseline, walks=1)
        quota._cost = time.monotonic() - began
        quota._free_at_walk, quota._walked_at = free, began
        return quota

    @property
    def interval(self) -> float:
        """Seconds between two measurements: :data:`INTERVAL`, or 4x what the last one took if that is longer."""
        return max(INTERVAL, 4 * self._cost)

    def check(self, pids: Callable[[], Iterable[int]]) -> str | None:
        """Check now, with the sandbox's current processes from ``pids()`` (in a worker thread: a walk blocks);
        return the reason to stop the server, or None. Walks only when the free space says it may be needed (see
        the module docstring)."""
        began = time.monotonic()
        free = free_bytes(self.write_dirs)
        if free is not None and self._free_at_walk is not None and began - self._walked_at < MAX_WALK_INTERVAL \
                and 2 * (self._free_at_walk - free) < self.quota_bytes - self._grown:
            return None
        try:
            used = measure(self.write_dirs, pids())
        except QuotaUnmeasurable as exc:
            self.exceeded = f"write quota cannot be enforced: {exc.message}"
            return self.exceeded
        self.walks += 1
        self._cost = time.monotonic() - began
        self._free_at_walk, self._walked_at = free, began
        grown = self._grown = used - self.baseline
        if grown > self.quota_bytes:
            self.exceeded = (f"write quota exceeded: its write dirs grew by {grown / _MB:.1f} MiB, more than "
                             f"limits.write_quota_mb = {self.quota_bytes // _MB}")
        return self.exceeded


@final
class QuotaGate:
    """One server's write quota across its launches (a launcher holds one): the baseline is measured before the
    first launch, and a server that passed its quota is not started again in this warden."""

    def __init__(self, write_dirs: Sequence[str], quota_mb: int) -> None:
        self._write_dirs = tuple(write_dirs)
        self._quota_mb = quota_mb
        self._quota: WriteQuota | None = None

    async def admit(self) -> WriteQuota | None:
        """The quota to enforce on the next launch, or None when the server has no write dirs.

        Raises:
            LaunchError: the quota was passed earlier in this warden, or the write dirs cannot be measured.
        """
        if not self._write_dirs:
            return None
        if self._quota is None:
            self._quota = await trio.to_thread.run_sync(WriteQuota.start, self._write_dirs, self._quota_mb)
        if self._quota.exceeded is not None:
            raise LaunchError(f"{self._quota.exceeded}; warden stopped the server and does not start it again",
                              hint="free space in its write dirs, or raise limits.write_quota_mb, then restart "
                                   "warden")
        return self._quota


async def wait_enforcing(quota: WriteQuota, wait: Callable[[], Awaitable[int]], *,
                         pids: Callable[[], Iterable[int]], stop: Callable[[str], None]) -> int:
    """``await wait()`` (the sandbox's exit status) while measuring ``quota`` every :attr:`WriteQuota.interval`;
    the first time it is passed, ``stop(reason)`` (which must kill the whole sandbox) and keep waiting for the
    exit. A measurement runs in a worker thread (a walk blocks) and is abandoned if the wait is cancelled."""
    async with trio.open_nursery() as nursery:
        async def enforce() -> None:
            while True:
                await trio.sleep(quota.interval)
                reason = await trio.to_thread.run_sync(quota.check, pids, abandon_on_cancel=True)
                if reason is not None:
                    log.warning("stopping the server: %s", reason)
                    stop(reason)
                    return

        nursery.start_soon(enforce)
        code = await wait()
        nursery.cancel_scope.cancel()
    return code
