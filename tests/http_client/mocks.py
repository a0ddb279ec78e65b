"""Scripted MCP servers over real HTTP on 127.0.0.1, and an in-process :class:`Upstream` connected to them.

The transport tests drive warden's real session logic (:class:`~warden.upstream.connection.Upstream`) over
warden's real HTTP client against :class:`~tests.http_client.httpserver.HttpServer`, whose answers each test
scripts: a well-behaved legacy or modern server by default (:class:`LegacyMock`, :class:`ModernMock`), with hooks
to make it misbehave.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trio

from tests.http_client.httpserver import Exchange, HttpServer, Seen, rpc_error, rpc_result
from warden.protocol.eras import Era
from warden.protocol.session import Reply
from warden.transport.http_client import HttpConnector
from warden.transport.http_config import http_config
from warden.upstream.connection import Upstream, UpstreamOptions

MODERN_TOOLS: list[dict[str, Any]] = [
    {"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
    {"name": "route", "inputSchema": {"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "count": {"type": "integer", "x-mcp-header": "Count"},
        "dry": {"type": "boolean", "x-mcp-header": "Dry"},
        "opts": {"type": "object", "properties": {"zone": {"type": "string", "x-mcp-header": "Zone"}}},
        "method": {"type": "string", "x-mcp-header": "Method"},
        "note": {"type": "string"}}}},
    {"name": "bad_number", "inputSchema": {"type": "object", "properties": {
        "n": {"type": "number", "x-mcp-header": "N"}}}},
    {"name": "bad_duplicate", "inputSchema": {"type": "object", "properties": {
        "a": {"type": "string", "x-mcp-header": "Field"}, "b": {"type": "string", "x-mcp-header": "field"}}}},
    {"name": "bad_token", "inputSchema": {"type": "object", "properties": {
        "r": {"type": "string", "x-mcp-header": "My Region"}}}},
    {"name": "bad_in_items", "inputSchema": {"type": "object", "properties": {
        "list": {"type": "array", "items": {"type": "string", "x-mcp-header": "Item"}}}}},
    {"name": "bad_in_one_of", "inputSchema": {"type": "object", "properties": {
        "v": {"oneOf": [{"type": "string", "x-mcp-header": "V"}]}}}},
]

CallHook = Callable[[Exchange, dict[str, Any]], Awaitable[bool]]
"""Answers a tools/call itself and returns True, or returns False to let the mock answer."""


@dataclass
class Recorder:
    """The gateway's side of the upstream: records notifications and answers server questions as scripted."""

    notifications: list[tuple[str, Any]] = field(default_factory=list)
    questions: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    lifecycle: list[tuple[str, str]] = field(default_factory=list)
    answer: bytes = b'{"action":"accept","content":{"ok":true}}'

    async def on_lifecycle(self, event: str, detail: str) -> None:
        self.lifecycle.append((event, detail))

    async def on_server_request(self, method: str, params: dict[str, Any]) -> Reply:
        self.questions.append((method, params))
        return Reply(result=self.answer)

    async def on_notification(self, method: str, params: bytes | None) -> None:
        self.notifications.append((method, json.loads(params) if params else None))


@dataclass
class ModernMock:
    """A 2026-07-28 server: stateless, POST only, answers by JSON (or SSE for calls when ``sse_calls``)."""

    tools: list[dict[str, Any]] = field(default_factory=lambda: list(MODERN_TOOLS))
    on_call: CallHook | None = None
    sse_calls: bool = False
    session_header: bool = False
    discover: Callable[[Exchange, dict[str, Any]], Awaitable[bool]] | None = None

    async def __call__(self, ex: Exchange) -> None:
        if ex.request.method != "POST":
            await ex.respond(405, b"Method Not Allowed", content_type="text/plain")
            return
        body = ex.request.json()
        method = body.get("method")
        extra = [("Mcp-Session-Id", "never-echo-me")] if self.session_header else []
        if method == "server/discover":
            if self.discover is not None and await self.discover(ex, body):
                return
            await ex.json(200, rpc_result(ex.request, {
                "resultType": "complete", "supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
                "ttlMs": 0, "cacheScope": "public",
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "modern-mock", "version": "1"}}}), extra)
            return
        if "id" not in body:
            await ex.respond(202)
            return
        if method == "tools/list":
            await ex.json(200, rpc_result(ex.request, {"resultType": "complete", "tools": self.tools,
                                                       "ttlMs": 0, "cacheScope": "public"}), extra)
            return
        if method == "tools/call":
            if self.on_call is not None and await self.on_call(ex, body):
                return
            result = rpc_result(ex.request, {"resultType": "complete", "content": [
                {"type": "text", "text": f"called {body['params']['name']}"}]})
            if self.sse_calls:
                await ex.sse_start(extra)
                await ex.sse_message(result)
            else:
                await ex.json(200, result, extra)
            return
        await ex.json(404, rpc_error(ex.request, -32601, f"Method not found: {method}"))


