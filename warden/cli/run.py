"""``warden run [--name NAME] -- CMD ARGS``: be the MCP server a host starts, in front of the real one.

The host talks to warden on stdin/stdout exactly as it would talk to ``CMD ARGS``. warden's own diagnostics and the
server's stderr go to warden's stderr (never stdout, which belongs to the protocol).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import logging
import os
import re
import signal
import sys
import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, final

import trio
from pydantic import ValidationError

from warden import audit, logs
from warden.audit import cosign_in_background
from warden.cli import _http as http_cli
from warden.cli._common import CommandContext, run_trio
from warden.cli.intake import intake_policy
from warden.consent import WebhookApprovals
from warden.egress import EgressRecorder, SandboxEgress
from warden.errors import ConfigError, IntakeError, LaunchError, SandboxUnavailable, WardenError
from warden.escape import for_terminal
from warden.gateway.core import Gateway
from warden.gateway.guard import Guard
from warden.gateway.mrtr import load_state_key
from warden.gateway.recorder import Recorder
from warden.gateway.stdio import StdioHost
from warden.intake import IntakeResult, PackageRequest, Store, package_record, parse_runner, take_in
from warden.launcher import Launcher, LaunchSpec
from warden.policy import (
    PinStore,
    ServerPolicy,
    Setting,
    Source,
    decide,
    host_process_session,
    launch_facts,
    launch_manifest,
    load_effective_policy,
    references,
    resolve_env,
    unpassed_env_warning,
)
from warden.policy.pins import digest as canonical_digest
from warden.protocol.framing import DEFAULT_MAX_MESSAGE_SIZE
from warden.protocol.paging import DEFAULT_MAX_BYTES, DEFAULT_MAX_ITEMS, ListLimits
from warden.protocol.request_state import StateSigner
from warden.sandbox import SandboxSettings, make_launcher, manifest_notes
from warden.secrets import Redactor, SecretStore, hand_to_server, load_redactor
from warden.transport.channel import MessageChannel
from warden.transport.http_config import (
    auth_headers_from_config,
    headers_from_env,
    http_config,
    http_server_name,
    is_http_url,
)
from warden.upstream.connection import Connection, Connector, StdioConnector, Upstream, UpstreamOptions
from warden.upstream.eras import EraMemory

if TYPE_CHECKING:  # the HTTP pieces are imported where they are used: a stdio `warden run` never loads them
    from warden.auth import AuditSink, GrantEvent, OAuthClient
    from warden.gateway.http import HttpOptions

log = logging.getLogger(__name__)

_RUNNERS = {"npx", "uvx", "node", "python", "python3", "bunx", "deno", "uv", "pipx", "npm", "pnpm", "yarn"}


_GENERIC = {"index", "main", "server", "cli", "app", "run", "start", "__main__", "dist", "build", "lib", "bin",
            "src", "out", "node_modules"}


def derive_name(argv: Sequence[str]) -> str:
    """A readable server name from its command: the package or script for runners (``npx -y pkg`` -> ``pkg``),
    else the executable's name. Scoped npm names keep the part after the slash; a generic script name
    (``dist/index.js``) gives way to the package directory it lives in (``server-everything``)."""
    if len(argv) == 1 and is_http_url(argv[0]):
        return http_server_name(argv[0])
    word = PurePath(argv[0]).name
    if word in _RUNNERS or re.fullmatch(r"python3(\.\d+)?", word):
        rest = [a for a in argv[1:] if not a.startswith("-") and a not in ("run", "exec", "tool", "dlx")]
        if rest:
            word = rest[0]
    parts = [re.sub(r"\.(py|js|mjs|cjs|ts)$", "", p) for p in PurePath(word).parts if p != "/"]
    while len(parts) > 1 and parts[-1] in _GENERIC:
        parts.pop()
    last = parts[-1].lstrip("@") if parts else ""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", last.split("@")[0]).strip("-.")  # "pkg@1.2" -> "pkg"
    return name or "server"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "run", help="serve a host on stdio in front of a real MCP server",
        description="Start CMD ARGS as an MCP server and serve a host on stdin/stdout in front of it.")
    parser.add_argument("--name", help="the server's name in pins, audit records and messages "
                                       "(default: derived from the command)")
    add_request_limits(parser)
    parser.add_argument("--probe-timeout", type=float, default=10.0, metavar="SECONDS",
                        help="how long server/discover may take before the server is treated as legacy")
    parser.add_argument("--handshake-timeout", type=float, default=30.0, metavar="SECONDS",
                        help="how long a legacy server may take to answer initialize (default 30)")
    parser.add_argument("--shutdown-grace", type=float, default=2.0, metavar="SECONDS",
                        help="wait this long after closing the server's stdin, then again after SIGTERM, "
                             "before SIGKILL (default 2)")
    parser.add_argument("--max-message-size", type=int, default=DEFAULT_MAX_MESSAGE_SIZE, metavar="BYTES",
                        help="largest JSON-RPC message accepted from either side (default 16 MiB)")
    parser.add_argument("--list-max-items", type=int, default=DEFAULT_MAX_ITEMS, metavar="N",
                        help=f"most entries one server list (tools, prompts, resources) may have "
                             f"(default {DEFAULT_MAX_ITEMS})")
    parser.add_argument("--list-max-bytes", type=int, default=DEFAULT_MAX_BYTES, metavar="BYTES",
                        help=f"most bytes of page text one server list may take (default {DEFAULT_MAX_BYTES // 2**20} "
                             "MiB)")
    parser.add_argument("--read", action="append", default=[], metavar="DIR",
                        help="let the server read DIR (and below), added to the config's read_dirs; repeatable")
    parser.add_argument("--write", action="append", default=[], metavar="DIR",
                        help="let the server read and write DIR (and below), added to the config's write_dirs; "
                             "repeatable. When warden runs as root the server runs as DIR's owner, so what it "
                             "creates there is theirs")
    add_output_switches(parser)
    parser.add_argument("--header", action="append", default=[], metavar="NAME=ENVVAR",
                        help="for an http(s):// server: send header NAME with the value of environment variable "
                             "ENVVAR on every request to that origin (e.g. Authorization=MY_TOKEN; a bare token "
                             "gets 'Bearer '). Repeatable.")
    oauth = parser.add_argument_group(
        "OAuth (http(s):// servers that answer 401)",
        "warden authorizes itself with the server's authorization server: it shows the URL to open (and opens a "
        "browser only with your consent) and keeps the tokens in its secrets store, bound to the server.")
    oauth.add_argument("--oauth-client-id", metavar="ID", help="a client pre-registered at the authorization server "
                                                                 "(default: register dynamically)")
    oauth.add_argument("--oauth-client-secret-env", metavar="ENVVAR",
                       help="the environment variable holding that client's secret")
    oauth.add_argument("--oauth-issuer", metavar="URL",
                       help="the authorization server the pre-registered client belongs to")
    oauth.add_argument("--oauth-client-metadata-url", metavar="URL",
                       help="an https URL serving warden's client ID metadata document, used where supported")
    oauth.add_argument("--oauth-browser", choices=("ask", "always", "never"),
                       help="ask before opening a browser (default; headless: print the URL only), always open it, "
                            "or never")
    oauth.add_argument("--oauth-redirect-port", type=int, metavar="PORT",
                       help="the loopback port for the redirect (default: any free port)")
    oauth.add_argument("--oauth-timeout", type=float, metavar="SECONDS",
                       help="how long an authorization may take (default 300)")
    http_cli.add_arguments(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS: the server to run")
    parser.set_defaults(func=run_command)


def add_request_limits(parser: argparse.ArgumentParser) -> None:
    """``--request-timeout`` and ``--max-request-time``, as ``warden run`` and ``warden serve`` take them."""
    parser.add_argument("--request-timeout", type=float, default=50.0, metavar="SECONDS",
                        help="per-request timeout, reset by progress (default 50; keep below the host's)")
    parser.add_argument("--max-request-time", type=float, default=600.0, metavar="SECONDS",
                        help="hard limit for any request, progress or not (default 600)")


def add_output_switches(parser: argparse.ArgumentParser) -> None:
    """``--quiet-server`` and ``--unsafe-no-audit``, as ``warden run`` and ``warden serve`` take them."""
    parser.add_argument("--quiet-server", action="store_true", help="do not copy servers' stderr to ours")
    parser.add_argument("--unsafe-no-audit", action="store_true",
                        help="do not write the audit log (for measurements only: nothing is recorded)")


def configure_logging(args: argparse.Namespace) -> None:
    """warden's log at the level ``-v`` asks for; servers' stderr copied to it unless ``--quiet-server``."""
    logs.configure(logging.WARNING - 10 * min(args.verbose, 2))
    logging.getLogger("warden.server").setLevel(logging.WARNING if args.quiet_server else logging.INFO)


def run_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    argv = list(args.command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv and not args.name:
        raise ConfigError("no server command given",
                          hint="usage: warden run [--name NAME] -- CMD ARGS   (or: warden run --name NAME, for a "
                               "server configured in your config file)")
    options = UpstreamOptions(
        request_timeout=args.request_timeout, max_request_time=args.max_request_time,
        probe_timeout=args.probe_timeout, handshake_timeout=args.handshake_timeout,
        stdin_close_grace=args.shutdown_grace, terminate_grace=args.shutdown_grace,
        max_message_size=args.max_message_size,
        list_limits=ListLimits(max_items=args.list_max_items, max_bytes=args.list_max_bytes))
    configure_logging(args)
    try:
        http = http_cli.http_from_args(ctx, args, max_body_size=options.max_message_size,
                                       question_timeout=options.max_request_time)
        plan = plan_server(ctx, args.name or derive_name(argv), argv or None, options, http_headers=args.header,
                           read_dirs=args.read, write_dirs=args.write, oauth=_oauth_options(args))
        plan = dataclasses.replace(plan, audit=not args.unsafe_no_audit)
        if http is not None:
            return run_trio(serve_http_hosts, plan, options, *http)
        return run_trio(_serve_stdio, plan, options)
    finally:
        logs.shutdown()


def _oauth_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--oauth-*`` flags as the keys of an ``auth = { type = "oauth", ... }`` block (unset ones left out: a
    flag given wins over the config's block, the block over the defaults)."""
    values = {"client_id": args.oauth_client_id, "client_secret_env": args.oauth_client_secret_env,
              "issuer": args.oauth_issuer, "client_metadata_url": args.oauth_client_metadata_url,
              "browser": args.oauth_browser, "redirect_port": args.oauth_redirect_port, "timeout": args.oauth_timeout}
    return {key: value for key, value in values.items() if value is not None}


