"""``warden run [--name NAME] -- CMD ARGS``: be the MCP server a host starts, in front of the real one.

The host talks to warden on stdin/stdout exactly as it would talk to ``CMD ARGS``. warden's own diagnostics and the
server's stderr go to warden's stderr (never stdout, which belongs to the protocol).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import logging
import os
import re
import signal
import sys
from collections.abc import Sequence
from pathlib import PurePath

import trio

from warden import __version__, logs
from warden.cli._common import CommandContext, run_trio
from warden.errors import ConfigError
from warden.gateway.core import Gateway
from warden.gateway.stdio import StdioHost
from warden.launcher import Launcher, LaunchSpec, UnsafeUnsandboxedLauncher
from warden.protocol.framing import DEFAULT_MAX_MESSAGE_SIZE
from warden.transport.channel import MessageChannel
from warden.upstream.connection import StdioConnector, Upstream, UpstreamOptions

log = logging.getLogger(__name__)

_RUNNERS = {"npx", "uvx", "node", "python", "python3", "bunx", "deno", "uv", "pipx", "npm", "pnpm", "yarn"}


def derive_name(argv: Sequence[str]) -> str:
    """A readable server name from its command: the package or script for runners (``npx -y pkg`` -> ``pkg``),
    else the executable's name. Scoped npm names keep only the part after the slash."""
    words = [PurePath(argv[0]).name]
    if words[0] in _RUNNERS or re.fullmatch(r"python3(\.\d+)?", words[0]):
        rest = [a for a in argv[1:] if not a.startswith("-") and a not in ("run", "exec", "tool", "dlx")]
        if rest:
            words = [rest[0]]
    name = words[0].split("/")[-1].split("@")[0] or words[0]
    name = re.sub(r"\.(py|js|mjs|cjs|ts)$", "", name)
    name = re.sub(r"[^A-Za-z0-9._-]", "-", name).strip("-.")
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
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS: the server to run")
    parser.set_defaults(func=run_command)


def run_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    argv = list(args.command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise ConfigError("no server command given", hint="usage: warden run [--name NAME] -- CMD ARGS")
    options = UpstreamOptions(
        request_timeout=args.request_timeout, max_request_time=args.max_request_time,
        probe_timeout=args.probe_timeout, handshake_timeout=args.handshake_timeout,
        stdin_close_grace=args.shutdown_grace, terminate_grace=args.shutdown_grace,
        max_message_size=args.max_message_size,
        client_info={"name": "warden", "version": __version__})
    logs.configure(logging.WARNING - 10 * min(args.verbose, 2))
    logging.getLogger("warden.server").setLevel(logging.WARNING if args.quiet_server else logging.INFO)
    name = args.name or derive_name(argv)
    spec = LaunchSpec(argv=tuple(argv), env=_server_env(ctx), cwd=os.getcwd())
    launcher: Launcher = UnsafeUnsandboxedLauncher()
    try:
        return run_trio(_serve_stdio, name, spec, launcher, options)
    finally:
        logs.shutdown()


def _server_env(ctx: CommandContext) -> dict[str, str]:
    return dict(ctx.env)


async def _serve_stdio(name: str, spec: LaunchSpec, launcher: Launcher, options: UpstreamOptions) -> int:
    stdin_fd, stdout_fd = os.dup(0), os.dup(1)
    # Anything that prints by mistake must not corrupt the protocol stream: fd 1 now points at stderr.
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    flags = {fd: fcntl.fcntl(fd, fcntl.F_GETFL) for fd in (stdin_fd, stdout_fd)}
    host_in = trio.lowlevel.FdStream(stdin_fd)
    host_out = trio.lowlevel.FdStream(stdout_fd)
    try:
        return await serve(name, spec, launcher, options, host_in, host_out)
    finally:
        for fd, flag in flags.items():  # FdStream made them non-blocking; a terminal would stay that way
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, fcntl.F_SETFL, flag)


async def serve(name: str, spec: LaunchSpec, launcher: Launcher, options: UpstreamOptions,
                host_in: trio.abc.ReceiveStream, host_out: trio.abc.SendStream) -> int:
    """Serve one host on the given streams until it leaves or warden is told to stop."""
    channel = MessageChannel(host_in, host_out, name="host", max_message_size=options.max_message_size)
    gateway = Gateway(name=name)
    upstream = Upstream(name=name, connector=StdioConnector(spec, launcher, options, name), handler=gateway,
                        options=options)
    gateway.bind(upstream)
    host = StdioHost(channel, gateway, question_timeout=options.max_request_time)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(channel.serve_writer)
        await nursery.start(upstream.run)
        nursery.start_soon(_stop_on_signals, nursery.cancel_scope)
        await host.serve()
        channel.close_outbox()
        nursery.cancel_scope.cancel()
    return 0


async def _stop_on_signals(scope: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            log.warning("received %s; stopping the server", signal.Signals(signum).name)
            scope.cancel()
            return


