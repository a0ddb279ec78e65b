"""PX — what warden owes as a proxy between hosts and its upstream (the rest of the PX group is named in
tests/proxy, tests/http_server and the other files here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from tests.gateway_harness import ScriptedServer, gateway_in_process, legacy_server
from tests.http_client.httpserver import HttpServer
from tests.http_client.mocks import ModernMock
from tests.obligations.scripts import (
    ACCEPT,
    ALL_ON,
    TOKEN,
    asking_legacy_server,
    http_gateway_in_process,
    legacy_reply,
    modern_meta,
    requests_of,
    result_of,
)
from warden.transport.http_client import HttpConnector
from warden.transport.http_config import http_config
from warden.upstream.connection import UpstreamOptions

URL_ELICITATION = {"mode": "url", "message": "Sign in to the calendar", "url": "https://example.com/oauth",
                   "elicitationId": "upstream-e1"}


async def test_PX09_PX10_a_url_elicitation_required_error_becomes_input_required_for_a_2026_host(
        tmp_path: Path) -> None:
    """A legacy server refuses the call with -32042 (URL elicitation required). The 2026 host never sees -32042: it
    gets ``input_required`` whose input request is the URL-mode ``elicitation/create`` (PX09), with no
    ``elicitationId`` (PX10). Its retry with consent makes warden call the server again, and the host gets that
    result."""
    calls = [0]

    async def needs_a_url_first(server: ScriptedServer) -> None:
        while (message := await server.receive()) is not None:
            if message.get("method") == "tools/call":
                calls[0] += 1
                if calls[0] == 1:
                    await server.send({"id": message["id"], "error": {
                        "code": -32042, "message": "URL elicitation required",
                        "data": {"elicitations": [URL_ELICITATION]}}})
                else:
                    await server.answer(message, {"content": [{"type": "text", "text": "calendar linked"}]})
            else:
                await legacy_reply(server, message)

    async with gateway_in_process(tmp_path, needs_a_url_first, user_policy=ALL_ON) as (host, _connector):
        meta = modern_meta({"elicitation": {"url": {}}})
        await host.request(1, "tools/call", {"name": "echo", "arguments": {}, "_meta": meta})
        first = await host.response(1)
        assert "error" not in first, first
        result = result_of(first)
        assert result["resultType"] == "input_required"
        [(key, question)] = result["inputRequests"].items()
        assert question["method"] == "elicitation/create"
        assert question["params"]["url"] == URL_ELICITATION["url"]
        assert question["params"]["mode"] == "url"
        assert "elicitationId" not in question["params"]
        await host.request(2, "tools/call", {"name": "echo", "arguments": {}, "_meta": meta,
                                             "requestState": result["requestState"],
                                             "inputResponses": {key: {"action": "accept"}}})
        done = result_of(await host.response(2))
    assert done["content"][0]["text"] == "calendar linked"
    assert calls[0] == 2
    assert "-32042" not in json.dumps([first, done])


async def test_PX12_an_elicitation_completion_reaches_only_the_host_that_was_asked(tmp_path: Path) -> None:
    """Two legacy HTTP sessions hold their GET streams open. The server asks session A for a URL elicitation
    (``upstream-e1``), then announces its completion and after that a log message for everyone. A gets the
    completion; B gets the log message but not the completion; a completion for an id nobody was asked reaches
    no one."""
    async def completes(server: ScriptedServer, reply: dict[str, Any]) -> None:
        for elicitation_id in ("upstream-e1", "never-asked"):
            await server.send({"method": "notifications/elicitation/complete",
                               "params": {"elicitationId": elicitation_id}})
        await server.send({"method": "notifications/message", "params": {"level": "info", "data": "marker"}})

    async with http_gateway_in_process(tmp_path, lambda s: asking_legacy_server(s, after=completes),
                                       user_policy=ALL_ON) as (host, _connector):
        a = await host.initialize({"elicitation": {"url": {}}})
        b = await host.initialize({"elicitation": {"url": {}}})
        a_stream: list[dict[str, Any]] = []
        b_stream: list[dict[str, Any]] = []
        async with trio.open_nursery() as nursery:
            await nursery.start(host.listen, a, a_stream)
            await nursery.start(host.listen, b, b_stream)
            await host.request(a, 1, "tools/call", {"name": "ask", "arguments": {
                "method": "elicitation/create", "params": URL_ELICITATION}},
                {"elicitation/create": {"action": "accept"}})
            with trio.fail_after(10):
                while not (any(m.get("method") == "notifications/message" for m in a_stream)
                           and any(m.get("method") == "notifications/message" for m in b_stream)):
                    await trio.sleep(0.02)
            nursery.cancel_scope.cancel()
    completions = {"a": [m["params"] for m in a_stream if m.get("method") == "notifications/elicitation/complete"],
                   "b": [m["params"] for m in b_stream if m.get("method") == "notifications/elicitation/complete"]}
    assert completions == {"a": [{"elicitationId": "upstream-e1"}], "b": []}


FORM_QUESTION = {"method": "elicitation/create", "params": {
    "message": "Ship it?", "requestedSchema": {
        "type": "object", "required": ["when", "tags"],
        "properties": {"when": {"type": "string", "format": "date", "title": "Date", "description": "d"},
                       "count": {"type": "integer", "minimum": 1, "maximum": 9, "default": 3},
                       "tags": {"type": "array", "items": {"type": "string", "enum": ["b", "a", "c"]}},
                       "ok": {"type": "boolean"}}}}}
URL_QUESTION = {"method": "elicitation/create", "params": {
    "mode": "url", "message": "Open", "url": "https://example.com/a/b?c=d&e=%20f#g", "elicitationId": "e-15"}}
SAMPLE_QUESTION = {"method": "sampling/createMessage", "params": {
    "messages": [{"role": "user", "content": {"type": "text", "text": "x"}}], "maxTokens": 123,
    "modelPreferences": {"hints": [{"name": "z"}, {"name": "a"}, {"name": "m"}], "speedPriority": 0.2}}}


@pytest.mark.parametrize(("question", "answer"), [
    (FORM_QUESTION, {"action": "decline"}),
    (URL_QUESTION, {"action": "accept"}),
    (SAMPLE_QUESTION, {"role": "assistant", "content": {"type": "text", "text": "y"}, "model": "m"}),
])
async def test_PX15_questions_are_forwarded_intact(tmp_path: Path, question: dict[str, Any],
                                                   answer: dict[str, Any]) -> None:
    """A form's ``requestedSchema`` (formats, bounds, defaults, enum order, required), a URL, and a sampling
    request's ``maxTokens`` and hint order reach the host exactly as the server sent them; an elicitation's message
    only gains the name of the server that asks (EL06)."""
    async with http_gateway_in_process(tmp_path, asking_legacy_server, user_policy=ALL_ON) as (host, _connector):
        session = await host.initialize({"elicitation": {"form": {}, "url": {}}, "sampling": {}})
        asked: list[dict[str, Any]] = []
        reply = await host.request(session, 1, "tools/call", {"name": "ask", "arguments": question},
                                   {question["method"]: answer}, asked)
    assert "result" in reply, reply
    assert len(asked) == 1
    forwarded = asked[0]["params"]
    for key, value in question["params"].items():
        assert forwarded[key] == (f"[scripted] {value}" if key == "message" else value), key
    if "requestedSchema" in question["params"]:
        assert list(forwarded["requestedSchema"]["properties"]) == ["when", "count", "tags", "ok"]


async def silent(server: ScriptedServer) -> None:
    """Take the call and never answer it."""


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_PX18_warden_gives_up_upstream_before_a_host_would(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    """With warden's default timeouts, a call the server never answers is cancelled upstream and answered to the
    host (-32001) well inside the 60 s hosts commonly wait, so the host hears warden's answer, not its own
    timeout. (Virtual time, from when the server got the call: the mock clock also jumps while the pin store
    writes in its thread, which is not time a host would wait.)"""
    async with gateway_in_process(tmp_path, lambda s: legacy_server(s, on_call=silent),
                                  options=UpstreamOptions()) as (host, connector):
        await host.initialize()
        await host.request(1, "tools/call", {"name": "hang", "arguments": {}})
        answer = await host.response(1)
        answered = trio.current_time()
        assert answer["error"]["code"] == -32001
        server = connector.connections[-1].server
        sent = next(t for t, m in zip(server.seen_at, server.seen, strict=True) if m.get("method") == "tools/call")
        assert answered - sent < 60
        while not requests_of(server.seen, "notifications/cancelled"):
            await trio.sleep(0.1)
        cancelled = next(t for t, m in zip(server.seen_at, server.seen, strict=True)
                         if m.get("method") == "notifications/cancelled")
        assert cancelled - sent < 60


async def test_PX22_PX28_a_re_exported_tool_keeps_its_headers_and_no_host_token_goes_upstream(
        tmp_path: Path) -> None:
    """Host -> warden's HTTP face (bearer :data:`TOKEN`) -> a 2026 HTTP server configured with its own token. The
    tool list the host gets keeps the ``x-mcp-header`` annotations as the server wrote them, and a call sends the
    ``Mcp-Param-*`` headers upstream (PX22). Every request upstream carries the upstream's own credential and the
    host's token nowhere (PX28)."""
    mock = ModernMock()
    server = HttpServer(mock)
    upstream_token = "Bearer upstream-only-credential-42"
    async with trio.open_nursery() as outer:
        await outer.start(server.serve)
        connector = HttpConnector(http_config(server.url("/mcp"), headers=(("Authorization", upstream_token),)),
                                  "scripted")
        async with http_gateway_in_process(tmp_path, silent, connector=connector) as (host, _memory):
            def modern_headers(method: str, **extra: str) -> dict[str, str]:
                return {"content-type": "application/json", "accept": ACCEPT, "authorization": f"Bearer {TOKEN}",
                        "mcp-protocol-version": "2026-07-28", "mcp-method": method, **extra}

            listed = await host.client.post(host.url, headers=modern_headers("tools/list"), content=json.dumps(
                {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": modern_meta()}}))
            assert listed.status_code == 200, listed.text
            tools = {t["name"]: t for t in listed.json()["result"]["tools"]}
            route = next(t for t in mock.tools if t["name"] == "route")
            assert tools["route"]["inputSchema"] == route["inputSchema"]
            called = await host.client.post(
                host.url, headers=modern_headers("tools/call", **{"mcp-name": "route", "mcp-param-region": "eu-west",
                                                                  "mcp-param-count": "3"}),
                content=json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                    "_meta": modern_meta(), "name": "route", "arguments": {"region": "eu-west", "count": 3}}}))
            assert called.status_code == 200, called.text
            assert "result" in called.json(), called.json()
        outer.cancel_scope.cancel()
    call = next(p for p in server.posts() if p.json().get("method") == "tools/call")
    assert call.header("mcp-param-region") == "eu-west"
    assert call.header("mcp-param-count") == "3"
    assert server.posts()
    for seen in server.posts():
        assert seen.all("authorization") == [upstream_token]
        assert TOKEN not in json.dumps(seen.headers)
        assert TOKEN.encode() not in seen.body
