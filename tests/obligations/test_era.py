"""ER — the era answer of a server configuration, kept across its processes (the probe itself is named in
tests/protocol/test_probe.py and tests/proxy/test_probe_fixtures.py). In process: each scripted connection is one
"process" of the same configuration; when one ends, warden's supervisor starts the next."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.gateway_harness import ScriptedServer, gateway_in_process
from tests.obligations.scripts import legacy_reply, modern_meta, modern_server, requests_of, until
from warden.upstream.connection import UpstreamOptions

FAST_RESTART = UpstreamOptions(restart_backoff=0.01)


def methods(server: ScriptedServer) -> list[Any]:
    return [m.get("method") for m in server.seen if "method" in m]


async def test_ER14_ER15_a_restarted_legacy_process_is_not_probed_but_gets_its_own_handshake(tmp_path: Path) -> None:
    """The first process is probed (``server/discover`` refused) and shakes hands; it exits after one call. The
    next process of the same configuration shares the cached legacy answer — no probe (ER14) — and gets its own
    ``initialize`` and ``notifications/initialized`` before the call (ER15)."""
    served: list[int] = []

    async def one_call_then_exit(server: ScriptedServer) -> None:
        while (message := await server.receive()) is not None:
            if message.get("method") == "tools/call":
                await server.answer(message, {"content": [{"type": "text", "text": f"process {len(served)}"}]})
                served.append(1)
                return  # the process exits
            await legacy_reply(server, message)

    async with gateway_in_process(tmp_path, one_call_then_exit, options=FAST_RESTART) as (host, connector):
        await host.initialize()
        await host.request(1, "tools/call", {"name": "echo", "arguments": {}})
        assert (await host.response(1))["result"]["content"][0]["text"] == "process 0"
        await until(lambda: len(connector.connections) >= 2)
        await host.request(2, "tools/call", {"name": "echo", "arguments": {}})
        assert (await host.response(2))["result"]["content"][0]["text"] == "process 1"
        first, second = (c.server for c in connector.connections[:2])
        assert methods(first)[:3] == ["server/discover", "initialize", "notifications/initialized"]
        assert methods(second)[:2] == ["initialize", "notifications/initialized"]
        assert "server/discover" not in methods(second)


async def test_ER16_a_restarted_modern_process_gets_no_handshake(tmp_path: Path) -> None:
    """A configuration cached as modern: its next process gets no ``initialize`` and no
    ``notifications/initialized``; its first message is a 2026 request carrying the full ``_meta`` at the cached
    version (``server/discover``, which warden sends for the new process's capabilities and instructions, whose
    pin it checks — a real request, not a handshake), and the host's call follows with nothing in between."""
    async def one_call_then_exit(server: ScriptedServer) -> None:
        async def answer_and_exit(server: ScriptedServer, message: dict[str, Any]) -> None:
            await server.answer(message, {"resultType": "complete", "content": [{"type": "text", "text": "bye"}]})
            raise _Exit

        try:
            await modern_server(server, on_call=answer_and_exit)
        except _Exit:
            return

    async with gateway_in_process(tmp_path, one_call_then_exit, options=FAST_RESTART) as (host, connector):
        await host.request(1, "tools/call", {"name": "hang", "arguments": {}, "_meta": modern_meta()})
        assert "result" in await host.response(1)
        await until(lambda: len(connector.connections) >= 2)
        await host.request(2, "tools/call", {"name": "hang", "arguments": {}, "_meta": modern_meta()})
        assert "result" in await host.response(2)
        second = connector.connections[1].server
        assert "initialize" not in methods(second)
        assert "notifications/initialized" not in methods(second)
        first_message = second.seen[0]
        assert first_message["method"] == "server/discover"
        meta = first_message["params"]["_meta"]
        assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
        assert "io.modelcontextprotocol/clientCapabilities" in meta
        requests = [m for m in second.seen if "id" in m and m.get("method") != "subscriptions/listen"]
        assert [m["method"] for m in requests[:2]] == ["server/discover", "tools/call"]


class _Exit(Exception):
    """Ends a scripted process from inside its handler."""


async def test_ER17_a_process_answering_in_another_era_drops_the_cached_answer(tmp_path: Path) -> None:
    """The configuration was legacy (first process); it is updated to a 2026-only build. The next process refuses
    the cached era's ``initialize`` with only 2026 versions: warden drops the cached answer and probes afresh (a
    fresh process gets ``server/discover`` first), and the host's call then works against the modern server."""
    count = [0]

    async def changes_era(server: ScriptedServer) -> None:
        count[0] += 1
        if count[0] == 1:
            while (message := await server.receive()) is not None:
                if message.get("method") == "tools/call":
                    await server.answer(message, {"content": [{"type": "text", "text": "legacy"}]})
                    return  # exits; it comes back as a 2026 build
                await legacy_reply(server, message)
        else:
            await modern_server(server)

    async with gateway_in_process(tmp_path, changes_era, options=FAST_RESTART) as (host, connector):
        await host.initialize()
        await host.request(1, "tools/call", {"name": "echo", "arguments": {}})
        assert (await host.response(1))["result"]["content"][0]["text"] == "legacy"
        await until(lambda: len(connector.connections) >= 3)
        await host.request(2, "tools/call", {"name": "echo", "arguments": {}})
        answer = await host.response(2)
        assert answer["result"]["content"][0]["text"] == "echo", answer
        second, third = (c.server for c in connector.connections[1:3])
        assert methods(second)[0] == "initialize"
        assert "server/discover" not in methods(second)
        assert methods(third)[0] == "server/discover"
        assert not requests_of(third.seen, "initialize")