@final
@dataclass(frozen=True, slots=True)
class ServerPlan:
    """Everything decided before the first byte flows: policy, launch, identity. When the server must not start,
    the connector refuses; warden still answers the host, with that error, so the host is told why."""

    name: str
    connector: Connector
    guard: Guard
    state_dir: Path
    redactor: Redactor
    """The secrets registry as this process knows it (the state dir's, and what this launch hands the server):
    the host channel, warden's log, the server's stderr and the audit log all redact with it."""
    audit: bool = True
    intake: IntakeResult | None = None
    """The package fetched into warden's store for this start (``npx``/``uvx``/``pipx run``), if one was."""
    egress: SandboxEgress | None = None
    """The server's egress proxy (``network.allow``): served for as long as the gateway, recording to its log."""
    oauth: OAuthClient | None = None
    """The OAuth client of a remote server warden authorizes itself to (its grants become audit records)."""
    handed: str = ""
    """A digest of the values the launch hands the server (its environment, ``--header`` values): a reload starts
    again a server whose secret or variable changed value, though its identity (which holds the names) did not."""


@final
class _Refused:
    """A connector that refuses: the launch was denied or the sandbox cannot be built (fail closed)."""

    def __init__(self, error: WardenError) -> None:
        self._error = error

    async def connect(self) -> Connection:
        raise self._error


