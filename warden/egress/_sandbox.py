"""What a sandbox launcher needs from egress: the proxy variables for the server, and a way to open the proxy's
door into one sandbox (:class:`SandboxEgress`)."""

from __future__ import annotations

import ipaddress
import logging
import re
from typing import Any, final

import trio

from warden.egress._allow import EgressRules
from warden.egress._listen import open_sandbox_listener
from warden.egress._proxy import PROXY_PORT, Attachment, EgressProxy, EgressSink, ProxyLimits, Resolver, resolve_host
from warden.errors import SandboxUnavailable

log = logging.getLogger(__name__)


def node_routes_fetch(version: str) -> bool:
    """Does this Node (``node --version`` output, ``v22.21.0``) send fetch and http(s) through ``HTTPS_PROXY`` when
    ``NODE_USE_ENV_PROXY=1``? Node 22.21+ and 24.5+ do (23 never did); older ones ignore the variables."""
    match = re.fullmatch(r"v(\d+)\.(\d+)\.\d+\s*", version)
    if match is None:
        return False
    major, minor = int(match[1]), int(match[2])
    return (major == 22 and minor >= 21) or (major == 24 and minor >= 5) or major >= 25


def warn_if_node_ignores_proxy(node: str, version: str) -> None:
    """Say so when the Node a server runs on (``node``, which answered ``node --version`` with ``version``; empty:
    it did not) will not use the proxy: its requests would fail with "fetch failed", which names nothing. (A
    warning, not a refusal: no network is reachable either way, and servers that use a proxy-aware HTTP library
    still work.) The caller asks the version inside a sandbox: ``node`` is whatever the server's command or its
    ``#!`` line names, which warden never runs on the host."""
    if not node_routes_fetch(version):
        log.warning("%s (%s) ignores HTTPS_PROXY in its built-in fetch: this server's requests cannot reach "
                    "its network.allow destinations; put Node 22.21+ or 24.5+ first on warden's PATH",
                    node, version.strip() or "version unknown")


def proxy_env(rules: EgressRules, port: int = PROXY_PORT) -> dict[str, str]:
    """The environment that routes a server's HTTP(S) through the proxy: both spellings (curl reads only the
    lower-case ``http_proxy``; Go and Python read either), ``NO_PROXY`` for the sandbox's own loopback, and
    ``NODE_USE_ENV_PROXY=1``, which makes Node's built-in fetch and http(s) honour them (Node 22.21+ and 24.5+; the
    node profile says what older Nodes get).

    A loopback form the allow-list names (an IP entry holding 127.0.0.1 or ::1, or the name ``localhost``) is
    left out of ``NO_PROXY``: the user means the host's service there (``127.0.0.1:8080``), which only the proxy
    can reach (and checks, port by port); kept in, the client would connect inside the sandbox, where nothing
    listens, and an entry that ``policy check`` and ``policy explain`` call allowed would never work."""
    url = f"http://127.0.0.1:{port}"
    env = {}
    for name in ("http_proxy", "https_proxy", "all_proxy"):
        env[name] = url
        env[name.upper()] = url
    proxied = {form for form in ("127.0.0.1", "::1")
               if any(e.network is not None and ipaddress.ip_address(form) in e.network for e in rules.allow)}
    if any(e.name == "localhost" and not e.wildcard for e in rules.allow):
        proxied.add("localhost")
    env["no_proxy"] = env["NO_PROXY"] = ",".join(f for f in ("localhost", "127.0.0.1", "::1") if f not in proxied)
    env["NODE_USE_ENV_PROXY"] = "1"
    return env


@final
class SandboxEgress:
    """One server's egress: its rules, and (once :meth:`serve` runs) the proxy every sandbox of it is attached to.

    A launch with egress calls :meth:`attach` while the sandbox waits to start; if the proxy is not serving, the
    launch fails (never a sandbox whose egress is unenforced, never a fallback to more network)."""

    def __init__(self, rules: EgressRules, *, resolver: Resolver = resolve_host,
                 limits: ProxyLimits | None = None) -> None:
        if not rules.enabled:
            raise ValueError("SandboxEgress needs an allow-list (network = 'none' needs no proxy)")
        self.rules = rules
        self._resolver = resolver
        self._limits = limits or ProxyLimits()
        self._proxy: EgressProxy | None = None
        self._own_ports: set[int] = set()

    def protect_port(self, port: int) -> None:
        """Refuse connections to warden's own ``port`` on loopback (its HTTP face), whatever ``allow_addresses``
        says; only an IP entry for exactly that address and port allows it."""
        self._own_ports.add(port)
        if self._proxy is not None:
            self._proxy.own_ports.add(port)

    def manifest(self) -> str | dict[str, Any]:
        """The egress part of the sandbox manifest (its identity): the entries as written."""
        return self.rules.to_json()

    def env(self) -> dict[str, str]:
        return proxy_env(self.rules)

    async def serve(self, sink: EgressSink, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the proxy until cancelled, recording to ``sink``."""
        proxy = EgressProxy(self.rules, sink, resolver=self._resolver, limits=self._limits)
        proxy.own_ports.update(self._own_ports)
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.serve)
            self._proxy = proxy
            try:
                task_status.started()
                await trio.sleep_forever()
            finally:
                self._proxy = None

    async def attach(self, sandbox_pid: int) -> Attachment:
        """Open the proxy's listener in the sandbox of init ``sandbox_pid`` and serve it.

        Raises:
            SandboxUnavailable: the proxy is not running or the listener cannot be made.
        """
        if self._proxy is None:
            raise SandboxUnavailable("the server's egress proxy is not running, so its network allow-list could not "
                                     "be enforced", hint="this is a warden bug; report it")
        listener = await open_sandbox_listener(sandbox_pid, PROXY_PORT)
        return self._proxy.attach(listener)
