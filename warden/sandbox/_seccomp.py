"""The seccomp filter: a rule list (``sandbox/seccomp.toml``) compiled to classic BPF for ``bwrap --seccomp FD``.

The rule list is data so it can be reviewed line by line; this module only validates it and hands it to
libseccomp (through ``pyseccomp``), which does the BPF generation, the architecture check and the 64-bit argument
splitting. Parsing is pure; compiling needs libseccomp and a memfd, nothing else.

Why a deny list on top of default-allow: servers run arbitrary runtimes (node, CPython, Go binaries), and an
allow-list breaks them on every runtime upgrade. The mount namespace, the dropped capabilities and the
unprivileged uid do the main work; the filter removes kernel attack surface and the known escapes those layers
do not cover (TIOCSTI, io_uring, new user namespaces, the new mount API).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from warden.errors import SandboxUnavailable
from warden.paths import read_once
from warden.sandbox._memfd import data_memfd

_MAX_U64 = (1 << 64) - 1
_MAX_RULES_BYTES = 256 * 1024


class ArgCheck(BaseModel):
    """One comparison on a syscall argument; all of a rule's comparisons must hold for it to match."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    arg: int = Field(ge=0, le=5)
    op: Literal["eq", "ne", "ge", "masked_eq"]
    value: int | tuple[int, ...]
    mask: int | None = Field(default=None, ge=1, le=_MAX_U64)

    @field_validator("value")
    @classmethod
    def _in_range(cls, value: int | tuple[int, ...]) -> int | tuple[int, ...]:
        values = value if isinstance(value, tuple) else (value,)
        if not values:
            raise ValueError("an empty value list matches nothing")
        for item in values:
            if not 0 <= item <= _MAX_U64:
                raise ValueError(f"{item} is not a 64-bit unsigned value")
        return value

    def model_post_init(self, context: Any, /) -> None:
        if (self.op == "masked_eq") != (self.mask is not None):
            raise ValueError("`mask` is required for masked_eq and only allowed there")

    def values(self) -> tuple[int, ...]:
        return self.value if isinstance(self.value, tuple) else (self.value,)


