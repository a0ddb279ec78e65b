"""A minimal MCP client over a launched child's pipes (newline-delimited JSON-RPC), for the sandbox tests.

It is deliberately not warden's upstream code: these tests check the sandbox with real servers, and must not
depend on (or be masked by) the proxy. stderr is drained concurrently so a chatty server cannot block on a full
pipe; the tail is kept for failure messages.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from warden.launcher import Child, Launcher, LaunchSpec


class McpSession:
    def __init__(self, child: Child) -> None:
        self.child = child
        self._buffer = b""
        self._next_id = 1
        self.stderr = bytearray()

    async def drain_stderr(self) -> None:
        while chunk := await self.child.stderr.receive_some(65536):
            self.stderr += chunk
            del self.stderr[:-65536]

    async def _message(self) -> dict[str, Any]:
        while b"\n" not in self._buffer:
            chunk = await self.child.stdout.receive_some(1 << 20)
            if not chunk:
                raise EOFError(f"server closed stdout; stderr: {self.stderr.decode(errors='replace')[-2000:]}")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message

    async def request(self, method: str, params: dict[str, Any] | None = None, *,
                      timeout: float = 60) -> dict[str, Any]:
        ident = self._next_id
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
        if params is not None:
            message["params"] = params
        await self.child.stdin.send_all(json.dumps(message).encode() + b"\n")
        with trio.fail_after(timeout):
            while True:
                answer = await self._message()
                if answer.get("id") == ident and ("result" in answer or "error" in answer):
                    if "error" in answer:
                        raise RuntimeError(f"{method} failed: {answer['error']}")
                    result: dict[str, Any] = answer["result"]
                    return result

    async def initialize(self) -> dict[str, Any]:
        result = await self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                                   "clientInfo": {"name": "warden-sandbox-tests", "version": "1"}})
        await self.child.stdin.send_all(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        return result

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self.request("tools/call", {"name": name, "arguments": arguments or {}})

    @staticmethod
    def text(result: dict[str, Any]) -> str:
        return "\n".join(item.get("text", "") for item in result.get("content", []) if item.get("type") == "text")


@asynccontextmanager
async def mcp_session(launcher: Launcher, spec: LaunchSpec) -> AsyncIterator[McpSession]:
    """Launch ``spec``, initialize, yield the session; on exit close stdin and make sure nothing survives."""
    child = await launcher.launch(spec)
    session = McpSession(child)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(session.drain_stderr)
        try:
            await session.initialize()
            yield session
        finally:
            with trio.CancelScope(shield=True):
                await child.stdin.aclose()
                with trio.move_on_after(10) as scope:
                    await child.wait()
                if scope.cancelled_caught:
                    child.kill()
                    await child.wait()
