"""The stdio face: one host on a pair of pipes (warden's own stdin/stdout under ``warden run``).

The host's messages go through its link's session engine (:class:`~warden.protocol.session.Session`), which
refuses a request id already in flight, maps the host's ``notifications/cancelled`` to the request it names (whose
answer it then suppresses), and settles the host's answers to warden's questions. Each request runs in its own
task, so a slow tool never blocks the others. Unreadable input is answered with the JSON-RPC error that fits when
its id can be found, and otherwise dropped and logged.
"""

from __future__ import annotations

import logging
from typing import final

import trio

from warden.errors import RemoteProtocolError
from warden.gateway.link import HostLink, Served
from warden.protocol.messages import INVALID_REQUEST, decode_object, encode_error
from warden.protocol.session import (
    Answered,
    Cancelled,
    Dropped,
    Event,
    IncomingNotification,
    IncomingRequest,
    InvalidIncoming,
    Reply,
)
from warden.transport.channel import MessageChannel

log = logging.getLogger(__name__)


@final
class StdioHost:
    """Serve the host on ``channel``. :meth:`serve` returns when the host closes its side."""

    def __init__(self, channel: MessageChannel, gateway: Served, *, question_timeout: float = 600.0) -> None:
        self._channel = channel
        self._gateway = gateway
        self.link = HostLink("host", question_timeout=question_timeout)
        self.link.unsolicited = channel
        self._tasks: dict[tuple[str, object], trio.CancelScope] = {}

    async def serve(self) -> None:
        self._gateway.attach(self.link)
        session = self.link.session
        try:
            async with trio.open_nursery() as nursery:
                while True:
                    batch = await self._channel.receive_batch()
                    if not batch:
                        break
                    for message in batch:
                        for event in session.receive(message, now=trio.current_time()):
                            await self._on_event(event, nursery)
                nursery.cancel_scope.cancel()
        finally:
            self._gateway.detach(self.link)

    async def _on_event(self, event: Event, nursery: trio.Nursery) -> None:
        if isinstance(event, IncomingRequest):
            self._start(event, nursery)
        elif isinstance(event, Cancelled):
            scope = self._tasks.get(event.key)
            if scope is not None:
                scope.cancel()  # PX19: the upstream request is cancelled as the task unwinds
        elif isinstance(event, IncomingNotification):
            if event.notification.method != "notifications/cancelled":  # one for no request in flight: nothing
                await self._gateway.host_notification(event.notification, self.link)
        elif isinstance(event, Answered | Dropped):
            self.link.settled(event)
        elif isinstance(event, InvalidIncoming):
            await self._on_invalid(event)

    def _start(self, event: IncomingRequest, nursery: trio.Nursery) -> None:
        request = event.request
        if request.method == "initialize":
            try:
                self.link.accept_initialize(decode_object(request.params))
            except RemoteProtocolError as exc:
                error = self.link.session.respond(event.key, request.id,
                                                  encode_error(request.id, exc.jsonrpc_code, exc.message))
                if error is not None:
                    nursery.start_soon(self._send, error)
                return
            self._gateway.expect_legacy_host()  # this face has one host, and it is a legacy one
        scope = trio.CancelScope()
        self._tasks[event.key] = scope
        nursery.start_soon(self._run, event, scope)

    async def _run(self, event: IncomingRequest, scope: trio.CancelScope) -> None:
        response: bytes | None = None
        with scope:
            try:
                response = await self._gateway.handle(event.request, self.link, self._channel)
            finally:
                self._tasks.pop(event.key, None)
        answer = self.link.session.respond(event.key, event.request.id, response or b"")
        if response is not None and answer is not None and not scope.cancelled_caught:
            await self._send(answer)
        # A request the host cancelled gets no response.

    async def _on_invalid(self, event: InvalidIncoming) -> None:
        message = event.invalid
        log.warning("invalid message from the host: %s", message.reason)
        if event.answer is not None:
            await self._send(event.answer)
        elif message.id is not None and not message.is_request:
            # An unreadable answer to a question warden asked: the question fails now, not at its timeout.
            self.link.answer(message.id, Reply.failure(INVALID_REQUEST,
                                                       f"the client sent an invalid response: {message.reason}"))

    async def _send(self, message: bytes) -> None:
        try:
            await self._channel.send(message)
        except trio.ClosedResourceError:
            log.debug("host went away before a message could be sent")
