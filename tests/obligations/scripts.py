"""Scripted servers and small helpers for the obligation tests, on top of :mod:`tests.gateway_harness` (warden's
real gateway, guard, pin store and upstream in process, between a scripted server and a scripted host)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import httpx
import trio

from tests.gateway_harness import TOOLS, MemoryConnector, Script, ScriptedServer, start_gateway
from warden.gateway.http import HttpOptions, serve_http
from warden.upstream.connection import Connector, UpstreamOptions

MODERN: Final = "2026-07-28"
ALL_ON: Final = """
[defaults.capabilities]
sampling = "with-tools"
sampling_context = true
elicitation = "url"
roots = ["/"]
"""
"""Policy TOML (for ``gateway_in_process(user_policy=...)``): every server question may reach the host."""

OnCall = Callable[[ScriptedServer, dict[str, Any]], Awaitable[None]]

MODERN_TOOLS: Final = [*TOOLS, {"name": "ask", "description": "Asks its client.", "inputSchema": {"type": "object"}}]


def modern_meta(capabilities: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """The ``_meta`` a 2026 host puts on every request."""
    return {"io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": capabilities or {},
            "io.modelcontextprotocol/clientInfo": {"name": "scripted-modern-host", "version": "1"}, **extra}


def result_of(message: dict[str, Any]) -> dict[str, Any]:
    assert "result" in message, message
    result: dict[str, Any] = message["result"]
    return result


async def modern_server(server: ScriptedServer, *, on_call: OnCall | None = None,
                        tools: list[dict[str, Any]] | None = None,
                        capabilities: dict[str, Any] | None = None,
                        on_list: OnCall | None = None) -> None:
    """A 2026-07-28-only server: answers ``server/discover``, refuses ``initialize`` with ``-32022`` (so warden
    gives a legacy host no legacy session of its own and translates), lists ``tools`` (:data:`MODERN_TOOLS`), answers
    ``echo`` and hands every other ``tools/call`` to ``on_call`` (and ``tools/list`` to ``on_list`` when given)."""
    while (message := await server.receive()) is not None:
        method, id_ = message.get("method"), message.get("id")
        if id_ is None or method == "subscriptions/listen":
            continue
        if method == "server/discover":
            await server.answer(message, {
                "resultType": "complete", "supportedVersions": [MODERN],
                "capabilities": capabilities if capabilities is not None else {"tools": {}},
                "ttlMs": 0, "cacheScope": "public",
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "scripted-modern", "version": "1"}}})
        elif method == "initialize":
            await server.send({"id": id_, "error": {"code": -32022, "message": "Unsupported protocol version",
                                                    "data": {"supported": [MODERN], "requested": "2025-11-25"}}})
        elif method == "tools/list" and on_list is not None:
            await on_list(server, message)
        elif method == "tools/list":
            await server.answer(message, {"resultType": "complete",
                                          "tools": tools if tools is not None else MODERN_TOOLS,
                                          "ttlMs": 0, "cacheScope": "public"})
        elif method == "tools/call" and message["params"]["name"] == "echo":
            await server.answer(message, {"resultType": "complete", "content": [{"type": "text", "text": "echo"}]})
        elif method == "tools/call" and on_call is not None:
            await on_call(server, message)
        else:
            await server.send({"id": id_, "error": {"code": -32601, "message": f"Method not found: {method}"}})


LEGACY_FEATURES: Final = {"tools": {}, "prompts": {}, "resources": {}, "completions": {}, "logging": {}}


async def legacy_reply(server: ScriptedServer, message: dict[str, Any], *,
                       tools: list[dict[str, Any]] | None = None) -> None:
    """How a 2025-11-25 server offering every feature answers one message: the probe refused, the handshake
    answered, ``tools`` (:data:`TOOLS`) listed, any other request answered with ``{}``."""
    method, id_ = message.get("method"), message.get("id")
    if id_ is None:
        return
    if method == "server/discover":
        await server.send({"id": id_, "error": {"code": -32601, "message": "Method not found"}})
    elif method == "initialize":
        await server.answer(message, {"protocolVersion": "2025-11-25", "capabilities": LEGACY_FEATURES,
                                      "serverInfo": {"name": "scripted", "version": "1"}})
    elif method == "tools/list":
        await server.answer(message, {"tools": tools if tools is not None else TOOLS})
    else:
        await server.answer(message, {})


ASK_TOOLS: Final = [{"name": "echo", "inputSchema": {"type": "object"}},
                    {"name": "ask", "description": "Asks its client arguments.method with arguments.params.",
                     "inputSchema": {"type": "object"}}]


async def asking_legacy_server(server: ScriptedServer, *, after: OnCall | None = None) -> None:
    """A 2025-11-25 server whose ``ask`` tool sends its client the request ``arguments.method`` with
    ``arguments.params`` on the wire and answers the call with the reply (as JSON text); ``after(server, reply)`` runs
    once the reply is in, before the call is answered."""
    asked = 0
    while (message := await server.receive()) is not None:
        if message.get("method") == "tools/call" and message["params"]["name"] == "ask":
            asked += 1
            question_id = f"server-q{asked}"
            arguments = message["params"]["arguments"]
            await server.send({"id": question_id, "method": arguments["method"], "params": arguments["params"]})
            while (reply := await server.receive()) is not None and reply.get("id") != question_id:
                pass
            assert reply is not None
            if after is not None:
                await after(server, reply)
            await server.answer(message, {"content": [{"type": "text", "text": json.dumps(reply)}]})
        else:
            await legacy_reply(server, message, tools=ASK_TOOLS)


def everything_seen(connector: MemoryConnector) -> list[dict[str, Any]]:
    """What every connection's server received, in connection order."""
    return [m for c in connector.connections for m in c.server.seen]


