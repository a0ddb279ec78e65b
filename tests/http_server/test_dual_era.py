"""A legacy HTTP host in front of a dual-era server gets a legacy session of its own on a sibling process, so what
only a legacy session can do works end to end: wire questions mid-call, per-resource subscriptions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.http_server.warden_http import sse_messages, warden_http
from tests.support import FIXTURES, PYTHON

FIXTURE = [PYTHON, str(FIXTURES / "conformance_server.py")]


def legacy_call(id_: object, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


async def test_legacy_host_gets_the_wire_question_of_a_dual_era_server(tmp_path: Path) -> None:
    async with warden_http(FIXTURE, cwd=tmp_path) as w:
        session = await w.initialize({"sampling": {}})
        headers = w.headers(mcp_session_id=session)
        async with w.client.stream("POST", w.url, headers=headers,
                                   content=json.dumps(legacy_call(1, "test_sampling", {"prompt": "capital?"}))) as r:
            body = b""
            asked: list[dict[str, Any]] = []
            async for chunk in r.aiter_bytes():
                body += chunk
                asked = [m for m in sse_messages(body.decode()) if m.get("method") == "sampling/createMessage"]
                if asked:
                    answer = {"role": "assistant", "content": {"type": "text", "text": "Paris"}, "model": "m",
                              "stopReason": "endTurn"}
                    await w.post({"jsonrpc": "2.0", "id": asked[0]["id"], "result": answer}, headers)
                    break
        assert asked, body.decode()


async def test_legacy_host_subscribes_to_a_resource_of_a_modern_server(tmp_path: Path) -> None:
    async with warden_http(FIXTURE, cwd=tmp_path) as w:
        session = await w.initialize()
        response = await w.post({"jsonrpc": "2.0", "id": 1, "method": "resources/subscribe",
                                 "params": {"uri": "test://watched-resource"}}, w.headers(mcp_session_id=session))
        assert response.json().get("result") == {}, response.text
