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
rule. Secret values never appear in a policy file: ``env`` lists names passed from warden's environment, or is a
table whose values refer to ``${secret:NAME}`` (warden's secrets store) or ``${env:NAME}``; a literal is accepted
only under a name that does not look secret (see :mod:`warden.policy._values`).
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Annotated, Any, Literal, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from warden.egress import parse_allow_entry, parse_network
from warden.loopback import is_loopback
from warden.paths import absolute_path
from warden.policy._glob import check_glob
from warden.policy._rate import DEFAULT_ELICITATION_RATE, check_rate
from warden.policy._regex import check_linear
from warden.policy._sandbox import Limits, SandboxSettings, check_protected_names
from warden.policy._values import check_env_table, check_env_value, references, secret_reference

OnNew = Literal["ask", "deny", "tofu"]
OnChanged = Literal["ask", "deny"]
AuditDetail = Literal["hash", "redacted", "full"]
SamplingLevel = Literal["off", "on", "with-tools"]
ElicitationLevel = Literal["off", "form", "url"]
SandboxKind = Literal["bwrap", "container", "none"]
InstallScripts = Literal["never", "sandboxed"]

# Orders, least permissive (or least detailed) first; layering takes the minimum (audit detail: the maximum).
ON_NEW_ORDER: tuple[OnNew, ...] = ("deny", "ask", "tofu")
ON_CHANGED_ORDER: tuple[OnChanged, ...] = ("deny", "ask")
AUDIT_ORDER: tuple[AuditDetail, ...] = ("hash", "redacted", "full")
SAMPLING_ORDER: tuple[SamplingLevel, ...] = ("off", "on", "with-tools")
ELICITATION_ORDER: tuple[ElicitationLevel, ...] = ("off", "form", "url")
INSTALL_SCRIPTS_ORDER: tuple[InstallScripts, ...] = ("never", "sandboxed")

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




def _arg_path(v: str) -> str:
    if not _ARG_PATH.fullmatch(v):
        raise ValueError(f"{v!r} is not an argument path (property names joined by '.', '*' for array items)")
    return v


def _allow_entry(v: str) -> str:
    parse_allow_entry(v)  # EntryError is a ValueError: pydantic reports it with the file and line
    return v


def _address_range(v: str) -> str:
    parse_network(v)
    return v


ServerName = Annotated[str, AfterValidator(_server_name)]
EnvName = Annotated[str, AfterValidator(_env_name)]
EnvValue = Annotated[str, AfterValidator(check_env_value)]
Glob = Annotated[str, AfterValidator(check_glob)]
AbsDir = Annotated[str, AfterValidator(absolute_path)]
Regex = Annotated[str, AfterValidator(check_linear)]  # RE2: linear time on hostile input
ArgPath = Annotated[str, AfterValidator(_arg_path)]
AllowEntryText = Annotated[str, AfterValidator(_allow_entry)]
AddressRange = Annotated[str, AfterValidator(_address_range)]


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


class NetworkRules(_Strict):
    """``network.allow = ["api.github.com:443", "*.example.org:443"]``: the only destinations a server may reach,
    through warden's egress proxy (grammar in :mod:`warden.egress`). ``allow_addresses``: non-public ranges
    (loopback, private, link-local...) that an allowed name may resolve to; without one, such an answer is refused.
    In an org file both are ceilings: a user entry must lie inside an org entry."""

    allow: tuple[AllowEntryText, ...] = ()
    allow_addresses: tuple[AddressRange, ...] = ()


class Capabilities(_Strict):
    """What a server may ask of the host through warden. ``elicitation = "url"`` allows form and URL mode;
    ``elicitation_rate`` bounds how often (an org value is a ceiling: see ``_effective.py``)."""

    sampling: SamplingLevel = "off"
    sampling_context: bool = Field(default=False, description="forward includeContext='thisServer' when it can be "
                                                              "limited to this one server")
    elicitation: ElicitationLevel = "off"
    elicitation_rate: Annotated[str, AfterValidator(check_rate)] = Field(
        default=DEFAULT_ELICITATION_RATE, description='questions (form and URL) per window, "COUNT/UNIT" with UNIT '
                                                      's, min or h; past it a question is refused, not asked')
    roots: tuple[AbsDir, ...] = Field(default=(), description="directories the server may be told about")


FlowViolation = Literal["deny", "confirm"]
FLOW_VIOLATION_ORDER: tuple[FlowViolation, ...] = ("deny", "confirm")


class FlowRules(_Strict):
    """``[defaults.flow]`` / ``[servers.NAME.flow]``: tools that bring untrusted content in (sources) and tools that
    can carry data out (sinks); once a source answered in a host session, a sink is refused (or confirmed by a
    human). Globs match a tool name or ``server__tool``. See ``warden/policy/_flow.py``."""

    sources: tuple[Glob, ...] = ()
    sinks: tuple[Glob, ...] = ()
    exempt: tuple[Glob, ...] = Field(default=(), description="neither source nor sink, whatever annotations say")
    on_violation: FlowViolation = "deny"
    annotations: bool = Field(default=True, description="derive roles from readOnlyHint / openWorldHint")


ContentAction = Literal["redact", "deny"]
CONTENT_ACTION_ORDER: tuple[ContentAction, ...] = ("deny", "redact")
_RULE_NAME = re.compile(r"[a-z0-9][a-z0-9_\-]{0,63}")


def _rule_name(v: str) -> str:
    if not _RULE_NAME.fullmatch(v):
        raise ValueError(f"rule name {v!r} must be 1-64 of a-z 0-9 _ - (it names the rule in audit records)")
    return v


class ContentRule(_Strict):
    """``[[defaults.content.rules]]``: a pattern (RE2) that is cut out of, or refuses, results and/or arguments
    of the tools matching ``tools``."""

    name: Annotated[str, AfterValidator(_rule_name)]
    pattern: Regex
    on: Literal["results", "arguments", "both"] = "both"
    action: ContentAction | None = Field(default=None, description="default: the table's results / arguments")
    tools: tuple[Glob, ...] = ("*",)


class ContentRules(_Strict):
    """``[defaults.content]``: what the built-in detectors (provider keys, private keys, JWTs, the secrets
    registry) and the rules do. See ``warden/policy/_content.py``."""

    results: ContentAction = "redact"
    arguments: ContentAction = "deny"
    max_scan_bytes: int = Field(default=16 << 20, ge=1024, le=64 << 20,
                                description="a larger result is refused, never passed unscanned")
    rules: tuple[ContentRule, ...] = ()


class ServerRules(_Strict):
    """The shared vocabulary of ``[defaults]`` and ``[servers.NAME]`` in both layers."""

    on_new: OnNew = "ask"
    on_changed: OnChanged = "ask"
    audit_arguments: AuditDetail = "hash"
    network: Literal["none"] | NetworkRules = Field(default="none", description='"none", or a table with allow '
                                                                                 '(and allow_addresses)')
    tools: Rules = Rules()
    prompts: Rules = Rules()
    resources: Rules = Rules()
    arguments: tuple[ArgumentRule, ...] = ()
    capabilities: Capabilities = Capabilities()
    flow: FlowRules = FlowRules()
    content: ContentRules = ContentRules()
    # Package intake (npx / uvx / pipx servers, warden.intake): an org value is a floor / a ceiling.
    release_age_hours: int = Field(default=72, ge=0, le=24 * 366,
                                   description="take no package version published less than this long ago")
    install_scripts: InstallScripts = Field(default="never", description="npm install scripts: never run, or run "
                                                                         "in a sandbox without network")
    shared: bool = Field(default=True, description="behind `warden serve --http`: false runs one process of this "
                                                   "server per principal, so what it keeps reaches no other")


class ServerEntry(ServerRules):
    """``[servers.NAME]``: the rules plus how to launch it (user config only)."""

    command: str | None = None
    args: tuple[str, ...] | None = None
    env: tuple[EnvName, ...] | dict[EnvName, EnvValue] | None = Field(
        default=None, description="names passed from warden's environment, or a table NAME = value where value is "
                                  "'${secret:S}' (from `warden secrets`), '${env:V}' or a short literal switch")
    sandbox: SandboxSettings | None = None
    url: str | None = Field(default=None, description="a remote server's http(s):// MCP endpoint, instead of "
                                                       "command")
    auth: dict[str, str | int | float] | None = Field(
        default=None, description='a remote server\'s authorization: { type = "oauth", client_id = ..., ... } '
                                  "(its keys are checked by warden.auth)")

    @model_validator(mode="after")
    def _url_or_command(self) -> Self:
        if self.url is not None and (self.command is not None or self.args is not None):
            raise ValueError("give either url (a remote server) or command and args, not both")
        if self.url is not None and not self.url.lower().startswith(("http://", "https://")):
            raise ValueError("url must be an http:// or https:// URL")
        return self

    @field_validator("env")
    @classmethod
    def _secret_names_take_no_literals(cls, env: tuple[str, ...] | dict[str, str] | None) -> Any:
        if isinstance(env, dict):
            check_env_table(env)
        return env

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
    protected_names: tuple[str, ...] = Field(default=(), description="write-dir entries every server keeps "
                                             "read-only, whatever its own protected_names say")

    @field_validator("protected_names")
    @classmethod
    def _check_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return check_protected_names(value)


def _approval_url(v: str) -> str:
    parts = urllib.parse.urlsplit(v)
    if parts.scheme == "https" and parts.hostname:
        return v
    if parts.scheme == "http" and parts.hostname and is_loopback(parts.hostname):
        return v
    raise ValueError(f"{v!r}: an approval webhook is https (or http on loopback only: the request carries what a "
                     "human is asked to approve)")


def _approval_secret(v: str) -> str:
    check_env_value(v)
    refs = references(v)
    if len(refs) != 1 or refs[0][0] != "secret" or v != secret_reference(refs[0][1]):
        raise ValueError("the webhook's HMAC key is named, never written here: secret = \"${secret:NAME}\" (set it "
                         "with `warden secrets set NAME`)")
    return v


class ApprovalsTable(_Strict):
    """``[approvals]``: where a call that needs a human goes when no one can be asked in-band -- a signed webhook
    (``warden/consent/_webhook.py`` documents the messages and how to wire a chat service). In an org policy it
    replaces the user's."""

    webhook: Annotated[str, AfterValidator(_approval_url)]
    secret: Annotated[str, AfterValidator(_approval_secret)]
    timeout_seconds: float = Field(default=120.0, gt=0, le=3600, description="how long a human has to answer")


class PolicyFile(_Strict):
    """A whole file: a user config, or an org policy when it has an ``[org]`` table."""

    org: OrgTable | None = None
    approvals: ApprovalsTable | None = None
    defaults: ServerEntry = ServerEntry()
    servers: dict[ServerName, ServerEntry] = {}

    @model_validator(mode="after")
    def _defaults_launch_nothing(self) -> Self:
        if self.defaults.command is not None or self.defaults.args is not None or self.defaults.url is not None:
            raise ValueError("[defaults] cannot name a command; put it under [servers.NAME]")
        return self


LAUNCH_KEYS = ("command", "args", "env", "sandbox", "url", "auth")
