"""The Python SDK client (``mcp`` 2.3.0) over real HTTP to ``warden run --http``, in front of stdio servers.

``mode="legacy"`` opens a 2025-11-25 session (initialize, Mcp-Session-Id, SSE, DELETE at the end); ``mode="auto"``
probes ``server/discover`` and talks 2026-07-28, statelessly, with the Mcp-* headers on every request. Both get
the same tools and answers as over stdio, including questions asked mid-call (on the wire for the legacy client,
as input_required for the 2026 one) and progress.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.conformance.test_fixture_server import (
    answer_elicitation,
    answer_roots,
    answer_sampling,
    check_names,
    text_of,
)
from tests.http_server.warden_http import warden_http
from tests.support import FIXTURES, PYTHON, VENV_BIN, write_config

FIXTURE = [PYTHON, str(FIXTURES / "conformance_server.py")]


def comparable(result: Any) -> dict[str, Any]:
    dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    dumped.pop("_meta", None)
    return dict(dumped)


async def test_HM01_HM03_HM04_sdk_client_both_eras_with_the_bearer_token(tmp_path: Path) -> None:
    """covers: HM01, HM02, HM03, HM04 (the SDK client's requests pass warden's header checks in both eras). The
    fixture's questions need a policy that lets them reach the host (the default asks nobody anything)."""
    write_config(tmp_path)
    async with warden_http(FIXTURE, cwd=tmp_path) as w:
        for mode, version in (("legacy", "2025-11-25"), ("auto", "2026-07-28")):
            http = create_mcp_http_client(headers={"Authorization": f"Bearer {w.token}"})
            progress: list[float] = []

            async def on_progress(value: float, total: float | None, message: str | None,
                                  seen: list[float] = progress) -> None:
                seen.append(value)

            async with http, Client(streamable_http_client(w.url, http_client=http), mode=mode,
                                    elicitation_callback=answer_elicitation, sampling_callback=answer_sampling,
                                    list_roots_callback=answer_roots) as client:
                assert client.protocol_version == version
                await check_names(client)
                if mode == "auto":  # input_required tools are 2026-only in the fixture; a legacy host gets the
                    # dual-era server's legacy session, as it would directly (tests/http_server/test_dual_era.py)
                    asked = await client.call_tool("test_input_required_result_elicitation", {})
                    assert text_of(asked) == "Hello, Alice!"
                    sampled = await client.call_tool("test_input_required_result_sampling", {})
                    assert text_of(sampled) == "Model said: Paris"
                done = await client.call_tool("test_tool_with_progress", {}, progress_callback=on_progress)
                assert text_of(done) == "Progress reported: 0, 50, 100 of 100"
                assert progress == [0, 50, 100]
                header = await client.call_tool("test_x_mcp_header", {"region": "Hello, 世界"})
                assert text_of(header) == "region=Hello, 世界"


async def test_sdk_client_gets_the_same_answers_over_http_as_over_stdio(tmp_path: Path) -> None:
    """mcp-server-time behind ``warden run --http --no-auth``, reached with ``Client(url)``, against the server
    run directly over stdio."""
    server = [str(VENV_BIN / "mcp-server-time")]
    calls = [("convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}),
             ("get_current_time", {"timezone": "no/such_zone"})]

    async def view(target: Any, mode: str) -> dict[str, Any]:
        async with Client(target, mode=mode) as client:
            tools = await client.list_tools()
            return {"tools": sorted((comparable(t) for t in tools.tools), key=lambda t: t["name"]),
                    "results": [comparable(await client.call_tool(name, args)) for name, args in calls]}

    direct = await view(StdioServerParameters(command=server[0], env={"PATH": os.environ["PATH"]}), "legacy")
    async with warden_http(server, cwd=tmp_path, no_auth=True) as w:
        for mode in ("legacy", "auto"):
            through = await view(w.url, mode)
            assert through["tools"] == direct["tools"]
            assert through["results"] == direct["results"]
    assert direct["results"][0].get("isError") is not True
