"""The engine-driven path (issue 13 item 4) in process, on trio's MockClock: a ``tools/call`` decided in the host's
reader and answered from the server's (no task, cancel scope or event of its own) keeps every behaviour of the
task path — deadlines, progress, cancellation both ways, late and duplicate answers, a server that goes away, a
host that leaves, the server's questions during the call — proved without a subprocess or a real sleep. Each test
first lists the tools (a call before any list takes the task path: its list is read first) and checks, through the
face's statistics, that the calls it makes took the engine-driven path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from tests.gateway_harness import (
    TOOLS,
    ScriptedHost,
    ScriptedServer,
    gateway_in_process,
    legacy_handshake,
    legacy_server,
)
from warden.protocol.messages import CONNECTION_CLOSED, REQUEST_TIMEOUT
from warden.upstream.connection import UpstreamOptions

pytestmark = pytest.mark.trio


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def silent(server: ScriptedServer) -> None:
    """Take the call and never answer it."""


async def ready(host: ScriptedHost) -> None:
    """Initialize and list: from here on, calls of listed, approved tools take the engine-driven path."""
    await host.initialize()
    await host.request("list", "tools/list", {})
    assert [t["name"] for t in (await host.response("list"))["result"]["tools"]] == [t["name"] for t in TOOLS]


def inline(host: ScriptedHost) -> int:
    assert host.face is not None
    return host.face.statistics().inline


async def seen(server: ScriptedServer, method: str, name: str | None = None) -> dict[str, Any]:
    """The first message ``method`` (for ``name``) the server received, once it has."""
    while True:
        for message in server.seen:
            if message.get("method") == method and (name is None or message["params"].get("name") == name):
                return message
        await trio.sleep(0.1)


async def test_MS04_MS09_an_engine_driven_call_times_out_is_cancelled_upstream_and_its_late_answer_dropped(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    """The session's one timer expires the call: the host gets -32001 at exactly the deadline, the server
    ``notifications/cancelled`` for warden's id, and the server's late answer reaches nobody."""
    options = UpstreamOptions(request_timeout=50.0)
    async with gateway_in_process(tmp_path, lambda s: legacy_server(s, on_call=silent), options=options) as (
            host, connector):
        await ready(host)
        await host.request("call-1", "tools/call", {"name": "hang", "arguments": {}})
        answer = await host.response("call-1")
        assert answer["error"]["code"] == REQUEST_TIMEOUT
        assert "within its deadline" in answer["error"]["message"]
        server = connector.connections[-1].server
        call = await seen(server, "tools/call", "hang")
        at = server.seen_at[server.seen.index(call)]
        assert trio.current_time() - at == pytest.approx(50.0, abs=0.01)
        cancel = await seen(server, "notifications/cancelled")
        assert cancel["params"]["requestId"] == call["id"] != "call-1"
        await server.answer(call, {"content": []})  # too late: dropped, never routed to the host
        await host.request(2, "tools/call", {"name": "echo", "arguments": {}})
        assert (await host.response(2))["result"]["content"][0]["text"] == "echo"
        assert [m for m in host.seen if m.get("id") == "call-1"] == [answer]
        assert inline(host) == 2


async def test_MS05_MS06_progress_extends_an_engine_driven_call_up_to_the_hard_maximum(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    """Progress every 5 s keeps a 10 s deadline alive, under the host's own token, until the 35 s maximum."""
    options = UpstreamOptions(request_timeout=10.0, max_request_time=35.0)

    async def progressing(server: ScriptedServer) -> None:
        token = server.seen[-1]["params"]["_meta"]["progressToken"]
        for n in range(100):
            await trio.sleep(5)
            await server.send({"method": "notifications/progress", "params": {"progressToken": token,
                                                                             "progress": n}})

    async with gateway_in_process(tmp_path, lambda s: legacy_server(s, on_call=progressing), options=options) as (
            host, connector):
        await ready(host)
        await host.request(1, "tools/call", {"name": "hang", "arguments": {}, "_meta": {"progressToken": "p"}})
        answer = await host.response(1)
        assert answer["error"]["code"] == REQUEST_TIMEOUT
        server = connector.connections[-1].server
        call = await seen(server, "tools/call", "hang")
        assert trio.current_time() - server.seen_at[server.seen.index(call)] == pytest.approx(35.0, abs=0.01)
        relayed = [m for m in host.seen if m.get("method") == "notifications/progress"]
        assert len(relayed) == 6
        assert all(m["params"]["progressToken"] == "p" for m in relayed)
        assert inline(host) == 1