def _launcher_for(server: ServerPolicy, spec: LaunchSpec | None, state_dir: Path,
                  env: Mapping[str, str], egress: SandboxEgress | None) -> Launcher:
    """The launcher the policy allows for ``server`` (fail closed: a refusal raises ``LaunchError``)."""
    decision = decide(launch_facts(server))
    if not decision.allowed or spec is None:
        raise LaunchError(f"launch refused: {decision.reason} [{decision.rule}]", hint=decision.hint)
    return make_launcher(server.sandbox.value, state_dir=state_dir, host_env=env, egress=egress)


def _http_connector(server: ServerPolicy, name: str, ctx: CommandContext, env: Mapping[str, str],
                    header_specs: Sequence[str], options: UpstreamOptions, state_dir: Path,
                    oauth: Mapping[str, Any]) -> tuple[Connector, dict[str, Any], OAuthClient | None]:
    """A remote server: nothing to launch or sandbox; the org's command rules still apply to its URL. Header values
    come from ``env`` (warden's environment, and the server's resolved env table: ``${secret:}`` values); the
    identity manifest names the URL and the header *names* only. Unless an ``Authorization`` header is configured,
    warden answers the server's 401s with OAuth (:mod:`warden.auth`)."""
    decision = decide(launch_facts(server))
    if not decision.allowed:
        raise LaunchError(f"connection refused: {decision.reason} [{decision.rule}]", hint=decision.hint)
    from warden.auth import CredentialStore, OAuthClient, oauth_settings
    from warden.transport.http_client import HttpConnector

    headers = headers_from_env(header_specs, env)
    block = dict(server.auth)
    if block:
        headers += auth_headers_from_config(block, env)
    settings = http_config(server.argv[0], headers=headers, max_message_size=options.max_message_size,
                           list_limits=options.list_limits)
    client = None
    if not any(header.lower() == "authorization" for header, _ in headers):
        configured = {k: v for k, v in block.items() if k != "type"} if block.get("type") == "oauth" else {}
        client = OAuthClient(settings.url, name, oauth_settings({**configured, **oauth}, env),
                             CredentialStore(SecretStore(state_dir)))
    return HttpConnector(settings, name, auth=client), {"kind": "http", "url": settings.url,
                                                        "headers": sorted(header for header, _ in headers)}, client


