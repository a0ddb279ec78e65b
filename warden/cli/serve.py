"""``warden serve [--server NAME ...] (--stdio | --http HOST:PORT)``: every server of the config behind one endpoint.

On stdio, one ``warden serve`` entry in a host config replaces one ``warden run`` entry per server. Over HTTP, one
warden serves any number of hosts and users, each request bound to the principal its bearer token names (``warden
tokens``; see :mod:`warden.gateway.principals`) exactly as under ``warden run --http``. Each server keeps what
``warden run`` gives it (its own sandbox, pins, policy and era handling; see :mod:`warden.gateway.hub` for how
names are shown and requests routed); they share one process, one audit log and one redaction registry. Nothing
starts until every configured server has been planned: a bad config or a bad server name stops ``serve`` before
any process is launched.

While it runs, ``serve`` keeps ``<state>/serve/<pid>.json`` current (what ``warden status`` shows) and removes it
when it stops.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import functools
import json
import logging
import os
import signal
import time
import urllib.parse
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

import trio

from warden import audit, durable, logs
from warden.cli import _http as http_cli
from warden.cli._common import CommandContext, run_trio
from warden.cli.policy import launch_problems
from warden.cli.run import (
    ServerPlan,
    add_output_switches,
    add_request_limits,
    configure_logging,
    fetch_ahead,
    gateway_on,
    host_streams,
    plan_server,
)
from warden.errors import ConfigError, WardenError
from warden.gateway.core import Gateway
from warden.gateway.hub import DEFAULT_SEPARATOR, Hub, Member, check_server_names
from warden.gateway.pinwatch import watch_file
from warden.gateway.stdio import StdioHost
from warden.policy import PinStore, host_process_session, load_effective_policy
from warden.secrets import Redactor, SecretStore, load_redactor
from warden.transport.channel import MessageChannel
from warden.transport.http_config import is_http_url
from warden.upstream.connection import UpstreamOptions

if TYPE_CHECKING:
    from warden.gateway.http import HttpOptions

log = logging.getLogger(__name__)

STATUS_DIR = "serve"
"""Where, under the state directory, each running ``warden serve`` keeps its status file."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "serve", help="serve hosts on stdio or HTTP in front of every server in the config",
        description="Serve hosts in front of every [servers.NAME] of the config (or those named with --server), "
                    "each sandboxed, pinned and audited as under `warden run`: one host on stdin/stdout, or any "
                    "number over HTTP (--http). Tools, prompts and resource templates are shown as SERVER__NAME.")
    parser.add_argument("--stdio", action="store_true", help="serve one host on stdin/stdout (the default)")
    parser.add_argument("--server", action="append", default=[], metavar="NAME",
                        help="serve only this configured server; repeatable (default: all of them)")
    parser.add_argument("--separator", default=DEFAULT_SEPARATOR, metavar="SEP",
                        help=f"what joins a server's name and its tool names (default {DEFAULT_SEPARATOR})")
    parser.add_argument("--eager", action="store_true",
                        help="start every server at once (default: each on its first use)")
    parser.add_argument("--list-wait", type=float, default=10.0, metavar="SECONDS",
                        help="how long a list waits for each server before answering without it (default 10)")
    parser.add_argument("--idle-stop", type=float, default=600.0, metavar="SECONDS",
                        help="over HTTP, stop a principal's own process of a shared = false server once it has "
                             "been unused this long; its next request starts a new one (default 600; 0: never)")
    parser.add_argument("--max-restarts", type=int, default=5, metavar="N",
                        help="mark a server failed after N quick crashes in a row (default 5)")
    parser.add_argument("--notification-rate", type=float, default=500.0, metavar="N",
                        help="read at most N notifications a second from each server, after a burst of 1000, so "
                             "one that floods cannot slow the others (default 500)")
    add_request_limits(parser)
    add_output_switches(parser)
    http_cli.add_arguments(parser)
    parser.set_defaults(func=serve_command)


