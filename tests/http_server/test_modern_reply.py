"""A 2026 request's response in process, on trio's MockClock: the task that runs the request writes a lone answer
as JSON itself; a message before the answer, an upfront request or a long wait turns it into an event stream; the
host closing the stream cancels the request. The gateway is scripted (what it sends, how long it takes), the ASGI
server is two functions: nothing here is timed by a real clock."""

from __future__ import annotations

import json
from typing import Any

import trio
import trio.testing

from warden.gateway.http import HttpFace, HttpOptions
from warden.gateway.link import Handled, HostLink, Sink, Started
from warden.protocol.eras import META_PROTOCOL_VERSION
from warden.protocol.messages import Notification, Request, encode_notification, encode_result
from warden.protocol.sse import SSEParser

MODERN = "2026-07-28"
PORT = 8765


class Scripted:
    """A served gateway whose ``handle`` sends ``before`` to the sink, waits ``takes`` seconds, then answers."""

    def __init__(self, before: tuple[bytes, ...] = (), takes: float = 0.0) -> None:
        self.before = before
        self.takes = takes
        self.cancelled = False

    def attach(self, link: HostLink) -> None:
        pass

    def detach(self, link: HostLink) -> None:
        pass

    def expect_legacy_host(self) -> None:
        pass

    def known_tool(self, name: str) -> dict[str, Any] | None:
        return None

    async def handle(self, request: Request, link: HostLink, sink: Sink) -> Handled:
        for message in self.before:
            await sink.send(message)
        try:
            await trio.sleep(self.takes)
        except trio.Cancelled:
            self.cancelled = True
            raise
        return Handled(encode_result(request.id, b'{"tools":[]}'))

    async def start(self, request: Request, link: HostLink, sink: Sink, answer: Any) -> Started | None:
        return None

    async def host_notification(self, note: Notification, link: HostLink) -> None:
        pass


async def post(served: Scripted, *, meta: dict[str, Any] | None = None, disconnect_after: float | None = None,
               keepalive: float = 15.0) -> list[dict[str, Any]]:
    """POST one modern ``tools/list`` to a face in front of ``served``; what the face sent back, in order."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
        META_PROTOCOL_VERSION: MODERN, "io.modelcontextprotocol/clientCapabilities": {}, **(meta or {})}}}).encode()
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": [
        (b"host", b"127.0.0.1:%d" % PORT), (b"content-type", b"application/json"),
        (b"accept", b"application/json, text/event-stream"), (b"mcp-protocol-version", MODERN.encode()),
        (b"mcp-method", b"tools/list"), (b"content-length", b"%d" % len(body))]}
    sent: list[dict[str, Any]] = []
    gone = trio.Event()
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async with trio.open_nursery() as nursery:
        face = HttpFace(served, HttpOptions(insecure_no_auth=True, port=PORT, keepalive_interval=keepalive),
                        port=PORT, nursery=nursery)
        if disconnect_after is not None:
            async def hang_up() -> None:
                await trio.sleep(disconnect_after)
                gone.set()
            nursery.start_soon(hang_up)
        await face(scope, receive, send)
        nursery.cancel_scope.cancel()
    return sent


def headers_of(start: dict[str, Any]) -> dict[bytes, bytes]:
    return dict(start["headers"])


def events_of(sent: list[dict[str, Any]]) -> list[Any]:
    return SSEParser().feed(b"".join(m.get("body", b"") for m in sent[1:]))


async def test_a_lone_answer_is_written_as_json_by_the_request_task(autojump_clock: trio.testing.MockClock) -> None:
    sent = await post(Scripted(takes=1.0))
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert headers_of(sent[0])[b"content-type"] == b"application/json"
    assert json.loads(sent[1]["body"]) == {"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}
    assert int(headers_of(sent[0])[b"content-length"]) == len(sent[1]["body"])


async def test_a_message_before_the_answer_turns_the_response_into_an_event_stream(
        autojump_clock: trio.testing.MockClock) -> None:
    note = encode_notification("notifications/message", b'{"level":"info","data":"first"}')
    sent = await post(Scripted(before=(note,), takes=1.0))
    assert headers_of(sent[0])[b"content-type"] == b"text/event-stream"
    assert [json.loads(e.data) for e in events_of(sent)] == [
        json.loads(note), {"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}]
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


async def test_a_progress_token_asks_for_an_event_stream_upfront(autojump_clock: trio.testing.MockClock) -> None:
    sent = await post(Scripted(), meta={"progressToken": "p"})
    assert headers_of(sent[0])[b"content-type"] == b"text/event-stream"
    assert [json.loads(e.data)["id"] for e in events_of(sent)] == [1]


async def test_an_answer_pending_past_the_keepalive_interval_goes_as_a_stream_with_comments(
        autojump_clock: trio.testing.MockClock) -> None:
    sent = await post(Scripted(takes=10.0), keepalive=3.0)
    assert headers_of(sent[0])[b"content-type"] == b"text/event-stream"
    bodies = b"".join(m.get("body", b"") for m in sent[1:])
    assert bodies.count(b":\n") == 2  # at 6 s and 9 s (the switch itself came at 3 s)
    assert [json.loads(e.data)["id"] for e in events_of(sent)] == [1]


async def test_the_host_closing_the_stream_cancels_the_request(autojump_clock: trio.testing.MockClock) -> None:
    served = Scripted(takes=60.0)
    sent = await post(served, disconnect_after=5.0)
    assert served.cancelled
    assert sent == []  # nothing written; the ASGI server ends the exchange