def _handed(server: ServerPolicy, env: Mapping[str, str], header_specs: Sequence[str],
            host_env: Mapping[str, str], secret: Callable[[str], str]) -> dict[str, str]:
    """What this launch gives the server that did not come from the config file (invariant 10: each value is
    registered for redaction before the server starts): every ``${env:V}`` and ``${secret:NAME}`` an env value
    refers to (``env = ["X"]`` is ``X = "${env:X}"``), and the variables ``--header`` names. Literal text in the
    config is in the file in clear already and is not registered (a path would be blanked from every line)."""
    handed: dict[str, str] = {}
    for name, spec in server.env_values.items():
        refs = references(spec) if name in env else []
        for kind, ref in refs:
            label = name if len(refs) == 1 else f"{name} (${{{kind}:{ref}}})"
            handed[label] = secret(ref) if kind == "secret" else host_env.get(ref, "")
    for spec in header_specs:
        var = spec.partition("=")[2]
        if host_env.get(var):
            handed[var] = host_env[var]
    return handed


def with_dirs(server: ServerPolicy, read_dirs: Sequence[str], write_dirs: Sequence[str]) -> ServerPolicy:
    """``server`` with the directories of ``--read`` / ``--write`` added to its sandbox's (relative ones are taken
    from the working directory). They are the user's to grant, like the config's: the org's ceilings still bind
    them (:func:`warden.policy.decide`), and they are part of the launch manifest, so a new one is a new identity.

    Raises:
        ConfigError: a directory cannot be written as an absolute path (NUL or newline in it).
    """
    if not read_dirs and not write_dirs:
        return server
    settings = server.sandbox.value

    def joined(current: tuple[str, ...], added: Sequence[str]) -> list[str]:
        return list(dict.fromkeys([*current, *(os.path.abspath(path) for path in added)]))

    try:
        updated = SandboxSettings.model_validate({
            **settings.model_dump(), "read_dirs": joined(settings.read_dirs, read_dirs),
            "write_dirs": joined(settings.write_dirs, write_dirs)})
    except ValidationError as exc:
        raise ConfigError(f"--read / --write: {exc.errors()[0]['msg']}",
                          hint="name an existing directory by its path") from exc
    source = Source("user", "warden run", None, "--read/--write")
    return dataclasses.replace(server, sandbox=Setting(updated, source))