def configured_servers(ctx: CommandContext) -> list[str]:
    """The ``[servers.NAME]`` of the user config, in file order.

    Raises:
        ConfigError: the config or org policy is invalid (with file:line).
    """
    policy = load_effective_policy(ctx.config_path, None, ctx.env, config_required=ctx.config_required)
    return list(policy.user.model.servers) if policy.user is not None else []


_M_ARENA_MAX: Final = -8
"""glibc's ``mallopt`` parameter for the most malloc arenas (``malloc.h``)."""


def _few_malloc_arenas() -> None:
    """Cap glibc's malloc arenas at two for this process. glibc gives a thread that allocates while another holds
    an arena one of its own (up to eight per core) and keeps it mapped: serve starts dozens of threads at once
    (fetching, sandbox launches, pin store writes), and at 50 upstreams those arenas were ~1.5 MB of its resident
    memory (issue 14's bound is 80 MB). warden's threads mostly wait on system calls, so two arenas cost nothing
    measurable. A C library without ``mallopt`` (musl) is left as it is."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(_M_ARENA_MAX, 2)


def serve_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    configure_logging(args)
    _few_malloc_arenas()
    try:
        if args.stdio and args.http is not None:
            raise ConfigError("--stdio and --http exclude each other", hint="serve on one of them")
        if not args.idle_stop >= 0:
            raise ConfigError(f"--idle-stop {args.idle_stop:g}: the seconds must be 0 (never) or more")
        names = _chosen(configured_servers(ctx), args.server, ctx.config_path)
        check_server_names(names, args.separator)
        options = UpstreamOptions(request_timeout=args.request_timeout, max_request_time=args.max_request_time,
                                  max_restarts=args.max_restarts, notification_rate=args.notification_rate)
        http = http_cli.http_from_args(ctx, args, max_body_size=options.max_message_size,
                                       question_timeout=options.max_request_time)
        store = PinStore(ctx.private_state_dir())
        ahead = fetch_ahead(ctx, names)
        plans = [plan_server(ctx, name, None, options, store=store, ahead=ahead) for name in names]
        redactor = load_redactor(ctx.private_state_dir(), tuple(v for p in plans for v in p.redactor.values))
        logs.use_redactor(redactor)  # one process: every server's handed values, on every channel
        if http is not None:
            return run_trio(_serve_http, ctx, plans, options, redactor, args, *http)
        return run_trio(_serve_stdio, ctx, plans, options, redactor, args)
    finally:
        logs.shutdown()


def _chosen(configured: list[str], wanted: Sequence[str], config: Path) -> list[str]:
    if not configured:
        raise ConfigError(f"no servers to serve: {config} has no [servers.NAME] table",
                          hint="add one per server, or let `warden import` write them from a host's config")
    unknown = [name for name in wanted if name not in configured]
    if unknown:
        raise ConfigError(f"--server {unknown[0]!r} is not configured in {config}",
                          hint=f"configured: {', '.join(configured)}")
    return list(dict.fromkeys(wanted)) if wanted else configured


async def _serve_stdio(ctx: CommandContext, plans: list[ServerPlan], options: UpstreamOptions, redactor: Redactor,
                       args: argparse.Namespace) -> int:
    async with host_streams() as (host_in, host_out):
        return await serve_hub(ctx, plans, options, redactor, args, host_in, host_out)


async def serve_hub(ctx: CommandContext, plans: list[ServerPlan], options: UpstreamOptions, redactor: Redactor,
                    args: argparse.Namespace, host_in: trio.abc.ReceiveStream, host_out: trio.abc.SendStream) -> int:
    """Serve one host on the given streams in front of every planned server, until it leaves or warden is told
    to stop (:func:`open_fleet`)."""
    channel = MessageChannel(host_in, host_out, name="host", max_message_size=options.max_message_size,
                             redactor=redactor)
    async with open_fleet(ctx, plans, options, redactor, args) as (fleet, nursery):
        assert fleet.hub is not None
        fleet.faces.append(channel)
        host = StdioHost(channel, fleet.hub, question_timeout=options.max_request_time)
        host.link.session_key = host_process_session(os.getppid()) or host.link.session_key
        nursery.start_soon(channel.serve_writer)
        try:
            await host.serve()
        finally:
            channel.close_outbox()
            nursery.cancel_scope.cancel()
    return 0


async def _serve_http(ctx: CommandContext, plans: list[ServerPlan], options: UpstreamOptions, redactor: Redactor,
                      args: argparse.Namespace, http: HttpOptions, token_file: Path | None) -> int:
    """Serve hosts over Streamable HTTP (both eras, any number of sessions and principals) in front of every
    planned server, until warden is told to stop (:func:`open_fleet`)."""
    from warden.gateway.http import serve_http

    http = dataclasses.replace(http, redactor=redactor)
    async with open_fleet(ctx, plans, options, redactor, args) as (fleet, nursery):
        assert fleet.hub is not None
        if http.port:
            fleet.protect_port(http.port)
        face = await nursery.start(serve_http, fleet.hub, http)
        fleet.faces.append(face)
        fleet.protect_port(urllib.parse.urlsplit(face.url).port or 80)  # a port the system picked is known now
        fleet.endpoint = face.url
        http_cli.announce(face.url, token_file)
        await trio.sleep_forever()
    return 0


class _Redacting(Protocol):
    """A face's output channel, whose redaction a reload widens (the stdio channel, the HTTP face)."""

    def redact_with(self, redactor: Redactor) -> None: ...


