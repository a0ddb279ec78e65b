"""Server questions (sampling, elicitation, roots) reach a host only if it declared that exact capability (PX01–PX04,
PX17, SA07, EL08); otherwise the server gets an error at once."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support import RAWSERVER, RawHost, through_warden

ELICIT_FORM = {"method": "elicitation/create",
               "params": {"message": "name?", "requestedSchema": {"type": "object",
                                                                  "properties": {"n": {"type": "string"}}}}}
ELICIT_URL = {"method": "elicitation/create",
              "params": {"mode": "url", "message": "sign in", "url": "https://example.com/x", "elicitationId": "e1"}}
SAMPLE = {"method": "sampling/createMessage",
          "params": {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 5,
                     "includeContext": "allServers"}}
SAMPLE_TOOLS = {"method": "sampling/createMessage",
                "params": {"messages": [], "maxTokens": 5, "tools": [{"name": "t", "inputSchema": {}}]}}
ROOTS = {"method": "roots/list", "params": {}}


async def ask(host: RawHost, question: dict[str, Any], answer: dict[str, Any] | None) -> tuple[dict[str, Any],
                                                                                             list[dict[str, Any]]]:
    """Call the server's ``ask`` tool; answer any question warden forwards with ``answer``."""
    await host.request(1, "tools/call", {"name": "ask", "arguments": question})
    forwarded = []
    while True:
        message = await host.next_message()
        assert message is not None
        if message.get("method") == question["method"]:
            forwarded.append(message)
            await host.send({"jsonrpc": "2.0", "id": message["id"], "result": answer})
        elif message.get("id") == 1:
            return json.loads(message["result"]["content"][0]["text"]), forwarded  # type: ignore[index]


@pytest.mark.parametrize(("capabilities", "question", "answer"), [
    ({"elicitation": {}}, ELICIT_FORM, {"action": "accept", "content": {"n": "x"}}),
    ({"elicitation": {"url": {}}}, ELICIT_URL, {"action": "accept"}),
    ({"sampling": {}}, SAMPLE, {"role": "assistant", "content": {"type": "text", "text": "yo"}, "model": "m"}),
    ({"sampling": {"tools": {}}}, SAMPLE_TOOLS, {"role": "assistant", "content": [], "model": "m"}),
    ({"roots": {}}, ROOTS, {"roots": [{"uri": "file:///tmp"}]}),
])
async def test_PX01_PX17_declared_questions_are_forwarded_under_warden_ids(
        capabilities: dict[str, Any], question: dict[str, Any], answer: dict[str, Any]) -> None:
    host = await RawHost.start(through_warden(RAWSERVER))
    await host.initialize(capabilities)
    reply, forwarded = await ask(host, question, answer)
    assert reply["result"] == answer
    assert len(forwarded) == 1
    assert str(forwarded[0]["id"]).startswith("warden-")
    assert forwarded[0]["params"].get("maxTokens") == question["params"].get("maxTokens")  # PX15
    await host.close()


@pytest.mark.parametrize(("capabilities", "question", "code"), [
    ({}, ELICIT_FORM, -32602),
    ({"elicitation": {"form": {}}}, ELICIT_URL, -32602),  # EL08 / PX02
    ({"elicitation": {}}, ELICIT_URL, -32602),
    ({}, SAMPLE, -32601),
    ({"sampling": {}}, SAMPLE_TOOLS, -32602),  # SA07 / PX03
    ({"elicitation": {}}, ROOTS, -32601),
])
async def test_PX01_PX02_PX03_undeclared_questions_are_refused_at_once(
        capabilities: dict[str, Any], question: dict[str, Any], code: int) -> None:
    """A question in a mode or with a feature the host did not declare gets an error at once; a URL-mode
    elicitation to a host that declared form mode only is -32602 (covers EL08)."""
    host = await RawHost.start(through_warden(RAWSERVER))
    await host.initialize(capabilities)
    reply, forwarded = await ask(host, question, None)
    assert forwarded == []
    assert reply["error"]["code"] == code
    await host.close()


async def test_PX06_include_context_is_scoped_to_none() -> None:
    host = await RawHost.start(through_warden(RAWSERVER))
    await host.initialize({"sampling": {"context": {}}})
    _, forwarded = await ask(host, SAMPLE, {"role": "assistant", "content": {"type": "text", "text": "x"},
                                            "model": "m"})
    assert forwarded[0]["params"]["includeContext"] == "none"
    await host.close()
