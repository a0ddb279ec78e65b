"""The HTTP era probe (ER09-ER12, SS01-SS04): what warden puts on the wire first, and what each answer leads to.

warden's real upstream session runs over its real HTTP client against scripted servers on 127.0.0.1.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import trio

from tests.http_client.httpserver import Exchange, HttpServer, rpc_error, rpc_result
from tests.http_client.mocks import LegacyMock, ModernMock, Recorder, connected
from warden.errors import IncompatibleServer
from warden.protocol.eras import Era
from warden.transport import http_client
from warden.transport.http_client import HttpConnector
from warden.transport.http_config import http_config
from warden.upstream.connection import Upstream, UpstreamOptions

META_VERSION = "io.modelcontextprotocol/protocolVersion"


async def test_ER09_modern_probe_is_a_post_with_every_header_and_success_means_modern() -> None:
    async with connected(ModernMock()) as c:
        description = c.upstream.description
        assert description is not None
        assert description.era is Era.MODERN
        assert description.server_info == {"name": "modern-mock", "version": "1"}
        first = c.server.seen[0]
        assert first.method == "POST"
        assert first.path == "/mcp"
        body = first.json()
        assert body["method"] == "server/discover"
        meta = body["params"]["_meta"]
        assert meta[META_VERSION] == "2026-07-28"
        assert "io.modelcontextprotocol/clientCapabilities" in meta
        assert first.header("accept") == "application/json, text/event-stream"
        assert first.header("content-type") == "application/json"
        assert first.header("mcp-protocol-version") == "2026-07-28"
        assert first.header("mcp-method") == "server/discover"
        assert first.header("mcp-name") is None  # server/discover names nothing
        assert not any(s.json().get("method") == "initialize" for s in c.server.posts())


async def test_ER10_unsupported_version_error_in_a_400_is_modern_and_warden_retries_with_a_listed_version() -> None:
    refused: list[str] = []

    async def discover(ex: Exchange, body: dict[str, Any]) -> bool:
        if not refused:
            refused.append(ex.request.header("mcp-protocol-version") or "")
            await ex.json(400, rpc_error(ex.request, -32022, "Unsupported protocol version",
                                         {"supported": ["2026-07-28"], "requested": "2026-07-28"}))
            return True
        return False

    async with connected(ModernMock(discover=discover)) as c:
        assert c.upstream.description is not None
        assert c.upstream.description.era is Era.MODERN
        probes = c.posts_of("server/discover")
        assert len(probes) == 2
        assert probes[1].header("mcp-protocol-version") == "2026-07-28"
        assert probes[0].json()["id"] != probes[1].json()["id"]
        assert not c.posts_of("initialize")


async def test_ER10_missing_capability_in_a_400_is_modern_and_the_probe_declares_it() -> None:
    async def discover(ex: Exchange, body: dict[str, Any]) -> bool:
        caps = body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
        if "elicitation" not in caps:
            await ex.json(400, rpc_error(ex.request, -32021, "needs elicitation",
                                         {"requiredCapabilities": {"elicitation": {}}}))
            return True
        return False

    async with connected(ModernMock(discover=discover)) as c:
        assert c.upstream.description is not None
        assert c.upstream.description.era is Era.MODERN
        assert len(c.posts_of("server/discover")) == 2
        assert not c.posts_of("initialize")


async def test_ER10_404_method_not_found_to_server_discover_falls_back_to_initialize() -> None:
    """A modern server MUST implement server/discover, so "method not found" to it is a legacy answer (the
    argument is in warden.protocol.http_answers)."""
    mock = LegacyMock()

    async def discover(ex: Exchange) -> None:
        await ex.json(404, rpc_error(ex.request, -32601, "Method not found"))

    mock.discover_answer = discover
    async with connected(mock) as c:
        assert c.upstream.description is not None
        assert c.upstream.description.era is Era.LEGACY
        assert c.server.methods()[:2] == ["server/discover", "initialize"]


async def _legacy_after(answer: Any) -> list[str]:
    mock = LegacyMock()
    mock.discover_answer = answer
    async with connected(mock) as c:
        assert c.upstream.description is not None
        assert c.upstream.description.era is Era.LEGACY
        return c.server.methods()


async def test_ER11_bare_text_400_to_the_probe_is_legacy() -> None:
    async def bare(ex: Exchange) -> None:
        await ex.respond(400, b"Bad Request", content_type="text/plain")

    assert (await _legacy_after(bare))[:3] == ["server/discover", "initialize", "notifications/initialized"]


async def test_ER11_html_error_page_and_200_empty_object_are_legacy() -> None:
    async def html(ex: Exchange) -> None:
        await ex.respond(404, b"<html><body>Cannot POST /mcp</body></html>", content_type="text/html")

    async def empty(ex: Exchange) -> None:
        await ex.json(200, {})

    async def result_empty(ex: Exchange) -> None:
        await ex.json(200, rpc_result(ex.request, {}))

    async def other_code(ex: Exchange) -> None:
        await ex.json(400, rpc_error(ex.request, -32602, "Invalid params"))

    for answer in (html, empty, result_empty, other_code):
        assert (await _legacy_after(answer))[:2] == ["server/discover", "initialize"]


def sse_only_server(ack: tuple[int, str]) -> Any:
    """A 2024-11-05 HTTP+SSE server at /sse: POSTs to /sse are refused with 405; messages go to the announced
    endpoint, which acknowledges with ``ack`` (status, content type) and answers on the stream."""
    stream_ready = trio.Event()
    outbox: trio.MemorySendChannel[dict[str, Any]]
    outbox, inbox = trio.open_memory_channel[dict[str, Any]](16)

    async def handler(ex: Exchange) -> None:
        request = ex.request
        if request.method == "GET" and request.path == "/sse":
            await ex.sse_start()
            await ex.write(b"event: endpoint\ndata: /messages?session=abc\n\n")
            stream_ready.set()
            async for message in inbox:
                await ex.write(f"event: message\ndata: {json.dumps(message)}\n\n".encode())
            return
        if request.method == "POST" and request.path == "/sse":
            await ex.respond(405, b"Method Not Allowed", content_type="text/plain")
            return
        if request.method == "POST" and request.path == "/messages?session=abc":
            body = request.json()
            await ex.respond(ack[0], b"Accepted", content_type=ack[1])
            if body.get("method") == "initialize":
                await outbox.send(rpc_result(request, {"protocolVersion": "2024-11-05", "capabilities": {"tools": {}},
                                                       "serverInfo": {"name": "sse", "version": "1"}}))
            elif body.get("method") == "tools/call":
                # a server request first (SS03), then the result once it is answered
                await outbox.send({"jsonrpc": "2.0", "id": 77, "method": "elicitation/create",
                                   "params": {"message": "ok?", "requestedSchema": {"type": "object"}}})
                await outbox.send(rpc_result(request, {"content": [{"type": "text", "text": "sse ok"}]}))
            return
        await ex.respond(404)

    return handler


@pytest.mark.parametrize("ack", [(202, "text/plain"), (200, "text/plain")])
async def test_ER12_SS01_SS02_SS03_initialize_refused_falls_back_to_http_sse(ack: tuple[int, str]) -> None:
    """ER12: initialize POST answered 405 -> GET the URL, wait for `endpoint`, POST everything there (SS02), read
    answers from the stream (SS03), answer server requests by POST to the endpoint. An endpoint that acknowledges
    with 200 and text instead of 202 is fine too: the answer is on the stream."""
    async with connected(sse_only_server(ack), path="/sse") as c:
        assert c.upstream.description is not None
        assert c.upstream.description.era is Era.LEGACY
        assert c.upstream.description.version == "2024-11-05"
        reply = await c.call("anything")
        assert reply.ok
        assert reply.result_dict()["content"][0]["text"] == "sse ok"
        with trio.fail_after(5):
            while not any(s.body.startswith(b'{"jsonrpc":"2.0","id":77') for s in c.server.posts()):
                await trio.sleep(0.01)
        posted = [(s.path, c_method) for s, c_method in zip(c.server.posts(), c.server.methods(), strict=True)]
        assert posted[:3] == [("/sse", "server/discover"), ("/sse", "initialize"),
                              ("/messages?session=abc", "initialize")]
        assert ("/messages?session=abc", "notifications/initialized") in posted
        assert ("/messages?session=abc", "response") in posted  # SS03: the answer to id 77 went to the endpoint
        assert c.recorder.questions[0][0] == "elicitation/create"
        gets = [s for s in c.server.seen if s.method == "GET"]
        assert len(gets) == 1
        assert gets[0].header("accept") == "text/event-stream"
        assert c.connector.legacy_transport is not None
        assert c.connector.legacy_transport.value == "HTTP+SSE"


async def test_SS04_http_sse_is_never_tried_while_streamable_http_works() -> None:
    async with connected(LegacyMock()) as c:
        assert not any(s.method == "GET" and s.header("mcp-session-id") is None for s in c.server.seen)
        assert c.connector.legacy_transport is not None
        assert c.connector.legacy_transport.value == "streamable HTTP"


@pytest.mark.parametrize(("endpoint", "refusal"), [
    ("{other}/steal", "the server's endpoint event points to another origin"),
    # urljoin raises ValueError for an unbalanced IPv6 bracket: it once escaped and stopped the server for good
    ("http://[::1/steal", "the server's endpoint event is not a valid URL (Invalid IPv6 URL)"),
])
async def test_SS02_endpoint_on_another_origin_or_not_a_url_is_refused(endpoint: str, refusal: str,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    """An HTTP+SSE server cannot steer warden's POSTs (and credentials) to another origin, and an endpoint that is
    not a URL is refused like one, not an internal error."""
    caplog.set_level(logging.INFO, logger="warden.transport.http_client")
    other = HttpServer(lambda ex: ex.respond(202))

    async def handler(ex: Exchange) -> None:
        if ex.request.method == "GET":
            await ex.sse_start()
            await ex.write(f"event: endpoint\ndata: {endpoint.format(other=other.origin)}\n\n".encode())
            await trio.sleep(30)
        elif ex.request.json().get("method") == "initialize":
            await ex.respond(404, b"nope", content_type="text/plain")
        else:
            await ex.respond(400, b"Bad Request", content_type="text/plain")

    server = HttpServer(handler)
    async with trio.open_nursery() as nursery:
        await nursery.start(other.serve)
        await nursery.start(server.serve)
        upstream = Upstream(name="t", connector=HttpConnector(
            http_config(server.url(), headers=[("Authorization", "Bearer sekrit")]), "t"), handler=Recorder(),
            options=UpstreamOptions(probe_timeout=5))
        upstream.set_legacy_capabilities({})
        await nursery.start(upstream.run)
        with trio.fail_after(20), pytest.raises(IncompatibleServer, match="initialize failed"):
            await upstream.wait_connected()
        assert f"no HTTP+SSE transport either: the server's event stream is unusable: {refusal}" in caplog.text
        assert other.seen == []
        nursery.cancel_scope.cancel()


async def test_SS04_a_cached_http_sse_answer_that_no_longer_holds_is_dropped() -> None:
    """The connector remembers HTTP+SSE for the URL, but the server now speaks Streamable HTTP: the GET fails and
    warden goes back to POSTing initialize."""
    server = HttpServer(LegacyMock())
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        connector = HttpConnector(http_config(server.url()), "t")
        connector.legacy_transport = http_client._Transport.SSE
        upstream = Upstream(name="t", connector=connector, handler=Recorder(), options=UpstreamOptions(),
                            known_era=Era.LEGACY)
        upstream.set_legacy_capabilities({})
        await nursery.start(upstream.run)
        with trio.fail_after(20):
            description = await upstream.wait_connected()
        assert description.era is Era.LEGACY
        assert [s.method for s in server.seen[:2]] == ["GET", "POST"]
        assert connector.legacy_transport is http_client._Transport.STREAMABLE
        nursery.cancel_scope.cancel()
