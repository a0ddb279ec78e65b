"""The JSON-RPC session engine: one per connection, on either side of it, with no I/O.

Like h11's ``Connection``, :class:`Session` does not know whether warden is the client (an upstream link) or the
server (a host face): both send requests (warden's to a server; warden's questions to a host) and both receive
them. It owns what those two cases share and what used to be written once per side:

- **ids**: every request warden sends gets an id from this session's own counter, formatted by the side
  (``1, 2, ...`` upstream; ``"warden-1"`` for questions to a host), so id spaces never meet (invariant 9);
- **the pending table**: a response settles exactly the request it names; a response to an id warden never sent,
  or already settled, is dropped and reported as :class:`Dropped`, never routed;
- **deadlines**: taken from ``now`` arguments (no clock here), pushed out by ``notifications/progress`` for the
  request's token, never past the request's hard maximum (MS06); :meth:`Session.expire` hands back what ran out
  and :meth:`Session.next_deadline` tells the one timer when to look again;
- **cancellation**: a request warden gives up on yields the ``notifications/cancelled`` to send (MS04/MS09),
  except ``initialize``, which is never cancelled (LC09: the connection is closed instead);
- **the peer's requests**: a request id already in flight is refused; the peer's ``notifications/cancelled``
  cancels one, and its answer is then suppressed (PX19: a cancelled request gets no response).

Callers feed it messages (:meth:`Session.receive`) or raw bytes (:meth:`Session.receive_data`, framed by
:class:`~warden.protocol.framing.LineFramer`), and write the bytes its ``send_*`` methods return. What a request
waits with is the caller's business: each pending entry carries an opaque ``waiter`` (a trio event, a
continuation) that the engine hands back in the event that settles it.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar, final

import msgspec

from warden.protocol.framing import DEFAULT_MAX_MESSAGE_SIZE, LineFramer, Oversized
from warden.protocol.messages import (
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    ErrorResponse,
    Invalid,
    Message,
    Notification,
    Request,
    Response,
    decode_json,
    decode_object,
    encode_error,
    encode_error_object,
    encode_json,
    encode_notification,
    encode_request,
    encode_result,
    error_object,
    id_key,
    parse_message,
    scan_prefix,
)

__all__ = [
    "Answered",
    "Cancelled",
    "Dropped",
    "Event",
    "Expired",
    "IncomingNotification",
    "IncomingRequest",
    "InvalidIncoming",
    "Pending",
    "Progress",
    "Reply",
    "Session",
    "numeric_ids",
    "string_ids",
]

W = TypeVar("W")

REMEMBERED_CANCELLED: Final = 1024
"""How many ids of requests warden gave up on are remembered, so a late answer is reported as late, not unknown."""
KEPT_PROGRESS: Final = 4096
"""How many settled requests' progress tokens a session keeps routing (requests that became tasks, MS11); past
that the oldest is dropped (invariant 13)."""


@final
@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to a request: exactly one of ``result`` (raw object text) or ``error`` (raw error object)."""

    result: bytes | None = None
    error: bytes | None = None
    code: int = 0
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.result is not None

    def result_dict(self) -> dict[str, Any]:
        return decode_object(self.result)

    def error_data(self) -> object:
        if self.error is None:
            return None
        try:
            error = decode_json(self.error)
        except msgspec.DecodeError:
            return None
        return error.get("data") if isinstance(error, dict) else None

    def encode(self, id_raw: bytes) -> bytes:
        """This reply as the response to ``id_raw``."""
        if self.result is not None:
            return encode_result(id_raw, self.result)
        return encode_error_object(self.error or error_object(INTERNAL_ERROR, "error"), id_raw)

    @classmethod
    def from_result(cls, result: Any) -> Reply:
        return cls(result=encode_json(dict(result)))

    @classmethod
    def failure(cls, code: int, message: str, data: Any = None) -> Reply:
        return cls(error=error_object(code, message, data), code=code, message=message)


def numeric_ids(n: int) -> bytes:
    """Upstream ids: ``1``, ``2``, ... (a server's own requests to warden use whatever ids it likes)."""
    return b"%d" % n


def string_ids(n: int) -> bytes:
    """Ids of warden's questions to a host: ``"warden-1"`` (PX17), never confusable with the host's own."""
    return b'"warden-%d"' % n