async def test_PX19_MS04_a_host_cancel_of_an_engine_driven_call_cancels_it_upstream_and_answers_nothing(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    async with gateway_in_process(tmp_path, lambda s: legacy_server(s, on_call=silent)) as (host, connector):
        await ready(host)
        await host.request(7, "tools/call", {"name": "hang", "arguments": {}})
        server = connector.connections[-1].server
        call = await seen(server, "tools/call", "hang")
        await host.notify("notifications/cancelled", {"requestId": 7, "reason": "user"})
        cancel = await seen(server, "notifications/cancelled")
        assert cancel["params"]["requestId"] == call["id"]
        await server.answer(call, {"content": []})  # after the cancel: dropped
        await trio.sleep(100)  # well past any deadline: no timeout answer either
        await host.request(8, "ping")
        await host.response(8)
        assert not [m for m in host.seen if m.get("id") == 7]
        assert host.face is not None
        assert host.face.statistics().in_flight == 0
        assert inline(host) == 1


async def test_MS09_a_duplicate_answer_and_one_to_an_id_warden_never_sent_are_dropped(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    """Invariant 9 on the engine-driven path: the second answer to a call, and an answer to an id warden did not
    send, are dropped; the host gets exactly one answer."""
    async def twice(server: ScriptedServer) -> None:
        call = server.seen[-1]
        await server.answer(call, {"content": [{"type": "text", "text": "first"}]})
        await server.answer(call, {"content": [{"type": "text", "text": "second"}]})
        await server.send({"id": 99999, "result": {"content": [{"type": "text", "text": "stray"}]}})

    async with gateway_in_process(tmp_path, lambda s: legacy_server(s, on_call=twice)) as (host, _):
        await ready(host)
        await host.request(1, "tools/call", {"name": "hang", "arguments": {}})
        assert (await host.response(1))["result"]["content"][0]["text"] == "first"
        await host.request(2, "tools/call", {"name": "echo", "arguments": {}})
        assert (await host.response(2))["result"]["content"][0]["text"] == "echo"
        texts = [c["text"] for m in host.seen if "result" in m for c in m["result"].get("content", [])]
        assert "second" not in texts
        assert "stray" not in texts
        assert inline(host) == 2


async def test_an_engine_driven_call_gets_an_error_when_the_server_goes_away(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    """The server ends with the call pending: the host gets -32000 saying why at once, not at the deadline."""
    async def dies_on_call(server: ScriptedServer) -> None:
        while (message := await server.receive()) is not None:
            if message.get("id") is None or await legacy_handshake(server, message):
                continue
            if message.get("method") == "tools/list":
                await server.answer(message, {"tools": TOOLS})
            elif message.get("method") == "tools/call":
                return  # the connection ends with the call unanswered

    async with gateway_in_process(tmp_path, dies_on_call) as (host, _):
        await ready(host)
        started = trio.current_time()
        await host.request(1, "tools/call", {"name": "hang", "arguments": {}})
        answer = await host.response(1)
        assert answer["error"]["code"] == CONNECTION_CLOSED
        assert "server" in answer["error"]["message"]
        assert trio.current_time() - started < 5
        assert inline(host) == 1


async def test_MS04_a_host_that_leaves_cancels_its_engine_driven_calls_upstream(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    async with gateway_in_process(tmp_path, lambda s: legacy_server(s, on_call=silent)) as (host, connector):
        await ready(host)
        await host.request(1, "tools/call", {"name": "hang", "arguments": {}})
        server = connector.connections[-1].server
        call = await seen(server, "tools/call", "hang")
        assert inline(host) == 1
        await host.close()
        cancel = await seen(server, "notifications/cancelled")
        assert cancel["params"]["requestId"] == call["id"]


async def test_PX01_a_server_question_during_an_engine_driven_call_reaches_its_host(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    """The server asks ``roots/list`` while the call is in flight: it reaches the host that made the call (which
    declared roots), the answer goes back, and the call completes."""
    async def asks_roots(server: ScriptedServer) -> None:
        call = server.seen[-1]
        await server.send({"id": "q1", "method": "roots/list"})
        while (message := await server.receive()) is not None and message.get("id") != "q1":
            pass
        assert message is not None
        assert "result" in message, message
        await server.answer(call, {"content": [{"type": "text", "text": f"roots {len(message['result']['roots'])}"}]})

    async with gateway_in_process(tmp_path, lambda s: legacy_server(s, on_call=asks_roots),
                                  user_policy='[defaults.capabilities]\nroots = ["/tmp"]\n') as (host, _):
        await host.request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {"roots": {}},
                                             "clientInfo": {"name": "scripted-host", "version": "1"}})
        await host.response(0)
        await host.notify("notifications/initialized")
        await host.request("list", "tools/list", {})
        await host.response("list")
        await host.request(1, "tools/call", {"name": "hang", "arguments": {}})
        question = await host.receive()
        assert question is not None
        assert question.get("method") == "roots/list"
        assert question["id"] != "q1"  # warden's own id towards the host (PX17)
        await host.send({"jsonrpc": "2.0", "id": question["id"], "result": {"roots": [{"uri": "file:///tmp"}]}})
        assert (await host.response(1))["result"]["content"][0]["text"] == "roots 1"
        assert inline(host) == 1


async def test_a_call_refused_on_its_face_is_answered_as_before(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    """What the engine-driven path does not take is answered by the task path, unchanged: a malformed 2026
    ``_meta`` (-32602), an unknown tool (refused, never forwarded), a call with a ``task`` the server offers no
    tasks for."""
    async with gateway_in_process(tmp_path, legacy_server) as (host, connector):
        await ready(host)
        await host.request(1, "tools/call", {"name": "echo", "arguments": {},
                                             "_meta": {"io.modelcontextprotocol/protocolVersion": 5}})
        assert (await host.response(1))["error"]["code"] == -32602
        await host.request(2, "tools/call", {"name": "nope", "arguments": {}})
        assert "nope" in (await host.response(2))["error"]["message"]
        await host.request(3, "tools/call", {"name": "echo", "arguments": {}, "task": {}})
        assert (await host.response(3))["error"]["code"] == -32602
        await host.request(4, "tools/call", {"name": "echo", "arguments": {}})
        assert (await host.response(4))["result"]["content"][0]["text"] == "echo"
        server = connector.connections[-1].server
        assert [m["params"]["name"] for m in server.seen if m.get("method") == "tools/call"] == ["echo"]
        assert host.face is not None
        assert host.face.statistics().inline == 1
