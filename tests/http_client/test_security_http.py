"""Credentials and hostile answers: AU03-AU06, and servers that send what no MCP server should.

Every test runs warden's real upstream session over its real HTTP client against a server on 127.0.0.1 that a
test scripts to misbehave. Whatever it sends, warden answers the request with a clear error (never a hang, never a
crash) and stays usable for the next one.
"""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest
import trio

from tests.http_client.httpserver import Exchange, HttpServer, rpc_result
from tests.http_client.mocks import LegacyMock, ModernMock, Recorder, connected
from warden.errors import IncompatibleServer
from warden.protocol.messages import CONNECTION_CLOSED, INTERNAL_ERROR
from warden.transport.http_client import HttpConnector
from warden.transport.http_config import http_config
from warden.upstream.connection import Upstream, UpstreamOptions

TOKEN = "Bearer s3cr3t-token-value"
AUTH = (("Authorization", TOKEN),)


async def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.01)


async def test_AU03_AU04_AU05_the_token_goes_on_every_legacy_request_and_never_in_a_url() -> None:
    async def on_get(ex: Exchange) -> None:
        await ex.sse_start()
        await trio.sleep_forever()

    async with connected(LegacyMock(on_get=on_get), headers=AUTH) as c:
        await c.list_tools()
        await wait_for(lambda: any(s.method == "GET" for s in c.server.seen))
        server = c.server
    kinds = {(s.method, (s.json().get("method") if s.method == "POST" else None)) for s in server.seen}
    assert ("POST", "server/discover") in kinds
    assert ("POST", "initialize") in kinds
    assert ("POST", "notifications/initialized") in kinds
    assert ("GET", None) in kinds
    assert ("DELETE", None) in kinds
    for seen in server.seen:
        assert seen.all("authorization") == [TOKEN], (seen.method, seen.path)
        assert "s3cr3t" not in seen.path


async def test_AU03_the_token_goes_on_every_modern_request() -> None:
    async with connected(ModernMock(), headers=AUTH) as c:
        await c.list_tools(capabilities={})
        await c.call("route", {"region": "x"}, capabilities={})
        assert len(c.server.seen) == 3
        assert all(s.all("authorization") == [TOKEN] for s in c.server.seen)


async def test_AU06_a_redirect_to_another_origin_is_not_followed_and_the_token_never_leaves() -> None:
    other = HttpServer(ModernMock())

    async def handler(ex: Exchange) -> None:
        body = ex.request.json()
        if body.get("method") == "tools/call":
            await ex.respond(307, headers=[("Location", other.url("/mcp"))])
            return
        await ModernMock()(ex)

    async with trio.open_nursery() as nursery:
        await nursery.start(other.serve)
        async with connected(handler, headers=AUTH) as c:
            reply = await c.call("echo", capabilities={})
            assert reply.code == INTERNAL_ERROR
            assert "another origin" in reply.message
            assert len(c.posts_of("tools/call")) == 1  # refused, not re-issued
        assert other.seen == []
        nursery.cancel_scope.cancel()


async def test_AU06_a_same_origin_redirect_keeps_method_body_and_token() -> None:
    async def handler(ex: Exchange) -> None:
        if ex.request.path == "/old":
            await ex.respond(308, headers=[("Location", "/mcp")])
            return
        await ModernMock()(ex)

    async with connected(handler, path="/old", headers=AUTH) as c:
        assert (await c.call("echo", capabilities={})).ok
        moved = [s for s in c.server.seen if s.path == "/mcp"]
        assert moved
        assert all(s.method == "POST" and s.all("authorization") == [TOKEN] for s in moved)
        assert moved[-1].json()["method"] == "tools/call"


async def test_AU06_a_redirect_to_a_location_that_is_not_a_url_is_an_error_for_that_request() -> None:
    """``Location: //[evil/mcp`` (an unbalanced IPv6 bracket) once escaped as a ValueError and stopped the server
    for good; it is refused like any redirect warden will not follow, and the connection stays usable."""
    async def answer(ex: Exchange) -> None:
        await ex.respond(307, headers=[("Location", "//[evil/mcp")])

    reply = await hostile_then_fine(answer)
    assert reply.code == INTERNAL_ERROR
    assert reply.message == "the server's redirect is not a valid URL (Invalid IPv6 URL)"
    assert reply.error_data() == {"httpStatus": 307}


async def test_AU06_a_302_is_an_error_not_a_get() -> None:
    async def handler(ex: Exchange) -> None:
        if ex.request.json().get("method") == "tools/call":
            await ex.respond(302, headers=[("Location", "/elsewhere")])
            return
        await ModernMock()(ex)

    async with connected(handler) as c:
        reply = await c.call("echo", capabilities={})
        assert reply.code == INTERNAL_ERROR
        assert "HTTP 302" in reply.message
        assert all(s.method == "POST" for s in c.server.seen)


# -- hostile answers --------------------------------------------------------------------------------------------


def call_answering(answer: Any) -> ModernMock:
    async def on_call(ex: Exchange, body: dict[str, Any]) -> bool:
        if body["params"]["name"] == "hostile":
            await answer(ex)
            return True
        return False

    return ModernMock(on_call=on_call)


async def hostile_then_fine(answer: Any, **limits: Any) -> Any:
    """Call the hostile tool, then a normal one: the first fails cleanly and the connection stays usable."""
    async with connected(call_answering(answer), **limits) as c:
        with trio.fail_after(20):
            reply = await c.call("hostile", capabilities={})
        assert not reply.ok
        assert (await c.call("echo", capabilities={})).ok
        return reply


