"""The gateway in process: a scripted upstream on an in-memory connector, a scripted host on the stdio face, and
the real Gateway, Guard, pin store and Upstream between them — no subprocess, no sandbox, and a clock the test
controls (``trio.testing.MockClock``), so deadlines are tested without sleeping. (The pin store's writes run in a
worker thread; an autojumping clock jumps while they run, so tests time deadlines from when the server saw the
request, not from when the host sent it.)

The upstream side is a plain async function given a :class:`ScriptedServer` (read the next request, answer it, send
anything); the host side is a :class:`ScriptedHost` over the stdio face.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
import trio.testing

from tests.policy.helpers import policy_from
from warden import audit
from warden.gateway.core import Gateway
from warden.gateway.guard import Guard
from warden.gateway.hub import Hub, Member
from warden.gateway.recorder import Recorder
from warden.gateway.stdio import StdioHost
from warden.policy import PinStore
from warden.protocol.request_state import StateSigner
from warden.transport.channel import MessageChannel
from warden.upstream.connection import Connector, Upstream, UpstreamOptions


class ScriptedServer:
    """The server's end of an in-memory connection: JSON lines in and out."""

    def __init__(self, stream: trio.testing.StapledStream[Any, Any]) -> None:
        self._stream = stream
        self._buffer = b""
        self.seen: list[dict[str, Any]] = []
        self.seen_at: list[float] = []  # trio time at which each message of ``seen`` arrived

    async def receive(self) -> dict[str, Any] | None:
        while b"\n" not in self._buffer:
            chunk = await self._stream.receive_some(65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        self.seen.append(message)
        self.seen_at.append(trio.current_time())
        return message

    async def send(self, message: dict[str, Any]) -> None:
        await self._stream.send_all(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")

    async def send_raw(self, data: bytes) -> None:
        await self._stream.send_all(data)

    async def answer(self, request: dict[str, Any], result: dict[str, Any]) -> None:
        await self.send({"id": request["id"], "result": result})


Script = Callable[[ScriptedServer], Awaitable[None]]

TOOLS = [{"name": "echo", "description": "Echoes.", "inputSchema": {"type": "object"}},
         {"name": "hang", "description": "Never answers.", "inputSchema": {"type": "object"}}]


async def legacy_handshake(server: ScriptedServer, message: dict[str, Any], *,
                           capabilities: dict[str, Any] | None = None, name: str = "scripted",
                           instructions: str | None = None) -> bool:
    """Answer ``message`` if it is part of a 2025-11-25 server's handshake (``server/discover`` refused,
    ``initialize`` answered with ``capabilities``, default tools only, and ``instructions`` if given); whether it
    was."""
    if message.get("method") == "server/discover":
        await server.send({"id": message["id"], "error": {"code": -32601, "message": "Method not found"}})
    elif message.get("method") == "initialize":
        await server.answer(message, {"protocolVersion": "2025-11-25", "capabilities": capabilities or {"tools": {}},
                                      "serverInfo": {"name": name, "version": "1"},
                                      **({"instructions": instructions} if instructions is not None else {})})
    else:
        return False
    return True


async def legacy_server(server: ScriptedServer, *, on_call: Script | None = None) -> None:
    """A 2025-11-25 server: refuses ``server/discover``, hands shakes, lists :data:`TOOLS`, answers ``echo`` and
    passes every other ``tools/call`` to ``on_call`` (after putting the request back in ``server.seen[-1]``)."""
    while (message := await server.receive()) is not None:
        method, id_ = message.get("method"), message.get("id")
        if id_ is None or await legacy_handshake(server, message):
            continue
        if method == "tools/list":
            await server.answer(message, {"tools": TOOLS})
        elif method == "tools/call" and message["params"]["name"] == "echo":
            await server.answer(message, {"content": [{"type": "text", "text": "echo"}]})
        elif method == "tools/call" and on_call is not None:
            await on_call(server)
        elif method == "ping":
            await server.answer(message, {})


class MemoryConnection:
    """One in-memory connection: warden's channel on one end, the script on the other."""

    def __init__(self, script: Script, max_message_size: int) -> None:
        ours, theirs = trio.testing.memory_stream_pair()
        self.channel = MessageChannel(ours, ours, name="memory", max_message_size=max_message_size)
        self.server = ScriptedServer(theirs)
        self._theirs = theirs
        self._script = script
        self._ended = trio.Event()
        self.label = "in-memory server"

    def start_side_tasks(self, nursery: trio.Nursery) -> None:
        nursery.start_soon(self.channel.serve_writer)
        nursery.start_soon(self._run)

    async def _run(self) -> None:
        try:
            await self._script(self.server)
        finally:
            await self._theirs.aclose()
            self._ended.set()

    async def wait_ended(self) -> str:
        await self._ended.wait()
        return "the scripted server ended"

    async def stop(self, *, graceful: bool) -> None:
        with trio.CancelScope(shield=True):
            await self.channel.aclose_send()


class MemoryConnector:
    """A :class:`~warden.upstream.connection.Connector` whose every connection runs ``script`` in process."""

    def __init__(self, script: Script, max_message_size: int = 1 << 20) -> None:
        self._script = script
        self._max = max_message_size
        self.connections: list[MemoryConnection] = []

    async def connect(self) -> MemoryConnection:
        connection = MemoryConnection(self._script, self._max)
        self.connections.append(connection)
        return connection


class ScriptedHost:
    """The host's end of the stdio face, in memory."""

    def __init__(self, stream: trio.testing.StapledStream[Any, Any], face: StdioHost | None = None) -> None:
        self._server = ScriptedServer(stream)
        self._stream = stream
        self.face = face
        """The stdio face this host talks to (its :meth:`~warden.gateway.stdio.StdioHost.statistics`)."""
        self.seen = self._server.seen
        self._answers: dict[str, dict[str, Any]] = {}

    async def close(self) -> None:
        """Close the host's side, as a host that exits does."""
        await self._stream.aclose()

    async def request(self, id_: object, method: str, params: dict[str, Any] | None = None) -> None:
        await self._server.send({"id": id_, "method": method, **({"params": params} if params is not None else {})})

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        await self._server.send({"method": method, **({"params": params} if params is not None else {})})

    async def send_raw(self, data: bytes) -> None:
        """Write bytes as they are (for hostile input)."""
        await self._server.send_raw(data)

    async def receive(self) -> dict[str, Any] | None:
        """The next message warden sends the host (None at the end)."""
        return await self._server.receive()

    async def send(self, message: dict[str, Any]) -> None:
        """Send any message (an answer to warden's question, say)."""
        await self._server.send(message)

    async def response(self, id_: object) -> dict[str, Any]:
        """The answer to ``id_``. Answers to other ids that arrive first are kept for their own ``response`` call
        (concurrent requests are answered in any order); requests and notifications on the way are skipped."""
        key = json.dumps(id_)
        while key not in self._answers:
            message = await self._server.receive()
            assert message is not None, f"warden closed the host's stream before answering {id_!r}"
            if "id" in message and "method" not in message:
                self._answers[json.dumps(message["id"])] = message
        return self._answers.pop(key)

    async def initialize(self) -> dict[str, Any]:
        await self.request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                             "clientInfo": {"name": "scripted-host", "version": "1"}})
        answer = await self.response(0)
        await self.notify("notifications/initialized")
        return answer


