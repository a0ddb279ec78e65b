"""Newline-delimited JSON framing for stdio, with a hard cap on message size.

MCP over stdio sends one JSON-RPC message per line. A peer is hostile by assumption, so the framer never holds more
than ``max_message_size`` bytes of an unfinished line: when a line grows past the cap, the framer emits one
:class:`Oversized` frame (carrying the line's first bytes, so the caller can try to find an id to answer) and then
discards bytes until the next newline. Memory stays bounded whatever the peer sends.

``feed`` returns every complete frame in the chunk at once, so a transport can process a burst with one call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, final

DEFAULT_MAX_MESSAGE_SIZE: Final = 16 * 1024 * 1024
"""16 MiB: larger than any sane tool result, small enough that a few in flight cannot exhaust memory."""

OVERSIZED_PREFIX_BYTES: Final = 4096
"""How much of an oversized line is kept, to look for its ``id``."""


@final
@dataclass(frozen=True, slots=True)
class Oversized:
    """A line longer than the cap. ``prefix`` is its beginning (the same however the bytes were chunked);
    ``size`` is how much had been seen when the framer gave up, at least cap + 1."""

    prefix: bytes
    size: int = field(compare=False)


Frame = bytes | Oversized


@final
class LineFramer:
    """Splits a byte stream into lines, enforcing ``max_message_size`` per line.

    Blank lines are skipped (some servers print them); a trailing ``\\r`` is left to the JSON parser, which treats
    it as whitespace.
    """

    def __init__(self, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        if max_message_size < 2:
            raise ValueError("max_message_size must be at least 2 bytes")
        self._max = max_message_size
        self._prefix_len = min(OVERSIZED_PREFIX_BYTES, max_message_size + 1)
        self._partial = bytearray()
        self._discarding = False

    @property
    def max_message_size(self) -> int:
        return self._max

    @property
    def buffered(self) -> int:
        """Bytes held for an unfinished line (never more than the cap)."""
        return len(self._partial)

    def feed(self, data: bytes | bytearray) -> list[Frame]:
        """Add ``data`` and return the frames it completed, in order."""
        frames: list[Frame] = []
        start = 0
        while True:
            newline = data.find(b"\n", start)
            if newline < 0:
                break
            self._end_line(data[start:newline], frames)
            start = newline + 1
        if start < len(data):
            self._extend(data[start:] if start else data, frames)
        return frames

    def close(self) -> list[Frame]:
        """End of stream: a last line without a newline is still a frame."""
        frames: list[Frame] = []
        if self._partial and not self._discarding:
            self._end_line(b"", frames)
        self._partial.clear()
        self._discarding = False
        return frames

    def _end_line(self, tail: bytes | bytearray, frames: list[Frame]) -> None:
        if self._discarding:
            self._discarding = False
            return
        if self._partial:
            self._partial += tail
            line = bytes(self._partial)
            self._partial.clear()
        else:
            line = bytes(tail)
        if len(line) > self._max:
            frames.append(Oversized(line[:self._prefix_len], len(line)))
        elif line.strip():
            frames.append(line)

    def _extend(self, data: bytes | bytearray, frames: list[Frame]) -> None:
        if self._discarding:
            return
        self._partial += data
        if len(self._partial) > self._max:
            frames.append(Oversized(bytes(self._partial[:self._prefix_len]), len(self._partial)))
            self._partial.clear()
            self._discarding = True
