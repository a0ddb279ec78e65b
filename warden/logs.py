"""warden's own diagnostics on stderr, written so that a host that stops reading can never stall warden.

Over stdio, warden's stderr is a pipe the host may or may not drain. A blocking write from the trio thread into a
full pipe would freeze every session, so log records go into a bounded queue that a background thread writes out;
when the queue is full, records are dropped and counted rather than waited for. Server stderr lines take the same
path (see :func:`server_line`), with control characters made visible so a server cannot drive the terminal of
whoever reads the log.
"""

from __future__ import annotations

import logging
import logging.handlers
import queue
import sys
from typing import Final, TextIO, final

MAX_LINE: Final = 2000
_QUEUE_RECORDS: Final = 10_000


@final
class _DroppingQueueHandler(logging.handlers.QueueHandler):
    dropped = 0

    def enqueue(self, record: logging.LogRecord) -> None:
        try:
            self.queue.put_nowait(record)
        except queue.Full:
            _DroppingQueueHandler.dropped += 1


_listener: logging.handlers.QueueListener | None = None


def configure(level: int, stream: TextIO | None = None) -> None:
    """Send warden's logging to ``stream`` (default stderr) through a bounded, non-blocking queue."""
    global _listener
    if _listener is not None:
        _listener.stop()
    q: queue.Queue[logging.LogRecord] = queue.Queue(_QUEUE_RECORDS)
    target = logging.StreamHandler(stream or sys.stderr)
    target.setFormatter(logging.Formatter("warden: %(levelname)s: %(message)s"))
    _listener = logging.handlers.QueueListener(q, target, respect_handler_level=False)
    _listener.start()
    root = logging.getLogger()
    root.handlers[:] = [_DroppingQueueHandler(q)]
    root.setLevel(level)


def shutdown() -> None:
    """Flush queued records (best effort) and stop the writer thread."""
    global _listener
    if _listener is not None:
        _listener.stop()
        _listener = None


_VISIBLE = {i: f"\\x{i:02x}" for i in range(0x20) if i != 0x09} | {0x7F: "\\x7f"} | {
    i: f"\\u{i:04x}" for i in range(0x80, 0xA0)}


def sanitize(text: str) -> str:
    """``text`` with C0/C1 controls (ANSI escapes included) shown as escapes, cut to ``MAX_LINE`` characters."""
    cleaned = text.translate(_VISIBLE)
    return cleaned if len(cleaned) <= MAX_LINE else cleaned[:MAX_LINE] + "…"
