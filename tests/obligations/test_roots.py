"""RT — roots, as warden relays the host's roots to a server, filtered by policy (RT04, RT05, RT07 are named in
tests/protocol and tests/policy)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.gateway_harness import ScriptedHost, ScriptedServer, gateway_in_process, legacy_server
from tests.obligations.scripts import (
    asking_legacy_server,
    everything_seen,
    modern_server,
    requests_of,
    result_of,
    until,
)


async def legacy_host(host: ScriptedHost, capabilities: dict[str, Any]) -> None:
    await host.request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": capabilities,
                                         "clientInfo": {"name": "scripted-host", "version": "1"}})
    await host.response(0)
    await host.notify("notifications/initialized")


def roots_policy(*dirs: Path) -> str:
    return f"[defaults.capabilities]\nroots = {json.dumps([str(d) for d in dirs])}\n"


def declared_roots(connector: Any) -> Any:
    initialize = requests_of(everything_seen(connector), "initialize")
    assert len(initialize) == 1
    return initialize[0]["params"]["capabilities"].get("roots", "absent")


@pytest.mark.parametrize(("host_declares", "expected"), [
    ({"roots": {"listChanged": True}}, {"listChanged": True}),
    ({"roots": {}}, {}),
    ({}, "absent"),
])
async def test_RT01_RT02_roots_and_list_changed_are_declared_as_they_will_be_served(
        tmp_path: Path, host_declares: dict[str, Any], expected: Any) -> None:
    """warden declares ``roots`` only when the host behind it answers ``roots/list``, and ``listChanged`` only when
    the host does (RT01); having declared it, the host's ``notifications/roots/list_changed`` reaches the server
    (RT02)."""
    async with gateway_in_process(tmp_path, legacy_server, user_policy=roots_policy(tmp_path)) as (host, connector):
        await legacy_host(host, host_declares)
        assert declared_roots(connector) == expected
        if expected == {"listChanged": True}:
            await host.notify("notifications/roots/list_changed")
            server = connector.connections[-1].server
            await until(lambda: requests_of(server.seen, "notifications/roots/list_changed"))


async def test_RT03_roots_are_not_declared_when_the_policy_gives_the_server_none(tmp_path: Path) -> None:
    """The host has roots, but the policy lets this server see no directory: every answer would be an empty list,
    so warden does not declare ``roots`` at all."""
    async with gateway_in_process(tmp_path, legacy_server, user_policy="[defaults.capabilities]\nroots = []\n") as (
            host, connector):
        await legacy_host(host, {"roots": {"listChanged": True}})
        assert declared_roots(connector) == "absent"


async def roots_through(host: ScriptedHost, roots: list[dict[str, Any]],
                        asked: list[dict[str, Any]]) -> dict[str, Any]:
    await host.request(1, "tools/call", {"name": "ask", "arguments": {"method": "roots/list", "params": {}}})
    while True:
        message = await host.receive()
        assert message is not None
        if "method" in message and "id" in message:
            asked.append(message)
            await host.send({"id": message["id"], "result": {"roots": roots}})
        elif message.get("id") == 1 and "method" not in message:
            got: dict[str, Any] = json.loads(result_of(message)["content"][0]["text"])
            return got


async def test_RT06_no_root_is_exposed_that_the_user_did_not_consent_to(tmp_path: Path) -> None:
    """The roots a server may be told are the user's standing consent, written in the policy. With none given,
    the server's ``roots/list`` is refused and the host is not even asked; with one directory given, only the
    host's roots inside it reach the server."""
    allowed = tmp_path / "allowed"
    (allowed / "sub").mkdir(parents=True)
    other = tmp_path / "other"
    other.mkdir()
    host_roots = [{"uri": (allowed / "sub").as_uri(), "name": "sub"}, {"uri": other.as_uri(), "name": "other"}]
    asked: list[dict[str, Any]] = []
    (tmp_path / "none").mkdir()
    async with gateway_in_process(tmp_path / "none", asking_legacy_server,
                                  user_policy="[defaults.capabilities]\nroots = []\n") as (host, _connector):
        await legacy_host(host, {"roots": {}})
        refused = await roots_through(host, host_roots, asked)
    assert "error" in refused
    assert asked == []
    async with gateway_in_process(tmp_path, asking_legacy_server, user_policy=roots_policy(allowed)) as (
            host, _connector):
        await legacy_host(host, {"roots": {}})
        given = await roots_through(host, host_roots, asked)
    assert len(asked) == 1
    assert [r["uri"] for r in given["result"]["roots"]] == [(allowed / "sub").as_uri()]


async def test_RT08_a_modern_server_gets_roots_only_through_input_requests(tmp_path: Path) -> None:
    """A legacy host with ``roots.listChanged`` in front of a 2026 server: requests declare ``roots: {}`` (no
    ``listChanged``); the server's ``roots/list`` input request is answered with ``{roots: [...]}`` in
    ``inputResponses``; the host's ``notifications/roots/list_changed`` is never sent to the server."""
    (tmp_path / "work").mkdir()
    root = {"uri": (tmp_path / "work").as_uri(), "name": "work"}

    async def asks_for_roots(server: ScriptedServer, message: dict[str, Any]) -> None:
        if "inputResponses" in message["params"]:
            await server.answer(message, {"resultType": "complete", "content": [{"type": "text", "text": "ok"}]})
        else:
            await server.answer(message, {"resultType": "input_required",
                                          "inputRequests": {"where": {"method": "roots/list", "params": {}}}})

    async with gateway_in_process(tmp_path, lambda s: modern_server(s, on_call=asks_for_roots),
                                  user_policy=roots_policy(tmp_path)) as (host, connector):
        await legacy_host(host, {"roots": {"listChanged": True}})
        await host.notify("notifications/roots/list_changed")
        await host.request(1, "tools/call", {"name": "ask", "arguments": {}})
        question = await host.receive()
        assert question is not None
        assert question["method"] == "roots/list"
        await host.send({"id": question["id"], "result": {"roots": [root]}})
        assert result_of(await host.response(1))["content"][0]["text"] == "ok"
        await host.notify("notifications/roots/list_changed")
        await host.request(2, "tools/call", {"name": "echo", "arguments": {}})
        await host.response(2)
        seen = everything_seen(connector)
        calls = requests_of(seen, "tools/call")
        assert [c["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]["roots"] for c in calls] == [
            {}, {}, {}]
        assert calls[1]["params"]["inputResponses"] == {"where": {"roots": [root]}}
        assert not requests_of(seen, "notifications/roots/list_changed")
