"""Modern Streamable HTTP (2026-07-28) as warden speaks it upstream: HM01-HM19.

warden's real upstream session over its real HTTP client, against a scripted stateless server on 127.0.0.1.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
import trio

from tests.http_client.httpserver import Exchange, rpc_error, rpc_result
from tests.http_client.mocks import MODERN_TOOLS, ModernMock, connected
from warden.errors import UpstreamTimeout
from warden.protocol.messages import HEADER_MISMATCH, INVALID_PARAMS

META_VERSION = "io.modelcontextprotocol/protocolVersion"


async def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.01)


async def test_HM01_HM03_HM04_HM05_every_request_carries_its_routing_headers() -> None:
    async with connected(ModernMock()) as c:
        await c.list_tools(capabilities={})
        assert (await c.call("echo", {"text": "hi"}, capabilities={})).ok
        for seen in c.server.posts():
            body = seen.json()
            assert seen.header("accept") == "application/json, text/event-stream"
            assert seen.header("mcp-protocol-version") == body["params"]["_meta"][META_VERSION] == "2026-07-28"
            assert seen.header("mcp-method") == body["method"]
            assert isinstance(body, dict)  # one message per POST, never a batch
        call = c.posts_of("tools/call")[0]
        assert call.header("mcp-name") == "echo"
        assert c.posts_of("tools/list")[0].header("mcp-name") is None


async def test_HM02_both_answer_kinds_and_request_scoped_notifications() -> None:
    async def on_call(ex: Exchange, body: dict[str, Any]) -> bool:
        token = body["params"]["_meta"]["progressToken"]
        await ex.sse_start()
        await ex.sse_message({"jsonrpc": "2.0", "method": "notifications/progress",
                              "params": {"progressToken": token, "progress": 5, "total": 10}})
        await ex.sse_message(rpc_result(ex.request, {"resultType": "complete",
                                                     "content": [{"type": "text", "text": "streamed"}]}))
        return True

    seen_progress: list[dict[str, Any]] = []

    async def progress(update: dict[str, Any]) -> None:
        seen_progress.append(update)

    async with connected(ModernMock(on_call=on_call)) as c:
        tools = await c.list_tools(capabilities={})  # a JSON answer
        assert tools
        reply = await c.call("echo", capabilities={}, on_progress=progress)  # an event-stream answer
        assert reply.result_dict()["content"][0]["text"] == "streamed"
        assert seen_progress[0]["progress"] == 5


async def test_HM06_HM07_HM08_HM09_HM10_param_headers_from_annotated_arguments() -> None:
    async with connected(ModernMock()) as c:
        await c.list_tools(capabilities={})
        arguments = {"region": "Hello, 世界", "count": 42, "dry": False, "opts": {"zone": " padded "},
                     "method": "\tindented", "note": "not annotated"}
        assert (await c.call("route", arguments, capabilities={})).ok
        call = c.posts_of("tools/call")[0]
        assert call.header("mcp-param-region") == "=?base64?SGVsbG8sIOS4lueVjA==?="
        assert call.header("mcp-param-count") == "42"
        assert call.header("mcp-param-dry") == "false"
        assert call.header("mcp-param-zone") == "=?base64?" + base64.b64encode(b" padded ").decode() + "?="
        assert call.header("mcp-param-method") == "=?base64?CWluZGVudGVk?="  # HM10: a tab is Base64-encoded
        assert call.header("mcp-method") == "tools/call"  # Mcp-Param-Method never replaces Mcp-Method (HM07)
        assert call.header("mcp-param-note") is None


async def test_HM06_absent_and_null_arguments_send_no_header() -> None:
    async with connected(ModernMock()) as c:
        await c.list_tools(capabilities={})
        assert (await c.call("route", {"region": None, "count": 7}, capabilities={})).ok
        call = c.posts_of("tools/call")[0]
        assert call.header("mcp-param-region") is None
        assert call.header("mcp-param-count") == "7"
        assert call.header("mcp-param-dry") is None
        assert call.header("mcp-param-zone") is None


async def test_HM06_a_tool_never_listed_is_listed_first_to_learn_its_headers() -> None:
    async with connected(ModernMock()) as c:
        assert (await c.call("route", {"region": "us-west1"}, capabilities={})).ok
        assert c.server.methods() == ["server/discover", "tools/list", "tools/call"]
        assert c.posts_of("tools/call")[0].header("mcp-param-region") == "us-west1"
        internal = c.posts_of("tools/list")[0].json()
        assert isinstance(internal["id"], str)  # warden's own id space, never the session's


INVALID = ("bad_number", "bad_duplicate", "bad_token", "bad_in_items", "bad_in_one_of")


async def test_HM11_HM12_HM13_HM14_HM15_invalid_tools_are_excluded_and_never_called(caplog: Any) -> None:
    async with connected(ModernMock()) as c:
        names = [t["name"] for t in await c.list_tools(capabilities={})]
        assert names == ["echo", "route"]
        for name in INVALID:
            assert f"tool {name!r} excluded" in caplog.text
        assert "is not an HTTP token" in caplog.text  # HM12
        assert "repeats 'Field'" in caplog.text  # HM13
        assert "of type 'number'" in caplog.text  # HM14
        assert "not on a property reached through `properties` keys alone" in caplog.text  # HM15
        for name in INVALID:
            refused = await c.call(name, {"n": 1}, capabilities={})
            assert refused.code == INVALID_PARAMS
            assert "x-mcp-header annotations are invalid" in refused.message
        assert not c.posts_of("tools/call")


async def test_HM11_a_valid_list_passes_byte_for_byte() -> None:
    tools = MODERN_TOOLS[:2]
    async with connected(ModernMock(tools=tools)) as c:
        reply = await c.upstream.request("tools/list", {}, capabilities={})
        assert reply.result is not None
        assert reply.result_dict()["tools"] == tools


async def test_HM16_header_mismatch_relists_and_retries_once() -> None:
    """The server's tool gained an annotation since warden listed it: -32020, re-list, retry with the header."""
    mock = ModernMock(tools=[{"name": "route", "inputSchema": {"type": "object", "properties": {
        "region": {"type": "string"}}}}])

    async def on_call(ex: Exchange, body: dict[str, Any]) -> bool:
        if ex.request.header("mcp-param-region") is None:
            await ex.json(400, rpc_error(ex.request, HEADER_MISMATCH, "Header mismatch: Mcp-Param-Region missing"))
            return True
        return False

    mock.on_call = on_call
    async with connected(mock) as c:
        await c.list_tools(capabilities={})
        mock.tools = [{"name": "route", "inputSchema": {"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"}}}}]
        reply = await c.call("route", {"region": "eu"}, capabilities={})
        assert reply.ok
        assert c.server.methods()[-3:] == ["tools/call", "tools/list", "tools/call"]
        first, second = c.posts_of("tools/call")
        assert first.json()["id"] != second.json()["id"]
        assert second.header("mcp-param-region") == "eu"


