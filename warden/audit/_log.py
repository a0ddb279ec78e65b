"""The trio-facing audit log: ``open_audit_log`` and :class:`AuditLog`, with group commit.

Every ``append`` is checked and encoded on the caller's task (cheap, no I/O), then joins the *open batch*. One
committer task takes the open batch whenever the previous one is done and commits it in a worker thread
(``trio.to_thread.run_sync``): the flock, the writes and the single ``fdatasync`` never block the event loop. While
a batch is being synced, new appends gather in the next one, so under load one ``fdatasync`` covers many
records (group commit), and with one caller the latency is one ``fdatasync``.

``append`` returns only when the record is durable. Any write or fsync error fails the log for good: the batch
in flight, the batch gathering and every later ``append`` raise :class:`AuditLogFailed`, so a gateway that awaits
``append`` before forwarding fails closed (write-ahead). Only a restart, whose recovery re-reads the disk, clears it.

``append_later`` is for records nothing waits on (a call's outcome: its decision was made durable before the call
went out). Such a record joins the gathering batch without starting a commit of its own: the next ``append``
carries it, or the committer commits it alone after at most :data:`LATER_WITHIN` seconds. A sequence of calls
thus costs one ``fdatasync`` per call instead of two, and an outcome is durable within that bound.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Callable, Collection
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar, final

import msgspec
import trio

from warden.audit._checkpoint import SignedCheckpoint
from warden.audit._errors import AuditLogFailed
from warden.audit._note import Ed25519Verifier
from warden.audit._records import Event, PreparedRecord, Record, prepare_record, redact_secrets, redact_text
from warden.audit._store import Store, format_time
from warden.canonical import canonical_json
from warden.errors import AuditError

__all__ = ["LATER_WITHIN", "AuditLog", "AuditLogStatistics", "open_audit_log"]

#: Shortest secret the log will redact: shorter strings would cut ordinary words out of every record.
MIN_SECRET_LENGTH = 4
#: Longest a record given to ``append_later`` waits for an ``append`` to carry it before it is committed alone (s).
LATER_WITHIN = 0.05
_T = TypeVar("_T")


@dataclass(slots=True, eq=False)
class _Batch:
    items: list[PreparedRecord] = field(default_factory=list)
    done: trio.Event = field(default_factory=trio.Event)
    urgent: bool = False  # someone awaits this batch (``append``), so it is committed as soon as possible
    first: int = -1
    error: BaseException | None = None


@final
@dataclass(frozen=True, slots=True)
class AuditLogStatistics:
    """A snapshot of the log's counters (trio-style ``statistics()``)."""

    records: int  # appended by this process since open
    batches: int  # fdatasync'ed batches committed by this process
    largest_batch: int
    size: int  # the tree size this process last saw (other processes may have appended since)
    failed: bool


