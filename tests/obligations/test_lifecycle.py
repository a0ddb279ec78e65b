"""LC — the lifecycle as warden speaks it to its upstream (the rest of the LC group is named in tests/protocol and
tests/proxy). In process: warden's real gateway and upstream between a scripted server and a scripted host."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from tests.gateway_harness import ScriptedHost, ScriptedServer, gateway_in_process, legacy_server
from tests.http_client.mocks import LegacyMock, connected
from tests.obligations.scripts import (
    ALL_ON,
    everything_seen,
    legacy_reply,
    modern_meta,
    modern_server,
    requests_of,
    until,
)
from warden.protocol.eras import LEGACY_VERSIONS
from warden.upstream.connection import UpstreamOptions


async def initialize(host: ScriptedHost, capabilities: dict[str, Any]) -> dict[str, Any]:
    await host.request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": capabilities,
                                         "clientInfo": {"name": "scripted-host", "version": "1"}})
    answer = await host.response(0)
    await host.notify("notifications/initialized")
    return answer


async def test_LC02_LC03_LC06_LC07_initialize_offers_the_latest_version_and_initialized_comes_first(
        tmp_path: Path) -> None:
    """The server holds its ``initialize`` answer while the host pipelines a list and a call behind its own
    initialize: nothing but ``ping`` reaches the server before the answer (LC07); ``initialize`` carries a version
    warden speaks — the latest legacy one, 2025-11-25 (LC03) — capabilities and a named, versioned clientInfo
    (LC02); ``notifications/initialized`` follows the answer before any other message (LC06)."""
    release = trio.Event()
    answered_at: list[int] = []

    async def slow_handshake(server: ScriptedServer) -> None:
        while (message := await server.receive()) is not None:
            method, id_ = message.get("method"), message.get("id")
            if method == "server/discover":
                await server.send({"id": id_, "error": {"code": -32601, "message": "Method not found"}})
            elif method == "initialize":
                await release.wait()
                answered_at.append(len(server.seen))
                await server.answer(message, {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                                              "serverInfo": {"name": "slow", "version": "1"}})
            elif method == "tools/list":
                await server.answer(message, {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]})
            elif method == "tools/call":
                await server.answer(message, {"content": [{"type": "text", "text": "echo"}]})
            elif id_ is not None:
                await server.answer(message, {})

    async with gateway_in_process(tmp_path, slow_handshake) as (host, connector):
        await host.request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                             "clientInfo": {"name": "scripted-host", "version": "1"}})
        await host.request(1, "tools/list")
        await host.request(2, "tools/call", {"name": "echo", "arguments": {}})
        await until(lambda: connector.connections and requests_of(connector.connections[-1].server.seen,
                                                                  "initialize"))
        await trio.sleep(0.2)  # room for warden to send too early, which this test exists to catch
        release.set()
        await host.response(0)
        await host.notify("notifications/initialized")
        assert "result" in await host.response(2)
        server = connector.connections[-1].server
        methods = [m.get("method") for m in server.seen]
        start = methods.index("initialize")
        assert answered_at == [start + 1]
        assert set(methods[start + 1:answered_at[0]]) <= {"ping"}  # LC07: nothing else before the answer
        assert methods[answered_at[0]] == "notifications/initialized"  # LC06: first after the answer
        assert server.seen[answered_at[0]] == {"jsonrpc": "2.0", "method": "notifications/initialized"}
        params = server.seen[start]["params"]
        assert params["protocolVersion"] in LEGACY_VERSIONS
        assert params["protocolVersion"] == LEGACY_VERSIONS[-1] == "2025-11-25"
        assert isinstance(params["capabilities"], dict)
        info = params["clientInfo"]
        assert isinstance(info["name"], str)
        assert info["name"]
        assert isinstance(info["version"], str)
        assert info["version"]


async def test_LC05_the_session_runs_at_the_version_the_server_answered() -> None:
    """warden offers 2025-11-25; the server settles on 2025-06-18. warden takes the answer as the session's
    version (not the one it offered): the session reports it and every later HTTP request carries it in
    ``MCP-Protocol-Version`` (a header that exists from 2025-06-18)."""
    async with connected(LegacyMock(version="2025-06-18")) as c:
        description = await c.upstream.wait_connected()
        assert description.version == "2025-06-18"
        await c.list_tools()
        assert c.posts_of("initialize")[0].json()["params"]["protocolVersion"] == "2025-11-25"
        later = [p for p in c.server.posts() if p.json().get("method") not in ("server/discover", "initialize")]
        assert later
        assert {p.header("mcp-protocol-version") for p in later} == {"2025-06-18"}


@pytest.mark.parametrize(("policy", "declared", "expected"), [
    # The host declares everything; the policy lets sampling through without tools, nothing else.
    ('[defaults.capabilities]\nsampling = "on"\n',
     {"sampling": {"tools": {}}, "elicitation": {}, "roots": {"listChanged": True}, "experimental": {"x": {}}},
     {"sampling": {}}),
    # Everything allowed: exactly the host's routable capabilities, never its experimental ones.
    (ALL_ON, {"sampling": {"tools": {}}, "elicitation": {}, "roots": {"listChanged": True},
              "experimental": {"x": {}}},
     {"sampling": {"tools": {}}, "elicitation": {}, "roots": {"listChanged": True}}),
    # The policy allows everything but the host can take nothing: nothing is declared.
    (ALL_ON, {}, {}),
])
async def test_LC08_initialize_declares_only_what_the_host_can_take_and_the_policy_lets_through(
        tmp_path: Path, policy: str, declared: dict[str, Any], expected: dict[str, Any]) -> None:
    """The declaration holds for the whole session and is exactly what the server may ask: what the host behind
    warden declared, narrowed to what the policy forwards."""
    async with gateway_in_process(tmp_path, legacy_server, user_policy=policy) as (host, connector):
        await initialize(host, declared)
        await host.request(1, "tools/list")
        await host.response(1)
        initialize_seen = requests_of(everything_seen(connector), "initialize")
        assert [m["params"]["capabilities"] for m in initialize_seen] == [expected]


async def test_LC14_PX05_each_upstream_request_declares_what_its_own_host_request_declared(tmp_path: Path) -> None:
    """Two 2026 host calls in a row, one declaring form elicitation and one declaring nothing: each request to the
    2026 server carries the capabilities of the host request it serves (computed per request, LC14), limited to
    what that host declared (PX05) — the second does not inherit the first's."""
    async with gateway_in_process(tmp_path, modern_server, user_policy=ALL_ON) as (host, connector):
        await host.request(1, "tools/call", {"name": "echo", "arguments": {},
                                             "_meta": modern_meta({"elicitation": {}, "experimental": {"y": {}}})})
        assert (await host.response(1))["result"]["content"][0]["text"] == "echo"
        await host.request(2, "tools/call", {"name": "echo", "arguments": {}, "_meta": modern_meta({})})
        assert (await host.response(2))["result"]["content"][0]["text"] == "echo"
        await host.request(3, "tools/call", {"name": "echo", "arguments": {},
                                             "_meta": modern_meta({"sampling": {}, "roots": {"listChanged": True}})})
        await host.response(3)
        calls = requests_of(everything_seen(connector), "tools/call")
        declared = [c["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] for c in calls]
        assert declared == [{"elicitation": {}}, {}, {"sampling": {}, "roots": {}}]


async def test_LC01_initialize_is_the_first_legacy_message_on_every_process(tmp_path: Path) -> None:
    """The first process: only the era probe (``server/discover``, refused) precedes ``initialize``. The process
    exits; the next one, of a configuration now known to be legacy, gets ``initialize`` as its very first message.
    On neither does any other request or notification come before it."""
    async def one_call_then_exit(server: ScriptedServer) -> None:
        while (message := await server.receive()) is not None:
            if message.get("method") == "tools/call":
                await server.answer(message, {"content": [{"type": "text", "text": "bye"}]})
                return
            await legacy_reply(server, message)

    async with gateway_in_process(tmp_path, one_call_then_exit, options=UpstreamOptions(restart_backoff=0.01)) as (
            host, connector):
        await host.initialize()
        await host.request(1, "tools/call", {"name": "echo", "arguments": {}})
        await host.response(1)
        await until(lambda: len(connector.connections) >= 2)
        await host.request(2, "tools/call", {"name": "echo", "arguments": {}})
        await host.response(2)
        first, second = ([m.get("method") for m in c.server.seen] for c in connector.connections[:2])
    assert first[:2] == ["server/discover", "initialize"]
    assert second[0] == "initialize"
