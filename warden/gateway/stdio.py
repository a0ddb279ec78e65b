"""The stdio face: one host on a pair of pipes (warden's own stdin/stdout under ``warden run``).

The host's messages go through its link's session engine (:class:`~warden.protocol.session.Session`), which
refuses a request id already in flight, maps the host's ``notifications/cancelled`` to the request it names (whose
answer it then suppresses), and settles the host's answers to warden's questions. A call the gateway can forward at
once takes the engine-driven path (:meth:`~warden.gateway.link.Served.start`): decided in this reader, answered
from the server's, no task of its own. Any other request runs in its own task, so a slow tool never blocks the
others. Unreadable input is answered with the JSON-RPC error that fits when its id can be found, and otherwise
dropped and logged.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import final

import trio

from warden.errors import RemoteProtocolError
from warden.gateway.link import After, Handled, HostLink, Served, Started
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
from warden.transport.channel import MessageChannel, dispatch, flush_held

log = logging.getLogger(__name__)


@final
@dataclass(frozen=True, slots=True)
class StdioStatistics:
    """How the host's requests were carried: ``inline`` on the engine-driven path, ``tasks`` each in a task of its
    own; ``in_flight``: engine-driven requests not answered yet."""

    inline: int
    tasks: int
    in_flight: int


@final
class _Call:
    """One request of the host on the engine-driven path: where its response goes (:class:`~warden.gateway.link.
    Answer`), and what the host's cancellation reaches."""

    __slots__ = ("_event", "_host", "answered", "started")

    def __init__(self, host: StdioHost, event: IncomingRequest) -> None:
        self._host = host
        self._event = event
        self.answered = False
        self.started: Started | None = None

    def _respond(self, response: bytes) -> bytes | None:
        """The answer to write (None: the host cancelled the request, PX19), and the call forgotten."""
        self.answered = True
        self.started = None  # the gateway's side holds this call: no cycle is left behind
        self._host.forget(self._event.key)
        return self._host.link.session.respond(self._event.key, self._event.request.id, response)

    async def send(self, response: bytes, *, hold: bool = False, after: After | None = None) -> None:
        answer = self._respond(response)
        if answer is not None:
            await self._host.send(answer, hold=hold, after=after)
        elif after is not None:
            after()

    def send_soon(self, response: bytes, *, after: After | None = None) -> None:
        answer = self._respond(response)
        if answer is not None:
            self._host.send_soon(answer, after=after)
        elif after is not None:
            after()

    async def cancel(self) -> None:
        started = self.started
        self._respond(b"")
        if started is not None:
            await started.cancel()


@final
class StdioHost:
    """Serve the host on ``channel``. :meth:`serve` returns when the host closes its side."""

    def __init__(self, channel: MessageChannel, gateway: Served, *, question_timeout: float = 600.0) -> None:
        self._channel = channel
        self._gateway = gateway
        self.link = HostLink("host", question_timeout=question_timeout)
        self.link.unsolicited = channel
        self._tasks: dict[tuple[str, object], trio.CancelScope] = {}
        self._calls: dict[tuple[str, object], _Call] = {}
        self._nursery: trio.Nursery | None = None
        self._inline = 0
        self._tasked = 0

    def statistics(self) -> StdioStatistics:
        return StdioStatistics(self._inline, self._tasked, len(self._calls))

    async def serve(self) -> None:
        self._gateway.attach(self.link)
        session = self.link.session
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                try:
                    await dispatch(self._channel, session, lambda event: self._on_event(event, nursery))
                finally:
                    self._nursery = None
                    with trio.CancelScope(shield=True):
                        for call in list(self._calls.values()):  # the host left: its calls end as cancelled
                            await call.cancel()
                nursery.cancel_scope.cancel()
        finally:
            self._gateway.detach(self.link)

    async def _on_event(self, event: Event, nursery: trio.Nursery) -> None:
        if isinstance(event, IncomingRequest):
            await self._start(event, nursery)
        elif isinstance(event, Cancelled):
            scope = self._tasks.get(event.key)
            if scope is not None:
                scope.cancel()  # PX19: the upstream request is cancelled as the task unwinds
            call = self._calls.get(event.key)
            if call is not None:
                await call.cancel()  # PX19: cancelled upstream; the host gets no answer
        elif isinstance(event, IncomingNotification):
            if event.notification.method != "notifications/cancelled":  # one for no request in flight: nothing
                flush_held()  # the handler may wait: what this batch forwarded so far does not wait with it
                await self._gateway.host_notification(event.notification, self.link)
        elif isinstance(event, Answered | Dropped):
            self.link.settled(event)
        elif isinstance(event, InvalidIncoming):
            await self._on_invalid(event)

    async def _start(self, event: IncomingRequest, nursery: trio.Nursery) -> None:
        request = event.request
        if request.method == "initialize":
            try:
                self.link.accept_initialize(decode_object(request.params))
            except RemoteProtocolError as exc:
                error = self.link.session.respond(event.key, request.id,
                                                  encode_error(request.id, exc.jsonrpc_code, exc.message))
                if error is not None:
                    nursery.start_soon(self.send, error)
                return
            self._gateway.expect_legacy_host()  # this face has one host, and it is a legacy one
        else:
            call = _Call(self, event)
            self._calls[event.key] = call
            started = await self._gateway.start(request, self.link, self._channel, call)
            if started is not None:
                self._inline += 1
                if not call.answered:
                    call.started = started
                return
            self.forget(event.key)
        self._tasked += 1
        scope = trio.CancelScope()
        self._tasks[event.key] = scope
        nursery.start_soon(self._run, event, scope)

    def forget(self, key: tuple[str, object]) -> None:
        """An engine-driven call was answered or cancelled."""
        self._calls.pop(key, None)

    async def _run(self, event: IncomingRequest, scope: trio.CancelScope) -> None:
        response: Handled | None = None
        with scope:
            try:
                response = await self._gateway.handle(event.request, self.link, self._channel)
            finally:
                self._tasks.pop(event.key, None)
        answer = self.link.session.respond(event.key, event.request.id, response.message if response else b"")
        if response is not None and answer is not None and not scope.cancelled_caught:
            await self.send(answer, after=response.after)
        elif response is not None and response.after is not None:
            response.after()  # a request the host cancelled gets no response

    async def _on_invalid(self, event: InvalidIncoming) -> None:
        message = event.invalid
        log.warning("invalid message from the host: %s", message.reason)
        if event.answer is not None:
            await self.send(event.answer)
        elif message.id is not None and not message.is_request:
            # An unreadable answer to a question warden asked: the question fails now, not at its timeout.
            self.link.answer(message.id, Reply.failure(INVALID_REQUEST,
                                                       f"the client sent an invalid response: {message.reason}"))

    async def send(self, message: bytes, *, hold: bool = False, after: After | None = None) -> None:
        """Write one message to the host (a host that went away loses it, logged); ``hold``, ``after``: see
        :meth:`MessageChannel.send` (the sender's reader flushes; ``after`` runs once it is written)."""
        try:
            await self._channel.send(message, hold=hold, after=after)
        except trio.ClosedResourceError:
            log.debug("host went away before a message could be sent")

    def send_soon(self, message: bytes, *, after: After | None = None) -> None:
        """:meth:`send` from code that must not wait (a server connection torn down under engine-driven calls):
        a task of this face's nursery, if the face still serves."""
        if self._nursery is not None:
            self._nursery.start_soon(functools.partial(self.send, message, after=after))
        elif after is not None:
            after()
