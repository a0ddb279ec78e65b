"""Draining a server's stderr: never an error (ST03), never allowed to fill the pipe, never unbounded.

Each line is redacted here, before anything cuts it (a line cut through a secret would leave its first half in
clear for no later redaction to find); escaping for a terminal and the length cut happen where the line is shown
(warden's log formatter, the host message's own escaping).
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Final, final

import trio

from warden.escape import for_terminal
from warden.logs import MAX_LINE, LineRate
from warden.secrets import Redactor

log = logging.getLogger("warden.server")

TAIL_BYTES: Final = 64 * 1024
LINES_PER_SECOND: Final = 50.0
BURST: Final = 200.0
LAST_WORDS_WAIT: Final = 0.5
"""How long an ended server's last stderr may take to arrive after its exit is seen: the exit and the pipe's last
bytes race, and a crash message without the server's last words (its reason) is the one a person needs most. Bounded,
because a process the server left behind can hold the pipe open."""


@final
class StderrTail:
    """Keeps the last ``TAIL_BYTES`` of a server's stderr (for error messages) and logs lines, rate-limited."""

    def __init__(self, name: str, redactor: Redactor | None = None) -> None:
        self._name = name
        self._redactor = redactor or Redactor()
        self._lines: deque[str] = deque()
        self._bytes = 0
        self._partial = b""
        self._rate = LineRate(LINES_PER_SECOND, BURST)
        self._ended = trio.Event()

    def tail(self, max_lines: int = 20) -> list[str]:
        """The last lines, redacted, escaped and cut to :data:`~warden.logs.MAX_LINE` characters each (they go
        into messages a host shows)."""
        shown = [for_terminal(line) for line in list(self._lines)[-max_lines:]]
        return [line if len(line) <= MAX_LINE else line[:MAX_LINE] + "…" for line in shown]

    async def last_words(self) -> None:
        """Wait until the stream has ended (every line read), at most :data:`LAST_WORDS_WAIT` seconds."""
        with trio.move_on_after(LAST_WORDS_WAIT):
            await self._ended.wait()

    async def drain(self, stream: trio.abc.ReceiveStream) -> None:
        """Read until EOF. Cancelling it is fine; the process is being stopped anyway."""
        try:
            await self._read(stream)
        finally:
            self._ended.set()

    async def _read(self, stream: trio.abc.ReceiveStream) -> None:
        while True:
            try:
                data = await stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                if self._partial:
                    self._line(self._partial)
                return
            parts = (self._partial + data).split(b"\n")
            self._partial = parts.pop()
            if len(self._partial) > TAIL_BYTES:
                self._line(self._partial)
                self._partial = b""
            for part in parts:
                self._line(part)

    def _line(self, raw: bytes) -> None:
        text = self._redactor.text(raw.decode("utf-8", "replace").rstrip("\r"))
        self._lines.append(text)
        self._bytes += len(text)
        while self._bytes > TAIL_BYTES and self._lines:
            self._bytes -= len(self._lines.popleft())
        held = self._rate.admit(trio.current_time())
        if held:
            log.info("[%s] (%d stderr lines not shown)", self._name, held)
        if held is not None:
            log.info("[%s] %s", self._name, text)
