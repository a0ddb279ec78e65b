"""A minimal 2026-07-28 HTTP client for benchmarks: one POST per ``tools/call``, stateless, every routing header.

It is the "direct" path of the HTTP-upstream row: the same requests warden makes upstream, with nothing else.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"}}


class HttpDirectClient:
    """``call`` returns the round-trip time in seconds; answers may be JSON or an event stream."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._client = httpx.AsyncClient(trust_env=False, timeout=30, limits=httpx.Limits(max_connections=64))
        self._next = 0

    async def call(self, tool: str, arguments: dict[str, Any]) -> float:
        self._next += 1
        body = {"jsonrpc": "2.0", "id": self._next, "method": "tools/call",
                "params": {"name": tool, "arguments": arguments, "_meta": META}}
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
                   "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool}
        started = time.perf_counter()
        response = await self._client.post(self._url, content=json.dumps(body), headers=headers)
        text = response.text
        elapsed = time.perf_counter() - started
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            text = next(line[5:] for line in text.splitlines() if line.startswith("data:") and '"id"' in line)
        if "result" not in json.loads(text):
            raise RuntimeError(f"tools/call failed: {text[:200]}")
        return elapsed

    async def aclose(self) -> None:
        await self._client.aclose()
