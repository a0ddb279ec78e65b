"""SA — sampling, as warden carries a server's ``sampling/createMessage`` to the host that has the model (SA07 is
named in tests/proxy/test_questions.py; SA09 in test_messages.py). warden declares sampling only where it can be
answered, narrows what the policy refuses, and keeps nothing of what was asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.gateway_harness import ScriptedHost, gateway_in_process, legacy_server
from tests.obligations.scripts import ALL_ON, asking_legacy_server, everything_seen, requests_of, result_of
from tests.support import RAWSERVER, RawHost, through_warden, write_config

MESSAGES = [{"role": "user", "content": {"type": "text", "text": "sampling-secret-7f3a: summarise this"}}]
COMPLETION = {"role": "assistant", "content": {"type": "text", "text": "completion-secret-91cc"}, "model": "m1",
              "stopReason": "endTurn"}


async def legacy_host(host: ScriptedHost, capabilities: dict[str, Any]) -> None:
    await host.request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": capabilities,
                                         "clientInfo": {"name": "scripted-host", "version": "1"}})
    await host.response(0)
    await host.notify("notifications/initialized")


def declared_sampling(connector: Any) -> Any:
    initialize = requests_of(everything_seen(connector), "initialize")
    assert len(initialize) == 1
    return initialize[0]["params"]["capabilities"].get("sampling")


async def sample_through(host: ScriptedHost, params: dict[str, Any], answer: dict[str, Any],
                         asked: list[dict[str, Any]]) -> dict[str, Any]:
    await host.request(1, "tools/call", {"name": "ask", "arguments": {"method": "sampling/createMessage",
                                                                     "params": params}})
    while True:
        message = await host.receive()
        assert message is not None
        if "method" in message and "id" in message:
            asked.append(message)
            await host.send({"id": message["id"], "result": answer})
        elif message.get("id") == 1 and "method" not in message:
            got: dict[str, Any] = json.loads(result_of(message)["content"][0]["text"])
            return got


@pytest.mark.parametrize(("policy", "host_declares", "expected"), [
    ('sampling = "on"', {"sampling": {}}, {}),
    ('sampling = "on"', {}, None),  # no downstream that can answer
    ('sampling = "off"', {"sampling": {}}, None),  # the policy answers every request with a refusal
])
async def test_SA05_sampling_is_declared_only_when_a_downstream_can_answer_it(
        tmp_path: Path, policy: str, host_declares: dict[str, Any], expected: Any) -> None:
    async with gateway_in_process(tmp_path, legacy_server, user_policy=f"[defaults.capabilities]\n{policy}\n") as (
            host, connector):
        await legacy_host(host, host_declares)
        assert declared_sampling(connector) == expected


@pytest.mark.parametrize(("policy", "host_declares", "expected"), [
    ('sampling = "with-tools"', {"sampling": {"tools": {}}}, {"tools": {}}),
    ('sampling = "on"', {"sampling": {"tools": {}}}, {}),  # the policy refuses tool loops
    ('sampling = "with-tools"', {"sampling": {}}, {}),  # the host cannot run them
])
async def test_SA06_sampling_tools_is_declared_only_when_the_path_runs_tool_loops(
        tmp_path: Path, policy: str, host_declares: dict[str, Any], expected: Any) -> None:
    async with gateway_in_process(tmp_path, legacy_server, user_policy=f"[defaults.capabilities]\n{policy}\n") as (
            host, connector):
        await legacy_host(host, host_declares)
        assert declared_sampling(connector) == expected


@pytest.mark.parametrize(("context_allowed", "declared", "forwarded"), [
    (True, {"context": {}}, "thisServer"),
    (False, {}, "none"),
])
async def test_SA08_sampling_context_is_declared_and_acted_on_only_when_it_can_be_honoured(
        tmp_path: Path, context_allowed: bool, declared: dict[str, Any], forwarded: str) -> None:
    """The host declared ``sampling.context``. With the policy's ``sampling_context`` on, warden declares it and
    forwards ``includeContext: "thisServer"`` (this gateway fronts one server); with it off, warden does not declare
    it and forwards ``"none"`` — it does not act on a value it could not honour."""
    policy = f'[defaults.capabilities]\nsampling = "on"\nsampling_context = {str(context_allowed).lower()}\n'
    asked: list[dict[str, Any]] = []
    async with gateway_in_process(tmp_path, asking_legacy_server, user_policy=policy) as (host, connector):
        await legacy_host(host, {"sampling": {"context": {}}})
        assert declared_sampling(connector) == declared
        got = await sample_through(host, {"messages": MESSAGES, "maxTokens": 10, "includeContext": "thisServer"},
                                   COMPLETION, asked)
    assert got["result"] == COMPLETION
    assert [q["params"]["includeContext"] for q in asked] == [forwarded]


async def test_SA04_model_preferences_reach_the_host_as_given(tmp_path: Path) -> None:
    """warden picks no model: ``modelPreferences`` are advice for the host, which evaluates ``hints`` in order —
    so they arrive unchanged, hints in the server's order, and the host's choice of model goes back as it is."""
    preferences = {"hints": [{"name": "zeta-large"}, {"name": "alpha"}, {"name": "mid"}], "costPriority": 0.9,
                   "speedPriority": 0.1, "intelligencePriority": 0.5}
    answer = {**COMPLETION, "model": "not-any-hint"}
    asked: list[dict[str, Any]] = []
    async with gateway_in_process(tmp_path, asking_legacy_server, user_policy=ALL_ON) as (host, _connector):
        await legacy_host(host, {"sampling": {}})
        got = await sample_through(host, {"messages": MESSAGES, "maxTokens": 10, "modelPreferences": preferences},
                                   answer, asked)
    assert [q["params"]["modelPreferences"] for q in asked] == [preferences]
    assert got["result"]["model"] == "not-any-hint"


async def test_SA10_nothing_of_a_sampling_exchange_is_kept(tmp_path: Path, isolated_env: Path) -> None:
    """A real ``warden run`` (audit on) carries a sampling request and its completion: afterwards, no file in
    warden's state dir holds the messages or the completion (the audit log keeps digests of what it records)."""
    write_config(tmp_path)
    host = await RawHost.start(through_warden(RAWSERVER))
    await host.initialize({"sampling": {}})
    await host.request(1, "tools/call", {"name": "ask", "arguments": {
        "method": "sampling/createMessage", "params": {"messages": MESSAGES, "maxTokens": 10}}})
    asked = 0
    while True:
        message = await host.next_message()
        assert message is not None
        if message.get("method") == "sampling/createMessage":
            asked += 1
            await host.send({"jsonrpc": "2.0", "id": message["id"], "result": COMPLETION})
        elif message.get("id") == 1:
            assert "result" in message, message
            break
    assert await host.close() == 0
    assert asked == 1
    files = [p for p in isolated_env.rglob("*") if p.is_file()]
    assert any("audit" in str(p) for p in files), files  # the exchange was recorded, so there was a place to keep it
    for path in files:
        data = path.read_bytes()
        assert b"sampling-secret-7f3a" not in data, path
        assert b"completion-secret-91cc" not in data, path
