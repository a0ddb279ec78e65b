"""A full-duplex channel of JSON-RPC messages over a pair of trio byte streams (a child's pipes, or warden's own
stdin/stdout).

Reading: chunks go through the :class:`~warden.protocol.framing.LineFramer` (hard size cap) and
:func:`~warden.protocol.messages.parse_message`; the caller gets every message of a chunk at once. A line over the
cap comes back as an :class:`~warden.protocol.messages.Invalid` like any other unreadable line, with the id found
in its first bytes, so callers handle one kind of bad input. On a pipe, the chunk is read with a non-blocking
``os.read`` and the reader waits for the pipe only when it is empty, so a reader that just waited does not pass
through the scheduler once more before reading (``FdStream.receive_some`` always does); a chunk that was there
already is handed over after a schedule point, so a peer that floods cannot keep other tasks from running.

Writing: when nothing is queued and the writer is idle, :meth:`MessageChannel.send` writes the message at once with
a non-blocking ``os.write`` on the pipe (the fast path: no task wakes up for it). Whatever the pipe does not take
(``EAGAIN``, a short write) goes to an outbox bounded in *bytes*, and one writer task drains everything queued into
a single write; while anything is queued every message queues behind it, so order is kept. A slow peer therefore
pushes back on whoever produces for it (the outbox fills and ``send`` waits), and memory stays bounded however fast
the other side floods. A single message larger than the budget still goes through on its own, so the bound is
budget + one maximum-size message. Streams without a file descriptor (in-memory streams in tests) always queue.

Holding: a reader that forwards or answers many messages of one chunk (16 calls in flight arrive ~10 to a read)
sends them with ``hold=True``: each is kept back, in order, and :func:`flush_held` (the reader calls it once it
has handled everything it read, and before anything that may wait) writes each channel's held messages with one
``os.write``, so the peer is woken once per chunk instead of once per message. Any other send on the channel, and
any queueing, writes or queues what is held first, so order is kept; what is held stays under ``HOLD_BYTES``.
A message may carry an ``after``: work that must not delay it (the gateway's outcome record), run once it is
written (or queued, or lost with a closed channel), after the write of what was held with it.
"""

from __future__ import annotations

import errno
import logging
import os
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol, final

import trio

from warden.errors import LocalProtocolError
from warden.protocol.framing import DEFAULT_MAX_MESSAGE_SIZE, LineFramer, Oversized
from warden.protocol.messages import INVALID_REQUEST, Invalid, Message, parse_message, scan_prefix
from warden.protocol.session import Event, Session
from warden.secrets import Redactor

log = logging.getLogger(__name__)

DEFAULT_OUTBOX_BYTES: Final = 8 * 1024 * 1024
READ_CHUNK: Final = 256 * 1024
HOLD_BYTES: Final = 256 * 1024
"""Held messages are written at once when they reach this many bytes."""

_HELD: Final[trio.lowlevel.RunVar[list[MessageChannel] | None]] = trio.lowlevel.RunVar("warden_held_channels",
                                                                                       default=None)
"""The channels of this run holding messages (:meth:`MessageChannel.send` with ``hold=True``)."""


def flush_held() -> None:
    """Write what every channel of this run holds. Readers that send with ``hold=True`` call it once they have
    handled everything they read, and before anything that may wait; flushing early is always safe."""
    held = _HELD.get()
    if held:
        channels = held.copy()
        held.clear()
        for channel in channels:
            channel.flush()


def _run(waiting: list[Callable[[], None]], after: Callable[[], None] | None) -> None:
    """What waited for messages just written (or queued, or lost with the channel): in the order they were sent."""
    for then in waiting:
        then()
    if after is not None:
        after()


class Batches(Protocol):
    """What :func:`dispatch` reads: a pipe's channel, or an HTTP connection's."""

    async def receive_batch(self) -> list[Message]: ...


