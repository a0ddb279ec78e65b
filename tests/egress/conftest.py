"""Fixtures for the egress tests: a test network with an HTTP host and a raw TLS-port host in their own
namespace, a proxy running in the test process, and a recording sink in place of the audit log."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
import trio

from tests.egress.netns import NetLab, have_netns, net_lab
from warden.egress import EgressDecision, EgressProxy, EgressRules, EgressTally, ProxyLimits, Resolver

HTTP_PORT = 8080
TLS_PORT = 8443


@pytest.fixture
def net() -> Iterator[NetLab]:
    reason = have_netns()
    if reason is not None:
        pytest.skip(reason)
    with net_lab() as made:
        made.start_server(made.server_ip, str(HTTP_PORT))
        made.start_server(made.server_ip, str(TLS_PORT), "tls")
        yield made


@dataclass
class MemorySink:
    """Records what the proxy would write to the audit log."""

    decisions: list[EgressDecision] = field(default_factory=list)
    ends: list[tuple[EgressDecision, int | None, EgressTally]] = field(default_factory=list)

    async def decided(self, decision: EgressDecision) -> int | None:
        self.decisions.append(decision)
        return len(self.decisions) - 1

    def closed(self, decision: EgressDecision, index: int | None, tally: EgressTally) -> None:
        self.ends.append((decision, index, tally))


def static_resolver(names: Mapping[str, str]) -> Resolver:
    """The resolver override for in-process tests: a fixed table; any other name does not resolve."""
    async def resolve(host: str, port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        await trio.lowlevel.checkpoint()
        if host not in names:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [ipaddress.ip_address(names[host])]
    return resolve


@asynccontextmanager
async def running_proxy(rules: EgressRules, names: Mapping[str, str],
                        limits: ProxyLimits | None = None) -> AsyncIterator[tuple[int, MemorySink]]:
    """The proxy on a 127.0.0.1 listener of the test process (a sandbox gets one inside its namespace instead)."""
    sink = MemorySink()
    proxy = EgressProxy(rules, sink, resolver=static_resolver(names), limits=limits)
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        port = listener.getsockname()[1]
        proxy.attach(listener)
        yield port, sink
        nursery.cancel_scope.cancel()


async def exchange(port: int, data: bytes, *, close_after: bool = False) -> bytes:
    """Send ``data`` to the proxy and read until it closes (a hang fails the test, it does not time it)."""
    with trio.fail_after(60):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(data)
            if close_after:
                await stream.send_eof()
            out = b""
            while chunk := await stream.receive_some(1 << 20):
                out += chunk
            return out
