"""Watching the pin store, so an approval made anywhere reaches every connected host at once (issue 10 item 5).

``warden pins approve`` (or ``review``) runs in another process and replaces ``pins.json`` atomically. The gateway
watches the state directory with inotify and, when the file is replaced, re-reads it once and tells its hosts what
became visible. This also replaces the ``stat`` every decision used to make: while the watch runs, the guard
re-reads the store only after the watch saw it change.

Where inotify cannot be had (the per-user watch limit is reached), nothing is lost but speed: the guard keeps
checking the file on each decision, and hosts hear of approvals on their next list.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio
from inotify_simple import INotify, flags

log = logging.getLogger(__name__)

_MASK = flags.CLOSE_WRITE | flags.MOVED_TO | flags.CREATE | flags.DELETE | flags.DELETE_SELF | flags.MOVE_SELF


async def watch_file(path: Path, on_change: Callable[[], Awaitable[None]], *,
                     task_status: trio.TaskStatus[bool] = trio.TASK_STATUS_IGNORED) -> None:
    """Call ``on_change`` each time ``path`` is written or replaced, until cancelled. Started with
    ``nursery.start``, it reports whether the watch is in place (False: inotify is unavailable; it returns)."""
    try:
        inotify = INotify(nonblocking=True)
        inotify.add_watch(path.parent, _MASK)
    except OSError as exc:
        log.info("cannot watch %s (%s); approvals are seen on each decision instead", path, exc.strerror)
        task_status.started(False)
        return
    with inotify:
        task_status.started(True)
        while True:
            await trio.lowlevel.wait_readable(inotify.fileno())
            try:
                events = inotify.read(timeout=0)
            except BlockingIOError:
                continue
            if any(event.name == path.name or event.mask & (flags.DELETE_SELF | flags.MOVE_SELF)
                   for event in events):
                await on_change()