async def test_HM16_retry_is_only_once() -> None:
    async def on_call(ex: Exchange, body: dict[str, Any]) -> bool:
        await ex.json(400, rpc_error(ex.request, HEADER_MISMATCH, "Header mismatch: no"))
        return True

    async with connected(ModernMock(on_call=on_call)) as c:
        reply = await c.call("echo", capabilities={})
        assert reply.code == HEADER_MISMATCH
        assert len(c.posts_of("tools/call")) == 2


async def test_HM17_no_session_machinery_with_a_modern_server() -> None:
    async with connected(ModernMock(session_header=True)) as c:
        await c.list_tools(capabilities={})
        assert (await c.call("echo", capabilities={})).ok
        server = c.server
    assert all(s.method == "POST" for s in server.seen)  # no GET stream, no DELETE
    assert all(s.header("mcp-session-id") is None for s in server.seen)
    assert all(s.header("last-event-id") is None for s in server.seen)


async def test_HM18_a_broken_stream_is_reissued_under_a_new_id() -> None:
    attempts: list[Any] = []

    async def on_call(ex: Exchange, body: dict[str, Any]) -> bool:
        attempts.append(body["id"])
        if len(attempts) == 1:
            await ex.sse_start()
            await ex.write(b": working\n\n")
            ex.abort()  # the connection breaks before the final response
        await ex.sse_start()
        await ex.sse_message(rpc_result(ex.request, {"resultType": "complete", "content": []}))
        return True

    async with connected(ModernMock(on_call=on_call)) as c:
        reply = await c.call("echo", capabilities={})
        assert reply.ok
        assert len(attempts) == 2
        assert attempts[0] != attempts[1]
        assert isinstance(attempts[1], str)


