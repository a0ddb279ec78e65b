"""Facts about this host that decide whether a sandbox can be built: read here, judged by the launcher and doctor.

Every reader returns a value or None ("could not tell"); none of them raise. The judgement (refuse, warn) lives
with the caller, so ``warden doctor`` can show every fact even when several are bad.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

_SYS_LANDLOCK_CREATE_RULESET = 444  # same number on every architecture (new syscall table)
_LANDLOCK_CREATE_RULESET_VERSION = 1


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as handle:
            return int(handle.read(64).strip())
    except (OSError, ValueError):
        return None


def seccomp_supported() -> bool:
    """True when the kernel has seccomp filters (``Seccomp:`` in ``/proc/self/status``)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as handle:
            return any(line.startswith("Seccomp:") for line in handle)
    except OSError:
        return False


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is absent or disabled."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        abi = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                           ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return int(abi) if abi > 0 else 0


@dataclass(frozen=True, slots=True)
class UsernsFacts:
    """What limits unprivileged user namespaces here (each None when the knob does not exist)."""

    max_user_namespaces: int | None
    unprivileged_userns_clone: int | None
    apparmor_restrict: int | None

    def blocker(self) -> str | None:
        """Why an unprivileged bwrap cannot create its user namespace, or None if nothing here forbids it."""
        if self.max_user_namespaces is not None and self.max_user_namespaces <= 0:
            return "user.max_user_namespaces is 0"
        if self.unprivileged_userns_clone == 0:
            return "kernel.unprivileged_userns_clone is 0"
        return None


def userns_facts() -> UsernsFacts:
    return UsernsFacts(
        max_user_namespaces=_read_int("/proc/sys/user/max_user_namespaces"),
        unprivileged_userns_clone=_read_int("/proc/sys/kernel/unprivileged_userns_clone"),
        apparmor_restrict=_read_int("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"),
    )


def executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)
