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
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, final

import trio

from warden import __version__, audit, logs
from warden.cli import _http as http_cli
from warden.cli._common import CommandContext, run_trio
from warden.errors import ConfigError, LaunchError, SandboxUnavailable, WardenError
from warden.gateway.core import Gateway
from warden.gateway.guard import Guard
from warden.gateway.http import HttpOptions, serve_http
from warden.gateway.mrtr import load_state_key
from warden.gateway.recorder import Recorder
from warden.gateway.stdio import StdioHost
from warden.launcher import Launcher, LaunchSpec
from warden.policy import PinStore, ServerPolicy, decide, launch_facts, launch_manifest, load_effective_policy
from warden.policy.pins import digest as canonical_digest
from warden.protocol.framing import DEFAULT_MAX_MESSAGE_SIZE
from warden.protocol.request_state import StateSigner
from warden.sandbox import make_launcher
from warden.transport.channel import MessageChannel
from warden.transport.http_client import HttpConnector, headers_from_env, http_config, http_server_name, is_http_url
from warden.upstream.connection import Connection, Connector, StdioConnector, Upstream, UpstreamOptions

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
    parser.add_argument("--request-timeout", type=float, default=50.0, metavar="SECONDS",
                        help="per-request timeout, reset by progress (default 50; keep below the host's)")
    parser.add_argument("--max-request-time", type=float, default=600.0, metavar="SECONDS",
                        help="hard limit for any request, progress or not (default 600)")
    parser.add_argument("--probe-timeout", type=float, default=10.0, metavar="SECONDS",
                        help="how long server/discover may take before the server is treated as legacy")
    parser.add_argument("--handshake-timeout", type=float, default=30.0, metavar="SECONDS",
                        help="how long a legacy server may take to answer initialize (default 30)")
    parser.add_argument("--shutdown-grace", type=float, default=2.0, metavar="SECONDS",
                        help="wait this long after closing the server's stdin, then again after SIGTERM, "
                             "before SIGKILL (default 2)")
    parser.add_argument("--max-message-size", type=int, default=DEFAULT_MAX_MESSAGE_SIZE, metavar="BYTES",
                        help="largest JSON-RPC message accepted from either side (default 16 MiB)")
    parser.add_argument("--quiet-server", action="store_true", help="do not copy the server's stderr to ours")
    parser.add_argument("--unsafe-no-audit", action="store_true",
                        help="do not write the audit log (for measurements only: nothing is recorded)")
    parser.add_argument("--header", action="append", default=[], metavar="NAME=ENVVAR",
                        help="for an http(s):// server: send header NAME with the value of environment variable "
                             "ENVVAR on every request to that origin (e.g. Authorization=MY_TOKEN; a bare token "
                             "gets 'Bearer '). Repeatable.")
    http_cli.add_arguments(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS: the server to run")
    parser.set_defaults(func=run_command)


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
        client_info={"name": "warden", "version": __version__})
    logs.configure(logging.WARNING - 10 * min(args.verbose, 2))
    logging.getLogger("warden.server").setLevel(logging.WARNING if args.quiet_server else logging.INFO)
    try:
        http: tuple[HttpOptions, Path | None] | None = None
        if args.http is not None:
            http = http_cli.http_options(ctx, args, max_body_size=options.max_message_size,
                                         question_timeout=options.max_request_time)
        elif args.no_auth or args.token_file is not None or args.allow_origin or args.allow_host:
            raise ConfigError("--no-auth, --token-file, --allow-origin and --allow-host only go with --http",
                              hint="add --http 127.0.0.1:PORT to serve hosts over HTTP")
        plan = plan_server(ctx, args.name or derive_name(argv), argv or None, options, http_headers=args.header)
        plan = dataclasses.replace(plan, audit=not args.unsafe_no_audit)
        if http is not None:
            return run_trio(serve_http_hosts, plan, options, *http)
        return run_trio(_serve_stdio, plan, options)
    finally:
        logs.shutdown()


@final
@dataclass(frozen=True, slots=True)
class ServerPlan:
    """Everything decided before the first byte flows: policy, launch, identity. When the server must not start,
    the connector refuses; warden still answers the host, with that error, so the host is told why."""

    name: str
    connector: Connector
    guard: Guard
    state_dir: Path
    secrets: tuple[str, ...]
    audit: bool = True


