"""Legacy Streamable HTTP (2025-03-26 ... 2025-11-25) as warden speaks it upstream: HL01-HL11.

warden's real upstream session over its real HTTP client, against a scripted session-keeping server on 127.0.0.1.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from tests.http_client.httpserver import Exchange, Seen, rpc_result
from tests.http_client.mocks import LegacyMock, connected
from warden.errors import UpstreamTimeout
from warden.protocol.messages import CONNECTION_CLOSED


async def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.01)


async def test_HL01_HL07_HL08_every_post_accepts_both_and_carries_the_negotiated_version() -> None:
    """The server settles on 2025-06-18 although warden offered 2025-11-25: the header follows the answer."""
    async with connected(LegacyMock(version="2025-06-18")) as c:
        await c.list_tools()
        assert (await c.call("echo", {"text": "x"})).ok
        posts = c.server.posts()
        assert c.server.methods()[:3] == ["server/discover", "initialize", "notifications/initialized"]
        assert all(p.header("accept") == "application/json, text/event-stream" for p in posts)
        initialize = c.posts_of("initialize")[0]
        assert initialize.json()["params"]["protocolVersion"] == "2025-11-25"
        assert initialize.header("mcp-protocol-version") is None
        assert initialize.header("mcp-session-id") is None
        for method in ("notifications/initialized", "tools/list", "tools/call"):
            seen = c.posts_of(method)[0]
            assert seen.header("mcp-protocol-version") == "2025-06-18", method
            assert seen.header("mcp-method") is None  # legacy requests carry no modern routing headers


async def test_HL02_event_stream_answers_carry_notifications_before_the_response() -> None:
    async def on_call(ex: Exchange, body: dict[str, Any]) -> bool:
        token = body["params"]["_meta"]["progressToken"]
        await ex.sse_start()
        await ex.sse_message({"jsonrpc": "2.0", "method": "notifications/message",
                              "params": {"level": "info", "data": "working"}}, event_id="1")
        await ex.sse_message({"jsonrpc": "2.0", "method": "notifications/progress",
                              "params": {"progressToken": token, "progress": 1}}, event_id="2")
        await ex.sse_message(rpc_result(ex.request, {"content": [{"type": "text", "text": "streamed"}]}),
                             event_id="3")
        return True

    progress: list[dict[str, Any]] = []

    async def on_progress(update: dict[str, Any]) -> None:
        progress.append(update)

    async with connected(LegacyMock(on_call=on_call)) as c:
        reply = await c.call("echo", on_progress=on_progress)
        assert reply.result_dict() == {"content": [{"type": "text", "text": "streamed"}]}
        assert ("notifications/message", {"level": "info", "data": "working"}) in c.recorder.notifications
        assert progress
        assert progress[0]["progress"] == 1


async def test_HL03_server_request_on_a_response_stream_is_answered_by_post_with_session_headers() -> None:
    answered = trio.Event()

    async def on_call(ex: Exchange, body: dict[str, Any]) -> bool:
        await ex.sse_start()
        await ex.sse_message({"jsonrpc": "2.0", "id": "q1", "method": "elicitation/create",
                              "params": {"message": "name?", "requestedSchema": {"type": "object"}}})
        await answered.wait()
        await ex.sse_message(rpc_result(ex.request, {"content": [{"type": "text", "text": "thanks"}]}))
        return True

    mock = LegacyMock(on_call=on_call)
    outer = mock.__call__

    async def handler(ex: Exchange) -> None:
        if ex.request.method == "POST" and ex.request.body.startswith(b'{"jsonrpc":"2.0","id":"q1"'):
            answered.set()
        await outer(ex)

    async with connected(handler) as c:
        reply = await c.call("echo")
        assert reply.ok
        answer = next(s for s in c.server.posts() if s.body.startswith(b'{"jsonrpc":"2.0","id":"q1"'))
        assert answer.json()["result"] == {"action": "accept", "content": {"ok": True}}
        assert answer.header("mcp-session-id") == mock.current()
        assert answer.header("mcp-protocol-version") == "2025-11-25"
        assert c.recorder.questions == [("elicitation/create", {"message": "name?",
                                                                "requestedSchema": {"type": "object"}})]


async def test_HL04_HL06_session_id_echoed_on_post_get_and_delete() -> None:
    async def on_get(ex: Exchange) -> None:
        await ex.sse_start()
        await trio.sleep_forever()

    mock = LegacyMock(on_get=on_get)
    async with connected(mock) as c:
        await c.list_tools()
        await wait_for(lambda: any(s.method == "GET" for s in c.server.seen))
        server = c.server
    session = mock.current()
    after_init = server.seen[2:]
    assert all(s.header("mcp-session-id") == session for s in after_init)
    assert [s.method for s in server.seen if s.method != "POST"] == ["GET", "DELETE"]
    delete = server.seen[-1]
    assert delete.method == "DELETE"
    assert delete.header("mcp-session-id") == session
    assert delete.header("mcp-protocol-version") == "2025-11-25"


async def test_HL05_404_on_a_session_request_starts_a_new_session() -> None:
    """The new session starts with ``initialize`` without the lost id; the origin's era answer is kept (covers ER01:
    the second session is not probed again)."""
    mock = LegacyMock()
    async with connected(mock) as c:
        assert (await c.call("echo")).ok
        mock.lost = True  # the server forgets the session
        lost = await c.call("echo")
        assert not lost.ok
        assert lost.code == CONNECTION_CLOSED
        assert "404" in lost.message
        # the supervisor reconnects: a fresh initialize, without the old id; the next call works
        await wait_for(lambda: mock.sessions_started == 2)
        again = await c.call("echo")
        assert again.ok
        initializes = c.posts_of("initialize")
        assert len(initializes) == 2
        assert initializes[1].header("mcp-session-id") is None
        assert mock.sessions_started == 2
        assert c.posts_of("tools/call")[-1].header("mcp-session-id") == mock.current() == "session-1-2"
        assert len(c.posts_of("server/discover")) == 1  # the era is cached: no second probe (ER01)


async def test_HL09_cancellation_is_a_posted_notification_with_the_request_id() -> None:
    async def on_call(ex: Exchange, body: dict[str, Any]) -> bool:
        await ex.sse_start()
        await trio.sleep(30)
        return True

    async with connected(LegacyMock(on_call=on_call)) as c:
        with pytest.raises(UpstreamTimeout, match="tools/call got no answer"):
            await c.call("echo", timeout=0.3)
        await wait_for(lambda: c.posts_of("notifications/cancelled"))
        call = c.posts_of("tools/call")[0]
        cancel = c.posts_of("notifications/cancelled")[0]
        assert cancel.json()["params"]["requestId"] == call.json()["id"]
        assert cancel.header("mcp-session-id") == call.header("mcp-session-id")


async def test_HL10_get_stream_delivers_server_notifications() -> None:
    async def on_get(ex: Exchange) -> None:
        await ex.sse_start()
        await ex.sse_message({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}, event_id="g1")
        await trio.sleep_forever()

    async with connected(LegacyMock(on_get=on_get)) as c:
        await wait_for(lambda: c.recorder.notifications)
        assert c.recorder.notifications == [("notifications/tools/list_changed", None)]
        get = next(s for s in c.server.seen if s.method == "GET")
        assert get.header("accept") == "text/event-stream"
        assert get.header("last-event-id") is None


async def test_HL10_no_get_stream_is_fine() -> None:
    """A 405 to the GET means the server offers none: warden does not retry it."""
    async with connected(LegacyMock()) as c:
        await wait_for(lambda: any(s.method == "GET" for s in c.server.seen))
        assert (await c.call("echo")).ok
        assert [s.method for s in c.server.seen].count("GET") == 1


async def test_HL11_response_stream_closed_early_is_resumed_with_last_event_id() -> None:
    """SEP-1699: the POST stream primes an event id and a retry, then closes; warden GETs with Last-Event-ID."""
    pending: list[Seen] = []

    async def on_call(ex: Exchange, body: dict[str, Any]) -> bool:
        pending.append(ex.request)
        await ex.sse_start()
        await ex.write(b"id: ev-1\nretry: 20\ndata: \n\n")
        return True  # the stream ends here, without the response

    async def on_get(ex: Exchange) -> None:
        await ex.sse_start()
        if ex.request.header("last-event-id") and pending:
            await ex.write(b"id: ev-2\nretry: 20\ndata: \n\n")
            await ex.sse_message(rpc_result(pending[0], {"content": [{"type": "text", "text": "resumed"}]}),
                                 event_id="ev-3")
        await trio.sleep_forever()

    async with connected(LegacyMock(on_call=on_call, on_get=on_get)) as c:
        reply = await c.call("echo")
        assert reply.result_dict()["content"][0]["text"] == "resumed"
        resumed = [s for s in c.server.seen if s.method == "GET" and s.header("last-event-id")]
        assert len(resumed) == 1
        assert resumed[0].header("last-event-id") == "ev-1"
        assert resumed[0].header("mcp-session-id") == c.posts_of("tools/call")[0].header("mcp-session-id")


async def test_HL11_a_compressed_resumption_stream_is_refused_like_any_compressed_answer() -> None:
    """The GET that resumes a broken response stream is held to the same identity-encoding rule as the POST."""
    async def on_call(ex: Exchange, body: dict[str, Any]) -> bool:
        await ex.sse_start()
        await ex.write(b"id: ev-1\nretry: 20\ndata: \n\n")
        return True

    async def on_get(ex: Exchange) -> None:
        await ex.sse_start([("Content-Encoding", "gzip")])
        await trio.sleep_forever()

    async with connected(LegacyMock(on_call=on_call, on_get=on_get)) as c:
        reply = await c.call("echo")
        assert not reply.ok
        assert reply.code == CONNECTION_CLOSED
        assert "resuming it: the server sent a 'gzip'-encoded answer" in reply.message
        assert "could not be resumed" in reply.message


async def test_HL11_get_stream_closed_is_resumed_from_its_last_event() -> None:
    async def on_get(ex: Exchange) -> None:
        await ex.sse_start()
        if ex.request.header("last-event-id") is None:
            await ex.write(b"retry: 10\n\n")
            await ex.sse_message({"jsonrpc": "2.0", "method": "notifications/message",
                                  "params": {"level": "info", "data": "one"}}, event_id="g-1")
            return  # closes the stream
        await ex.sse_message({"jsonrpc": "2.0", "method": "notifications/message",
                              "params": {"level": "info", "data": "two"}}, event_id="g-2")
        await trio.sleep_forever()

    async with connected(LegacyMock(on_get=on_get)) as c:
        await wait_for(lambda: len(c.recorder.notifications) == 2)
        assert [n[1]["data"] for n in c.recorder.notifications] == ["one", "two"]
        gets = [s for s in c.server.seen if s.method == "GET"]
        assert [g.header("last-event-id") for g in gets] == [None, "g-1"]


@pytest.mark.parametrize("event_id", ["ev-\u00e9", "ev-\x01", "x" * 1025])
async def test_HL11_an_event_id_no_header_can_carry_is_not_resumed_with(event_id: str) -> None:
    """An SSE id may be any text; ``Last-Event-ID`` may not. A non-ASCII id once reached httpx, which raised
    UnicodeEncodeError out of the request's task: the server was stopped for good. Such an id counts as none: that
    request fails like one on a stream without ids, and the connection stays usable."""
    calls = 0

    async def on_call(ex: Exchange, body: dict[str, Any]) -> bool:
        nonlocal calls
        calls += 1
        if calls > 1:
            return False
        await ex.sse_start()
        await ex.write(f"id: {event_id}\nretry: 10\ndata: \n\n".encode())
        return True

    async with connected(LegacyMock(on_call=on_call)) as c:
        reply = await c.call("echo")
        assert reply.code == CONNECTION_CLOSED
        assert reply.message == ("tools/call: the event stream ended before the response, and it could not be "
                                 "resumed")
        assert not [s for s in c.server.seen if s.method == "GET" and s.header("last-event-id")]
        assert (await c.call("echo")).ok


async def test_HL11_stream_without_event_id_cannot_be_resumed_and_the_request_fails() -> None:
    async def on_call(ex: Exchange, body: dict[str, Any]) -> bool:
        await ex.sse_start()
        await ex.write(b": keep-alive\n\n")
        return True

    async with connected(LegacyMock(on_call=on_call)) as c:
        reply = await c.call("echo")
        assert not reply.ok
        assert reply.code == CONNECTION_CLOSED
        assert "could not be resumed" in reply.message
        assert not [s for s in c.server.seen if s.method == "GET" and s.header("last-event-id")]
