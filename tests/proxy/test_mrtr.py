"""Era translation with MRTR: a legacy server asking mid-call, served to a 2026 host (PX07, PX13, SEC07–SEC09), and
a 2026 server's input requests served to a legacy host (PX08) — through ``warden run``."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import mcp.types as t
from mcp import Client, StdioServerParameters

from tests.support import RAWSERVER, RawHost, through_warden

ISOLATION = ("WARDEN_STATE_DIR", "WARDEN_CONFIG", "XDG_STATE_HOME", "XDG_CONFIG_HOME")
MODERN = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
          "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
          "io.modelcontextprotocol/clientInfo": {"name": "raw-modern-host", "version": "1"}}
FORM = {"method": "elicitation/create",
        "params": {"message": "your name?", "requestedSchema": {"type": "object",
                                                               "properties": {"name": {"type": "string"}}}}}


def params(argv: list[str]) -> StdioServerParameters:
    return StdioServerParameters(command=argv[0], args=argv[1:],
                                 env={k: os.environ[k] for k in ISOLATION if k in os.environ})


async def test_PX07_legacy_server_question_reaches_a_2026_host_as_input_required() -> None:
    asked: list[t.ElicitRequestParams] = []

    async def answer(context: Any, request: t.ElicitRequestParams) -> t.ElicitResult:
        asked.append(request)
        return t.ElicitResult(action="accept", content={"name": "Ada"})

    async with Client(params(through_warden(RAWSERVER)), mode="auto", elicitation_callback=answer) as client:
        assert client.protocol_version == "2026-07-28"
        result = await client.call_tool("ask", FORM)
    reply = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert reply.get("result") == {"action": "accept", "content": {"name": "Ada"}}, reply
    assert [a.message for a in asked] == ["[rawserver] your name?"]  # EL06


async def call_modern(host: RawHost, id_: int, arguments: dict[str, Any], **extra: Any) -> dict[str, Any]:
    await host.request(id_, "tools/call", {"_meta": MODERN, "name": "ask", "arguments": arguments, **extra})
    return await host.response(id_)  # type: ignore[return-value]


async def test_SEC07_SEC08_tampered_or_foreign_request_state_is_refused() -> None:
    host = await RawHost.start(through_warden(RAWSERVER, "--request-timeout", "5"))
    first = await call_modern(host, 1, FORM)
    assert first["result"]["resultType"] == "input_required"
    state = first["result"]["requestState"]
    assert state.startswith("wdn1.")
    key = next(iter(first["result"]["inputRequests"]))
    responses = {key: {"action": "accept", "content": {"name": "x"}}}
    payload, mac = state[5:].split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    later = json.dumps({**claims, "e": claims["e"] + 3600}, separators=(",", ":")).encode()
    tampered = "wdn1." + base64.urlsafe_b64encode(later).rstrip(b"=").decode() + "." + mac  # valid JSON, old MAC
    for forged in (tampered, "wdn1." + payload + "." + mac[:-1] + "\u00e9"):  # non-ASCII: no crash either
        refused = await call_modern(host, 2, FORM, requestState=forged, inputResponses=responses)
        assert refused["error"]["code"] == -32602
        assert refused["error"]["message"] == "requestState is invalid, expired, or not for this request"
    other_call = await call_modern(host, 3, {**FORM, "params": {**FORM["params"], "message": "x"}},
                                   requestState=state, inputResponses=responses)
    assert other_call["error"]["code"] == -32602  # bound to the exact request it continues (SEC08)
    wrong_tool = dict(name="echo")
    await host.request(4, "tools/call", {"_meta": MODERN, **wrong_tool, "arguments": {}, "requestState": state})
    assert (await host.response(4))["error"]["code"] == -32602  # bound to the call it continues
    done = await call_modern(host, 5, FORM, requestState=state, inputResponses=responses)
    reply = json.loads(done["result"]["content"][0]["text"])
    assert reply["result"]["content"] == {"name": "x"}
    await host.close()


async def test_PX13_abandoned_exchange_answers_the_server(tmp_path: Path) -> None:
    log = tmp_path / "log"
    host = await RawHost.start(through_warden([*RAWSERVER, "--log", str(log)], "--request-timeout", "1"))
    first = await call_modern(host, 1, FORM)
    assert first["result"]["resultType"] == "input_required"
    # The host never retries. The server's pending question must get an answer (an error), not silence.
    echo = {"_meta": MODERN, "name": "echo", "arguments": {"text": "later"}}
    import trio

    await trio.sleep(2.5)
    await host.request(2, "tools/call", echo)
    assert (await host.response(2))["result"]["content"][0]["text"] == "later"
    await host.close()
    answers = [json.loads(line) for line in log.read_bytes().splitlines() if line.strip()]
    replies = [m for m in answers if "method" not in m and str(m.get("id", "")).startswith("srv-")]
    assert replies
    assert replies[0]["error"]["code"] == -32001


async def test_PX08_MS39_2026_server_input_requests_are_asked_on_the_wire_to_a_legacy_host() -> None:
    """A modern-only server's input_required reaches a legacy host as a wire question; warden retries upstream
    with the answer and the server's own requestState byte for byte (MS39), under a new id (MS38)."""
    asked: list[t.ElicitRequestParams] = []

    async def answer(context: Any, request: t.ElicitRequestParams) -> t.ElicitResult:
        asked.append(request)
        return t.ElicitResult(action="accept", content={"name": "ada"})

    server = [*RAWSERVER, "--era", "modern"]
    async with Client(params(through_warden(server)), mode="legacy", elicitation_callback=answer) as client:
        assert client.protocol_version == "2025-11-25"
        result = await client.call_tool("mrtr_ask", {})
    assert [a.message for a in asked] == ["[rawserver] who are you?"]  # EL06
    echoed = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert echoed == {"inputResponses": {"who": {"action": "accept", "content": {"name": "ada"}}},
                      "requestState": "server-state-\u00e9 1"}
