"""Server-Sent Events (the ``text/event-stream`` format, WHATWG HTML §9.2): a bounded parser and an encoder.

Streamable HTTP answers a request with either one JSON object or an event stream whose ``data`` fields each carry
one JSON-RPC message; legacy servers also send server-initiated messages, ``id`` (for ``Last-Event-ID``
resumption) and ``retry`` on it, and the 2024-11-05 HTTP+SSE transport announces its POST endpoint in an
``endpoint`` event. The parser follows the WHATWG processing model exactly - lines end in CRLF, LF or CR;
``:`` starts a comment; ``data`` lines join with LF; ``event`` names the type (``message`` by default); ``id``
sets the last event ID unless it holds NUL and outlives the event; ``retry`` takes ASCII digits only; a blank
line dispatches; an event cut off by the end of the stream is discarded - with three deliberate differences:

* it is bounded: the line being read plus the data already gathered for the current event may not exceed
  ``max_event_size`` bytes, so an oversized event is an error, never unbounded memory, and so is an overlong
  line, even a comment that would be ignored;
* text is strict UTF-8: a data, event or id value that is not UTF-8 is an error, not U+FFFD (a replacement
  character inside JSON would be silently wrong data, not a parse failure);
* a ``retry`` of more than 15 digits is ignored like any other invalid retry.

Pure: bytes in, :class:`SSEEvent` values out. The result does not depend on how the stream is split into chunks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, final

from warden.errors import LocalProtocolError, RemoteProtocolError
from warden.protocol.framing import DEFAULT_MAX_MESSAGE_SIZE

__all__ = [
    "DEFAULT_MAX_EVENT_SIZE",
    "SSEError",
    "SSEEvent",
    "SSEParser",
    "encode_comment",
    "encode_event",
]

DEFAULT_MAX_EVENT_SIZE: Final = DEFAULT_MAX_MESSAGE_SIZE + 64 * 1024
"""warden's default JSON-RPC message cap plus headroom for the ``data:`` prefixes and the other fields."""

_EOL: Final = re.compile(rb"[\r\n]")
_LINE_BREAK: Final = re.compile(r"\r\n|\r|\n")
_BOM: Final = b"\xef\xbb\xbf"
_MAX_RETRY_DIGITS: Final = 15


class SSEError(RemoteProtocolError):
    """The event stream broke the format or a bound: an oversized event or line, or a value that is not UTF-8.

    The parser that raised it stays broken; every later call raises too, so a stream is never resynchronised
    in the middle of an event.
    """