@final
@dataclass(slots=True, eq=False)
class Pending(Generic[W]):
    """A request warden sent that awaits its answer."""

    id: bytes
    method: str
    deadline: float
    hard_deadline: float
    waiter: W
    token: str | None = None
    cancellable: bool = True

    @property
    def number(self) -> int | str:
        """The id as the peer sees it in ``requestId`` (a number upstream, a string to a host)."""
        value = decode_json(self.id)
        assert isinstance(value, (int, str))
        return value


# -- events -------------------------------------------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class Answered(Generic[W]):
    """A pending request got its answer."""

    pending: Pending[W]
    reply: Reply


@final
@dataclass(frozen=True, slots=True)
class Progress(Generic[W]):
    """``notifications/progress`` for a pending request (its deadline was already pushed out)."""

    pending: Pending[W]
    params: dict[str, Any]


@final
@dataclass(frozen=True, slots=True)
class Dropped:
    """An answer nobody waits for: to an id warden never sent, or to one already settled or given up on."""

    id: bytes
    why: str


@final
@dataclass(frozen=True, slots=True)
class IncomingRequest:
    """A request from the peer, now in flight under ``key`` until :meth:`Session.respond`."""

    request: Request
    key: tuple[str, object]


@final
@dataclass(frozen=True, slots=True)
class IncomingNotification:
    """A notification other than progress for, or cancellation of, something this session tracks."""

    notification: Notification


@final
@dataclass(frozen=True, slots=True)
class Cancelled:
    """The peer cancelled one of its requests that is in flight; its answer will be suppressed."""

    key: tuple[str, object]


@final
@dataclass(frozen=True, slots=True)
class InvalidIncoming:
    """An unreadable message. ``answer`` is the error response to send, when it was a request with an id."""

    invalid: Invalid
    answer: bytes | None


@final
@dataclass(frozen=True, slots=True)
class Expired(Generic[W]):
    """A pending request ran past its deadline. ``cancel`` is the notification to send, if any."""

    pending: Pending[W]
    cancel: bytes | None


Event = (Answered[Any] | Progress[Any] | Dropped | IncomingRequest | IncomingNotification | Cancelled
         | InvalidIncoming)


@final
@dataclass(slots=True)
class _Incoming:
    cancelled: bool = False