def plan_server(ctx: CommandContext, name: str, argv: list[str] | None,
                options: UpstreamOptions, *, http_headers: Sequence[str] = (), read_dirs: Sequence[str] = (),
                write_dirs: Sequence[str] = (), oauth: Mapping[str, Any] | None = None,
                store: PinStore | None = None, ahead: FetchedAhead | None = None) -> ServerPlan:
    """Load the effective policy for ``name``, decide the launch, build its sandbox and identity. ``read_dirs`` and
    ``write_dirs`` come from ``--read`` / ``--write`` (see :func:`with_dirs`); ``oauth`` holds the OAuth options;
    ``store`` is the pin store to share (``warden serve``'s servers share one: one copy in memory, one re-read
    per change); ``ahead`` holds packages :func:`fetch_ahead` took in for the plans being made.

    Raises:
        ConfigError: the config or org policy is invalid (nothing runs until it is fixed).
        StateError: the state directory is unsafe.
    """
    policy = load_effective_policy(ctx.config_path, None, ctx.env, config_required=ctx.config_required)
    server = with_dirs(policy.server(name, argv), read_dirs, write_dirs)
    state_dir = ctx.private_state_dir()
    store = store or PinStore(state_dir)
    env, missing = resolve_env(server.env_values, ctx.env, SecretStore(state_dir).get)
    handed = canonical_digest({"env": env, "headers": {spec: ctx.env.get(spec.partition("=")[2], "")
                                                       for spec in http_headers}})
    unpassed = unpassed_env_warning(name, server.argv, server.env_values, ctx.env, str(ctx.config_path))
    if unpassed:
        log.warning("%s", unpassed)
    if missing:
        log.warning("%s: env %s not set in warden's environment; the server starts without it",
                    name, ", ".join(missing))
    refusal: LaunchError | None = None
    try:
        redactor = hand_to_server(state_dir, name, _handed(server, env, http_headers, {**ctx.env, **env},
                                                           SecretStore(state_dir).get))
    except LaunchError as exc:  # a secret too short to redact: the server does not start, the host is told why
        refusal, redactor = exc, load_redactor(state_dir, tuple(env.values()))
    logs.use_redactor(redactor)
    spec = LaunchSpec(argv=server.argv, env=env, cwd=os.getcwd()) if server.argv else None
    manifest: dict[str, Any] = {}
    connector: Connector
    fetched: IntakeResult | None = None
    egress: SandboxEgress | None = None
    if http_headers and not (len(server.argv) == 1 and is_http_url(server.argv[0])):
        raise ConfigError("--header only goes with an http(s):// server URL")
    try:
        if refusal is not None:
            raise refusal
        if len(server.argv) == 1 and is_http_url(server.argv[0]):
            connector, manifest, client = _http_connector(server, name, ctx, {**ctx.env, **env}, http_headers,
                                                          options, state_dir, oauth or {})
            guard = Guard(policy=server, store=store, manifest=launch_manifest(
                server.argv, server.env_names.value, manifest, server.network.value.to_json()),
                secrets=redactor.values)
            return ServerPlan(name, connector, guard, state_dir, redactor, oauth=client, handed=handed)
        egress = SandboxEgress(server.network.value) if server.network.value.enabled else None
        launcher = _launcher_for(server, spec, state_dir, ctx.env, egress)
        assert spec is not None
        fetched = _take_in(server, state_dir, ctx.env, ahead)
        manifest = launcher.manifest(spec)
        connector = StdioConnector(spec, launcher, options, name, redactor=redactor)
    except (LaunchError, SandboxUnavailable, IntakeError) as exc:
        log.error("%s: %s", name, exc.message)
        if exc.hint:
            log.error("%s: hint: %s", name, exc.hint)
        connector = _Refused(exc)
    guard = Guard(policy=server, store=store,
                  manifest=launch_manifest(server.argv, server.env_names.value, manifest,
                                           server.network.value.to_json()),
                  secrets=redactor.values)  # content rules cut these out of results
    return ServerPlan(name, connector, guard, state_dir, redactor, intake=fetched, egress=egress, handed=handed)