@final
class _Refused:
    """A connector that refuses: the launch was denied or the sandbox cannot be built (fail closed)."""

    def __init__(self, error: WardenError) -> None:
        self._error = error

    async def connect(self) -> Connection:
        raise self._error


def _launcher_for(server: ServerPolicy, spec: LaunchSpec | None, state_dir: Path,
                  env: Mapping[str, str]) -> Launcher:
    """The launcher the policy allows for ``server`` (fail closed: a refusal raises ``LaunchError``)."""
    decision = decide(launch_facts(server))
    if not decision.allowed or spec is None:
        raise LaunchError(f"launch refused: {decision.reason} [{decision.rule}]", hint=decision.hint)
    return make_launcher(server.sandbox.value, state_dir=state_dir, host_env=env)


def _http_connector(server: ServerPolicy, name: str, ctx: CommandContext, header_specs: Sequence[str],
                    options: UpstreamOptions) -> tuple[Connector, dict[str, Any]]:
    """A remote server: nothing to launch or sandbox; the org's command rules still apply to its URL. Header values
    come from the environment; the identity manifest names the URL and the header *names* only."""
    decision = decide(launch_facts(server))
    if not decision.allowed:
        raise LaunchError(f"connection refused: {decision.reason} [{decision.rule}]", hint=decision.hint)
    headers = headers_from_env(header_specs, ctx.env)
    settings = http_config(server.argv[0], headers=headers, max_message_size=options.max_message_size)
    return HttpConnector(settings, name), {"kind": "http", "url": settings.url,
                                           "headers": sorted(header for header, _ in headers)}


def _secrets(env: Mapping[str, str]) -> tuple[str, ...]:
    """The env values handed to a server are redacted from every audit record (invariant 10). Values shorter
    than 8 characters (``1``, ``true``, ``*``) are switches, not secrets: redacting them would blank out
    unrelated text everywhere."""
    return tuple(value for value in env.values() if len(value) >= 8)


def plan_server(ctx: CommandContext, name: str, argv: list[str] | None,
                options: UpstreamOptions, *, http_headers: Sequence[str] = ()) -> ServerPlan:
    """Load the effective policy for ``name``, decide the launch, build its sandbox and identity.

    Raises:
        ConfigError: the config or org policy is invalid (nothing runs until it is fixed).
        StateError: the state directory is unsafe.
    """
    policy = load_effective_policy(ctx.config_path, None, ctx.env, config_required=ctx.config_required)
    server = policy.server(name, argv)
    state_dir = ctx.private_state_dir()
    store = PinStore(state_dir)
    env = {key: ctx.env[key] for key in server.env_names.value if key in ctx.env}
    missing = [key for key in server.env_names.value if key not in ctx.env]
    if missing:
        log.warning("%s: env %s not set in warden's environment; the server starts without it",
                    name, ", ".join(missing))
    spec = LaunchSpec(argv=server.argv, env=env, cwd=os.getcwd()) if server.argv else None
    manifest: dict[str, Any] = {}
    connector: Connector
    if http_headers and not (len(server.argv) == 1 and is_http_url(server.argv[0])):
        raise ConfigError("--header only goes with an http(s):// server URL")
    try:
        if len(server.argv) == 1 and is_http_url(server.argv[0]):
            connector, manifest = _http_connector(server, name, ctx, http_headers, options)
            guard = Guard(policy=server, store=store, manifest=launch_manifest(
                server.argv, server.env_names.value, manifest, server.network.value))
            return ServerPlan(name, connector, guard, state_dir, _secrets(env))
        launcher = _launcher_for(server, spec, state_dir, ctx.env)
        assert spec is not None
        manifest = launcher.manifest(spec)
        connector = StdioConnector(spec, launcher, options, name)
    except (LaunchError, SandboxUnavailable) as exc:
        log.error("%s: %s", name, exc.message)
        if exc.hint:
            log.error("%s: hint: %s", name, exc.hint)
        connector = _Refused(exc)
    guard = Guard(policy=server, store=store,
                  manifest=launch_manifest(server.argv, server.env_names.value, manifest, server.network.value))
    return ServerPlan(name, connector, guard, state_dir, _secrets(env))