async def test_HM18_a_stream_that_ends_without_the_response_is_reissued_once_then_fails() -> None:
    async def on_call(ex: Exchange, body: dict[str, Any]) -> bool:
        await ex.sse_start()
        await ex.write(b"data: \n\n")
        return True

    async with connected(ModernMock(on_call=on_call)) as c:
        reply = await c.call("echo", capabilities={})
        assert not reply.ok
        assert "also after re-issuing it" in reply.message
        assert len(c.posts_of("tools/call")) == 2


async def test_HM19_cancellation_closes_the_stream_and_posts_nothing() -> None:
    closed = trio.Event()

    async def on_call(ex: Exchange, body: dict[str, Any]) -> bool:
        await ex.sse_start()
        try:
            while True:
                await ex.write(b": tick\n\n")
                await trio.sleep(0.05)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            closed.set()
            raise
        return True

    async with connected(ModernMock(on_call=on_call)) as c:
        with pytest.raises(UpstreamTimeout, match="tools/call got no answer"):
            await c.call("echo", capabilities={}, timeout=0.3)
        with trio.fail_after(10):
            await closed.wait()
        assert "notifications/cancelled" not in c.server.methods()


async def test_HM11_a_tool_list_smuggled_onto_another_requests_stream_is_dropped(
        caplog: pytest.LogCaptureFixture) -> None:
    """A response travels on its own request's stream. A server that answered the pending ``tools/list`` on the
    stream of a ``tools/call`` instead had that answer delivered as it was, past the screening of HM11: the host
    was offered a tool whose x-mcp-header annotations are invalid. Such a response is now dropped, and the list
    that comes back on the list's own stream is screened as always."""
    held: list[Any] = []
    armed = False
    arrived, forged = trio.Event(), trio.Event()
    smuggled = [MODERN_TOOLS[0], next(t for t in MODERN_TOOLS if t["name"] == "bad_token")]

    async def on_call(ex: Exchange, body: dict[str, Any]) -> bool:
        await arrived.wait()
        await ex.sse_start()
        await ex.sse_message({"jsonrpc": "2.0", "id": held[0], "result": {
            "resultType": "complete", "tools": smuggled, "ttlMs": 0, "cacheScope": "public"}})
        forged.set()
        await ex.sse_message(rpc_result(ex.request, {"resultType": "complete", "content": []}))
        return True

    mock = ModernMock(on_call=on_call)

    async def handler(ex: Exchange) -> None:
        body = ex.request.json()
        if armed and body.get("method") == "tools/list":
            held.append(body["id"])
            arrived.set()
            await forged.wait()
        await mock(ex)

    async with connected(handler) as c:
        await c.list_tools(capabilities={})  # warden knows the tools: the call needs no internal listing
        armed = True
        answers: dict[str, Any] = {}

        async def call() -> None:
            answers["call"] = await c.call("echo", capabilities={})

        async def listing() -> None:
            answers["list"] = await c.list_tools(capabilities={})

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(call)
                nursery.start_soon(listing)
        assert [t["name"] for t in answers["list"]] == ["echo", "route"]
        assert answers["call"].ok
        assert f"dropped a response to id {held[0]} sent on the stream of another request" in caplog.text