async def start_gateway(tmp: Path, connector: Connector, nursery: trio.Nursery, *, options: UpstreamOptions,
                        user_policy: str = "", name: str = "scripted", start: bool = True,
                        on_new: str = "tofu", store: PinStore | None = None,
                        log: audit.AuditLog | None = None) -> Gateway:
    """warden's real gateway and upstream (started in ``nursery`` unless not ``start``) in front of ``connector``,
    trusting on first use unless ``on_new`` says otherwise, recording to ``log`` (default: audit off; the audit log
    has its own batteries).
    ``user_policy`` is TOML appended to the user policy after its ``[defaults]`` table (a
    ``[defaults.capabilities]`` table, say); ``store`` is a pin store to share (default: one of its own)."""
    state = tmp / "state"
    state.mkdir(mode=0o700, exist_ok=True)
    user = f'[defaults]\non_new = "{on_new}"\n{user_policy}\n'
    policy = policy_from(tmp, user=user).server(name, (name,))
    guard = Guard(policy=policy, store=store or PinStore(state), manifest={"command": [name]})
    recorder = Recorder(log, server=name, server_id=guard.identity, policy_digest=guard.policy.digest,
                        sandbox_digest="sha256:" + "0" * 64, detail=guard.policy.audit_arguments.value)
    await recorder.pins(await guard.observe_identity())
    gateway = Gateway(name=name, guard=guard, recorder=recorder, signer=StateSigner(b"k" * 32),
                      background=nursery, question_timeout=options.request_timeout)
    upstream = Upstream(name=name, connector=connector, handler=gateway, options=options)
    gateway.bind(upstream)
    if start:
        await nursery.start(upstream.run)
    return gateway


