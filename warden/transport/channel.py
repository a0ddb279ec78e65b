"""A full-duplex channel of JSON-RPC messages over a pair of trio byte streams (a child's pipes, or warden's own
stdin/stdout).

Reading: chunks go through the :class:`~warden.protocol.framing.LineFramer` (hard size cap) and
:func:`~warden.protocol.messages.parse_message`; the caller gets every message of a chunk at once. A line over the
cap comes back as an :class:`~warden.protocol.messages.Invalid` like any other unreadable line, with the id found
in its first bytes, so callers handle one kind of bad input.

Writing: :meth:`MessageChannel.send` puts a message in an outbox bounded in *bytes*, and one writer task drains
everything queued into a single write. A slow peer therefore pushes back on whoever produces for it (the outbox
fills and ``send`` waits), and memory stays bounded however fast the other side floods. A single message larger
than the budget still goes through on its own, so the bound is budget + one maximum-size message.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Final, final

import trio

from warden.errors import LocalProtocolError
from warden.protocol.framing import DEFAULT_MAX_MESSAGE_SIZE, LineFramer, Oversized
from warden.protocol.messages import INVALID_REQUEST, Invalid, Message, parse_message, scan_prefix

log = logging.getLogger(__name__)

DEFAULT_OUTBOX_BYTES: Final = 8 * 1024 * 1024
READ_CHUNK: Final = 256 * 1024


@final
class _Outbox:
    """FIFO of encoded messages, bounded in bytes; ``take_all`` hands the writer everything queued."""

    def __init__(self, limit: int) -> None:
        self._items: deque[bytes] = deque()
        self._bytes = 0
        self._limit = limit
        self._closed = False
        self._space = trio.lowlevel.ParkingLot()
        self._data = trio.lowlevel.ParkingLot()

    @property
    def queued_bytes(self) -> int:
        return self._bytes

    async def put(self, data: bytes) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        while self._bytes and self._bytes + len(data) > self._limit and not self._closed:
            await self._space.park()
        if self._closed:
            raise trio.ClosedResourceError("channel is closed")
        self._items.append(data)
        self._bytes += len(data)
        self._data.unpark_all()

    async def take_all(self) -> list[bytes] | None:
        """Everything queued, or None once closed and drained."""
        while not self._items:
            if self._closed:
                return None
            await self._data.park()
        items = list(self._items)
        self._items.clear()
        self._bytes = 0
        self._space.unpark_all()
        return items

    def close(self) -> None:
        self._closed = True
        self._data.unpark_all()
        self._space.unpark_all()


@final
class MessageChannel:
    """Messages in and out over two byte streams. Run :meth:`serve_writer` in a nursery while the channel is used.

    Args:
        name: for log lines ("host", "upstream time").
        max_message_size: the per-message cap on reading.
        outbox_bytes: the write-side budget.
    """

    def __init__(self, receive_stream: trio.abc.ReceiveStream, send_stream: trio.abc.SendStream, *, name: str,
                 max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
                 outbox_bytes: int = DEFAULT_OUTBOX_BYTES) -> None:
        self.name = name
        self._receive_stream = receive_stream
        self._send_stream = send_stream
        self._framer = LineFramer(max_message_size)
        self._outbox = _Outbox(outbox_bytes)
        self._eof = False

    @property
    def max_message_size(self) -> int:
        return self._framer.max_message_size

    async def receive_batch(self) -> list[Message]:
        """The messages of the next chunk; an empty list means end of stream. Never raises: an unreadable or
        oversized line comes back as an ``Invalid`` item."""
        while True:
            if self._eof:
                return []
            try:
                data = await self._receive_stream.receive_some(READ_CHUNK)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                self._eof = True
                frames = self._framer.close()
            else:
                frames = self._framer.feed(data)
            if frames or self._eof:
                break
        return [self._oversized(frame) if isinstance(frame, Oversized) else parse_message(frame) for frame in frames]

    def _oversized(self, frame: Oversized) -> Invalid:
        id_raw, is_request = scan_prefix(frame.prefix)
        reason = f"message of {frame.size}+ bytes exceeds the {self._framer.max_message_size}-byte limit"
        return Invalid(INVALID_REQUEST, reason, id_raw, is_request, frame.prefix)

    async def send(self, message: bytes) -> None:
        """Queue one encoded message (without newline); waits while the outbox is over budget.

        Raises:
            trio.ClosedResourceError: the channel was closed or its writer failed.
        """
        if b"\n" in message:
            raise LocalProtocolError("refusing to frame a message that contains a raw newline")
        await self._outbox.put(message)

    async def serve_writer(self) -> None:
        """Drain the outbox into the send stream until closed. A broken pipe closes the channel quietly."""
        try:
            while True:
                items = await self._outbox.take_all()
                if items is None:
                    break
                data = b"\n".join(items) + b"\n"
                await self._send_stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            log.debug("%s: peer stopped reading", self.name)
        finally:
            self._outbox.close()

    def close_outbox(self) -> None:
        """Stop accepting messages; the writer flushes what is queued and returns."""
        self._outbox.close()

    async def aclose_send(self) -> None:
        """Close the send stream (e.g. a child's stdin: the first step of a polite shutdown)."""
        self._outbox.close()
        with trio.CancelScope(shield=True):
            await self._send_stream.aclose()