@dataclass
class LegacyMock:
    """A 2025-11-25 Streamable HTTP server with a session; refuses ``server/discover`` like the TS SDK does."""

    version: str = "2025-11-25"
    session: str = "session-1"
    sessions_started: int = 0
    lost: bool = False
    on_call: CallHook | None = None
    on_get: Callable[[Exchange], Awaitable[None]] | None = None
    discover_answer: Callable[[Exchange], Awaitable[None]] | None = None
    tools: list[dict[str, Any]] = field(default_factory=lambda: [
        {"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}])

    def current(self) -> str:
        return f"{self.session}-{self.sessions_started}"

    async def __call__(self, ex: Exchange) -> None:
        request = ex.request
        if request.method == "DELETE":
            await ex.respond(200)
            return
        if request.method == "GET":
            if self.lost or request.header("mcp-session-id") != self.current():
                await ex.respond(404 if self.lost else 400, b"no such session", content_type="text/plain")
            elif self.on_get is not None:
                await self.on_get(ex)
            else:
                await ex.respond(405, b"Method Not Allowed", content_type="text/plain")
            return
        body = request.json()
        method = body.get("method")
        if method == "server/discover":
            if self.discover_answer is not None:
                await self.discover_answer(ex)
            else:
                await ex.json(400, {"jsonrpc": "2.0", "id": None,
                                    "error": {"code": -32000, "message": "Bad Request: Server not initialized"}})
            return
        if method == "initialize":
            self.sessions_started += 1
            self.lost = False
            await ex.json(200, rpc_result(request, {
                "protocolVersion": self.version, "capabilities": {"tools": {}},
                "serverInfo": {"name": "legacy-mock", "version": "1"}}), [("Mcp-Session-Id", self.current())])
            return
        if self.lost or request.header("mcp-session-id") != self.current():
            if self.lost:
                await ex.respond(404, b"session not found", content_type="text/plain")
            else:
                await ex.json(400, rpc_error(None, -32000, "Bad Request: no valid session"))
            return
        if "id" not in body or "method" not in body:
            await ex.respond(202)
            return
        if method == "tools/list":
            await ex.json(200, rpc_result(request, {"tools": self.tools}))
            return
        if method == "tools/call":
            if self.on_call is not None and await self.on_call(ex, body):
                return
            await ex.json(200, rpc_result(request, {"content": [{"type": "text", "text": "ok"}]}))
            return
        await ex.json(200, rpc_result(request, {}))


@dataclass
class Connected:
    upstream: Upstream
    connector: HttpConnector
    server: HttpServer
    recorder: Recorder

    async def call(self, name: str, arguments: dict[str, Any] | None = None, **kwargs: Any) -> Reply:
        params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
        return await self.upstream.request("tools/call", params, **kwargs)

    async def list_tools(self, **kwargs: Any) -> list[dict[str, Any]]:
        reply = await self.upstream.request("tools/list", {}, **kwargs)
        assert reply.ok, reply.error
        tools: list[dict[str, Any]] = reply.result_dict()["tools"]
        return tools

    def posts_of(self, method: str) -> list[Seen]:
        return [s for s in self.server.posts() if _method(s) == method]


def _method(seen: Seen) -> str | None:
    try:
        body = seen.json()
    except ValueError:
        return None
    return body.get("method") if isinstance(body, dict) else None


@asynccontextmanager
async def connected(handler: Callable[[Exchange], Awaitable[None]], *, path: str = "/mcp",
                    headers: tuple[tuple[str, str], ...] = (), options: UpstreamOptions | None = None,
                    legacy: bool = False, recorder: Recorder | None = None,
                    server: HttpServer | None = None, **limits: Any) -> AsyncIterator[Connected]:
    """An :class:`Upstream` over warden's HTTP client to ``handler`` on 127.0.0.1, connected (handshake done).

    ``legacy``: the era is known to be legacy (as after an earlier connection), so the probe is skipped.
    """
    server = server or HttpServer(handler)
    recorder = recorder or Recorder()
    async with trio.open_nursery() as outer:
        await outer.start(server.serve)
        connector = HttpConnector(http_config(server.url(path), headers=headers, **limits), "mock")
        upstream = Upstream(name="mock", connector=connector, handler=recorder,
                            options=options or UpstreamOptions(probe_timeout=5, request_timeout=10),
                            known_era=Era.LEGACY if legacy else None)
        upstream.set_legacy_capabilities({"elicitation": {}})
        async with trio.open_nursery() as inner:  # stopped first, so the server sees warden's goodbye
            await inner.start(upstream.run)
            with trio.fail_after(20):
                await upstream.wait_connected()
            yield Connected(upstream, connector, server, recorder)
            inner.cancel_scope.cancel()
        outer.cancel_scope.cancel()