@final
class AuditLog:
    """An open audit log. Get one from :func:`open_audit_log`; share it between all tasks of the process."""

    def __init__(self, store: Store, *, clock: Callable[[], float]) -> None:
        self._store = store
        self._clock = clock
        self._pid = os.getpid()
        self._open = _Batch()
        self._work = trio.Event()
        self._closed = False
        self._failed: AuditLogFailed | None = None
        self._store_lock = trio.Lock()  # the Store is used by one thread at a time
        self._secrets: set[str] = set()
        self._records = 0
        self._batches = 0
        self._largest = 0

    # -- public ---------------------------------------------------------------------------------------------

    @property
    def origin(self) -> str:
        """The log's unique identity: first line of its checkpoints and name of its key."""
        return self._store.origin

    @property
    def verifier(self) -> Ed25519Verifier:
        """The log's public key; ``verifier.vkey`` is the string to give ``warden audit verify --vkey``."""
        return self._store.signer.verifier

    @property
    def failed(self) -> bool:
        return self._failed is not None

    def statistics(self) -> AuditLogStatistics:
        return AuditLogStatistics(self._records, self._batches, self._largest, self._store.size,
                                  self._failed is not None)

    def add_secrets(self, values: Collection[str]) -> None:
        """Register secret values (tokens, passwords given to a server): they are cut out of every later record.

        Raises:
            AuditError: a value is shorter than 4 characters (it would redact ordinary text).
        """
        for v in values:
            if len(v) < MIN_SECRET_LENGTH:
                raise AuditError(f"a secret of {len(v)} characters is too short to redact reliably",
                                 hint=f"secrets must be at least {MIN_SECRET_LENGTH} characters")
        self._secrets.update(values)

    async def append(self, record: Record) -> int:
        """Append ``record`` and return its index once it is durable (fdatasync'ed).

        The log fills ``v``, ``index``, ``untrusted_time`` and ``pid``. Cancelling the wait does not withdraw the
        record: it may still be written; the caller must simply not act on it.

        Raises:
            AuditLogFailed: the log failed now or earlier (write-ahead: refuse the action).
            InvalidRecord: a field of the record is malformed (refuse the action; the log is fine).
            AuditError: the log is closed.
        """
        batch = self._join(record)
        position = len(batch.items) - 1
        batch.urgent = True
        self._work.set()
        await batch.done.wait()
        if batch.error is not None:
            raise batch.error
        return batch.first + position

    def append_later(self, record: Record) -> None:
        """Queue ``record`` to be made durable with the next batch, within :data:`LATER_WITHIN` seconds; return at
        once. For records nothing waits on: if their batch fails, the log fails and the next ``append`` raises.

        Raises:
            AuditLogFailed, InvalidRecord, AuditError: as :meth:`append`, checked before queueing.
        """
        self._join(record)
        self._work.set()

    def _join(self, record: Record) -> _Batch:
        if self._failed is not None:
            raise self._failed
        if self._closed:
            raise AuditError("the audit log is closed", hint="this is a bug: append after the log's context ended")
        prepared = self._prepare(record)
        batch = self._open
        batch.items.append(prepared)
        return batch

    async def checkpoint(self) -> SignedCheckpoint:
        """Publish a checkpoint covering everything committed so far (by any process) and return it.

        Raises:
            AuditLogFailed: the log failed now or earlier.
        """
        if self._failed is not None:
            raise self._failed
        try:
            return await self._in_thread(self._store.publish)
        except AuditLogFailed as exc:
            self._fail(exc)
            raise

    # -- internals ------------------------------------------------------------------------------------------

    async def _in_thread(self, fn: Callable[[], _T]) -> _T:
        """Run a Store call in a worker thread, one at a time. Never abandoned: a write in progress finishes."""
        async with self._store_lock:
            return await trio.to_thread.run_sync(fn, abandon_on_cancel=False)

    def _prepare(self, record: Record) -> PreparedRecord:
        if self._secrets:
            record = _redact_record(record, self._secrets)
        return prepare_record(record, untrusted_time=format_time(self._clock()), pid=self._pid)

    def _fail(self, exc: AuditLogFailed) -> None:
        if self._failed is None:
            self._failed = exc
        pending = self._open
        if pending.items and pending.error is None:
            pending.error = exc
            pending.done.set()
            self._open = _Batch()

    async def _run_committer(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            if not self._open.items:
                await self._work.wait()
                self._work = trio.Event()
                continue
            if not self._open.urgent:  # only records nothing waits on: give an append the chance to carry them
                with trio.move_on_after(LATER_WITHIN):
                    while not self._open.urgent:
                        await self._work.wait()
                        self._work = trio.Event()
                if not self._open.items:  # taken meanwhile: the log failed, or closed and drained it
                    continue
            batch, self._open = self._open, _Batch()
            await self._commit(batch)

    async def _commit(self, batch: _Batch) -> None:
        try:
            items = batch.items
            batch.first = await self._in_thread(lambda: self._store.commit_prepared(items))
        except AuditLogFailed as exc:
            batch.error = exc
            self._fail(exc)
        except BaseException as exc:
            failure = AuditLogFailed(f"the audit log stopped: {exc!r}",
                                     hint="restart warden; recovery checks the log")
            batch.error = failure
            self._fail(failure)
            raise
        else:
            self._records += len(batch.items)
            self._batches += 1
            self._largest = max(self._largest, len(batch.items))
        finally:
            batch.done.set()

    async def _drain(self) -> None:
        """Commit whatever is gathering, then stop accepting appends."""
        self._closed = True
        batch, self._open = self._open, _Batch()
        if batch.items and self._failed is None:
            await self._commit(batch)


def _redact_record(record: Record, secrets: Collection[str]) -> Record:
    """Cut registered secret values out of every string of a record (arguments included)."""
    changes: dict[str, object] = {}
    for name in ("server_name", "client", "target", "rule", "reason", "violation", "error"):
        value = getattr(record, name)
        if value is not None:
            cleaned = redact_text(value, secrets)
            if cleaned != value:
                changes[name] = cleaned
    args = record.arguments
    if args is not None and args.has_value:
        raw = bytes(args.value)
        if any(s.encode() in raw or msgspec.json.encode(s)[1:-1] in raw for s in secrets):
            value = redact_secrets(msgspec.json.decode(raw), secrets)
            changes["arguments"] = msgspec.structs.replace(args, value=msgspec.Raw(canonical_json(value)))
    return msgspec.structs.replace(record, **changes) if changes else record


@asynccontextmanager
async def open_audit_log(state_dir: Path, *, clock: Callable[[], float] = time.time,
                         checkpoint_interval: float = 1.0, origin: str | None = None,
                         secrets: Collection[str] = ()) -> AsyncIterator[AuditLog]:
    """Open the audit log of ``state_dir`` (creating it and its key on first use) for the duration of the block.

    On entry: take the lock, recover (cut a torn tail, check the tree against what was committed and published),
    append ``audit.opened`` (and ``audit.recovered`` if recovery changed anything). On exit: commit what is
    pending, append ``audit.closed`` and publish a final checkpoint (shielded, bounded to 10 s).

    ``clock`` gives POSIX seconds for ``untrusted_time`` and checkpoint pacing; ``checkpoint_interval`` is the
    least time between two published checkpoints while records flow.

    Raises:
        StateError, AuditUnavailable: the state directory or the log's files are unusable.
        VerificationError: the log is shorter than or inconsistent with what it committed or published.
        AuditLogFailed: an I/O error.
    """
    store = await trio.to_thread.run_sync(lambda: Store.open(state_dir, clock=clock,
                                                             checkpoint_interval=checkpoint_interval,
                                                             origin=origin))
    log = AuditLog(store, clock=clock)
    try:
        log.add_secrets(secrets)
        async with trio.open_nursery() as nursery:
            await nursery.start(log._run_committer)
            await log.append(Record(event=Event.AUDIT_OPENED))
            try:
                yield log
            finally:
                with trio.move_on_after(10, shield=True):
                    await log._drain()
                    if log._failed is None:
                        closing = log._prepare(Record(event=Event.AUDIT_CLOSED))
                        try:
                            await log._in_thread(lambda: store.commit_prepared([closing], publish=True))
                        except AuditLogFailed as exc:
                            log._fail(exc)
                nursery.cancel_scope.cancel()
    finally:
        store.close()

