"""warden's own diagnostics on stderr: redacted, terminal-safe, and never able to stall warden.

Over stdio, warden's stderr is a pipe the host may or may not drain. A blocking write from the trio thread into a
full pipe would freeze every session, so log records go into a bounded queue that a background thread writes out;
when the queue is full, records are dropped and counted rather than waited for.

Every line leaves through one formatter, the one output point of this channel: the message (server stderr lines
included, see :mod:`warden.upstream.stderr`) has the registered secret values cut out (:func:`use_redactor` gives
it the process's registry once a launch has resolved what it hands the server), is shown through
:func:`warden.escape.for_terminal` so a server cannot drive the terminal of whoever reads the log or forge a line,
and is cut to :data:`MAX_LINE` characters — in that order, so a cut never leaves half a secret behind. A
traceback keeps its line breaks (warden wrote them) but is escaped and redacted the same way. Other commands log
through the same formatter (:func:`configure_command`), which reads the registry when it first writes a line; if
the registry cannot be read, a line is withheld rather than written unredacted, and says so.
"""

from __future__ import annotations

import logging
import logging.handlers
import queue
import sys
from collections.abc import Callable
from typing import Any, Final, TextIO, final

from warden.errors import WardenError
from warden.escape import for_terminal
from warden.secrets import Redactor

__all__ = ["MAX_LINE", "LineRate", "configure", "configure_command", "say", "shown", "shutdown", "use_redactor"]

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


@final
class _SafeFormatter(logging.Formatter):
    """``warden: LEVEL: message``, redacted, escaped and bounded (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__("warden: %(levelname)s: %(message)s")
        self._redactor = Redactor()
        self._loader: Callable[[], Redactor] | None = None
        self._unreadable: str | None = None

    def use(self, redactor: Redactor | None = None, loader: Callable[[], Redactor] | None = None) -> None:
        self._redactor, self._loader, self._unreadable = redactor or Redactor(), loader, None

    def shown(self, text: str, *, keep_newlines: bool = False) -> str | None:
        """``text`` redacted and escaped; None when the registry could not be read (fail closed: the caller
        withholds the text). A lazy registry is read on first use, so a command that logs nothing reads none."""
        if self._loader is not None:
            loader, self._loader = self._loader, None
            try:
                self._redactor = loader()
            except WardenError as exc:
                self._unreadable = exc.message
        if self._unreadable is not None:
            return None
        return for_terminal(self._redactor.text(text), keep_newlines=keep_newlines)

    def _withheld(self) -> str:
        return f"(withheld: the secrets registry cannot be read: {for_terminal(self._unreadable or '')})"

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = self.shown(super().formatMessage(record))
        if line is None:
            return f"warden: {record.levelname}: {self._withheld()}"
        return _cut(line, MAX_LINE)

    def shown_or_withheld(self, text: str, *, keep_newlines: bool = False) -> str:
        out = self.shown(text, keep_newlines=keep_newlines)
        return self._withheld() if out is None else out  # not `or`: an empty text stays empty

    def formatException(self, ei: Any) -> str:
        return self.shown_or_withheld(super().formatException(ei), keep_newlines=True)

    def formatStack(self, stack_info: str) -> str:
        return self.shown_or_withheld(stack_info, keep_newlines=True)


def _cut(line: str, limit: int) -> str:
    return line if len(line) <= limit else line[:limit] + "…"


_listener: logging.handlers.QueueListener | None = None
_formatter: Final = _SafeFormatter()


def configure(level: int, stream: TextIO | None = None) -> None:
    """Send warden's logging to ``stream`` (default stderr) through a bounded, non-blocking queue."""
    global _listener
    if _listener is not None:
        _listener.stop()
    q: queue.Queue[logging.LogRecord] = queue.Queue(_QUEUE_RECORDS)
    target = logging.StreamHandler(stream or sys.stderr)
    target.setFormatter(logging.Formatter("%(message)s"))  # rendered already, by the queue handler
    _listener = logging.handlers.QueueListener(q, target, respect_handler_level=False)
    _listener.start()
    root = logging.getLogger()
    handler = _DroppingQueueHandler(q)
    handler.setFormatter(_formatter)  # QueueHandler.prepare renders on the caller's thread: no secret is queued
    root.handlers[:] = [handler]
    root.setLevel(level)


def use_redactor(redactor: Redactor) -> None:
    """Cut ``redactor``'s values out of every later log line (the registry as this process knows it)."""
    _formatter.use(redactor)


def configure_command(level: int, registry: Callable[[], Redactor], stream: TextIO | None = None) -> None:
    """For a command other than ``warden run``: log lines go straight to ``stream`` (default stderr) through the
    same formatter, with the secrets registry read from ``registry`` when the first line is written. Like
    ``logging.basicConfig``, it leaves a root logger that already has handlers (a test's capture) alone."""
    _formatter.use(loader=registry)
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(stream or sys.stderr)
        handler.setFormatter(_formatter)
        root.addHandler(handler)
        root.setLevel(level)


def shown(text: str, *, keep_newlines: bool = False, limit: int | None = None) -> str:
    """``text`` (a message warden prints that may quote a server: an error, a hint) as the log shows it: redacted
    and escaped for a terminal; a note in its place when the registry cannot be read.

    ``keep_newlines`` is for a block warden laid out in lines (a traceback); ``limit`` cuts the result to that many
    characters, after redaction and escaping, so a cut never leaves half a secret or half an escape behind.
    """
    out = _formatter.shown_or_withheld(text, keep_newlines=keep_newlines)
    return out if limit is None else _cut(out, limit)


@final
class LineRate:
    """How many log lines one source a server drives may write (its stderr, its refused connections): a burst, then
    ``per_second``. warden's log queue drops what it cannot hold, so a server writing without end would otherwise
    crowd warden's own warnings out of it; what is held back is counted and said with the next line let through."""

    def __init__(self, per_second: float, burst: float) -> None:
        self._per_second = per_second
        self._burst = burst
        self._tokens = burst
        self._last = 0.0
        self._held = 0

    def admit(self, now: float) -> int | None:
        """Whether a line may be written at ``now`` (seconds, any monotonic clock): None if not (it is counted),
        else how many were held back since the last one let through."""
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._per_second)
        self._last = now
        if self._tokens < 1:
            self._held += 1
            return None
        self._tokens -= 1
        held, self._held = self._held, 0
        return held


def say(text: str) -> None:
    """Write ``text`` (already escaped) to stderr as one line, in one write. ``print`` writes the text and its line
    end apart, and warden's log thread writes to the same stderr: a log line landed between them once, and the
    line that names the HTTP face's URL read ``.../mcpwarden: WARNING: ...`` (seen in make test)."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def shutdown() -> None:
    """Flush queued records (best effort) and stop the writer thread."""
    global _listener
    if _listener is not None:
        _listener.stop()
        _listener = None