@asynccontextmanager
async def open_fleet(ctx: CommandContext, plans: list[ServerPlan], options: UpstreamOptions, redactor: Redactor,
                     args: argparse.Namespace) -> AsyncIterator[tuple[_Fleet, trio.Nursery]]:
    """Every planned server's gateway behind one hub, the shared audit log, the status file, and reloads, for the
    lifetime of the block; yields the fleet (its ``hub`` set) and a nursery whose cancellation ends it all.
    SIGTERM and SIGINT stop it; SIGHUP, or a change to the config file, reloads (:meth:`_Fleet.reload`)."""
    state_dir = ctx.private_state_dir()
    async with AsyncExitStack() as stack:
        log_ = None
        if args.unsafe_no_audit:
            log.warning("AUDIT IS OFF (--unsafe-no-audit): nothing these servers do is recorded")
        else:
            log_ = await stack.enter_async_context(audit.open_audit_log(state_dir, secrets=redactor.values))
        gateways = await stack.enter_async_context(trio.open_nursery())
        stack.callback(gateways.cancel_scope.cancel)  # after the nursery below: upstreams stop before gateways
        fleet = _Fleet(ctx, options, args, log_, redactor, gateways)
        members = [await fleet.add(plan) for plan in plans]
        nursery = await stack.enter_async_context(trio.open_nursery())
        if log_ is not None:
            nursery.start_soon(audit.cosign_in_background, state_dir)
        fleet.hub = hub = Hub(members, background=nursery, separator=args.separator, list_wait=args.list_wait,
                              idle_stop=args.idle_stop)
        status = _StatusFile(state_dir, fleet, ctx.config_path)
        nursery.start_soon(status.keep)
        nursery.start_soon(fleet.signals, nursery.cancel_scope)
        nursery.start_soon(fleet.reloads)
        await nursery.start(watch_file, ctx.config_path, fleet.config_changed)
        try:
            if args.eager:
                await hub.start_all()
            yield fleet, nursery
        finally:
            nursery.cancel_scope.cancel()
            status.remove()


