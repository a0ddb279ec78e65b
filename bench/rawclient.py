"""A minimal JSON-RPC client over a child's stdio for benchmarks: it adds as little of its own time as possible."""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import trio


class RawClient:
    """Legacy-handshake client; ``call`` returns the round-trip time in seconds."""

    def __init__(self, process: trio.Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self.process = process
        self._stdin = process.stdin
        self._stdout = process.stdout
        self._waiters: dict[int, trio.Event] = {}
        self._results: dict[int, dict[str, Any]] = {}
        self._next = 0
        self._send_lock = trio.StrictFIFOLock()

    @classmethod
    async def start(cls, nursery: trio.Nursery, argv: list[str], env: dict[str, str] | None = None) -> RawClient:
        process = await trio.lowlevel.open_process(argv, stdin=-1, stdout=-1, stderr=subprocess.DEVNULL, env=env)
        client = cls(process)
        nursery.start_soon(client._reader)
        await client.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                            "clientInfo": {"name": "bench", "version": "1"}})
        await client._stdin.send_all(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        return client

    async def _reader(self) -> None:
        buffer = b""
        while True:
            chunk = await self._stdout.receive_some(1 << 20)
            if not chunk:
                for event in self._waiters.values():
                    event.set()
                return
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                message = json.loads(line)
                mid = message.get("id")
                if isinstance(mid, int) and mid in self._waiters and "method" not in message:
                    self._results[mid] = message
                    self._waiters.pop(mid).set()

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next += 1
        mid = self._next
        event = trio.Event()
        self._waiters[mid] = event
        data = json.dumps({"jsonrpc": "2.0", "id": mid, "method": method, "params": params}).encode() + b"\n"
        async with self._send_lock:
            await self._stdin.send_all(data)
        await event.wait()
        result = self._results.pop(mid, None)
        if result is None or "error" in result:
            raise RuntimeError(f"{method} failed: {result}")
        return result

    async def call(self, tool: str, arguments: dict[str, Any], failed: list[dict[str, Any]] | None = None) -> float:
        """One ``tools/call``: its round trip in seconds (an answer that is an error goes into ``failed``)."""
        started = time.perf_counter()
        try:
            answer = await self.request("tools/call", {"name": tool, "arguments": arguments})
        except RuntimeError as exc:
            if failed is None:
                raise
            answer = {"error": str(exc)}
        elapsed = time.perf_counter() - started
        if failed is not None and ("error" in answer or answer["result"].get("isError")):
            failed.append(answer)
        return elapsed

    async def aclose(self) -> None:
        await self._stdin.aclose()
        with trio.move_on_after(10):
            await self.process.wait()
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
