"""What one principal can make the HTTP face hold for legacy sessions, and what it cannot take from the others: real
hypercorn on 127.0.0.1, real HTTP, two named tokens. The gateway behind the face is scripted (as in
``test_modern_reply``): these tests are about the face's bounds, and a request must stay in flight on demand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import trio

from tests.http_server.test_modern_reply import Scripted
from warden.gateway.http import HttpFace, HttpOptions, serve_http
from warden.gateway.link import Handled, HostLink, Sink
from warden.gateway.principals import TokenRegistry
from warden.protocol.messages import Request, encode_result

ACCEPT = "application/json, text/event-stream"


class SlowCalls(Scripted):
    """Answers ``initialize`` at once and every other request after an hour (it stays in flight)."""

    async def handle(self, request: Request, link: HostLink, sink: Sink) -> Handled:
        if request.method == "initialize":
            return Handled(encode_result(request.id, b'{"protocolVersion":"2025-11-25","capabilities":{},'
                                                     b'"serverInfo":{"name":"s","version":"1"}}'))
        await trio.sleep(3600)
        return Handled(encode_result(request.id, b"{}"))


class Host:
    def __init__(self, http: httpx.AsyncClient, url: str, token: str) -> None:
        self.http, self.url, self.token = http, url, token

    def headers(self, session: str | None = None) -> dict[str, str]:
        headers = {"authorization": f"Bearer {self.token}", "content-type": "application/json", "accept": ACCEPT}
        if session is not None:
            headers |= {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
        return headers

    async def initialize(self) -> httpx.Response:
        return await self.http.post(self.url, headers=self.headers(), json={
            "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})

    async def leave_running(self, session: str, id_: int) -> int:
        """POST a request and hang up once its response started (a legacy disconnect does not cancel it)."""
        async with self.http.stream("POST", self.url, headers=self.headers(session), json={
                "jsonrpc": "2.0", "id": id_, "method": "tools/list"}) as response:
            return response.status_code


async def serving(tmp_path: Path, nursery: trio.Nursery, **options: Any) -> tuple[HttpFace, str, str]:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    registry = TokenRegistry(state)
    alice, bob = registry.add("alice"), registry.add("bob")
    face = await nursery.start(serve_http, SlowCalls(), HttpOptions(
        token="o" * 43, tokens=registry, keepalive_interval=0.1, **options))
    return face, alice, bob


async def test_one_principal_cannot_take_every_legacy_session(tmp_path: Path, nursery: trio.Nursery) -> None:
    """A principal opening sessions without end (and keeping each busy) exhausts its own share, never the face's:
    another principal still opens one (before: one principal could open all of them and every other got 503 for
    the hour an idle session lives). Past its share, its own least recently used quiet session makes room."""
    face, alice, bob = await serving(tmp_path, nursery, max_sessions=6, max_sessions_per_principal=2)
    async with httpx.AsyncClient(timeout=10) as http:
        mallory, host = Host(http, face.url, bob), Host(http, face.url, alice)
        opened = [(await mallory.initialize()).headers.get("mcp-session-id") for _ in range(6)]
        assert all(opened)  # each new one ended bob's oldest quiet one
        alive = [s for s in opened if (await mallory.leave_running(s, 1)) == 200]
        assert alive == opened[-2:]  # the ended ones are "not found" (404)
        refused = await mallory.initialize()
        assert refused.status_code == 503  # both busy: no room made at the cost of work in flight
        assert "2 sessions open" in refused.json()["error"]["message"]
        mine = await host.initialize()
        assert mine.status_code == 200, mine.text
        assert (await host.leave_running(mine.headers["mcp-session-id"], 1)) == 200


async def test_a_legacy_session_holds_a_bounded_number_of_requests_in_flight(tmp_path: Path,
                                                                            nursery: trio.Nursery) -> None:
    """Requests a host abandons keep running in the legacy era, so firing and hanging up without end would make
    the face hold unbounded work (before: no limit at all); past the limit a request gets 429, and the limit is
    the session's own."""
    face, alice, bob = await serving(tmp_path, nursery, max_requests_per_session=3)
    async with httpx.AsyncClient(timeout=10) as http:
        mallory, host = Host(http, face.url, bob), Host(http, face.url, alice)
        session = (await mallory.initialize()).headers["mcp-session-id"]
        assert [await mallory.leave_running(session, n) for n in range(1, 4)] == [200, 200, 200]
        assert await mallory.leave_running(session, 4) == 429
        other = (await host.initialize()).headers["mcp-session-id"]
        assert (await host.leave_running(other, 1)) == 200


async def test_a_body_announced_and_never_sent_gets_408_and_the_connection_closes(tmp_path: Path,
                                                                                  nursery: trio.Nursery) -> None:
    """An authenticated client that sends a request's headers and part of its body, then nothing, holds the
    connection (and a task of the face) for ``body_timeout`` only: it gets 408 and ``Connection: close``, and the
    face goes on serving (before: nothing bounded the wait, and hypercorn's own read timeout cannot, since it would
    also end the streams a legacy client reads without sending)."""
    face, alice, _ = await serving(tmp_path, nursery, body_timeout=0.5)
    port = int(face.url.split(":")[2].split("/")[0])
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nauthorization: Bearer {alice}\r\n"
                          f"content-type: application/json\r\naccept: {ACCEPT}\r\ncontent-length: 100\r\n\r\n"
                          '{"jsonrpc":'.encode())
    answer = b""
    with trio.fail_after(5):
        while chunk := await stream.receive_some(65536):  # until the face closes the connection
            answer += chunk
    head = answer.split(b"\r\n\r\n")[0].lower()
    assert head.startswith(b"http/1.1 408")
    assert b"connection: close" in head
    assert b"did not arrive within 0.5 s" in answer
    await stream.aclose()
    async with httpx.AsyncClient(timeout=10) as http:
        assert (await Host(http, face.url, alice).initialize()).status_code == 200