class _Fleet:
    """The servers one ``warden serve`` runs: each server's plan and the exit stack of its gateway, and the
    reload that replaces them when the config changes."""

    def __init__(self, ctx: CommandContext, options: UpstreamOptions, args: argparse.Namespace,
                 log_: audit.AuditLog | None, redactor: Redactor, gateways: trio.Nursery) -> None:
        self._ctx = ctx
        self._options = options
        self._args = args
        self._log = log_
        self._redactor = redactor
        self._gateways = gateways
        self.plans: dict[str, ServerPlan] = {}
        self._scopes: dict[str, trio.CancelScope] = {}
        """Each server's gateway task (a principal's own, ``shared = false``, is its member's in the hub)."""
        self.hub: Hub | None = None
        self.faces: list[_Redacting] = []
        """Where hosts are served: each redacts every server's handed values, widened by a reload."""
        self.endpoint: str | None = None
        """The HTTP face's URL (``warden status`` shows it); None on stdio."""
        self._ports: set[int] = set()
        self._wanted = trio.Event()

    def protect_port(self, port: int) -> None:
        """No server's egress proxy may reach ``port`` (warden's own HTTP face), nor may one a reload adds."""
        self._ports.add(port)
        for plan in self.plans.values():
            if plan.egress is not None:
                plan.egress.protect_port(port)

    async def add(self, plan: ServerPlan) -> Member:
        """Open ``plan``'s gateway and serve it (at start)."""
        member, self._scopes[plan.name] = await self._open(plan)
        self.plans[plan.name] = plan
        return member

    async def _open(self, plan: ServerPlan) -> tuple[Member, trio.CancelScope]:
        """``plan``'s gateway, open in a task of its own until its scope is cancelled (its upstream starts on
        first use, in the hub); its names are shown namespaced. Over HTTP, a server with ``shared = false``
        gets one more gateway (and process) for each principal that uses it (:meth:`_open_own`)."""
        gateway, scope = await self._gateway(plan)
        own = None
        if self._args.http is not None and not plan.guard.policy.shared.value:
            own = functools.partial(self._open_own, plan, scope)
            if plan.guard.policy.sandbox.value.write_dirs:
                log.warning("%s: shared = false, but every principal's process may write the same write_dirs; "
                            "what one stores there, the others' can read", plan.name)
        return Member(plan.name, gateway, own=own), scope

    async def _gateway(self, plan: ServerPlan) -> tuple[Gateway, trio.CancelScope]:
        plan.guard.namespaced = True
        if plan.egress is not None:
            for port in self._ports:
                plan.egress.protect_port(port)
        opened: tuple[Gateway, trio.CancelScope] = await self._gateways.start(self._keep, plan)
        return opened

    async def _open_own(self, plan: ServerPlan, configured: trio.CancelScope,
                        principal: str) -> tuple[Gateway, trio.CancelScope]:
        """A principal's own gateway of ``plan``'s server (``shared = false``) and the scope it runs in (the hub
        cancels it when the server is retired or the process goes idle): planned again, so it has a sandbox,
        egress proxy and guard of its own, and refused if the config no longer plans it the same way (a reload
        is on its way; the host retries once it is done). ``configured`` is the configured server's scope.

        Raises:
            WardenError: the config changed, or cannot be read.
        """
        try:
            again = await trio.to_thread.run_sync(functools.partial(
                plan_server, self._ctx, plan.name, None, self._options, store=plan.guard.store))
        finally:
            logs.use_redactor(self._redactor)  # planning set the plan's; the process's is the union
        if _differs(again, plan):
            raise WardenError(f"server {plan.name!r} changed in the config since it was loaded",
                              hint="retry once warden serve has reloaded it")
        gateway, scope = await self._gateway(again)
        if configured.cancel_called:  # a reload retired the server while this one was being planned
            scope.cancel()
            raise WardenError(f"server {plan.name!r} was reloaded; try again")
        log.info("%s: started a process of its own for principal %r (shared = false)", plan.name, principal)
        return gateway, scope

    async def _keep(self, plan: ServerPlan,
                    task_status: trio.TaskStatus[tuple[Gateway, trio.CancelScope]] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as scope:
            async with gateway_on(plan, self._options, self._log) as (gateway, _):
                task_status.started((gateway, scope))
                await trio.sleep_forever()

    async def signals(self, scope: trio.CancelScope) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for signum in signals:
                if signum == signal.SIGHUP:
                    log.warning("received SIGHUP; reloading %s", self._ctx.config_path)
                    self._wanted.set()
                    continue
                log.warning("received %s; stopping", signal.Signals(signum).name)
                scope.cancel()
                return

    async def config_changed(self) -> None:
        self._wanted.set()

    async def reloads(self) -> None:
        """One reload at a time; changes that come while one runs (an editor writes a file in steps) make one
        more."""
        while True:
            await self._wanted.wait()
            await trio.sleep(0.2)
            self._wanted = trio.Event()
            await self.reload()

    async def reload(self) -> None:
        """Re-read the config and policy, and plan every server again, before anything changes. A bad file leaves
        everything as it was and says why (file:line). Then a server whose launch identity or policy changed is
        stopped and started again as what it now is (a changed identity waits for approval, as any new one does);
        one no longer configured is stopped; one new is added. Each reload is a ``config.reloaded`` record."""
        assert self.hub is not None
        try:
            configured = configured_servers(self._ctx)
            names = _chosen(configured, self._args.server, self._ctx.config_path)
            check_server_names(names, self._args.separator)
            store = next(iter(self.plans.values())).guard.store  # the one every server of this serve shares
            ahead = await trio.to_thread.run_sync(fetch_ahead, self._ctx, names)
            plans = [await trio.to_thread.run_sync(functools.partial(plan_server, self._ctx, name, None,
                                                                     self._options, store=store, ahead=ahead))
                     for name in names]
        except WardenError as exc:
            log.error("reload refused, the servers keep running as they were: %s", exc.message)
            if exc.hint:
                log.error("hint: %s", exc.hint)
            await self._record(error=exc.message)
            return
        finally:
            logs.use_redactor(self._redactor)  # planning set the last plan's; the process's is the union
        changed = [p for p in plans if p.name in self.plans and _differs(p, self.plans[p.name])]
        added = [p for p in plans if p.name not in self.plans]
        removed = [name for name in self.plans if name not in names]
        problems = await trio.to_thread.run_sync(self._launch_problems, changed + added)
        if problems:  # what `warden policy check` refuses: a working server is never replaced by a refused one
            message = "; ".join(problems)
            log.error("reload refused, the servers keep running as they were: %s", message)
            await self._record(error=message)
            return
        failed = [p for p in plans if p.name in self.plans and p.name not in {c.name for c in changed}
                  and self.hub.members[p.name].gateway.upstream.state == "failed"]
        changed += failed  # a reload is the user's "try again" once the cause is fixed (a directory's owner, say)
        opened: dict[str, tuple[Member, trio.CancelScope]] = {}
        try:  # every new gateway open before anything is retired: a failure leaves the old servers as they were
            self._widen([v for p in changed + added for v in p.redactor.values])
            for plan in changed + added:
                opened[plan.name] = await self._open(plan)
        except (WardenError, OSError) as exc:
            for _, scope in opened.values():
                scope.cancel()
            message = exc.message if isinstance(exc, WardenError) else f"{type(exc).__name__}: {exc}"
            log.error("reload failed, the servers keep running as they were: %s", message)
            await self._record(error=message)
            return
        retired = [self._scopes.pop(name) for name in [p.name for p in changed] + removed]
        members = dict(self.hub.members)
        for plan in changed + added:
            members[plan.name], self._scopes[plan.name] = opened[plan.name]
        self.hub.replace([members[name] for name in names])  # stops the upstreams of what it no longer serves
        for plan in changed + added:
            self.plans[plan.name] = plan
        for name in removed:
            del self.plans[name]
        for scope in retired:
            scope.cancel()
        retried = {p.name for p in failed}
        summary = "; ".join(f"{what}: {', '.join(items)}" for what, items in (
            ("added", [p.name for p in added]),
            ("changed, started again as what it now is", [p.name for p in changed if p.name not in retried]),
            ("failed before, started again", sorted(retried)), ("removed", removed)) if items) \
            or "nothing changed"
        unserved = sorted(set(configured) - set(names))
        if unserved:
            summary += (f" (in the config but not served here, as this serve was started with --server: "
                        f"{', '.join(unserved)})")
        log.warning("config reloaded: %s", summary)
        await self._record(reason=summary)
        await self.hub.tell_changed()

    def _launch_problems(self, plans: Sequence[ServerPlan]) -> list[str]:
        """What ``warden policy check`` (and ``warden run``) would refuse about each of ``plans``, one line each."""
        secret_names = set(SecretStore(self._ctx.state_dir).names())
        return [f"{plan.name}: {problem}" for plan in plans
                for problem in launch_problems(plan.guard.policy, state_dir=self._ctx.state_dir,
                                               secret_names=secret_names)]

    def _widen(self, values: list[str]) -> None:
        """Redact what a reload handed new servers on every channel, before any of them starts."""
        if not values:
            return
        self._redactor = load_redactor(self._ctx.private_state_dir(), (*self._redactor.values, *values))
        logs.use_redactor(self._redactor)
        for face in self.faces:
            face.redact_with(self._redactor)
        if self._log is not None:
            self._log.add_secrets(values)

    async def _record(self, *, reason: str | None = None, error: str | None = None) -> None:
        """The reload's ``config.reloaded`` record. The log refusing it (full disk, a failed log) is said in
        warden's log and does not stop the servers: their own actions are refused by their recorders."""
        if self._log is None:
            return
        try:
            await self._log.append(audit.Record(
                event=audit.Event.CONFIG_RELOADED, target=audit.bounded_text(str(self._ctx.config_path), 1024),
                reason=audit.bounded_text(reason, 2048) if reason else None,
                error=audit.bounded_text(error, 2048) if error else None))
        except WardenError as exc:
            log.error("the reload could not be recorded: %s", exc.message)


def _differs(new: ServerPlan, old: ServerPlan) -> bool:
    """Whether a reload must start ``new`` in place of ``old``: its launch identity, its effective policy (the
    policy's values: an edit elsewhere in the file changes the file's hash, not this server) or a value handed to
    it (``warden secrets set`` of a secret it is given) changed."""
    def values(plan: ServerPlan) -> dict[str, Any]:
        return {k: v for k, v in plan.guard.policy.to_json().items() if k != "files"}
    return new.guard.identity != old.guard.identity or values(new) != values(old) or new.handed != old.handed


def sees(plan: ServerPlan) -> dict[str, Any]:
    """What the server's sandbox lets it reach, as ``warden status`` shows it."""
    policy = plan.guard.policy
    if len(policy.argv) == 1 and is_http_url(policy.argv[0]):
        return {"kind": "remote", "url": policy.argv[0]}
    settings = policy.sandbox.value
    return {"kind": settings.kind, "read_dirs": list(settings.read_dirs), "write_dirs": list(settings.write_dirs),
            "network": policy.network.value.to_json()}


class _StatusFile:
    """``<state>/serve/<pid>.json``: what this process serves and how each server is doing, rewritten (atomic
    replace, 0600) within a second of any change."""

    def __init__(self, state_dir: Path, fleet: _Fleet, config: Path) -> None:
        self._dir = state_dir / STATUS_DIR
        self.path = self._dir / f"{os.getpid()}.json"
        self._fleet = fleet
        self._head = {"pid": os.getpid(), "started": time.time(), "config": str(config)}
        self._written: bytes | None = None

    def snapshot(self) -> dict[str, Any]:
        assert self._fleet.hub is not None
        plans = self._fleet.plans
        servers = [{**m.status(), "sandbox": sees(plans[name]) if name in plans else None}
                   for name, m in self._fleet.hub.members.items()]
        return {**self._head, "endpoint": self._fleet.endpoint, "servers": servers}

    async def keep(self) -> None:
        """Rewrite the file while serve runs. A write that fails (the disk is full, the directory went away) is
        logged and tried again: the status file is a view, and serve goes on without it."""
        while True:
            data = json.dumps(self.snapshot(), sort_keys=True).encode()
            if data != self._written:
                try:
                    await trio.to_thread.run_sync(self._write, data)
                except OSError as exc:
                    log.warning("cannot write %s: %s", self.path, exc.strerror)
                else:
                    self._written = data
            await trio.sleep(1.0)

    def _write(self, data: bytes) -> None:
        self._dir.mkdir(mode=0o700, exist_ok=True)
        durable.replace_path(self.path, data)

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
