"""MS — ids, timeouts, progress, pagination, ping, logging, caching and MRTR as warden practises them towards its
upstream (the rest of the MS group is named in tests/protocol, tests/proxy and tests/http_client). In process,
mostly: warden's real gateway and upstream between a scripted server and a scripted host."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from tests.gateway_harness import ScriptedHost, ScriptedServer, gateway_in_process
from tests.obligations.scripts import (
    ALL_ON,
    everything_seen,
    legacy_reply,
    modern_meta,
    modern_server,
    requests_of,
    result_of,
    until,
)
from warden.protocol.session import Reply, Session, numeric_ids
from warden.upstream.connection import UpstreamOptions

FORM = {"method": "elicitation/create", "params": {
    "message": "your name?", "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}}}
SAMPLE = {"method": "sampling/createMessage", "params": {
    "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 5}}
ELICITED = {"action": "accept", "content": {"name": "Ada"}}
SAMPLED = {"role": "assistant", "content": {"type": "text", "text": "hello"}, "model": "m", "stopReason": "endTurn"}


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def legacy_host(host: ScriptedHost, capabilities: dict[str, Any]) -> None:
    await host.request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": capabilities,
                                         "clientInfo": {"name": "scripted-host", "version": "1"}})
    await host.response(0)
    await host.notify("notifications/initialized")


async def answer_questions(host: ScriptedHost, answers: dict[str, dict[str, Any]], until_id: object,
                           asked: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Answer warden's questions (by method) until the response to ``until_id`` arrives; returns it."""
    while True:
        message = await host.receive()
        assert message is not None
        if "method" in message and "id" in message:
            if asked is not None:
                asked.append(message)
            await host.send({"id": message["id"], "result": answers[message["method"]]})
        elif message.get("id") == until_id and "method" not in message:
            return message


# -- ids, deadlines, progress tokens --------------------------------------------------------------------------------


def test_MS01_ids_are_unique_among_outstanding_requests() -> None:
    """Ids come from the session's own counter: 500 requests in flight at once, then more after half of them were
    answered, never share an id with a request still outstanding (nor with one answered earlier)."""
    engine: Session[None] = Session(ids=numeric_ids)
    pending = [engine.send_request("tools/call", {}, now=0.0, waiter=None)[1] for _ in range(500)]
    assert len({p.id for p in pending}) == 500
    for p in pending[::2]:
        engine.settle(p.id, Reply(result=b"{}"))
    later = [engine.send_request("ping", None, now=1.0, waiter=None)[1] for _ in range(500)]
    outstanding = [p for p in pending + later if engine.is_pending(p)]
    assert len(outstanding) == 750
    assert len({p.id for p in outstanding}) == 750
    assert len({p.id for p in pending + later}) == 1000