@final
class Session(Generic[W]):
    """One connection's JSON-RPC state. See the module docstring.

    Args:
        ids: formats warden's n-th request id (:func:`numeric_ids` or :func:`string_ids`).
        request_timeout: seconds a request may go without an answer or progress.
        max_request_time: seconds a request may take at all, progress or not.
        max_message_size: the framer's cap, for :meth:`receive_data`.
        progress_prefix: progress tokens are ``<prefix><id>``; None sends no tokens.
    """

    def __init__(self, *, ids: Callable[[int], bytes] = numeric_ids, request_timeout: float = 50.0,
                 max_request_time: float = 600.0, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
                 progress_prefix: str | None = "warden-") -> None:
        self._ids = ids
        self._count = 0
        self.request_timeout = request_timeout
        self.max_request_time = max_request_time
        self._progress_prefix = progress_prefix
        self._pending: dict[bytes, Pending[W]] = {}
        self._by_token: dict[str, Pending[W]] = {}
        self._kept: OrderedDict[str, Pending[W]] = OrderedDict()
        self._given_up: OrderedDict[bytes, None] = OrderedDict()
        self._incoming: dict[tuple[str, object], _Incoming] = {}
        self._timers: list[tuple[float, int, Pending[W]]] = []
        self._framer = LineFramer(max_message_size)
        self.closed: str | None = None

    # -- warden's requests --------------------------------------------------------------------------------------

    def send_request(self, method: str, params: dict[str, Any] | None, *, now: float, waiter: W,
                     timeout: float | None = None, progress: bool = True,
                     stream: bool = False) -> tuple[bytes, Pending[W]]:
        """Register a request and return its encoded message (no newline) and its pending entry.

        ``params`` is the object to send (None: no ``params`` member; ``{}`` is sent as it is;
        ``_meta.progressToken`` is added when ``progress``); ``stream`` marks a
        request that normally never gets an answer (``subscriptions/listen``, MS08): it has no deadline.
        """
        if self.closed is not None:
            raise ValueError("session is closed")
        self._count += 1
        id_raw = self._ids(self._count)
        token = None
        body = params
        if progress and self._progress_prefix is not None and method != "initialize":
            token = f"{self._progress_prefix}{self._count}"
            body = dict(params) if params else {}
            given = body.get("_meta")
            body["_meta"] = {**(given if isinstance(given, dict) else {}), "progressToken": token}
        hard = math.inf if stream else now + self.max_request_time
        deadline = math.inf if stream else min(now + (timeout or self.request_timeout), hard)
        pending = Pending(id_raw, method, deadline, hard, waiter, token, method != "initialize")
        self._pending[id_raw] = pending
        if token is not None:
            self._by_token[token] = pending
        self._arm(pending)
        return encode_request(id_raw, method, encode_json(body) if body is not None else None), pending

    def notification(self, method: str, params: dict[str, Any] | None = None) -> bytes:
        return encode_notification(method, encode_json(params) if params else None)

    def give_up(self, pending: Pending[W], reason: str) -> bytes | None:
        """Stop waiting for ``pending`` (its caller went away); returns the ``notifications/cancelled`` to send,
        or None when it was settled already or is ``initialize`` (LC09). A late answer is then :class:`Dropped`."""
        if self._pending.get(pending.id) is not pending:
            return None
        self._forget(pending)
        self._given_up[pending.id] = None
        while len(self._given_up) > REMEMBERED_CANCELLED:
            self._given_up.popitem(last=False)
        if not pending.cancellable or self.closed is not None:
            return None
        return encode_notification("notifications/cancelled",
                                   encode_json({"requestId": pending.number, "reason": reason}))

    def is_pending(self, pending: Pending[W]) -> bool:
        return self._pending.get(pending.id) is pending

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    # -- deadlines ----------------------------------------------------------------------------------------------

    def _arm(self, pending: Pending[W]) -> None:
        if pending.deadline != math.inf:
            heapq.heappush(self._timers, (pending.deadline, id(pending), pending))

    def next_deadline(self) -> float:
        """When :meth:`expire` next has something to do (``inf``: nothing pending with a deadline)."""
        timers = self._timers
        while timers:
            deadline, _, pending = timers[0]
            if self._pending.get(pending.id) is pending and pending.deadline == deadline:
                return deadline
            heapq.heappop(timers)  # settled, or pushed out by progress (a newer entry is in the heap)
        return math.inf

    def expire(self, now: float) -> list[Expired[W]]:
        """Every pending request whose deadline is at or before ``now``, given up with its cancellation."""
        expired: list[Expired[W]] = []
        while self.next_deadline() <= now:
            _, _, pending = heapq.heappop(self._timers)
            expired.append(Expired(pending, self.give_up(pending, "cancelled by warden (timeout)")))
        return expired

    # -- receiving ----------------------------------------------------------------------------------------------

    def receive_data(self, data: bytes, *, now: float) -> list[Event]:
        """Feed raw bytes of a newline-delimited stream (``b""`` is end of stream); return the events."""
        frames = self._framer.feed(data) if data else self._framer.close()
        events: list[Event] = []
        for frame in frames:
            if isinstance(frame, Oversized):
                id_raw, is_request = scan_prefix(frame.prefix)
                reason = f"message of {frame.size}+ bytes exceeds the {self._framer.max_message_size}-byte limit"
                message: Message = Invalid(INVALID_REQUEST, reason, id_raw, is_request, frame.prefix)
            else:
                message = parse_message(frame)
            events.extend(self.receive(message, now=now))
        return events

    def receive(self, message: Message, *, now: float) -> Iterator[Event]:
        """The events one parsed message makes (none for a progress token nobody waits on)."""
        if isinstance(message, Response):
            yield self.settle(message.id, Reply(result=message.result))
        elif isinstance(message, ErrorResponse):
            if message.id is None:
                yield Dropped(b"null", f"error without id: {message.message[:200]}")
            else:
                yield self.settle(message.id, Reply(error=message.error, code=message.code,
                                                     message=message.message))
        elif isinstance(message, Request):
            key = message.key()
            if key in self._incoming:
                yield InvalidIncoming(Invalid(INVALID_REQUEST, "request id already in use", message.id, True,
                                              message.raw[:64]),
                                      encode_error(message.id, INVALID_REQUEST, "request id already in use"))
                return
            self._incoming[key] = _Incoming()
            yield IncomingRequest(message, key)
        elif isinstance(message, Notification):
            yield from self._notification(message, now)
        else:
            yield self._invalid(message)

    def settle(self, id_raw: bytes, reply: Reply) -> Answered[W] | Dropped:
        """Settle the request ``id_raw`` with ``reply`` (an answer, or a failure the caller makes of an unreadable
        answer, so it fails now and not at its deadline); an id nobody waits on is :class:`Dropped`."""
        pending = self._pending.get(id_raw)
        if pending is None:
            # Invariant 9: a response to an id warden did not send (or already settled) is dropped, never routed.
            why = "late answer to a request warden gave up on" if id_raw in self._given_up \
                else "answer to an id warden did not send or already settled"
            return Dropped(id_raw, why)
        self._forget(pending)
        return Answered(pending, reply)

    def _notification(self, note: Notification, now: float) -> Iterator[Event]:
        if note.method == "notifications/progress":
            params = _params(note.params)
            token = params.get("progressToken")
            pending = self._by_token.get(token) if isinstance(token, str) else None
            if pending is not None:
                extended = min(max(pending.deadline, now + self.request_timeout), pending.hard_deadline)
                if extended != pending.deadline:
                    pending.deadline = extended
                    self._arm(pending)
                yield Progress(pending, params)
                return
            kept = self._kept.get(token) if isinstance(token, str) else None
            if kept is not None:
                yield Progress(kept, params)  # a request that became a task: no deadline left to push out
            return  # progress for a request this session no longer tracks has nowhere to go
        elif note.method == "notifications/cancelled":
            request_id = _params(note.params).get("requestId")
            key = id_key(request_id)
            incoming = self._incoming.get(key)
            if incoming is not None:
                incoming.cancelled = True
                yield Cancelled(key)
                return
            if isinstance(request_id, int) and not isinstance(request_id, bool):
                raw = b"%d" % request_id
            elif isinstance(request_id, str):
                raw = encode_json(request_id)
            else:
                raw = b""
            pending = self._pending.get(raw)
            if pending is not None:
                # MS30: a peer may end one of warden's requests (a listen stream) this way.
                self._forget(pending)
                yield Answered(pending, Reply.failure(CONNECTION_CLOSED, "the server ended the request"))
                return
        yield IncomingNotification(note)

    def _invalid(self, message: Invalid) -> Event:
        if message.id is None:
            return InvalidIncoming(message, None)
        if message.is_request:
            return InvalidIncoming(message, encode_error(message.id, message.code, message.reason))
        return InvalidIncoming(message, None)  # an unreadable answer: the caller fails it with :meth:`settle`

    # -- answering the peer -------------------------------------------------------------------------------------

    def respond(self, key: tuple[str, object], id_raw: bytes, reply: Reply | bytes) -> bytes | None:
        """The encoded answer to the peer's request ``key`` (a :class:`Reply`, or a whole encoded response), or
        None when the peer cancelled it (it gets no response) or it is not in flight."""
        incoming = self._incoming.pop(key, None)
        if incoming is None or incoming.cancelled:
            return None
        return reply if isinstance(reply, bytes) else reply.encode(id_raw)

    def in_flight(self, key: tuple[str, object]) -> bool:
        return key in self._incoming

    # -- the end ------------------------------------------------------------------------------------------------

    def close(self, reason: str) -> list[Answered[W]]:
        """The connection is gone: every pending request fails with ``reason``; nothing more is sent."""
        if self.closed is not None:
            return []
        self.closed = reason
        failed = [Answered(p, Reply.failure(CONNECTION_CLOSED, reason)) for p in self._pending.values()]
        self._pending.clear()
        self._by_token.clear()
        self._timers.clear()
        self._incoming.clear()
        return failed

    def keep_progress(self, pending: Pending[W]) -> None:
        """Keep routing ``notifications/progress`` for a settled request's token (MS11: the request became a task,
        and its token stays valid until the task ends) until :meth:`drop_progress`. Bounded by
        :data:`KEPT_PROGRESS`, oldest dropped first."""
        if pending.token is None:
            return
        self._kept[pending.token] = pending
        while len(self._kept) > KEPT_PROGRESS:
            self._kept.popitem(last=False)

    def drop_progress(self, token: str) -> None:
        """Stop routing progress for ``token`` (its task ended); unknown tokens are ignored."""
        self._kept.pop(token, None)

    def _forget(self, pending: Pending[W]) -> None:
        del self._pending[pending.id]
        if pending.token is not None:
            self._by_token.pop(pending.token, None)
        if len(self._timers) > 2 * len(self._pending) + 64:  # settled entries leave the heap lazily: keep it small
            self._timers = [t for t in self._timers if self._pending.get(t[2].id) is t[2] and t[2].deadline == t[0]]
            heapq.heapify(self._timers)


def _params(raw: bytes | None) -> dict[str, Any]:
    try:
        return decode_object(raw)
    except (msgspec.DecodeError, TypeError):
        return {}
