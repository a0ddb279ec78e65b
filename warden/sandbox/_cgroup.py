"""Whole-sandbox memory: one memory cgroup per sandbox, limited to ``limits.memory_mb`` (issue 11 item 4).

rlimits are per process: a server that forks, or that writes into its tmpfs mounts (``/tmp``, ``$HOME``,
``/dev/shm``: shared memory, charged to no process), holds as much memory as it likes. The kernel's memory
controller counts every page a cgroup's processes use, tmpfs pages included (a shmem page is charged to the cgroup
of the process that first writes it), so one limit bounds the processes and the tmpfs together; at the limit the
kernel's OOM killer stops a process of that sandbox and nothing else.

Where the sandbox cgroups go: always *under* warden's own cgroup, never beside it, so a sandbox stays inside
whatever limits the machine already puts on warden, and warden touches no cgroup but its own subtree.

- cgroup v1 (the legacy and hybrid layouts, this machine's and CI's): the memory hierarchy's directory for
  warden's cgroup, when warden may create directories there (root, or a hierarchy delegated to its user).
- cgroup v2: warden's own cgroup, when its ``cgroup.subtree_control`` already hands the ``memory`` controller to
  its children. (warden does not enable it there itself: that would change the cgroup for every other process in
  it, and the kernel refuses it anyway while processes live in the cgroup.)

Anywhere else (an unprivileged warden on a v1 or undelegated v2 machine, no memory controller, a read-only
cgroupfs) :func:`find_memory_cgroups` says why, and the launcher bounds memory per process only: doctor, the
launch manifest and the audit record say so, and the tmpfs sizes come out of the per-process budget.

A sandbox's cgroup is made and its limit set before the sandbox's first process runs the server, and it is removed
once the sandbox is reaped. How a sandbox gets into it:

- cgroup v1: bwrap is born in it. Moving a process in by pid (``cgroup.procs``) takes the kernel's global
  threadgroup lock, whose writer waits for an RCU grace period: 10-15 ms on this machine, the largest part of a
  sandbox's start. A single thread moving *itself* (``0`` written to the v1 ``tasks`` file) needs no such lock
  (kernel/cgroup ``cgroup_procs_write_start``: ~0.2 ms). So bwrap is started through :data:`JOIN_SHIM`, a
  single-threaded ``/bin/sh`` that writes ``0`` to the cgroup's ``tasks`` and execs bwrap, and everything bwrap
  forks, its init and the server included, starts inside. bwrap itself (a few hundred KiB) is charged to the
  sandbox. While bwrap waits on ``--block-fd`` warden still checks that the init is in the cgroup
  (:meth:`SandboxCgroup.holds`): the server never runs outside it.
- cgroup v2: ``0`` to ``cgroup.procs`` takes the same lock, so nothing is gained; warden moves the init in by pid
  while bwrap waits on ``--block-fd`` (:meth:`SandboxCgroup.attach`). Names carry the
creating warden's pid (``warden-<pid>-<random>``), so a cgroup left behind by a warden that died is recognised and
removed by the next one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Final, final

from warden.errors import SandboxUnavailable

__all__ = ["JOIN_SHIM", "MemoryCgroups", "NoMemoryCgroups", "SandboxCgroup", "find_memory_cgroups"]

_PREFIX: Final = "warden-"
_PROBE: Final = "warden-probe-"
#: (limit file, swap-inclusive limit file) per cgroup version. The swap file is absent when the kernel does not
#: account swap; then the limit bounds memory in RAM, which is what it is for (and machines here have no swap).
_LIMIT_FILES: Final = {1: ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"),
                       2: ("memory.max", "memory.swap.max")}
#: Starts the program named ``bwrap`` in the directory ``$WARDEN_BWRAP_DIR`` (so its ``argv[0]``, which a sandbox
#: can read from ``/proc/1/cmdline``, is ``bwrap`` and not a host path) from inside the v1 cgroup whose ``tasks``
#: file is ``$WARDEN_CGROUP_TASKS``. The two paths come in the environment, not the command line (DESIGN
#: invariant 10), and are gone before the exec, as is the ``PWD`` dash exports: bwrap starts with an empty
#: environment, as it would without the shim. A failed write ends the shim, and so the launch.
JOIN_SHIM: Final = ("/bin/sh", "-c",
                    'echo 0 > "$WARDEN_CGROUP_TASKS" || { echo "cannot join the sandbox memory cgroup" >&2; '
                    'exit 125; }; PATH=$WARDEN_BWRAP_DIR; unset WARDEN_CGROUP_TASKS WARDEN_BWRAP_DIR PWD; '
                    'exec bwrap "$@"', "warden-cgroup")


@final
@dataclass(frozen=True, slots=True)
class NoMemoryCgroups:
    """No memory cgroup warden can use here; ``reason`` says why (for doctor and warden's log)."""

    reason: str


@final
@dataclass(frozen=True, slots=True)
class MemoryCgroups:
    """Where this warden makes its sandboxes' memory cgroups: ``parent`` in a v1 or v2 hierarchy."""

    version: int
    parent: Path

    def describe(self) -> str:
        return f"cgroup v{self.version} memory controller, sandbox cgroups under {self.parent}"

    def create(self, limit_bytes: int) -> SandboxCgroup:
        """Make one sandbox's cgroup with its limit set (the limit is written before anything joins it).

        Raises:
            SandboxUnavailable: the cgroup cannot be made or limited (nothing is started without it).
        """
        _sweep(self.parent)
        path = self.parent / f"{_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        try:
            path.mkdir(mode=0o755)
        except OSError as exc:
            raise SandboxUnavailable(f"cannot create the sandbox's memory cgroup {path}: {exc.strerror}",
                                     hint="run `warden doctor` to see how memory is bounded here") from exc
        cgroup = SandboxCgroup(path, self.version)
        try:
            cgroup.limit(limit_bytes)
        except BaseException:
            cgroup.remove()
            raise
        return cgroup


@final
class SandboxCgroup:
    """One sandbox's memory cgroup: :meth:`attach` its init before it starts the server, :meth:`remove` after."""

    def __init__(self, path: Path, version: int) -> None:
        self.path = path
        self.version = version

    def limit(self, limit_bytes: int) -> None:
        """Set the memory limit, swap included where the kernel accounts swap (so swap cannot stretch it)."""
        memory, swap = _LIMIT_FILES[self.version]
        self._write(memory, str(limit_bytes))
        if (self.path / swap).exists():
            self._write(swap, "0" if self.version == 2 else str(limit_bytes))

    def attach(self, pid: int) -> None:
        """Move process ``pid`` (and, in v1, all its threads) into the cgroup; its later children follow."""
        self._write("cgroup.procs", str(pid))

    def join_env(self, bwrap: str) -> dict[str, str] | None:
        """The environment under which :data:`JOIN_SHIM` starts ``bwrap`` inside this cgroup; None where that is
        no faster (v2) or where the binary is not named ``bwrap`` (its ``argv[0]`` would show another name)."""
        if self.version != 1 or os.path.basename(bwrap) != "bwrap":
            return None
        return {"WARDEN_CGROUP_TASKS": str(self.path / "tasks"), "WARDEN_BWRAP_DIR": os.path.dirname(bwrap)}

    def holds(self, pid: int) -> bool:
        """True when process ``pid`` is in this cgroup (listed in its ``cgroup.procs``).

        Raises:
            SandboxUnavailable: the cgroup cannot be read.
        """
        try:
            listed = (self.path / "cgroup.procs").read_text(encoding="ascii").split()
        except OSError as exc:
            raise SandboxUnavailable(f"cannot read {self.path / 'cgroup.procs'}: {exc.strerror}",
                                     hint="run `warden doctor` to see how memory is bounded here") from exc
        return str(pid) in listed

    def peak_bytes(self) -> int | None:
        """The most memory the sandbox has held (None where the kernel does not report it)."""
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        try:
            return int((self.path / name).read_text(encoding="ascii").strip())
        except (OSError, ValueError):
            return None

    def remove(self) -> None:
        """Remove the cgroup (idempotent). Called once the sandbox is reaped; if a process lingers, the next
        warden's sweep removes the cgroup when it is empty and its warden is gone."""
        with contextlib.suppress(OSError):
            self.path.rmdir()

    def _write(self, name: str, value: str) -> None:
        try:
            fd = os.open(self.path / name, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, value.encode("ascii"))
            finally:
                os.close(fd)
        except OSError as exc:
            raise SandboxUnavailable(f"cannot write {value} to {self.path / name}: {exc.strerror}",
                                     hint="run `warden doctor` to see how memory is bounded here") from exc


def _sweep(parent: Path) -> None:
    """Remove sandbox cgroups whose warden is gone (a crash skips :meth:`SandboxCgroup.remove`)."""
    try:
        names = [entry.name for entry in os.scandir(parent) if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return
    for name in names:
        if not name.startswith(_PREFIX):
            continue
        pid_text = name.removeprefix(_PROBE if name.startswith(_PROBE) else _PREFIX).split("-", 1)[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid() or _alive(int(pid_text)):
            continue
        with contextlib.suppress(OSError):
            (parent / name).rmdir()  # fails (EBUSY) while a process is still in it: left for later


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _own_cgroups(proc_self_cgroup: str) -> dict[str, str]:
    """``/proc/self/cgroup`` as {controller: path}; the v2 entry is keyed ``""``."""
    out = {}
    for line in proc_self_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(","):
            out[controller] = parts[2]
    return out


def _mounts(mountinfo: str) -> list[tuple[str, str, str, str]]:
    """(mount root, mount point, fs type, super options) of every cgroup mount in ``mountinfo``."""
    out = []
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if not sep or len(fields) < 5 or len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
            continue
        out.append((_unescape(fields[3]), _unescape(fields[4]), rest[0], rest[2]))
    return out


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (``\\040``)."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def _under(mount_root: str, mount_point: str, path: str) -> Path | None:
    """Where cgroup ``path`` (as /proc/self/cgroup names it) appears under a mount of ``mount_root``."""
    root = mount_root.rstrip("/")
    if path != root and not path.startswith(root + "/"):
        return None
    return Path(mount_point + path[len(root):]) if path != root else Path(mount_point)


def locate(proc_self_cgroup: str, mountinfo: str) -> MemoryCgroups | NoMemoryCgroups:
    """Decide from these two files (pure) where sandbox cgroups would go; :func:`find_memory_cgroups` then proves
    that warden can create one there."""
    own = _own_cgroups(proc_self_cgroup)
    mounts = _mounts(mountinfo)
    if "memory" in own:
        for root, point, fstype, options in mounts:
            if fstype == "cgroup" and "memory" in options.split(","):
                parent = _under(root, point, own["memory"])
                if parent is None:
                    return NoMemoryCgroups(f"warden's memory cgroup {own['memory']} is not visible under the "
                                           f"cgroup v1 mount at {point}")
                return MemoryCgroups(1, parent)
        return NoMemoryCgroups("the cgroup v1 memory hierarchy is not mounted")
    if "" in own:
        for root, point, fstype, _ in mounts:
            if fstype != "cgroup2":
                continue
            parent = _under(root, point, own[""])
            if parent is None:
                return NoMemoryCgroups(f"warden's cgroup {own['']} is not visible under the cgroup v2 mount at "
                                       f"{point}")
            try:
                delegated = (parent / "cgroup.subtree_control").read_text(encoding="ascii").split()
                available = (parent / "cgroup.controllers").read_text(encoding="ascii").split()
            except OSError as exc:
                return NoMemoryCgroups(f"cannot read {parent}/cgroup.subtree_control: {exc.strerror}")
            if "memory" in delegated:
                return MemoryCgroups(2, parent)
            if "memory" not in available:
                return NoMemoryCgroups(f"the memory controller is not available to warden's cgroup {own['']} "
                                       "(cgroup v2, not in its cgroup.controllers)")
            return NoMemoryCgroups(f"warden's cgroup {parent} does not hand the memory controller to sub-cgroups "
                                   "(cgroup v2: memory is not in its cgroup.subtree_control)")
        return NoMemoryCgroups("no cgroup v2 hierarchy is mounted")
    return NoMemoryCgroups("this kernel has no memory controller (/proc/self/cgroup names none)")


def find_memory_cgroups() -> MemoryCgroups | NoMemoryCgroups:
    """Where this warden can make memory-limited sandbox cgroups, proven by making (and removing) one; or why not.

    Never raises: the answer is a fact about the machine, judged by the launcher and shown by doctor.
    """
    try:
        with open("/proc/self/cgroup", encoding="utf-8", errors="replace") as handle:
            own = handle.read()
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as handle:
            mountinfo = handle.read()
    except OSError as exc:
        return NoMemoryCgroups(f"cannot read /proc/self/cgroup or mountinfo: {exc.strerror}")
    place = locate(own, mountinfo)
    if isinstance(place, NoMemoryCgroups):
        return place
    probe = place.parent / f"{_PROBE}{os.getpid()}-{secrets.token_hex(4)}"
    try:
        probe.mkdir(mode=0o755)
    except OSError as exc:
        why = ("only root or the owner of a delegated cgroup may create cgroups there"
               if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else exc.strerror)
        return NoMemoryCgroups(f"warden (uid {os.geteuid()}) cannot create a cgroup under {place.parent} "
                               f"(cgroup v{place.version}): {why}")
    try:
        if not (probe / _LIMIT_FILES[place.version][0]).exists():
            return NoMemoryCgroups(f"a cgroup made under {place.parent} has no {_LIMIT_FILES[place.version][0]}")
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()
    return place