async def _serve_stdio(plan: ServerPlan, options: UpstreamOptions) -> int:
    stdin_fd, stdout_fd = os.dup(0), os.dup(1)
    # Anything that prints by mistake must not corrupt the protocol stream: fd 1 now points at stderr.
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    flags = {fd: fcntl.fcntl(fd, fcntl.F_GETFL) for fd in (stdin_fd, stdout_fd)}
    host_in = trio.lowlevel.FdStream(stdin_fd)
    host_out = trio.lowlevel.FdStream(stdout_fd)
    try:
        return await serve(plan, options, host_in, host_out)
    finally:
        for fd, flag in flags.items():  # FdStream made them non-blocking; a terminal would stay that way
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, fcntl.F_SETFL, flag)


@asynccontextmanager
async def open_gateway(plan: ServerPlan, options: UpstreamOptions) -> AsyncIterator[tuple[Gateway, Upstream]]:
    """The audit log, the gateway and its (not yet started) upstream, for the lifetime of the block.

    The log is opened first: warden records that the policy was loaded and who the server is before anything
    else happens, and refuses every action it could not record (write-ahead; see :mod:`warden.gateway.recorder`).
    """
    async with AsyncExitStack() as stack:
        log_ = None
        if plan.audit:
            log_ = await stack.enter_async_context(audit.open_audit_log(plan.state_dir, secrets=plan.secrets))
        else:
            log.warning("%s: AUDIT IS OFF (--unsafe-no-audit): nothing this server does is recorded", plan.name)
        guard = plan.guard
        background = await stack.enter_async_context(trio.open_nursery())
        recorder = Recorder(log_, server=plan.name, server_id=guard.identity, policy_digest=guard.policy.digest,
                            sandbox_digest=canonical_digest(guard.manifest.get("sandbox") or {}),
                            detail=guard.policy.audit_arguments.value)
        await recorder.policy_loaded()
        await recorder.pins(await guard.observe_identity())
        signer = StateSigner(await trio.to_thread.run_sync(load_state_key, plan.state_dir))
        gateway = Gateway(name=plan.name, guard=guard, recorder=recorder, signer=signer, background=background,
                          question_timeout=options.request_timeout)
        background.start_soon(gateway.listen_upstream)
        upstream = Upstream(name=plan.name, connector=plan.connector, handler=gateway, options=options)
        gateway.bind(upstream)
        try:
            yield gateway, upstream
        finally:
            background.cancel_scope.cancel()  # warden's own listen and late audit outcomes; the log closes after


async def serve(plan: ServerPlan, options: UpstreamOptions,
                host_in: trio.abc.ReceiveStream, host_out: trio.abc.SendStream) -> int:
    """Serve one host on the given streams until it leaves or warden is told to stop."""
    channel = MessageChannel(host_in, host_out, name="host", max_message_size=options.max_message_size)
    async with open_gateway(plan, options) as (gateway, upstream), trio.open_nursery() as nursery:
        host = StdioHost(channel, gateway, question_timeout=options.max_request_time)
        nursery.start_soon(channel.serve_writer)
        await nursery.start(upstream.run)
        nursery.start_soon(_stop_on_signals, nursery.cancel_scope)
        await host.serve()
        channel.close_outbox()
        nursery.cancel_scope.cancel()
    return 0


async def serve_http_hosts(plan: ServerPlan, options: UpstreamOptions, http: HttpOptions,
                           token_file: Path | None) -> int:
    """Serve hosts over Streamable HTTP (both eras, any number of sessions, one upstream) until warden is told to
    stop."""
    async with open_gateway(plan, options) as (gateway, upstream), trio.open_nursery() as nursery:
        await nursery.start(upstream.run)
        url = await nursery.start(serve_http, gateway, http)
        http_cli.announce(url, token_file)
        await _stop_on_signals(nursery.cancel_scope)
        nursery.cancel_scope.cancel()
    return 0


async def _stop_on_signals(scope: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            log.warning("received %s; stopping the server", signal.Signals(signum).name)
            scope.cancel()
            return


