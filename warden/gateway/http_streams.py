"""The messages of one HTTP response stream, held so the host can read them live or, in the legacy era, resume.

A request's messages (progress, logs, questions, then its response) are produced by the gateway task serving it
and consumed by whatever HTTP response is writing them out. The two are decoupled by an :class:`EventLog`:

* producers never wait on the network: :meth:`EventLog.send` appends and returns, so a slow or vanished host
  cannot stall the upstream side. Memory is bounded: past ``max_bytes`` the oldest events are dropped, and a
  reader that had not reached them learns it (:class:`StreamGap`) instead of silently missing a message;
* a legacy (2025) stream has an id, and each event an SSE ``id`` of the form ``<stream>-<n>``. When the host's
  connection breaks, the request goes on (a disconnect is not a cancellation in that era) and the events wait
  here; a ``GET`` with ``Last-Event-ID: <stream>-<n>`` reattaches a reader after event ``n`` (SEP-1699);
* a 2026 stream has no id: there is no resumption, and closing the response cancels the request.

Only one reader reads a log at a time; a second :meth:`EventLog.attach` is refused.
"""

from __future__ import annotations

import collections
from typing import Final, final

import trio

from warden.errors import RemoteProtocolError
from warden.protocol.sse import encode_event

__all__ = ["EventLog", "StreamGap"]

_MAX_RETAINED_EVENTS: Final = 4096


class StreamGap(RemoteProtocolError):
    """A reader asked for events the log no longer holds (it fell too far behind, or resumed too late)."""


@final
class EventLog:
    """One response stream's events, in order, with a bounded replay window. Is a gateway ``Sink``."""

    def __init__(self, stream_id: str | None, *, max_bytes: int) -> None:
        self.stream_id = stream_id
        self._max_bytes = max_bytes
        self._events: collections.deque[tuple[int, bytes]] = collections.deque()
        self._bytes = 0
        self._last = 0  # sequence number of the newest event appended
        self._changed = trio.Event()
        self.response: bytes | None = None
        """The final JSON-RPC response, once :meth:`finish` gave one."""
        self.done = False
        """No more events will come: the response was appended, or the request ended without one."""
        self.closed = False
        """The log was abandoned (session ended, request cancelled): senders get ``ClosedResourceError``."""
        self.attached = False
        self.messages = 0
        """How many messages (not counting the response) were sent."""
        self.done_at: float | None = None

    # -- producing ----------------------------------------------------------------------------------------------

    async def send(self, message: bytes) -> None:
        """Append one message. Raises ``trio.ClosedResourceError`` once the log was closed or finished."""
        if self.closed or self.done:
            raise trio.ClosedResourceError("the response stream has ended")
        self.messages += 1
        self._append(message)
        await trio.lowlevel.checkpoint()

    def finish(self, response: bytes | None) -> None:
        """The request ended: append its response (None: it was cancelled and gets none) and mark the log done."""
        if self.done or self.closed:
            return
        if response is not None:
            self.response = response
            self._append(response)
        self.done = True
        self.done_at = trio.current_time()
        self._wake()

    def close(self) -> None:
        """Abandon the log: readers end now, senders are refused."""
        self.closed = True
        self.done = True
        if self.done_at is None:
            self.done_at = trio.current_time()
        self._wake()

    def _append(self, message: bytes) -> None:
        self._last += 1
        self._events.append((self._last, message))
        self._bytes += len(message)
        while len(self._events) > 1 and (self._bytes > self._max_bytes or len(self._events) > _MAX_RETAINED_EVENTS):
            _, dropped = self._events.popleft()
            self._bytes -= len(dropped)
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # -- consuming ----------------------------------------------------------------------------------------------

    @property
    def last(self) -> int:
        """The sequence number of the newest event (0 before the first)."""
        return self._last

    def only_response(self) -> bytes | None:
        """The response, if the log is done and the response is all it ever held (then it can go out as JSON)."""
        if self.done and self.messages == 0:
            return self.response
        return None

    def attach(self) -> None:
        if self.attached:
            raise RuntimeError("the response stream already has a reader")
        self.attached = True

    def detach(self) -> None:
        self.attached = False

    async def wait_beyond(self, position: int) -> None:
        """Wait until an event after ``position`` exists or the log is done."""
        while self._last <= position and not self.done:
            await self._changed.wait()

    def events_after(self, position: int) -> list[tuple[int, bytes]]:
        """The events after ``position`` (the sequence number a reader has reached).

        Raises:
            StreamGap: some of them were already dropped from the replay window.
        """
        if position >= self._last:
            return []
        first = self._events[0][0] if self._events else self._last + 1
        if position + 1 < first:
            raise StreamGap(f"events {position + 1}..{first - 1} of the stream are no longer held")
        return [(seq, message) for seq, message in self._events if seq > position]

    def event_id(self, position: int) -> str | None:
        return None if self.stream_id is None else f"{self.stream_id}-{position}"

    def encode(self, seq: int, message: bytes) -> bytes:
        """The SSE form of one event: its id (legacy streams) and the message as ``data``."""
        return encode_event(message.decode("utf-8"), id=self.event_id(seq))