async def dispatch(channel: Batches, session: Session[Any], on_event: Callable[[Event], Awaitable[None]]) -> None:
    """One side's reader (the host's face, or the upstream's): everything ``channel`` reads goes through
    ``session``, each event it makes to ``on_event``, until the channel's end. What the events held
    (``hold=True``: the calls forwarded, the answers settled) is written once per read, and at the end whatever
    happens."""
    try:
        while batch := await channel.receive_batch():
            for message in batch:
                for event in session.receive(message, now=trio.current_time()):
                    await on_event(event)
            flush_held()
    finally:
        flush_held()


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

    @property
    def idle(self) -> bool:
        """Nothing queued and the writer not in the middle of a write: a message may go straight to the pipe."""
        return not self._items and not self.writing and not self._closed

    writing = False

    async def put(self, data: bytes) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        while self._bytes and self._bytes + len(data) > self._limit and not self._closed:
            await self._space.park()
        if self._closed:
            raise trio.ClosedResourceError("channel is closed")
        self._items.append(data)
        self._bytes += len(data)
        self._data.unpark_all()

    def put_rest(self, data: bytes) -> None:
        """The unwritten rest of a message the fast path began: queued first, at once, whatever the budget."""
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


def _read_error(exc: OSError) -> trio.ClosedResourceError | trio.BrokenResourceError:
    """A failed read as ``FdStream.receive_some`` reports it: a closed descriptor, or a broken stream."""
    if exc.errno == errno.EBADF:
        return trio.ClosedResourceError("the stream was closed")
    return trio.BrokenResourceError(str(exc))


