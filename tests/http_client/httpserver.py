"""A tiny HTTP/1.1 server on 127.0.0.1 (h11 over trio) whose every answer a test writes by hand.

Real MCP servers answer correctly; hostile and broken ones are what these tests need: a bare-text 400, a body
larger than any limit, an event stream that never ends a line, a redirect to another origin, a 404 for a session
that existed a moment ago. Each request goes to the test's handler as an :class:`Exchange`, which can answer in
one piece, stream an answer chunk by chunk, or cut the connection. Every request is recorded in
:attr:`HttpServer.seen` (method, path, headers, body) so tests can assert what warden put on the wire.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import h11
import trio


class Abort(Exception):
    """Raised by a handler (or :meth:`Exchange.abort`) to cut the connection without finishing the answer."""


@dataclass
class Seen:
    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        values = [v for k, v in self.headers if k == name.lower()]
        return values[-1] if values else None

    def all(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k == name.lower()]

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Exchange:
    request: Seen
    _stream: trio.SocketStream
    _conn: h11.Connection
    started: bool = False
    finished: bool = False
    closed: trio.Event = field(default_factory=trio.Event)

    async def _send(self, event: Any) -> None:
        data = self._conn.send(event)
        if data:
            await self._stream.send_all(data)

    async def start(self, status: int, headers: Iterable[tuple[str, str]] = ()) -> None:
        """Send the status line and headers; the body follows with :meth:`write` (chunked unless a length is set)."""
        self.started = True
        await self._send(h11.Response(status_code=status, headers=list(headers)))

    async def write(self, data: bytes) -> None:
        await self._send(h11.Data(data=data))

    async def end(self) -> None:
        self.finished = True
        await self._send(h11.EndOfMessage())

    async def respond(self, status: int, body: bytes = b"", headers: Iterable[tuple[str, str]] = (),
                      content_type: str | None = None) -> None:
        hdrs = list(headers)
        if content_type is not None:
            hdrs.append(("Content-Type", content_type))
        hdrs.append(("Content-Length", str(len(body))))
        await self.start(status, hdrs)
        if body:
            await self.write(body)
        await self.end()

    async def json(self, status: int, value: Any, headers: Iterable[tuple[str, str]] = ()) -> None:
        await self.respond(status, json.dumps(value).encode(), headers, "application/json")

    async def sse_start(self, headers: Iterable[tuple[str, str]] = ()) -> None:
        await self.start(200, [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache"), *headers])

    async def sse_message(self, value: Any, *, event_id: str | None = None) -> None:
        head = f"id: {event_id}\n" if event_id is not None else ""
        await self.write(f"{head}event: message\ndata: {json.dumps(value)}\n\n".encode())

    def abort(self) -> None:
        raise Abort


Handler = Callable[[Exchange], Awaitable[None]]


class HttpServer:
    """Serve ``handler`` on 127.0.0.1; start with ``await nursery.start(server.serve)``."""

    def __init__(self, handler: Handler, *, max_body: int = 64 * 1024 * 1024) -> None:
        self.handler = handler
        self.seen: list[Seen] = []
        self.port = 0
        self._max_body = max_body

    def url(self, path: str = "/mcp") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def posts(self) -> list[Seen]:
        return [s for s in self.seen if s.method == "POST"]

    def methods(self) -> list[str]:
        """The JSON-RPC method (or ``response``) of every POST, in order."""
        out = []
        for seen in self.posts():
            try:
                body = seen.json()
            except ValueError:
                out.append("?")
                continue
            out.append(body.get("method", "response") if isinstance(body, dict) else "?")
        return out

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            task_status.started(self.port)
            await trio.serve_listeners(self._connection, listeners, handler_nursery=nursery)

    async def _connection(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
        try:
            while True:
                request = await self._read_request(conn, stream)
                if request is None:
                    return
                exchange = Exchange(request, stream, conn)
                try:
                    await self.handler(exchange)
                    if not exchange.started:
                        await exchange.respond(500, b"handler sent nothing")
                    elif not exchange.finished:
                        await exchange.end()
                except Abort:
                    return
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            return
        finally:
            with trio.move_on_after(1) as scope:
                scope.shield = True
                await stream.aclose()

    async def _read_request(self, conn: h11.Connection, stream: trio.SocketStream) -> Seen | None:
        head: h11.Request | None = None
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                conn.receive_data(data)
                if not data and conn.their_state is h11.IDLE:
                    return None
                continue
            if isinstance(event, h11.Request):
                head = event
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > self._max_body:
                    return None
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                seen = Seen(head.method.decode(), head.target.decode(),
                            [(k.decode().lower(), v.decode("latin-1")) for k, v in head.headers], bytes(body))
                self.seen.append(seen)
                return seen
            elif isinstance(event, h11.ConnectionClosed):
                return None


def rpc_result(request: Seen, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request.json()["id"], "result": result}


def rpc_error(request: Seen | None, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request.json().get("id") if request is not None else None, "error": error}