def requests_of(messages: list[dict[str, Any]], method: str) -> list[dict[str, Any]]:
    return [m for m in messages if m.get("method") == method]


async def until(predicate: Callable[[], object], *, step: float = 0.01, bound: float = 30.0) -> None:
    """Wait (bounded, so a broken test fails instead of hanging) until ``predicate()`` is true."""
    with trio.fail_after(bound):
        while not predicate():
            await trio.sleep(step)


# -- the HTTP face in process ---------------------------------------------------------------------------------------

TOKEN: Final = "obligations-test-token-0123456789abcdef"
ACCEPT: Final = "application/json, text/event-stream"


class HttpHost:
    """A host of warden's real HTTP face on 127.0.0.1 (legacy sessions; answers warden's questions as asked)."""

    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        self.client = client
        self.url = url

    def headers(self, session: str | None = None, *, token: str | None = TOKEN) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": ACCEPT}
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        if session is not None:
            headers["mcp-session-id"] = session
            headers["mcp-protocol-version"] = "2025-11-25"
        return headers

    async def post(self, body: dict[str, Any], session: str | None = None, **kwargs: Any) -> httpx.Response:
        return await self.client.post(self.url, content=json.dumps(body).encode(),
                                      headers=self.headers(session, **kwargs))

    async def initialize(self, capabilities: dict[str, Any], client_info: dict[str, Any] | None = None) -> str:
        """Open a legacy session; returns its id."""
        response = await self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": capabilities,
            "clientInfo": client_info or {"name": "http-host", "version": "1"}}})
        assert response.status_code == 200, response.text
        session = response.headers["mcp-session-id"]
        note = await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
        assert note.status_code == 202, note.text
        return session

    async def request(self, session: str, id_: object, method: str, params: dict[str, Any],
                      answers: Mapping[str, dict[str, Any]] | None = None,
                      asked: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """POST a request of ``session`` and read its answer, answering warden's questions on the way with
        ``answers[method]`` (and noting them in ``asked``)."""
        body = json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params}).encode()
        async with self.client.stream("POST", self.url, content=body, headers=self.headers(session)) as response:
            assert response.status_code == 200, await response.aread()
            if not response.headers["content-type"].startswith("text/event-stream"):
                answer: dict[str, Any] = json.loads(await response.aread())
                return answer
            async for message in sse_stream(response):
                if "method" in message and "id" in message:
                    if asked is not None:
                        asked.append(message)
                    assert answers is not None, f"warden asked {message['method']} unexpectedly"
                    reply = await self.post({"jsonrpc": "2.0", "id": message["id"],
                                             "result": answers[message["method"]]}, session)
                    assert reply.status_code == 202, reply.text
                elif message.get("id") == id_ and "method" not in message:
                    return message
        raise AssertionError(f"the stream ended before the answer to {id_!r}")

    async def listen(self, session: str, into: list[dict[str, Any]], *,
                     task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the session's GET stream open, appending every message warden sends on it to ``into``."""
        headers = self.headers(session)
        headers["accept"] = "text/event-stream"
        async with self.client.stream("GET", self.url, headers=headers) as response:
            assert response.status_code == 200, await response.aread()
            task_status.started()
            async for message in sse_stream(response):
                into.append(message)


async def sse_stream(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON-RPC messages of an event stream as they arrive (priming events and comments skipped)."""
    data: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
        elif not line and data:
            text = "\n".join(data)
            data = []
            if text.strip():
                yield json.loads(text)


@asynccontextmanager
async def http_gateway_in_process(tmp: Path, script: Script, *, user_policy: str = "",
                                  options: UpstreamOptions | None = None,
                                  connector: Connector | None = None) -> AsyncIterator[tuple[HttpHost,
                                                                                             MemoryConnector]]:
    """warden's real gateway and HTTP face (bearer :data:`TOKEN`) on 127.0.0.1 in front of ``script`` (or of
    ``connector``, an HTTP upstream say; the memory connector returned then runs nothing)."""
    options = options or UpstreamOptions()
    memory = MemoryConnector(script, options.max_message_size)
    async with trio.open_nursery() as nursery:
        gateway = await start_gateway(tmp, connector or memory, nursery, options=options, user_policy=user_policy)
        url = (await nursery.start(serve_http, gateway, HttpOptions(token=TOKEN))).url
        async with httpx.AsyncClient(timeout=httpx.Timeout(30.0)) as client:
            yield HttpHost(client, url), memory
        nursery.cancel_scope.cancel()