async def test_huge_json_body_is_refused_without_reading_it_all() -> None:
    sent: list[int] = []

    async def answer(ex: Exchange) -> None:
        await ex.start(200, [("Content-Type", "application/json")])
        chunk = b" " * 65536
        try:
            for _ in range(1000):  # 64 MiB, never all read
                await ex.write(chunk)
                sent.append(len(chunk))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            ex.abort()

    reply = await hostile_then_fine(answer, max_message_size=256 * 1024)
    assert reply.code == INTERNAL_ERROR
    assert "exceeds the 262144-byte message limit" in reply.message
    assert sum(sent) < 64 * 1024 * 1024


async def test_a_declared_oversized_length_is_refused_up_front() -> None:
    async def answer(ex: Exchange) -> None:
        await ex.start(200, [("Content-Type", "application/json"), ("Content-Length", str(10**9))])
        ex.abort()

    reply = await hostile_then_fine(answer, max_message_size=1024)
    assert "1000000000 bytes" in reply.message


async def test_an_event_stream_without_newlines_is_bounded() -> None:
    async def answer(ex: Exchange) -> None:
        await ex.sse_start()
        try:
            for _ in range(200):
                await ex.write(b"data: " + b"a" * 65536)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            ex.abort()

    reply = await hostile_then_fine(answer, max_message_size=64 * 1024)
    assert reply.code == INTERNAL_ERROR
    assert "event stream is unusable" in reply.message


@pytest.mark.parametrize(("status", "content_type", "body"), [
    (200, "text/html", b"<html>hello</html>"),
    (200, None, b"{}"),
    (500, "text/html", b"<h1>Internal Server Error</h1>"),
    (400, "text/plain", b"Bad Request"),
    (200, "application/json", b"[1, 2]"),
    (200, "application/json", b"not json at all"),
])
async def test_wrong_content_types_and_bodies_become_errors(status: int, content_type: str | None,
                                                            body: bytes) -> None:
    async def answer(ex: Exchange) -> None:
        await ex.respond(status, body, content_type=content_type)

    reply = await hostile_then_fine(answer)
    assert reply.code == INTERNAL_ERROR
    assert reply.error_data() == {"httpStatus": status}


async def test_an_answer_to_another_id_is_not_taken_as_this_one() -> None:
    async def answer(ex: Exchange) -> None:
        await ex.json(200, {"jsonrpc": "2.0", "id": 99999, "result": {"content": []}})

    reply = await hostile_then_fine(answer)
    assert "answered id" in reply.message


async def test_a_compressed_answer_is_refused() -> None:
    async def answer(ex: Exchange) -> None:
        payload = gzip.compress(json.dumps(rpc_result(ex.request, {"content": []})).encode())
        await ex.respond(200, payload, [("Content-Encoding", "gzip")], content_type="application/json")

    reply = await hostile_then_fine(answer)
    assert "'gzip'-encoded" in reply.message
    assert reply.code == INTERNAL_ERROR


async def test_a_flood_of_notifications_reaches_the_session_in_order() -> None:
    async def on_call(ex: Exchange, body: dict[str, Any]) -> bool:
        await ex.sse_start()
        for i in range(2000):
            await ex.sse_message({"jsonrpc": "2.0", "method": "notifications/message",
                                  "params": {"level": "info", "data": i}})
        await ex.sse_message(rpc_result(ex.request, {"content": []}))
        return True

    async with connected(LegacyMock(on_call=on_call)) as c:
        assert (await c.call("echo")).ok
        await wait_for(lambda: len(c.recorder.notifications) == 2000)
        assert [n[1]["data"] for n in c.recorder.notifications] == list(range(2000))


async def test_a_session_id_that_is_not_visible_ascii_is_refused() -> None:
    async def handler(ex: Exchange) -> None:
        body = ex.request.json()
        if body.get("method") == "initialize":
            await ex.json(200, rpc_result(ex.request, {"protocolVersion": "2025-11-25", "capabilities": {},
                                                       "serverInfo": {"name": "x", "version": "1"}}),
                          [("Mcp-Session-Id", "has space")])
            return
        await ex.respond(400, b"Bad Request", content_type="text/plain")

    server = HttpServer(handler)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        upstream = Upstream(name="t", connector=HttpConnector(http_config(server.url()), "t"), handler=Recorder(),
                            options=UpstreamOptions(probe_timeout=5))
        upstream.set_legacy_capabilities({})
        await nursery.start(upstream.run)
        with trio.fail_after(20), pytest.raises(IncompatibleServer, match="not visible ASCII"):
            await upstream.wait_connected()
        nursery.cancel_scope.cancel()


async def test_an_unreachable_server_is_waited_for_not_classified() -> None:
    """Nothing listens yet: warden keeps trying; when the server comes up, the probe runs against it."""
    probe = HttpServer(ModernMock())
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        for listener in listeners:
            await listener.aclose()
        connector = HttpConnector(http_config(f"http://127.0.0.1:{port}/mcp", connect_timeout=1), "t")
        upstream = Upstream(name="t", connector=connector, handler=Recorder(), options=UpstreamOptions())
        await nursery.start(upstream.run)
        await trio.sleep(0.5)  # a few refused connections
        assert connector.connections == 0

        async def serve_on_port(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
            probe.port = port
            task_status.started()
            await trio.serve_listeners(probe._connection, listeners)

        await nursery.start(serve_on_port)
        with trio.fail_after(30):
            description = await upstream.wait_connected()
        assert description.era.value == "modern"
        assert connector.connections == 1
        nursery.cancel_scope.cancel()


async def test_transport_failure_mid_session_is_an_error_for_that_request() -> None:
    async def answer(ex: Exchange) -> None:
        ex.abort()

    reply = await hostile_then_fine(answer)
    assert reply.code == CONNECTION_CLOSED
    assert "also after re-issuing it" in reply.message