@final
class MessageChannel:
    """Messages in and out over two byte streams. Run :meth:`serve_writer` in a nursery while the channel is used.

    Args:
        name: for log lines ("host", "upstream time").
        max_message_size: the per-message cap on reading.
        outbox_bytes: the write-side budget.
        redactor: for a channel to a host, the process's secrets registry: :meth:`send` is that channel's one
            redaction point, so no message warden writes to the host (a forwarded result, an error, a logging
            notification, warden's own "the server exited" text) carries a registered value in clear.
    """

    def __init__(self, receive_stream: trio.abc.ReceiveStream, send_stream: trio.abc.SendStream, *, name: str,
                 max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
                 outbox_bytes: int = DEFAULT_OUTBOX_BYTES, redactor: Redactor | None = None) -> None:
        self.name = name
        self._redactor = redactor if redactor else None
        self._receive_stream = receive_stream
        self._send_stream = send_stream
        self._framer = LineFramer(max_message_size)
        self._outbox = _Outbox(outbox_bytes)
        self._eof = False
        fileno = getattr(send_stream, "fileno", None)
        self._fd: int | None = fileno() if callable(fileno) else None
        fileno = getattr(receive_stream, "fileno", None)
        self._read_fd: int | None = fileno() if callable(fileno) else None
        self._drained = False
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._after: list[Callable[[], None]] = []  # the ``after`` of held messages, run once they are written

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
                data = await (self._receive_stream.receive_some(READ_CHUNK) if self._read_fd is None
                              else self._read_pipe(self._read_fd))
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

    async def _read_pipe(self, fd: int) -> bytes:
        """The next chunk of a non-blocking pipe (``b""`` at its end), with one cancel point and one schedule point
        like any trio read: the wait when the pipe is empty, else a yield before the chunk is handed over. After a
        chunk shorter than asked for (the pipe was emptied) it waits first, sparing a read that would find nothing.

        Raises:
            trio.ClosedResourceError: the stream was closed under the reader.
            trio.BrokenResourceError: the read failed.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        waited = self._drained
        while True:
            try:
                if waited:
                    await trio.lowlevel.wait_readable(fd)
                data = os.read(fd, READ_CHUNK)
            except BlockingIOError:
                waited = True
                continue
            except OSError as exc:
                raise _read_error(exc) from exc
            if not waited:
                await trio.lowlevel.cancel_shielded_checkpoint()
            self._drained = len(data) < READ_CHUNK
            return data

    def _oversized(self, frame: Oversized) -> Invalid:
        id_raw, is_request = scan_prefix(frame.prefix)
        reason = f"message of {frame.size}+ bytes exceeds the {self._framer.max_message_size}-byte limit"
        return Invalid(INVALID_REQUEST, reason, id_raw, is_request, frame.prefix)

    def redact_with(self, redactor: Redactor) -> None:
        """Redact with ``redactor`` from the next message on (a wider registry: ``warden serve`` reloaded its
        config and a new server was handed values)."""
        self._redactor = redactor if redactor else None

    async def send(self, message: bytes, *, hold: bool = False, after: Callable[[], None] | None = None) -> None:
        """Write or queue one encoded message (without newline); waits while the outbox is over budget. With
        ``hold``, a message that would be written at once is kept back until :func:`flush_held` (or the next send
        that is not held) writes it with the others; a failure to write it then closes the channel, as the writer
        task's does. ``after`` (which must neither wait nor raise) runs once the message is written, queued or
        lost with the channel: never before, so nothing it does delays the message.

        Raises:
            trio.ClosedResourceError: the channel was closed or its writer failed.
        """
        if self._redactor is not None:
            message = self._redactor.wire(message)
        if b"\n" in message:
            raise LocalProtocolError("refusing to frame a message that contains a raw newline")
        data = message + b"\n"
        if self._fd is not None and self._outbox.idle:
            if hold:
                if not self._held:
                    held = _HELD.get()
                    if held is None:
                        held = []
                        _HELD.set(held)
                    held.append(self)
                self._held.append(data)
                self._held_bytes += len(data)
                if after is not None:
                    self._after.append(after)
                if self._held_bytes >= HOLD_BYTES:
                    self.flush()
                return
            waiting = self._after_held()
            try:
                self._write_now(self._fd, self._take_held(data) if self._held else data)
            finally:
                _run(waiting, after)
            return
        waiting = self._after_held()
        try:
            if self._held:
                self._outbox.put_rest(self._take_held(b""))  # what was held goes first
            await self._outbox.put(data)
        finally:
            _run(waiting, after)

    def _after_held(self) -> list[Callable[[], None]]:
        """The ``after`` of what is held, taken with it (run once it is written)."""
        waiting, self._after = self._after, []
        return waiting

    def _take_held(self, then: bytes) -> bytes:
        data = b"".join(self._held) + then
        self._held.clear()
        self._held_bytes = 0
        return data

    def _write_now(self, fd: int, data: bytes) -> None:
        """Write ``data`` with one non-blocking ``os.write``; the rest goes to the outbox, ahead of anything else.

        Raises:
            trio.ClosedResourceError: the peer stopped reading (the channel is closed).
        """
        try:
            written = os.write(fd, data)
        except BlockingIOError:
            written = 0
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.EBADF, errno.ECONNRESET):
                raise
            log.debug("%s: peer stopped reading", self.name)
            self._outbox.close()
            raise trio.ClosedResourceError("the peer stopped reading") from exc
        if written < len(data):
            self._outbox.put_rest(data[written:])  # never waits: a half-written message must not be left

    def flush(self) -> None:
        """Write (or, behind queued messages, queue) what this channel holds. Never waits and never raises: a
        peer that stopped reading closes the channel, and whoever sends next hears of it."""
        if not self._held:
            return
        waiting = self._after_held()
        data = self._take_held(b"")
        try:
            if self._fd is not None and self._outbox.idle:
                self._write_now(self._fd, data)
            else:
                self._outbox.put_rest(data)
        except trio.ClosedResourceError:
            log.debug("%s: %d held bytes not written: the channel is closed", self.name, len(data))
        finally:
            _run(waiting, None)

    async def serve_writer(self) -> None:
        """Drain the outbox into the send stream until closed. A broken pipe closes the channel quietly."""
        try:
            while True:
                items = await self._outbox.take_all()
                if items is None:
                    break
                self._outbox.writing = True
                try:
                    await self._send_stream.send_all(b"".join(items))
                finally:
                    self._outbox.writing = False
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            log.debug("%s: peer stopped reading", self.name)
        finally:
            self._outbox.close()

    def close_outbox(self) -> None:
        """Stop accepting messages; the writer flushes what is queued and returns."""
        self.flush()
        self._outbox.close()

    async def aclose_send(self) -> None:
        """Close the send stream (e.g. a child's stdin: the first step of a polite shutdown)."""
        self.flush()
        self._outbox.close()
        with trio.CancelScope(shield=True):
            await self._send_stream.aclose()
