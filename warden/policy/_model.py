"""The policy file vocabulary, as pydantic models. One schema serves both layers:

* a **user config** (``--config``; default ``$XDG_CONFIG_HOME/warden/warden.toml``) has ``[defaults]`` and
  ``[servers.NAME]`` tables: how each server is launched (command, args, env *names*, ``[servers.NAME.sandbox]``)
  and what it may do (tools/prompts/resources rules, argument rules, capabilities, audit detail, pin handling);
* an **org policy** (``/etc/warden/policy.toml`` or ``$WARDEN_ORG_POLICY``) has an ``[org]`` table of launch
  ceilings (commands, env names, sandbox kinds, directories, limits) plus the same ``[defaults]`` /
  ``[servers.NAME]`` rule tables, which there act as ceilings and mandatory rules: the effective policy is the
  intersection (see ``_effective.py``). Launch settings (command, args, env, sandbox) are not valid in an org
  file's server tables; the ``[org]`` table bounds them.

Every model forbids unknown keys, so a typo (``alow = [...]``) is an error with its line, never a silently ignored
rule. Values of env vars never appear in a policy file: ``env`` lists names only.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model, model_validator

from warden.paths import absolute_path
from warden.policy._glob import check_glob
from warden.sandbox.settings import Limits, SandboxSettings

OnNew = Literal["ask", "deny", "tofu"]
OnChanged = Literal["ask", "deny"]
AuditDetail = Literal["hash", "redacted", "full"]
SamplingLevel = Literal["off", "on", "with-tools"]
ElicitationLevel = Literal["off", "form", "url"]
SandboxKind = Literal["bwrap", "container", "none"]

# Orders, least permissive (or least detailed) first; layering takes the minimum (audit detail: the maximum).
ON_NEW_ORDER: tuple[OnNew, ...] = ("deny", "ask", "tofu")
ON_CHANGED_ORDER: tuple[OnChanged, ...] = ("deny", "ask")
AUDIT_ORDER: tuple[AuditDetail, ...] = ("hash", "redacted", "full")
SAMPLING_ORDER: tuple[SamplingLevel, ...] = ("off", "on", "with-tools")
ELICITATION_ORDER: tuple[ElicitationLevel, ...] = ("off", "form", "url")

_SERVER_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ARG_PATH = re.compile(r"(\*|[^.*\s]+)(\.(\*|[^.*\s]+))*")


def _server_name(v: str) -> str:
    if not _SERVER_NAME.fullmatch(v):
        raise ValueError(f"server name {v!r} must be 1-64 of A-Z a-z 0-9 _ . -")
    return v


def _env_name(v: str) -> str:
    if not _ENV_NAME.fullmatch(v):
        raise ValueError(f"{v!r} is not an environment variable name (values never go in a policy file)")
    if v.upper().startswith("WARDEN_"):
        raise ValueError(f"{v!r}: warden's own variables (they locate its state) are never passed to a server")
    return v


def _regex(v: str) -> str:
    try:
        re.compile(v)
    except re.error as exc:
        raise ValueError(f"invalid regular expression: {exc}") from exc
    return v


def _arg_path(v: str) -> str:
    if not _ARG_PATH.fullmatch(v):
        raise ValueError(f"{v!r} is not an argument path (property names joined by '.', '*' for array items)")
    return v


ServerName = Annotated[str, AfterValidator(_server_name)]
EnvName = Annotated[str, AfterValidator(_env_name)]
Glob = Annotated[str, AfterValidator(check_glob)]
AbsDir = Annotated[str, AfterValidator(absolute_path)]
Regex = Annotated[str, AfterValidator(_regex)]
ArgPath = Annotated[str, AfterValidator(_arg_path)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Rules(_Strict):
    """Which names (tools, prompts) or URIs (resources) may be used. ``allow`` absent = no opinion at this level
    (an org file then sets no ceiling; a user file falls back to its ``[defaults]``, then to ``["*"]``)."""

    allow: tuple[Glob, ...] | None = None
    deny: tuple[Glob, ...] = ()
    confirm: tuple[Glob, ...] = Field(default=(), description="ask a human for each call, bound to its arguments")


class ArgumentRule(_Strict):
    """A limit on one argument of the tools matching ``tool``; every rule that matches a call must pass."""

    tool: Glob
    argument: ArgPath
    under: tuple[AbsDir, ...] | None = Field(default=None, description="path argument must lie under one of these")
    enum: tuple[str | bool | int, ...] | None = None
    pattern: Regex | None = Field(default=None, description="the string value must match this regex entirely")
    max_length: int | None = Field(default=None, ge=0)
    required: bool = False

    @model_validator(mode="after")
    def _has_a_limit(self) -> Self:
        if self.under is None and self.enum is None and self.pattern is None and self.max_length is None \
                and not self.required:
            raise ValueError("an argument rule needs at least one of under, enum, pattern, max_length, required")
        return self


class Capabilities(_Strict):
    """What a server may ask of the host through warden. ``elicitation = "url"`` allows form and URL mode."""

    sampling: SamplingLevel = "off"
    sampling_context: bool = Field(default=False, description="forward includeContext='thisServer' when it can be "
                                                              "limited to this one server")
    elicitation: ElicitationLevel = "off"
    roots: tuple[AbsDir, ...] = Field(default=(), description="directories the server may be told about")


class ServerRules(_Strict):
    """The shared vocabulary of ``[defaults]`` and ``[servers.NAME]`` in both layers."""

    on_new: OnNew = "ask"
    on_changed: OnChanged = "ask"
    audit_arguments: AuditDetail = "hash"
    network: Literal["none"] = "none"
    tools: Rules = Rules()
    prompts: Rules = Rules()
    resources: Rules = Rules()
    arguments: tuple[ArgumentRule, ...] = ()
    capabilities: Capabilities = Capabilities()


class ServerEntry(ServerRules):
    """``[servers.NAME]``: the rules plus how to launch it (user config only)."""

    command: str | None = None
    args: tuple[str, ...] | None = None
    env: tuple[EnvName, ...] | None = None
    sandbox: SandboxSettings | None = None

    @model_validator(mode="after")
    def _args_need_command(self) -> Self:
        if self.args is not None and self.command is None:
            raise ValueError("args given without command")
        if self.command is not None and (not self.command or "\x00" in self.command):
            raise ValueError("command must be a non-empty string")
        return self


_LIMIT_FIELDS: dict[str, Any] = {
    name: (int | None, Field(default=None, ge=1, description=f"at most this {info.description or name}"))
    for name, info in Limits.model_fields.items()
}
OrgLimits = create_model("OrgLimits", __config__=ConfigDict(extra="forbid", frozen=True), **_LIMIT_FIELDS)


class OrgTable(_Strict):
    """``[org]``: ceilings on how any server may be launched. Absent lists mean "no ceiling" except
    ``sandbox_kinds``, which defaults to sandboxed kinds only: an org policy must say ``"none"`` to allow it."""

    commands: tuple[Glob, ...] | None = Field(default=None, description="globs over the whole command line")
    env: tuple[Glob, ...] | None = Field(default=None, description="globs over env names a server may receive")
    sandbox_kinds: tuple[SandboxKind, ...] = ("bwrap", "container")
    read_dirs: tuple[AbsDir, ...] | None = None
    write_dirs: tuple[AbsDir, ...] | None = None
    limits: OrgLimits | None = None  # type: ignore[valid-type]


class PolicyFile(_Strict):
    """A whole file: a user config, or an org policy when it has an ``[org]`` table."""

    org: OrgTable | None = None
    defaults: ServerEntry = ServerEntry()
    servers: dict[ServerName, ServerEntry] = {}

    @model_validator(mode="after")
    def _defaults_launch_nothing(self) -> Self:
        if self.defaults.command is not None or self.defaults.args is not None:
            raise ValueError("[defaults] cannot name a command; put it under [servers.NAME]")
        return self


LAUNCH_KEYS = ("command", "args", "env", "sandbox")