async def test_MS03_every_request_warden_sends_upstream_has_a_timeout(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    """After the handshake the server answers nothing: each kind of host request warden forwards (a list, a call,
    a prompt, a read, a completion) ends with warden's timeout error (-32001), none waits forever."""
    async def answers_only_the_handshake(server: ScriptedServer) -> None:
        while (message := await server.receive()) is not None:
            if message.get("method") in ("server/discover", "initialize"):
                await legacy_reply(server, message)

    options = UpstreamOptions(request_timeout=20.0)
    async with gateway_in_process(tmp_path, answers_only_the_handshake, options=options) as (host, _connector):
        await host.initialize()
        forwarded = [("tools/list", {}), ("tools/call", {"name": "echo", "arguments": {}}),
                     ("prompts/get", {"name": "p"}), ("resources/read", {"uri": "file:///x"}),
                     ("completion/complete", {"ref": {"type": "ref/prompt", "name": "p"},
                                              "argument": {"name": "a", "value": ""}})]
        for n, (method, params) in enumerate(forwarded, start=1):
            await host.request(n, method, params)
            answer = await host.response(n)
            assert answer["error"]["code"] == -32001, (method, answer)


async def test_MS10_progress_tokens_upstream_are_warden_own_and_unique(tmp_path: Path) -> None:
    """Three calls in flight at once, two of them with host tokens (``"p"`` and ``1``): every request upstream
    carries a progress token, all different, none of them a host's (hosts choose theirs independently, so passing
    them on could make two active requests share one)."""
    async def holds_three_calls(server: ScriptedServer) -> None:
        held: list[dict[str, Any]] = []
        while (message := await server.receive()) is not None:
            if message.get("method") == "tools/call":
                held.append(message)
                if len(held) == 3:
                    for call in held:
                        await server.answer(call, {"content": []})
            elif "id" in message:
                await legacy_reply(server, message)

    async with gateway_in_process(tmp_path, holds_three_calls) as (host, connector):
        await host.initialize()
        for n, token in ((1, "p"), (2, 1), (3, None)):
            meta = {"_meta": {"progressToken": token}} if token is not None else {}
            await host.request(n, "tools/call", {"name": "hang", "arguments": {}, **meta})
        for n in (1, 2, 3):
            await host.response(n)
        tokens = [c["params"]["_meta"]["progressToken"] for c in requests_of(connector.connections[-1].server.seen,
                                                                             "tools/call")]
    assert len(tokens) == 3
    assert len(set(tokens)) == 3
    assert not {"p", 1} & set(tokens)


# -- pagination -----------------------------------------------------------------------------------------------------


ODD_CURSOR = "  ü/../c?x=1&y==\u00a0"


async def test_MS12_a_cursor_goes_back_exactly_as_the_server_gave_it(tmp_path: Path) -> None:
    """A cursor with spaces, non-ASCII, path and query syntax and base64 padding: the next page's request carries
    it unchanged, and warden follows the pages to the end."""
    async def paged(server: ScriptedServer) -> None:
        while (message := await server.receive()) is not None:
            if message.get("method") == "tools/list":
                cursor = message["params"].get("cursor")
                if cursor is None:
                    await server.answer(message, {"tools": [{"name": "a", "inputSchema": {"type": "object"}}],
                                                  "nextCursor": ODD_CURSOR})
                else:
                    await server.answer(message, {"tools": [{"name": "b", "inputSchema": {"type": "object"}}]})
            else:
                await legacy_reply(server, message)

    async with gateway_in_process(tmp_path, paged) as (host, connector):
        await host.initialize()
        await host.request(1, "tools/list")
        tools = result_of(await host.response(1))["tools"]
        assert [t["name"] for t in tools] == ["a", "b"]
        lists = requests_of(connector.connections[-1].server.seen, "tools/list")
        assert [m["params"].get("cursor") for m in lists] == [None, ODD_CURSOR]


async def test_MS13_a_cursor_is_not_kept_across_sessions(tmp_path: Path) -> None:
    """The server process exits while warden follows its cursor. In the next process's session the list starts
    from the first page: no request of the new session carries the old session's cursor."""
    count = [0]

    async def exits_mid_list(server: ScriptedServer) -> None:
        count[0] += 1
        while (message := await server.receive()) is not None:
            method = message.get("method")
            if method == "tools/list":
                if count[0] == 1 and message["params"].get("cursor") == "session-1-page-2":
                    return  # the process dies before answering page 2
                if count[0] == 1:
                    await server.answer(message, {"tools": [{"name": "a", "inputSchema": {"type": "object"}}],
                                                  "nextCursor": "session-1-page-2"})
                else:
                    await server.answer(message, {"tools": [{"name": "a", "inputSchema": {"type": "object"}}]})
            elif method in ("server/discover", "initialize"):
                await legacy_reply(server, message)

    async with gateway_in_process(tmp_path, exits_mid_list, options=UpstreamOptions(restart_backoff=0.01)) as (
            host, connector):
        await host.initialize()
        await host.request(1, "tools/list")
        assert "error" in await host.response(1)
        await until(lambda: len(connector.connections) >= 2)
        await host.request(2, "tools/list")
        assert [t["name"] for t in result_of(await host.response(2))["tools"]] == ["a"]
        second = requests_of(connector.connections[1].server.seen, "tools/list")
        assert second
        assert all("cursor" not in m["params"] for m in second)


async def test_MS23_a_rejected_cursor_leaves_no_page_behind(tmp_path: Path) -> None:
    """The server rejects warden's cursor as invalid (-32602) in the middle of a list: the host gets an error, not
    the first page passed off as the list; the next list starts again from the first page (warden keeps no page of
    a list it could not finish)."""
    rejected = [False]

    async def rejects_once(server: ScriptedServer) -> None:
        while (message := await server.receive()) is not None:
            method = message.get("method")
            if method == "tools/list":
                cursor = message["params"].get("cursor")
                if cursor is not None and not rejected[0]:
                    rejected[0] = True
                    await server.send({"id": message["id"], "error": {"code": -32602, "message": "invalid cursor"}})
                elif cursor is None:
                    await server.answer(message, {"tools": [{"name": "a", "inputSchema": {"type": "object"}}],
                                                  "nextCursor": "p2"})
                else:
                    await server.answer(message, {"tools": [{"name": "b", "inputSchema": {"type": "object"}}]})
            elif method in ("server/discover", "initialize"):
                await legacy_reply(server, message)

    async with gateway_in_process(tmp_path, rejects_once) as (host, connector):
        await host.initialize()
        await host.request(1, "tools/list")
        first = await host.response(1)
        assert first["error"]["code"] == -32602
        await host.request(2, "tools/list")
        assert [t["name"] for t in result_of(await host.response(2))["tools"]] == ["a", "b"]
        cursors = [m["params"].get("cursor") for m in requests_of(connector.connections[-1].server.seen,
                                                                   "tools/list")]
        assert cursors == [None, "p2", None, "p2"]


# -- ping and logging -----------------------------------------------------------------------------------------------


async def test_MS17_no_ping_ever_reaches_a_modern_server(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    """An hour of (virtual) time with a 2026 server and a legacy host that pings warden every minute: the host's
    pings are answered by warden (``{}``), and the server receives no ``ping`` at all."""
    async with gateway_in_process(tmp_path, modern_server) as (host, connector):
        await host.initialize()
        for n in range(1, 61):
            await host.request(n, "ping")
            assert (await host.response(n))["result"] == {}
            await trio.sleep(60)
        assert connector.connections
        assert not requests_of(everything_seen(connector), "ping")


async def logging_server(server: ScriptedServer) -> None:
    while (message := await server.receive()) is not None:
        if message.get("method") in ("server/discover", "initialize"):
            await legacy_reply(server, message)
        elif message.get("method") == "tools/list":
            await server.answer(message, {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]})
        elif "id" in message:
            await server.answer(message, {} if message["method"] == "logging/setLevel" else {"content": []})


async def test_MS18_a_legacy_server_gets_the_level_once_per_session_by_logging_setLevel(tmp_path: Path) -> None:
    """The host sets the level: the legacy server gets ``logging/setLevel {level}`` once, and the calls after it
    carry no per-request level (it holds for the whole session)."""
    async with gateway_in_process(tmp_path, logging_server) as (host, connector):
        await host.initialize()
        await host.request(1, "logging/setLevel", {"level": "warning"})
        assert (await host.response(1))["result"] == {}
        await host.request(2, "tools/call", {"name": "echo", "arguments": {}})
        await host.response(2)
        seen = connector.connections[-1].server.seen
        assert [m["params"]["level"] for m in requests_of(seen, "logging/setLevel")] == ["warning"]
        call = requests_of(seen, "tools/call")[0]
        assert "io.modelcontextprotocol/logLevel" not in call["params"].get("_meta", {})


async def test_MS19_a_modern_server_is_asked_for_logs_per_request(tmp_path: Path) -> None:
    """A legacy host's ``logging/setLevel`` is not sent to the 2026 server (no such method there): warden answers
    it and puts the level in ``_meta["io.modelcontextprotocol/logLevel"]`` of each request it then sends for that
    host; before it, and for a 2026 host's request that asks for no level, requests carry none."""
    async with gateway_in_process(tmp_path, modern_server) as (host, connector):
        await host.initialize()
        await host.request(1, "tools/call", {"name": "echo", "arguments": {}})
        await host.response(1)
        await host.request(2, "logging/setLevel", {"level": "info"})
        assert (await host.response(2))["result"] == {}
        await host.request(3, "tools/call", {"name": "echo", "arguments": {}})
        await host.response(3)
        await host.request(4, "tools/call", {"name": "echo", "arguments": {},
                                             "_meta": modern_meta(**{"io.modelcontextprotocol/logLevel": "debug"})})
        await host.response(4)
        await host.request(5, "tools/call", {"name": "echo", "arguments": {}, "_meta": modern_meta()})
        await host.response(5)
        seen = everything_seen(connector)
        assert not requests_of(seen, "logging/setLevel")
        levels = [c["params"]["_meta"].get("io.modelcontextprotocol/logLevel") for c in requests_of(seen, "tools/call")]
        assert levels == [None, "info", "debug", None]


# -- caching --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("ttl", "scope"), [(0, "public"), (60_000, "private")])
async def test_MS20_MS21_PX20_no_list_result_is_served_from_a_cache(tmp_path: Path, ttl: int, scope: str) -> None:
    """warden keeps no cache of results: every host list goes to the server. So a result with ``ttlMs: 0`` is
    never reused (MS20), and a ``private`` one — here still fresh for a minute — is not reused even for the same
    host, let alone another authorization context (MS21, PX20)."""
    async def listing(server: ScriptedServer, message: dict[str, Any]) -> None:
        await server.answer(message, {"resultType": "complete", "tools": [{"name": "echo",
                                                                           "inputSchema": {"type": "object"}}],
                                      "ttlMs": ttl, "cacheScope": scope})

    async with gateway_in_process(tmp_path, lambda s: modern_server(s, on_list=listing)) as (host, connector):
        before = 0
        for n in range(1, 4):
            await host.request(n, "tools/list", {"_meta": modern_meta()})
            answer = result_of(await host.response(n))
            assert answer["cacheScope"] == scope
            now = len(requests_of(everything_seen(connector), "tools/list"))
            assert now > before
            before = now


async def test_MS22_PX21_a_list_is_as_private_and_as_short_lived_as_its_weakest_page(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    """Page 1: public, fresh for 10 s; page 2 (2 s later): public, 30 s; page 3 (2 s after that): private, 60 s.
    The list warden re-exports is ``private`` (the pages disagree, MS22; one is private, PX21) and fresh for no
    longer than what is left of page 1 when the list is complete: 6 s (PX21)."""
    pages = {None: ({"ttlMs": 10_000, "cacheScope": "public"}, "p2"),
             "p2": ({"ttlMs": 30_000, "cacheScope": "public"}, "p3"),
             "p3": ({"ttlMs": 60_000, "cacheScope": "private"}, None)}

    async def listing(server: ScriptedServer, message: dict[str, Any]) -> None:
        cursor = message["params"].get("cursor")
        fields, following = pages[cursor]
        if cursor is not None:
            await trio.sleep(2)
        result = {"resultType": "complete", "tools": [{"name": f"t{cursor}", "inputSchema": {"type": "object"}}],
                  **fields}
        if following is not None:
            result["nextCursor"] = following
        await server.answer(message, result)

    async with gateway_in_process(tmp_path, lambda s: modern_server(s, on_list=listing)) as (host, _connector):
        await host.request(1, "tools/list", {"_meta": modern_meta()})
        answer = result_of(await host.response(1))
    assert len(answer["tools"]) == 3
    assert answer["cacheScope"] == "private"
    assert 0 <= answer["ttlMs"] <= 6_000


async def test_MS24_an_input_required_result_is_never_reused(tmp_path: Path) -> None:
    """The same call twice from a 2026 host: each gets the server's own fresh ``input_required`` (its
    ``requestState`` differs), and the retry's result comes from the server — nothing of a multi-round request is
    answered from memory."""
    states = iter(["state-1", "state-2"])

    async def asks(server: ScriptedServer, message: dict[str, Any]) -> None:
        params = message["params"]
        if "inputResponses" in params:
            await server.answer(message, {"resultType": "complete", "content": [
                {"type": "text", "text": f"retried with {params['requestState']}"}]})
        else:
            await server.answer(message, {"resultType": "input_required", "inputRequests": {"q": FORM},
                                          "requestState": next(states)})

    async with gateway_in_process(tmp_path, lambda s: modern_server(s, on_call=asks), user_policy=ALL_ON) as (
            host, connector):
        meta = modern_meta({"elicitation": {}})
        got = []
        for n in (1, 2):
            await host.request(n, "tools/call", {"name": "ask", "arguments": {}, "_meta": meta})
            got.append(result_of(await host.response(n)))
        assert [g["requestState"] for g in got] == ["state-1", "state-2"]
        for n, state in ((3, "state-1"), (4, "state-1")):
            await host.request(n, "tools/call", {"name": "ask", "arguments": {}, "_meta": meta,
                                                 "inputResponses": {"q": ELICITED}, "requestState": state})
            assert result_of(await host.response(n))["content"][0]["text"] == "retried with state-1"
        assert len(requests_of(everything_seen(connector), "tools/call")) == 4


async def test_MS25_a_list_changed_notification_invalidates_what_warden_knew_of_the_list(tmp_path: Path) -> None:
    """The host listed ``echo`` and ``hang``; the server drops ``hang`` and says ``tools/list_changed``. warden
    re-reads the list before deciding anything on it: a call to ``hang`` made without listing again is refused,
    not decided on the stale list, and the host hears of the change."""
    tools = [{"name": "echo", "inputSchema": {"type": "object"}}, {"name": "hang", "inputSchema": {"type": "object"}}]

    async def changing(server: ScriptedServer) -> None:
        while (message := await server.receive()) is not None:
            method = message.get("method")
            if method in ("server/discover", "initialize"):
                await legacy_reply(server, message)
            elif method == "tools/list":
                await server.answer(message, {"tools": list(tools)})
            elif method == "tools/call" and message["params"]["name"] == "echo":
                tools.pop()
                await server.answer(message, {"content": [{"type": "text", "text": "dropping hang"}]})
                await server.send({"method": "notifications/tools/list_changed"})
            elif method == "tools/call":
                await server.answer(message, {"content": [{"type": "text", "text": "hang ran"}]})

    async with gateway_in_process(tmp_path, changing) as (host, connector):
        await host.initialize()
        await host.request(1, "tools/list")
        assert len(result_of(await host.response(1))["tools"]) == 2
        await host.request(2, "tools/call", {"name": "echo", "arguments": {}})
        await host.response(2)
        while (note := await host.receive()) is not None and note.get("method") != "notifications/tools/list_changed":
            pass
        await host.request(3, "tools/call", {"name": "hang", "arguments": {}})
        refused = await host.response(3)
        assert "error" in refused, refused
        assert not [c for c in requests_of(connector.connections[-1].server.seen, "tools/call")
                    if c["params"]["name"] == "hang"]


async def test_MS26_ttl_expiry_is_not_a_polling_interval(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    """The server's list is fresh for one second. Over an hour of (virtual) time with no host asking, warden sends
    it no further ``tools/list``: an expired ``ttlMs`` makes warden fetch again only when something needs the
    list, never on a timer (so there is no re-fetch storm to jitter)."""
    async def listing(server: ScriptedServer, message: dict[str, Any]) -> None:
        await server.answer(message, {"resultType": "complete", "tools": [{"name": "echo",
                                                                           "inputSchema": {"type": "object"}}],
                                      "ttlMs": 1000, "cacheScope": "public"})

    async with gateway_in_process(tmp_path, lambda s: modern_server(s, on_list=listing)) as (host, connector):
        await host.request(1, "tools/list", {"_meta": modern_meta()})
        await host.response(1)
        before = len(requests_of(everything_seen(connector), "tools/list"))
        await trio.sleep(3600)
        assert len(requests_of(everything_seen(connector), "tools/list")) == before


# -- tasks and MRTR -------------------------------------------------------------------------------------------------


async def test_MS33_the_tasks_extension_is_never_declared_upstream(tmp_path: Path) -> None:
    """A 2026 host declares the tasks extension but the server does not: warden carries tasks only where both
    sides declared them, so the request it sends the server declares no extension at all (the positive side, both
    declaring: tests/proxy/test_tasks.py)."""
    async with gateway_in_process(tmp_path, modern_server, user_policy=ALL_ON) as (host, connector):
        caps = {"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}}
        await host.request(1, "tools/call", {"name": "echo", "arguments": {}, "_meta": modern_meta(caps)})
        await host.response(1)
        call = requests_of(everything_seen(connector), "tools/call")[0]
        declared = call["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
        assert declared == {"elicitation": {}}


async def test_MS35_MS36_MS37_MS40_SA09_EL15_input_requests_are_answered_only_in_the_retry(tmp_path: Path) -> None:
    """A 2026 server answers a legacy host's call with ``input_required`` holding a form elicitation and a sampling
    request, and no ``requestState``. warden asks the host both (on the wire: it is legacy), and only when both are
    answered (MS36) retries with the original method and params plus ``inputResponses`` under the same keys (MS37)
    — the ``ElicitResult`` (EL15) and the ``CreateMessageResult`` (SA09) — and no ``requestState`` (MS40). The
    server never receives a JSON-RPC response (MS35)."""
    async def asks(server: ScriptedServer, message: dict[str, Any]) -> None:
        if "inputResponses" in message["params"]:
            await server.answer(message, {"resultType": "complete", "content": [{"type": "text", "text": "done"}]})
        else:
            await server.answer(message, {"resultType": "input_required",
                                          "inputRequests": {"who": FORM, "llm": SAMPLE}})

    async with gateway_in_process(tmp_path, lambda s: modern_server(s, on_call=asks), user_policy=ALL_ON) as (
            host, connector):
        await legacy_host(host, {"elicitation": {}, "sampling": {}})
        arguments = {"x": [1, {"y": "z"}]}
        await host.request(1, "tools/call", {"name": "ask", "arguments": arguments})
        asked: list[dict[str, Any]] = []
        calls_when_asked: list[int] = []

        async def count_calls() -> None:
            calls_when_asked.append(len(requests_of(everything_seen(connector), "tools/call")))

        answer = await answer_questions_counting(host, {"elicitation/create": ELICITED,
                                                        "sampling/createMessage": SAMPLED}, 1, asked, count_calls)
        assert result_of(answer)["content"][0]["text"] == "done"
        assert sorted(q["method"] for q in asked) == ["elicitation/create", "sampling/createMessage"]
        assert calls_when_asked == [1, 1]  # the retry waited for every answer
        seen = everything_seen(connector)
        first, retry = requests_of(seen, "tools/call")
        assert retry["params"]["name"] == "ask"
        assert retry["params"]["arguments"] == arguments
        assert retry["params"]["inputResponses"] == {"who": ELICITED, "llm": SAMPLED}
        assert "requestState" not in retry["params"]
        assert retry["id"] != first["id"]
        assert all("method" in m for m in seen)  # no response ever went to the 2026 server


async def answer_questions_counting(host: ScriptedHost, answers: dict[str, dict[str, Any]], until_id: object,
                                    asked: list[dict[str, Any]], on_question: Any) -> dict[str, Any]:
    while True:
        message = await host.receive()
        assert message is not None
        if "method" in message and "id" in message:
            asked.append(message)
            await trio.sleep(0.1)  # room for a retry sent too early, which the test exists to catch
            await on_question()
            await host.send({"id": message["id"], "result": answers[message["method"]]})
        elif message.get("id") == until_id and "method" not in message:
            return message


async def test_MS36_a_result_with_only_request_state_is_retried_at_once(tmp_path: Path) -> None:
    """``input_required`` with a ``requestState`` and no questions: warden asks the host nothing and retries at
    once with that state (and no ``inputResponses``)."""
    async def state_only(server: ScriptedServer, message: dict[str, Any]) -> None:
        if "requestState" in message["params"]:
            await server.answer(message, {"resultType": "complete", "content": [{"type": "text", "text": "ok"}]})
        else:
            await server.answer(message, {"resultType": "input_required", "requestState": "go-on"})

    async with gateway_in_process(tmp_path, lambda s: modern_server(s, on_call=state_only), user_policy=ALL_ON) as (
            host, connector):
        await legacy_host(host, {"elicitation": {}})
        await host.request(1, "tools/call", {"name": "ask", "arguments": {}})
        assert result_of(await host.response(1))["content"][0]["text"] == "ok"
        retry = requests_of(everything_seen(connector), "tools/call")[1]
        assert retry["params"]["requestState"] == "go-on"
        assert "inputResponses" not in retry["params"]
        assert not [m for m in host.seen if "method" in m and "id" in m]


async def test_MS41_input_responses_belong_to_the_retry_of_their_own_request_only(tmp_path: Path) -> None:
    """While one call waits for the host's answer to its server's question, another call goes through: it carries
    neither ``inputResponses`` nor the first call's ``requestState``; the first call's retry carries both."""
    async def asks(server: ScriptedServer, message: dict[str, Any]) -> None:
        if "requestState" in message["params"]:
            await server.answer(message, {"resultType": "complete", "content": [{"type": "text", "text": "asked"}]})
        else:
            await server.answer(message, {"resultType": "input_required", "inputRequests": {"who": FORM},
                                          "requestState": "ask-state"})

    async with gateway_in_process(tmp_path, lambda s: modern_server(s, on_call=asks), user_policy=ALL_ON) as (
            host, connector):
        await legacy_host(host, {"elicitation": {}})
        await host.request(1, "tools/call", {"name": "ask", "arguments": {}})
        question = await host.receive()
        assert question is not None
        assert question["method"] == "elicitation/create"
        await host.request(2, "tools/call", {"name": "echo", "arguments": {}})
        assert result_of(await host.response(2))["content"][0]["text"] == "echo"
        await host.send({"id": question["id"], "result": ELICITED})
        assert result_of(await host.response(1))["content"][0]["text"] == "asked"
        calls = requests_of(everything_seen(connector), "tools/call")
        echo = next(c for c in calls if c["params"]["name"] == "echo")
        assert "inputResponses" not in echo["params"]
        assert "requestState" not in echo["params"]
        retry = [c for c in calls if c["params"]["name"] == "ask"][1]
        assert retry["params"]["requestState"] == "ask-state"
        assert retry["params"]["inputResponses"] == {"who": ELICITED}


async def test_MS42_multi_round_input_keeps_going_with_the_latest_state(tmp_path: Path) -> None:
    """The server asks three rounds in a row: each retry goes under a new id with the ``requestState`` of the
    round just answered, until the server's result is complete."""
    async def three_rounds(server: ScriptedServer, message: dict[str, Any]) -> None:
        state = message["params"].get("requestState")
        if state == "round-3":
            await server.answer(message, {"resultType": "complete", "content": [{"type": "text", "text": "end"}]})
            return
        following = {None: "round-1", "round-1": "round-2", "round-2": "round-3"}[state]
        await server.answer(message, {"resultType": "input_required", "inputRequests": {following: FORM},
                                      "requestState": following})

    async with gateway_in_process(tmp_path, lambda s: modern_server(s, on_call=three_rounds),
                                  user_policy=ALL_ON) as (host, connector):
        await legacy_host(host, {"elicitation": {}})
        await host.request(1, "tools/call", {"name": "ask", "arguments": {}})
        answer = await answer_questions(host, {"elicitation/create": ELICITED}, 1)
        assert result_of(answer)["content"][0]["text"] == "end"
        calls = requests_of(everything_seen(connector), "tools/call")
        assert [c["params"].get("requestState") for c in calls] == [None, "round-1", "round-2", "round-3"]
        assert [list(c["params"].get("inputResponses", {})) for c in calls] == [[], ["round-1"], ["round-2"],
                                                                                ["round-3"]]
        assert len({c["id"] for c in calls}) == 4