FetchedAhead = dict[PackageRequest, IntakeResult | IntakeError]
"""What :func:`fetch_ahead` took in, by request; the first plan that asks for a request takes its entry."""


def fetch_ahead(ctx: CommandContext, names: Sequence[str], *, at_once: int = 4) -> FetchedAhead:
    """Take in, ``at_once`` at a time, the packages of the servers ``names`` that are not in warden's store yet,
    so that a cold start of many ``npx``/``uvx`` servers waits about as long as its slowest fetch, not the sum of
    them all; planning each server (:func:`plan_server`, one after another) then takes what was fetched for it.
    A fetch that fails is kept as its error, for that server's plan to report. No package code runs.

    Raises:
        ConfigError: the config or org policy is invalid (with file:line).
    """
    policy = load_effective_policy(ctx.config_path, None, ctx.env, config_required=ctx.config_required)
    state_dir = ctx.private_state_dir()
    store = Store(state_dir)
    wanted: dict[PackageRequest, ServerPolicy] = {}
    for name in names:
        server = policy.server(name, None)
        request = _runner_request(server)
        if request is not None and request not in wanted and store.lookup(request) is None:
            wanted[request] = server
    if len(wanted) < 2:
        return {}  # nothing to overlap: the plan fetches its one package itself
    for request, server in wanted.items():
        _say_fetching(server, request)

    def fetch(request: PackageRequest, server: ServerPolicy) -> IntakeResult | IntakeError:
        try:
            return take_in(request, state_dir=state_dir, env=ctx.env, policy=intake_policy(server))
        except IntakeError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="warden-intake") as pool:
        futures = {request: pool.submit(fetch, request, server) for request, server in wanted.items()}
    return {request: future.result() for request, future in futures.items()}


def _say_fetching(server: ServerPolicy, request: PackageRequest) -> None:
    log.warning("%s: fetching %s into warden's package store (none of its code runs)", server.name,
                for_terminal(request.requirement))


def _runner_request(server: ServerPolicy) -> PackageRequest | None:
    """The package an ``npx``/``uvx``/``pipx run`` server runs (taken into warden's store); None for other
    commands, and for a server that is not sandboxed (it runs its command as written)."""
    return parse_runner(server.argv) if server.sandbox.value.kind != "none" else None


def _take_in(server: ServerPolicy, state_dir: Path, env: Mapping[str, str],
             ahead: FetchedAhead | None) -> IntakeResult | None:
    """Fetch the package an ``npx``/``uvx``/``pipx run`` server runs into warden's store, if it is not there yet
    (no package code runs; see :mod:`warden.intake`), or take what :func:`fetch_ahead` fetched for it. Other
    commands: None.

    Raises:
        IntakeError: the fetch failed or was refused.
    """
    request = _runner_request(server)
    if request is None:
        return None
    taken = ahead.pop(request, None) if ahead is not None else None
    if isinstance(taken, IntakeError):
        raise taken
    if taken is not None:
        return taken
    if Store(state_dir).lookup(request) is None:
        _say_fetching(server, request)
    return take_in(request, state_dir=state_dir, env=env, policy=intake_policy(server))