@asynccontextmanager
async def gateway_in_process(tmp: Path, script: Script, *,
                             options: UpstreamOptions | None = None, user_policy: str = "",
                             log: audit.AuditLog | None = None) -> AsyncIterator[tuple[ScriptedHost, MemoryConnector]]:
    """warden's real gateway (:func:`start_gateway`, recording to ``log``) between ``script`` (the server) and a
    scripted host on the stdio face."""
    options = options or UpstreamOptions()
    connector = MemoryConnector(script, options.max_message_size)
    host_side, warden_side = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        gateway = await start_gateway(tmp, connector, nursery, options=options, user_policy=user_policy, log=log)
        channel = MessageChannel(warden_side, warden_side, name="host")
        face = StdioHost(channel, gateway, question_timeout=options.max_request_time)
        nursery.start_soon(channel.serve_writer)
        nursery.start_soon(face.serve)
        yield ScriptedHost(host_side, face), connector
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def hub_in_process(tmp: Path, scripts: dict[str, Script], *, options: UpstreamOptions | None = None,
                         list_wait: float = 10.0, on_new: str = "tofu", user_policy: str = "") -> AsyncIterator[
                             tuple[ScriptedHost, Hub, dict[str, MemoryConnector]]]:
    """``warden serve``'s hub in front of one real gateway per script (named by its key), sharing one pin store
    as ``warden serve``'s do, each upstream started by the hub on first use, with a scripted host on the stdio
    face. ``user_policy`` is as for :func:`start_gateway`."""
    options = options or UpstreamOptions()
    connectors = {name: MemoryConnector(script, options.max_message_size) for name, script in scripts.items()}
    host_side, warden_side = trio.testing.memory_stream_pair()
    (tmp / "state").mkdir(mode=0o700, exist_ok=True)
    store = PinStore(tmp / "state")
    async with trio.open_nursery() as nursery:
        members = [Member(name, await start_gateway(tmp, connector, nursery, options=options, name=name,
                                                    start=False, on_new=on_new, store=store,
                                                    user_policy=user_policy))
                   for name, connector in connectors.items()]
        for member in members:
            member.gateway.guard.namespaced = True
            await member.gateway.watch_pins()  # as warden serve's gateways do
        hub = Hub(members, background=nursery, list_wait=list_wait)
        channel = MessageChannel(warden_side, warden_side, name="host")
        face = StdioHost(channel, hub, question_timeout=options.max_request_time)
        nursery.start_soon(channel.serve_writer)
        nursery.start_soon(face.serve)
        yield ScriptedHost(host_side), hub, connectors
        nursery.cancel_scope.cancel()