@final
@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event.

    ``event`` is the type (``message`` when the stream named none); ``data`` is the joined ``data`` lines;
    ``id`` is the last event ID in force when it was dispatched (``""`` when none was ever set); ``retry`` is the
    reconnection time in milliseconds given in this event's own block, if any.
    """

    data: str
    event: str = "message"
    id: str = ""
    retry: int | None = None


def _text(value: bytes, field: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SSEError(f"event stream {field} field is not valid UTF-8") from exc


@final
class SSEParser:
    """Turns the bytes of one ``text/event-stream`` body into :class:`SSEEvent` values, chunk by chunk.

    Feed it whatever the transport reads (:meth:`feed`); call :meth:`close` at the end of the body. Memory stays
    within a few times ``max_event_size`` whatever the peer sends. :attr:`last_event_id` and :attr:`retry` are
    what a reconnecting client sends as ``Last-Event-ID`` and waits before reconnecting.
    """

    def __init__(self, *, max_event_size: int = DEFAULT_MAX_EVENT_SIZE) -> None:
        if max_event_size < 1:
            raise ValueError("max_event_size must be positive")
        self._max = max_event_size
        self._buf = bytearray()
        self._scanned = 0  # bytes at the front of _buf known to hold no line break
        self._at_start = True  # a UTF-8 BOM may still be stripped
        self._skip_lf = False  # the last line ended in CR at a chunk boundary; an LF next is part of it
        self._broken = False
        self._closed = False
        self._data: list[str] = []
        self._data_size = 0
        self._event = ""
        self._block_retry: int | None = None
        self._id_buffer = ""
        self._last_event_id = ""
        self._retry: int | None = None

    @property
    def last_event_id(self) -> str:
        """The last event ID string: what to send as ``Last-Event-ID`` when reconnecting (``""``: send none)."""
        return self._last_event_id

    @property
    def retry(self) -> int | None:
        """The latest reconnection time in milliseconds the stream set, or None if it set none."""
        return self._retry

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Take the next chunk of the body; return the events it completed, in order.

        Raises :class:`SSEError` when the stream breaks a bound or sends text that is not UTF-8; from then on
        every call raises. Feeding after :meth:`close` is a caller error (:class:`RuntimeError`).
        """
        if self._closed:
            raise RuntimeError("SSEParser.feed() after close()")
        if self._broken:
            raise SSEError("the event stream already failed; it cannot be parsed further")
        try:
            return self._feed(data)
        except SSEError:
            self._broken = True
            raise

    def close(self) -> bool:
        """Mark the end of the body. Returns True when it ended inside an event, which is discarded unsent."""
        self._closed = True
        cut = bool(self._buf) or bool(self._data) or bool(self._event) or self._block_retry is not None
        self._buf.clear()
        self._data.clear()
        return cut

    def _feed(self, data: bytes) -> list[SSEEvent]:
        if self._skip_lf and data:
            self._skip_lf = False
            if data[:1] == b"\n":
                data = data[1:]
        buf = self._buf
        buf += data
        if self._at_start:
            if len(buf) < len(_BOM) and _BOM.startswith(buf):
                return []
            if buf.startswith(_BOM):
                del buf[: len(_BOM)]
            self._at_start = False
        events: list[SSEEvent] = []
        start = 0
        search = self._scanned
        while (found := _EOL.search(buf, search)) is not None:
            end = found.start()
            if end - start + self._data_size > self._max:
                raise SSEError(f"event stream event larger than {self._max} bytes")
            nxt = end + 1
            if buf[end] == 0x0D:
                if nxt == len(buf):
                    self._skip_lf = True
                elif buf[nxt] == 0x0A:
                    nxt += 1
            self._line(bytes(buf[start:end]), events)
            start = search = nxt
        del buf[:start]
        self._scanned = len(buf)
        if len(buf) + self._data_size > self._max:
            raise SSEError(f"event stream event larger than {self._max} bytes")
        return events

    def _line(self, line: bytes, events: list[SSEEvent]) -> None:
        if not line:
            self._dispatch(events)
            return
        if line[0] == 0x3A:  # ':' - a comment, such as a keep-alive
            return
        colon = line.find(b":")
        if colon < 0:
            name, value = line, b""
        else:
            name, value = line[:colon], line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if name == b"data":
            # Within the bound: _feed checked this whole line plus the data gathered so far before calling us.
            self._data_size += len(value) + 1
            self._data.append(_text(value, "data"))
        elif name == b"event":
            self._event = _text(value, "event")
        elif name == b"id":
            if b"\x00" not in value:
                self._id_buffer = _text(value, "id")
        elif name == b"retry" and value.isdigit() and len(value) <= _MAX_RETRY_DIGITS:
            self._block_retry = self._retry = int(value)
        # any other field name is ignored, as the format requires

    def _dispatch(self, events: list[SSEEvent]) -> None:
        self._last_event_id = self._id_buffer
        if self._data:
            events.append(
                SSEEvent(
                    data="\n".join(self._data),
                    event=self._event or "message",
                    id=self._last_event_id,
                    retry=self._block_retry,
                )
            )
        self._data = []
        self._data_size = 0
        self._event = ""
        self._block_retry = None


def _field_value(value: str, field: str) -> str:
    if "\r" in value or "\n" in value:
        raise LocalProtocolError(f"an SSE {field} cannot contain a line break: {value[:64]!r}")
    return value


def encode_event(data: str, *, event: str | None = None, id: str | None = None, retry: int | None = None) -> bytes:
    """One event in wire form, ready to write: optional ``event``, ``id`` and ``retry`` lines, then ``data``.

    ``data`` is split at its line breaks into ``data`` lines, so a reader gets it back with each CRLF or CR turned
    into LF (JSON text from warden's encoder has no raw line breaks, so it comes back byte for byte). An empty
    ``data`` still makes an event (a priming event); ``event`` and ``id`` are written as given.

    Raises :class:`~warden.errors.LocalProtocolError` for an ``event`` or ``id`` holding a line break (it would
    inject fields), an ``id`` holding NUL (readers ignore it), a negative or non-int ``retry``, or text that has
    no UTF-8 form.
    """
    lines: list[str] = []
    if event is not None:
        lines.append("event: " + _field_value(event, "event type"))
    if id is not None:
        if "\x00" in id:
            raise LocalProtocolError("an SSE id cannot contain NUL")
        lines.append("id: " + _field_value(id, "id"))
    if retry is not None:
        if isinstance(retry, bool) or not isinstance(retry, int) or retry < 0:
            raise LocalProtocolError(f"an SSE retry must be a non-negative int, not {retry!r}")
        lines.append(f"retry: {retry}")
    lines.extend("data: " + part for part in _LINE_BREAK.split(data))
    try:
        return ("\n".join(lines) + "\n\n").encode("utf-8")
    except UnicodeEncodeError as exc:
        raise LocalProtocolError("an SSE event must be valid Unicode text") from exc


def encode_comment(text: str = "") -> bytes:
    """A comment line (``:`` + text), which readers ignore: the keep-alive long-lived streams send."""
    return (":" + _field_value(text, "comment") + "\n").encode("utf-8")
