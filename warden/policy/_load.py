"""Load policy files into validated models, turning every problem into ``file:line: key: message``."""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, final

from pydantic import BaseModel, ValidationError

from warden.errors import ConfigError
from warden.policy._model import LAUNCH_KEYS, PolicyFile
from warden.policy._sandbox import SandboxSettings
from warden.policy._toml import KeyPath, line_of, load_toml, parse_toml

Role = Literal["org", "user"]
DEFAULT_ORG_POLICY = Path("/etc/warden/policy.toml")


def _known_keys() -> set[str]:
    keys: set[str] = set()
    todo: list[type[BaseModel]] = [PolicyFile, SandboxSettings]
    seen: set[type[BaseModel]] = set()
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, info in model.model_fields.items():
            keys.add(name)
            for arg in (info.annotation, *getattr(info.annotation, "__args__", ())):
                for sub in (arg, *getattr(arg, "__args__", ())):
                    if isinstance(sub, type) and issubclass(sub, BaseModel):
                        todo.append(sub)
    return keys


_KNOWN_KEYS = _known_keys()


@final
@dataclass(frozen=True, slots=True)
class LoadedFile:
    """One validated policy file and where each of its keys is written."""

    path: Path
    role: Role
    model: PolicyFile
    lines: Mapping[KeyPath, int]
    sha256: str

    def line(self, path: KeyPath) -> int | None:
        return line_of(dict(self.lines), path)


def dotted(path: Sequence[str | int]) -> str:
    """A key path as a reader writes it: ``servers.s.tools.allow[0]``."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _problem(file: Path, lines: Mapping[KeyPath, int], loc: KeyPath, msg: str) -> str:
    line = line_of(dict(lines), loc)
    where = f"{file}:{line}" if line is not None else f"{file}"
    return f"{where}: {dotted(loc) or '(top level)'}: {msg}"


def _describe(err: Mapping[str, Any]) -> str:
    loc = err["loc"]
    if err["type"] == "extra_forbidden":
        key = str(loc[-1]) if loc else ""
        close = difflib.get_close_matches(key, _KNOWN_KEYS, n=1, cutoff=0.7)
        return f"unknown key {key!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] in ("literal_error", "enum"):
        msg += f" (got {err.get('input')!r})"
    return msg


def parse_policy(doc: Mapping[str, Any], lines: Mapping[KeyPath, int], *, path: Path, role: Role,
                 raw: bytes = b"") -> LoadedFile:
    """Validate a parsed document as ``role``; raise one :class:`ConfigError` listing every problem."""
    problems: list[str] = []
    model: PolicyFile | None = None
    try:
        model = PolicyFile.model_validate(doc)
    except ValidationError as exc:
        for err in exc.errors():
            loc = tuple(p for p in err["loc"] if isinstance(p, str | int) and p != "[key]")
            problems.append(_problem(path, lines, loc, _describe(err)))
    if model is not None:
        if role == "user" and model.org is not None:
            problems.append(_problem(path, lines, ("org",), "the [org] table is only valid in an org policy"))
        if role == "org":
            tables = [(("defaults",), model.defaults)] + [(("servers", n), e) for n, e in model.servers.items()]
            for prefix, entry in tables:
                for key in LAUNCH_KEYS:
                    if key in entry.model_fields_set:
                        problems.append(_problem(path, lines, (*prefix, key),
                                                 f"{key!r} is a launch setting of a user config; an org policy "
                                                 "bounds launches in its [org] table"))
    if problems or model is None:
        problems.sort(key=lambda p: int(p.split(":")[1]) if p.split(":")[1].isdigit() else 0)
        raise ConfigError(f"{len(problems)} problem(s) in {path}:", details=problems,
                          hint=f"fix {path} and check it with `warden policy check {path}`")
    return LoadedFile(path=path, role=role, model=model, lines=dict(lines),
                      sha256=hashlib.sha256(raw).hexdigest())


def load_policy_file(path: Path, role: Role | None = None) -> LoadedFile:
    """Read, parse and validate ``path``. ``role=None`` detects it: a file with an ``[org]`` table is an org
    policy, anything else a user config.

    Raises:
        ConfigError: unreadable, invalid TOML, unknown keys, bad globs or values (each with file:line).
    """
    doc, lines, raw = load_toml(path)
    if role is None:
        role = "org" if "org" in doc else "user"
    return parse_policy(doc, lines, path=path, role=role, raw=raw)


def load_policy_bytes(raw: bytes, path: Path, role: Role | None = None) -> LoadedFile:
    """:func:`load_policy_file` on bytes not yet written (``warden import`` checks the config it would write).

    Raises:
        ConfigError: as :func:`load_policy_file`.
    """
    doc, lines, raw = parse_toml(raw, path)
    if role is None:
        role = "org" if "org" in doc else "user"
    return parse_policy(doc, lines, path=path, role=role, raw=raw)


def org_policy_path(env: Mapping[str, str], default: Path = DEFAULT_ORG_POLICY) -> tuple[Path | None, bool]:
    """Where the org policy is and whether it must exist: ``$WARDEN_ORG_POLICY`` (must exist) else ``default``
    (optional). Returns ``(None, False)`` when neither applies."""
    explicit = env.get("WARDEN_ORG_POLICY")
    if explicit:
        return Path(explicit), True
    return default, False
