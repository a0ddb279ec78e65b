"""Sandbox profiles as data: ``sandbox/profiles/*.toml``, validated here.

``base.toml`` lists what every sandbox gets (system directories, a few public ``/etc`` files, synthesized account
files, scratch tmpfs, the environment). Each runtime profile (``node``, ``python``, ``binary``) names the
*finders* that decide which host paths the server's runtime needs; the finders themselves are code in
:mod:`warden.sandbox._runtime`, because they inspect the filesystem. Every entry carries a ``why``, shown by
``warden doctor`` and the manifest, so a reviewer can see what is exposed and the reason.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from warden.errors import SandboxUnavailable
from warden.paths import absolute_path, read_once

ProfileName = Literal["node", "python", "binary"]
Finder = Literal["runtime_prefix", "node_modules", "package_json", "venv", "script", "executable"]
SYNTHESIZED = ("/etc/passwd", "/etc/group", "/etc/hosts", "/etc/nsswitch.conf", "/etc/hostname", "/etc/gitconfig")


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    why: str = Field(min_length=1)

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        return absolute_path(value)


class _Scratch(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tmp: str
    home: str
    why: str = Field(min_length=1)

    @field_validator("tmp", "home")
    @classmethod
    def _path(cls, value: str) -> str:
        return absolute_path(value)


class BaseProfile(BaseModel):
    """``base.toml``: the part of every sandbox that does not depend on the server."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    why: str = Field(min_length=1)
    system: tuple[_Entry, ...] = Field(min_length=1)
    etc: tuple[_Entry, ...] = ()
    synthesized: tuple[_Entry, ...] = ()
    scratch: _Scratch
    env: dict[str, str]

    @field_validator("synthesized")
    @classmethod
    def _known(cls, value: tuple[_Entry, ...]) -> tuple[_Entry, ...]:
        for entry in value:
            if entry.path not in SYNTHESIZED:
                raise ValueError(f"warden does not know how to synthesize {entry.path}")
        return value

    @field_validator("etc")
    @classmethod
    def _under_etc(cls, value: tuple[_Entry, ...]) -> tuple[_Entry, ...]:
        for entry in value:
            if not entry.path.startswith("/etc/"):
                raise ValueError(f"{entry.path} is not under /etc")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for name in ("PATH", "HOME"):
            if name not in value:
                raise ValueError(f"the base environment must set {name}")
        return value


class _Bind(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    finds: Finder
    why: str = Field(min_length=1)


class RuntimeProfile(BaseModel):
    """One runtime profile: which interpreters select it, which finders run, extra environment."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: ProfileName
    why: str = Field(min_length=1)
    interpreters: tuple[str, ...] = ()
    bind: tuple[_Bind, ...] = Field(min_length=1)
    env: dict[str, str] = {}

    def why_for(self, finder: Finder) -> str | None:
        for item in self.bind:
            if item.finds == finder:
                return item.why
        return None


@dataclass(frozen=True, slots=True)
class Profiles:
    """The base profile and the runtime profiles by name."""

    base: BaseProfile
    runtimes: dict[str, RuntimeProfile]


_RUNTIMES: Final = ("node", "python", "binary")


def _load(path: Path) -> object:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SandboxUnavailable(f"cannot read sandbox profile {path}: {exc}",
                                 hint="restore sandbox/profiles/ from the warden release") from exc


_LOADED: dict[tuple[object, ...], Profiles] = {}


def load_profiles(directory: Path) -> Profiles:
    """Load ``base.toml`` and the runtime profiles from ``directory``: once per process while the files stay as
    they are (every sandbox of a ``warden serve`` shares one copy; the models are frozen).

    Raises:
        SandboxUnavailable: a profile is missing or invalid; warden will not guess what a sandbox should hold.
    """
    files = [directory / f"{name}.toml" for name in ("base", *_RUNTIMES)]
    return read_once(_LOADED, files, lambda: _read_profiles(directory))


def _read_profiles(directory: Path) -> Profiles:
    try:
        base = BaseProfile.model_validate(_load(directory / "base.toml"))
        runtimes: dict[str, RuntimeProfile] = {}
        for name in _RUNTIMES:
            profile = RuntimeProfile.model_validate(_load(directory / f"{name}.toml"))
            if profile.name != name:
                raise SandboxUnavailable(f"sandbox profile {name}.toml names itself {profile.name!r}",
                                         hint="restore sandbox/profiles/ from the warden release")
            runtimes[name] = profile
    except ValidationError as exc:
        raise SandboxUnavailable(f"a sandbox profile in {directory} is invalid: {exc}",
                                 hint="restore sandbox/profiles/ from the warden release") from exc
    return Profiles(base=base, runtimes=runtimes)
