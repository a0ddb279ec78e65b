"""The stdio face: one host on a pair of pipes (warden's own stdin/stdout under ``warden run``).

Reads the host's messages, runs each request in its own task (so a slow tool never blocks the others), maps the
host's ``notifications/cancelled`` to that task, and hands the host's answers to questions back to its
:class:`~warden.gateway.core.HostLink`. Unreadable input is answered with the JSON-RPC error that fits when its id
can be found, and otherwise dropped and logged.
"""

from __future__ import annotations

import logging
from typing import final

import trio

from warden.errors import RemoteProtocolError
from warden.gateway.core import Gateway
from warden.gateway.link import HostLink
from warden.protocol.messages import (
    INVALID_REQUEST,
    ErrorResponse,
    Invalid,
    Notification,
    Request,
    Response,
    decode_json,
    decode_object,
    encode_error,
    id_key,
)
from warden.transport.channel import MessageChannel
from warden.upstream.connection import Reply

log = logging.getLogger(__name__)


@final
class StdioHost:
    """Serve the host on ``channel``. :meth:`serve` returns when the host closes its side."""

    def __init__(self, channel: MessageChannel, gateway: Gateway, *, question_timeout: float = 600.0) -> None:
        self._channel = channel
        self._gateway = gateway
        self.link = HostLink("host", question_timeout=question_timeout)
        self.link.unsolicited = channel
        self._tasks: dict[tuple[str, object], trio.CancelScope] = {}

    async def serve(self) -> None:
        self._gateway.attach(self.link)
        try:
            async with trio.open_nursery() as nursery:
                while True:
                    batch = await self._channel.receive_batch()
                    if not batch:
                        break
                    for message in batch:
                        if isinstance(message, Request):
                            self._start(message, nursery)
                        elif isinstance(message, Notification):
                            await self._on_notification(message)
                        elif isinstance(message, Response):
                            self.link.answer(message.id, Reply(result=message.result))
                        elif isinstance(message, ErrorResponse):
                            if message.id is not None:
                                self.link.answer(message.id, Reply(error=message.error, code=message.code,
                                                                   message=message.message))
                        else:
                            await self._on_invalid(message)
                nursery.cancel_scope.cancel()
        finally:
            self._gateway.detach(self.link)

    def _start(self, request: Request, nursery: trio.Nursery) -> None:
        key = id_key(decode_json(request.id))
        if key in self._tasks:
            nursery.start_soon(self._send, encode_error(request.id, INVALID_REQUEST, "request id already in use"))
            return
        if request.method == "initialize":
            try:
                self.link.accept_initialize(decode_object(request.params))
            except RemoteProtocolError as exc:
                nursery.start_soon(self._send, encode_error(request.id, exc.jsonrpc_code, exc.message))
                return
        scope = trio.CancelScope()
        self._tasks[key] = scope
        nursery.start_soon(self._run, request, key, scope)

    async def _run(self, request: Request, key: tuple[str, object], scope: trio.CancelScope) -> None:
        response: bytes | None = None
        with scope:
            try:
                response = await self._gateway.handle(request, self.link, self._channel)
            finally:
                self._tasks.pop(key, None)
        if response is not None and not scope.cancelled_caught:
            await self._send(response)
        # A request the host cancelled gets no response.

    async def _on_notification(self, note: Notification) -> None:
        if note.method == "notifications/cancelled":
            scope = self._tasks.get(id_key(decode_object(note.params).get("requestId")))
            if scope is not None:
                scope.cancel()  # PX19: the upstream request is cancelled as the task unwinds
            return
        await self._gateway.host_notification(note, self.link)

    async def _on_invalid(self, message: Invalid) -> None:
        id_raw, is_request, code, reason = message.id, message.is_request, message.code, message.reason
        log.warning("invalid message from the host: %s", reason)
        if id_raw is None:
            return
        if is_request:
            await self._send(encode_error(id_raw, code, reason))
        else:  # an unreadable answer to a question warden asked: the question fails now, not at its timeout
            self.link.answer(id_raw, Reply.failure(INVALID_REQUEST, f"the client sent an invalid response: {reason}"))

    async def _send(self, message: bytes) -> None:
        try:
            await self._channel.send(message)
        except trio.ClosedResourceError:
            log.debug("host went away before a message could be sent")
