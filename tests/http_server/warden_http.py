"""Run ``warden run --http`` (or ``warden serve --http``) as a real process; talk to it over real HTTP on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import trio

from tests.support import WARDEN, free_port
from warden.cli._http import SERVING_PREFIX

MODERN = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"}}
ACCEPT = "application/json, text/event-stream"


class WardenHttp:
    """A running ``warden run --http 127.0.0.1:0 ... -- SERVER``: its URL, token, stderr and an HTTP client."""

    def __init__(self, process: trio.Process, url: str, token: str | None, stderr: list[str]) -> None:
        self.process = process
        self.url = url
        self.token = token
        self.stderr = stderr
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(60.0))

    @property
    def origin(self) -> str:
        return self.url.removesuffix("/mcp")

    def headers(self, *, auth: bool = True, **extra: str) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": ACCEPT}
        if auth and self.token is not None:
            headers["authorization"] = f"Bearer {self.token}"
        headers.update({k.replace("_", "-"): v for k, v in extra.items()})
        return headers

    async def post(self, body: Any, headers: Mapping[str, str] | None = None, **kwargs: Any) -> httpx.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return await self.client.post(self.url, content=content,
                                      headers=dict(headers) if headers is not None else self.headers(), **kwargs)

    async def modern(self, id_: object, method: str, params: dict[str, Any] | None = None,
                     **headers: str) -> httpx.Response:
        """A well-formed 2026-07-28 request (headers mirroring the body) plus any header overrides."""
        body_params = {"_meta": META, **(params or {})}
        base = self.headers(mcp_protocol_version=MODERN, mcp_method=method)
        if method in ("tools/call", "prompts/get"):
            base["mcp-name"] = str(body_params["name"])
        elif method == "resources/read":
            base["mcp-name"] = str(body_params["uri"])
        base.update({k.replace("_", "-"): v for k, v in headers.items()})
        return await self.post({"jsonrpc": "2.0", "id": id_, "method": method, "params": body_params}, base)

    async def initialize(self, capabilities: dict[str, Any] | None = None) -> str:
        """Open a legacy session; returns its id."""
        response = await self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": capabilities or {},
            "clientInfo": {"name": "test", "version": "1"}}})
        assert response.status_code == 200, response.text
        session = response.headers["mcp-session-id"]
        note = await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"},
                               self.headers(mcp_session_id=session))
        assert note.status_code == 202
        return session

    async def wait_stderr(self, text: str) -> str:
        """Wait (bounded) until warden wrote a line containing ``text`` to its stderr; returns the line."""
        with trio.fail_after(20):
            while True:
                for line in self.stderr:
                    if text in line:
                        return line
                await trio.sleep(0.02)

    async def aclose(self) -> None:
        await self.client.aclose()


FIXED_PORT = "fixed"
"""``bind`` for a face that must name its port before it listens (an OAuth resource): a free port picked here, and
another one if a parallel test takes it first."""
IN_USE = "Address already in use"


@contextlib.asynccontextmanager
async def warden_http(server: list[str], *args: str, cwd: Path, no_auth: bool = False,
                      env: Mapping[str, str] | None = None, bind: str = "127.0.0.1:0") -> AsyncIterator[WardenHttp]:
    """Start ``warden run --http BIND [--no-auth] ARGS -- SERVER`` (with no ``server``: ``warden serve --http
    BIND [--no-auth] ARGS``, every configured server), wait for its URL, stop it after."""
    async with trio.open_nursery() as nursery:
        for _ in range(5):
            address = f"127.0.0.1:{free_port()}" if bind == FIXED_PORT else bind
            head = [WARDEN, "run" if server else "serve", "--http", address, *(["--no-auth"] if no_auth else []),
                    *args]
            process, lines, url = await _serving([*head, "--", *server] if server else head, cwd, env, nursery)
            if url or bind != FIXED_PORT or not any(IN_USE in line for line in lines):
                break
        assert url, "warden exited before serving:\n" + "\n".join(lines)
        token = None
        if not no_auth:
            token_file = next(line for line in lines if line.startswith("warden: bearer token in "))
            path = Path(token_file.removeprefix("warden: bearer token in ").split(" (hosts send")[0])
            token = path.read_text().strip()
        face = WardenHttp(process, url, token, lines)
        try:
            yield face
        finally:
            await face.aclose()
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            with trio.fail_after(30):
                await process.wait()
            nursery.cancel_scope.cancel()


async def _serving(argv: list[str], cwd: Path, env: Mapping[str, str] | None, nursery: trio.Nursery
                   ) -> tuple[trio.Process, list[str], str]:
    """Start warden and wait until it serves or exits: its process, the stderr lines so far (kept growing by a task
    in ``nursery``) and its URL ("" if it exited first)."""
    process = await trio.lowlevel.open_process(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.PIPE, cwd=str(cwd), env=env)
    lines: list[str] = []
    ready = trio.Event()
    url: list[str] = []

    async def drain() -> None:
        assert process.stderr is not None
        buffer = b""
        async for chunk in process.stderr:
            buffer += chunk
            *complete, buffer = buffer.split(b"\n")
            for raw in complete:
                line = raw.decode("utf-8", "replace")
                lines.append(line)
                if line.startswith(SERVING_PREFIX):
                    url.append(line.removeprefix(SERVING_PREFIX))
                elif url and line.startswith(("warden: bearer token in ", "warden: WARNING: --no-auth")):
                    ready.set()
        ready.set()

    nursery.start_soon(drain)
    with trio.fail_after(60):
        await ready.wait()
    if not url:
        await process.wait()
    return process, lines, url[0] if url else ""


def sse_messages(text: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages in an event-stream body (priming events and comments skipped)."""
    messages = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        data = "\n".join(line[5:].lstrip(" ") for line in block.split("\n") if line.startswith("data:"))
        if data.strip():
            messages.append(json.loads(data))
    return messages


def sse_ids(text: str) -> list[str]:
    return [line[3:].strip() for line in text.replace("\r\n", "\n").split("\n") if line.startswith("id:")]