@asynccontextmanager
async def host_streams() -> AsyncIterator[tuple[trio.lowlevel.FdStream, trio.lowlevel.FdStream]]:
    """warden's own stdin and stdout as the host's streams, for the lifetime of the block."""
    stdin_fd, stdout_fd = os.dup(0), os.dup(1)
    # Anything that prints by mistake must not corrupt the protocol stream: fd 1 now points at stderr.
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    flags = {fd: fcntl.fcntl(fd, fcntl.F_GETFL) for fd in (stdin_fd, stdout_fd)}
    try:
        yield trio.lowlevel.FdStream(stdin_fd), trio.lowlevel.FdStream(stdout_fd)
    finally:
        for fd, flag in flags.items():  # FdStream made them non-blocking; a terminal would stay that way
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, fcntl.F_SETFL, flag)


async def _serve_stdio(plan: ServerPlan, options: UpstreamOptions) -> int:
    async with host_streams() as (host_in, host_out):
        return await serve(plan, options, host_in, host_out)


def approval_channel(server: ServerPolicy, state_dir: Path) -> WebhookApprovals | None:
    """The ``[approvals]`` webhook with its key from the secrets store, or None when none is configured.

    Raises:
        ConfigError: the key's secret is not set (the hint names the command): warden does not run with a
            configured approval channel it cannot sign for.
    """
    if server.approvals is None:
        return None
    table = server.approvals.value
    (_, name), = references(table.secret)
    key = SecretStore(state_dir).get(name).encode()
    if len(key) < 16:
        raise ConfigError(f"secret {name!r} (the approval webhook's key, {server.approvals.source}) is shorter "
                          "than 16 bytes", hint=f"set a long random key: warden secrets set {name}")
    return WebhookApprovals(table.webhook, key, timeout=table.timeout_seconds)


@asynccontextmanager
async def open_gateway(plan: ServerPlan, options: UpstreamOptions) -> AsyncIterator[tuple[Gateway, Upstream]]:
    """The audit log, the gateway and its (not yet started) upstream, for the lifetime of the block.

    The log is opened first: warden records that the policy was loaded and who the server is before anything
    else happens, and refuses every action it could not record (write-ahead; see :mod:`warden.gateway.recorder`).
    """
    async with AsyncExitStack() as stack:
        log_ = None
        if plan.audit:
            log_ = await stack.enter_async_context(audit.open_audit_log(plan.state_dir,
                                                                        secrets=plan.redactor.values))
        else:
            log.warning("%s: AUDIT IS OFF (--unsafe-no-audit): nothing this server does is recorded", plan.name)
        background = await stack.enter_async_context(trio.open_nursery())
        if log_ is not None:
            background.start_soon(cosign_in_background, plan.state_dir)  # each new checkpoint to the witnesses
        try:
            async with gateway_on(plan, options, log_) as opened:
                yield opened
        finally:
            background.cancel_scope.cancel()