class SeccompRule(BaseModel):
    """Fail ``syscalls`` with ``action`` (an errno name) when every ``args`` comparison holds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    why: str = Field(min_length=1)
    action: str
    syscalls: tuple[str, ...] = Field(min_length=1)
    args: tuple[ArgCheck, ...] = ()
    when: Literal["no_network", "no_memfd_noexec"] | None = None

    @field_validator("action")
    @classmethod
    def _errno_name(cls, value: str) -> str:
        if not value.startswith("E") or not isinstance(getattr(errno, value, None), int):
            raise ValueError(f"{value!r} is not an errno name")
        return value

    @field_validator("syscalls")
    @classmethod
    def _names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not name or not all(c.isalnum() or c == "_" for c in name) or not name.isascii():
                raise ValueError(f"{name!r} is not a syscall name")
        return value

    def expanded(self) -> Iterator[tuple[tuple[int, str, int, int], ...]]:
        """Yield one tuple of (arg, op, value, mask) comparisons per combination of listed values."""
        combos: list[tuple[tuple[int, str, int, int], ...]] = [()]
        for check in self.args:
            mask = check.mask if check.mask is not None else 0
            combos = [(*c, (check.arg, check.op, v, mask)) for c in combos for v in check.values()]
        yield from combos


class RuleList(BaseModel):
    """The whole file: a format version, the bad-architecture action and the rules in order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1]
    bad_arch: Literal["kill_process"]
    rule: tuple[SeccompRule, ...] = Field(min_length=1)

    def applicable(self, *, network: bool, memfd_noexec: bool = False) -> tuple[SeccompRule, ...]:
        """The rules in force for a server with (``network=True``) or without network, in a PID namespace that
        does (``memfd_noexec=True``: the kernel seals every memfd non-executable) or does not enforce
        ``vm.memfd_noexec = 2``. The defaults are the stricter filter."""
        off = {"no_network": network, "no_memfd_noexec": memfd_noexec}
        return tuple(r for r in self.rule if r.when is None or not off[r.when])

    def digest(self, *, network: bool, memfd_noexec: bool = False) -> str:
        """SHA-256 over the applicable rules, canonical JSON: part of a server's launch manifest."""
        body = json.dumps([r.model_dump(mode="json") for r in self.applicable(network=network,
                                                                              memfd_noexec=memfd_noexec)],
                          sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(body.encode()).hexdigest()


def parse_rules(text: str) -> RuleList:
    """Validate a rule list given as TOML text.

    Raises:
        SandboxUnavailable: the text is not TOML or does not follow the format; no filter means no sandbox.
    """
    if len(text) > _MAX_RULES_BYTES:
        raise SandboxUnavailable(f"the seccomp rule list is larger than {_MAX_RULES_BYTES} bytes",
                                 hint="restore sandbox/seccomp.toml from the warden release")
    try:
        return RuleList.model_validate(tomllib.loads(text))
    except (tomllib.TOMLDecodeError, ValidationError, ValueError) as exc:
        raise SandboxUnavailable(f"the seccomp rule list is invalid: {exc}",
                                 hint="restore sandbox/seccomp.toml from the warden release") from exc


_LOADED: dict[tuple[object, ...], RuleList] = {}


def load_rules(path: Path) -> RuleList:
    """Read and validate the rule list at ``path`` (see :func:`parse_rules`): once per process while the file
    stays as it is (every sandbox of a ``warden serve`` shares one copy)."""
    return read_once(_LOADED, [path], lambda: _read_rules(path))


def _read_rules(path: Path) -> RuleList:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SandboxUnavailable(f"cannot read the seccomp rule list {path}: {exc}",
                                 hint="restore sandbox/seccomp.toml from the warden release") from exc
    return parse_rules(text)


def _libseccomp() -> Any:
    try:
        import pyseccomp  # type: ignore[import-untyped]
    except (ImportError, OSError, RuntimeError) as exc:
        raise SandboxUnavailable(f"libseccomp cannot be loaded ({exc}); warden cannot build its syscall filter",
                                 hint="install libseccomp: apt-get install libseccomp2") from exc
    return pyseccomp


_COMPILED: dict[tuple[str, bool, bool], bytes] = {}


def compile_filter(rules: RuleList, *, network: bool, memfd_noexec: bool = False) -> bytes:
    """Compile the applicable rules (see :meth:`RuleList.applicable`) to a classic-BPF program for the native
    architecture.

    The result is a pure function of the rules, so it is memoized by their digest (a few ms saved per launch).

    Raises:
        SandboxUnavailable: libseccomp is missing, or it does not know a syscall named in the list (an older
            libseccomp than the list was written for): the filter would have a hole, so nothing starts.
    """
    key = (rules.digest(network=network, memfd_noexec=memfd_noexec), network, memfd_noexec)
    cached = _COMPILED.get(key)
    if cached is not None:
        return cached
    program = _compile(rules.applicable(network=network, memfd_noexec=memfd_noexec))
    _COMPILED[key] = program
    return program


def _compile(rules: tuple[SeccompRule, ...]) -> bytes:
    sc = _libseccomp()
    ops = {"eq": sc.EQ, "ne": sc.NE, "ge": sc.GE, "masked_eq": sc.MASKED_EQ}
    try:
        filt = sc.SyscallFilter(sc.ALLOW)
        filt.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
        # A binary tree over syscall numbers instead of a linear list: every allowed syscall (the hot path of
        # a server) then costs a handful of BPF instructions, not one per rule.
        filt.set_attr(sc.Attr.CTL_OPTIMIZE, 2)
        for rule in rules:
            action = sc.ERRNO(getattr(errno, rule.action))
            for name in rule.syscalls:
                number = sc.resolve_syscall(sc.Arch.NATIVE, name)
                if number == -1:  # __NR_SCMP_ERROR: libseccomp has never heard of it
                    raise SandboxUnavailable(
                        f"libseccomp does not know the syscall {name!r} from the seccomp rule list",
                        hint="upgrade libseccomp2, or warden is newer than this system supports")
                for combo in rule.expanded():
                    args = [
                        sc.Arg(arg, ops[op], mask, value) if op == "masked_eq" else sc.Arg(arg, ops[op], value)
                        for arg, op, value, mask in combo
                    ]
                    filt.add_rule(action, number, *args)
        fd = data_memfd("warden-seccomp")
        try:
            with os.fdopen(os.dup(fd), "wb") as handle:
                filt.export_bpf(handle)
            os.lseek(fd, 0, os.SEEK_SET)
            chunks = []
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
        finally:
            os.close(fd)
    except OSError as exc:
        raise SandboxUnavailable(f"libseccomp could not build the syscall filter: {exc}",
                                 hint="run `warden doctor` to check the seccomp support of this system") from exc
    program = b"".join(chunks)
    if not program or len(program) % 8:
        raise SandboxUnavailable(f"libseccomp produced a malformed filter ({len(program)} bytes)",
                                 hint="run `warden doctor` to check the seccomp support of this system")
    return program