@asynccontextmanager
async def gateway_on(plan: ServerPlan, options: UpstreamOptions,
                     log_: audit.AuditLog | None) -> AsyncIterator[tuple[Gateway, Upstream]]:
    """The gateway of ``plan`` and its (not yet started) upstream, recording to ``log_`` (opened by the caller,
    and shared by every server of a ``warden serve``), for the lifetime of the block."""
    async with AsyncExitStack() as stack:
        guard = plan.guard
        background = await stack.enter_async_context(trio.open_nursery())
        recorder = Recorder(log_, server=plan.name, server_id=guard.identity, policy_digest=guard.policy.digest,
                            sandbox_digest=canonical_digest(guard.manifest.get("sandbox") or {}),
                            detail=guard.policy.audit_arguments.value,
                            sandbox_notes=manifest_notes(guard.manifest.get("sandbox") or {}))
        await recorder.policy_loaded()
        if plan.oauth is not None:
            plan.oauth.bind_audit(None if log_ is None else _grant_recorder(log_, plan.name, guard.identity))
        if log_ is not None and plan.intake is not None and plan.intake.fetched:
            await log_.append(package_record(plan.intake.record, server_name=plan.name, consent=audit.Consent.POLICY))
        await recorder.pins(await guard.observe_identity())
        if plan.egress is not None:  # before the upstream starts: a launch with egress needs its proxy serving
            await background.start(plan.egress.serve, EgressRecorder(log_, server_name=plan.name,
                                                                     server_id=guard.identity,
                                                                     policy_digest=guard.policy.digest))
        signer = StateSigner(await trio.to_thread.run_sync(load_state_key, plan.state_dir))
        gateway = Gateway(name=plan.name, guard=guard, recorder=recorder, signer=signer, background=background,
                          question_timeout=options.request_timeout,
                          approvals=await trio.to_thread.run_sync(approval_channel, guard.policy, plan.state_dir))
        background.start_soon(gateway.listen_upstream)
        memory = EraMemory(plan.state_dir, guard.identity) if isinstance(plan.connector, StdioConnector) else None
        upstream = Upstream(name=plan.name, connector=plan.connector, handler=gateway, options=options,
                            era_memory=memory)
        gateway.bind(upstream)
        await gateway.watch_pins()
        try:
            yield gateway, upstream
        finally:
            background.cancel_scope.cancel()  # warden's own listen and late audit outcomes; the log closes after


def _grant_recorder(log_: audit.AuditLog, server: str, server_id: str) -> AuditSink:
    """Each OAuth authorization and refresh as an audit record: resource, issuer, scopes, the token's digest."""
    async def record(event: GrantEvent) -> None:
        kind = audit.Event.AUTH_AUTHORIZED if event.kind == "authorized" else audit.Event.AUTH_REFRESHED
        await log_.append(audit.Record(
            event=kind, server_name=server, server_id=server_id, target=event.resource,
            grant=audit.Grant(resource=event.resource, issuer=event.issuer, client_id=event.client_id,
                              scopes=event.scopes, token_digest=event.token_digest)))
    return record


async def serve(plan: ServerPlan, options: UpstreamOptions,
                host_in: trio.abc.ReceiveStream, host_out: trio.abc.SendStream) -> int:
    """Serve one host on the given streams until it leaves or warden is told to stop."""
    channel = MessageChannel(host_in, host_out, name="host", max_message_size=options.max_message_size,
                             redactor=plan.redactor)
    async with open_gateway(plan, options) as (gateway, upstream), trio.open_nursery() as nursery:
        host = StdioHost(channel, gateway, question_timeout=options.max_request_time)
        host.link.session_key = host_process_session(os.getppid()) or host.link.session_key  # shared flow taint
        nursery.start_soon(channel.serve_writer)
        await nursery.start(upstream.run)
        nursery.start_soon(stop_on_signals, nursery.cancel_scope)
        await host.serve()
        channel.close_outbox()
        nursery.cancel_scope.cancel()
    return 0


async def serve_http_hosts(plan: ServerPlan, options: UpstreamOptions, http: HttpOptions,
                           token_file: Path | None) -> int:
    """Serve hosts over Streamable HTTP (both eras, any number of sessions, one upstream) until warden is told to
    stop."""
    from warden.gateway.http import serve_http

    http = dataclasses.replace(http, redactor=plan.redactor)
    async with open_gateway(plan, options) as (gateway, upstream), trio.open_nursery() as nursery:
        if plan.egress is not None and http.port:  # the server's proxy never lets it reach warden's HTTP face
            plan.egress.protect_port(http.port)
        await nursery.start(upstream.run)
        face = await nursery.start(serve_http, gateway, http)
        if plan.egress is not None:  # (a port the system picked is known only now)
            plan.egress.protect_port(urllib.parse.urlsplit(face.url).port or 80)
        http_cli.announce(face.url, token_file)
        await stop_on_signals(nursery.cancel_scope)
        nursery.cancel_scope.cancel()
    return 0


async def stop_on_signals(scope: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            log.warning("received %s; stopping the server", signal.Signals(signum).name)
            scope.cancel()
            return


