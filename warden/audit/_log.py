"""The trio-facing audit log: ``open_audit_log`` and :class:`AuditLog`, with group commit.

Every ``append`` is checked and encoded on the caller's task (cheap, no I/O), then joins the *open batch*. One
long-lived writer thread, started and stopped by :func:`open_audit_log`, owns the
:class:`~warden.audit._store.Store`: it takes the open batch whenever the previous one is done and commits it (the
flock, the writes and the single ``fdatasync`` never block the event loop), so nothing is handed to a borrowed
thread per batch. Group commit is leader/follower: the first ``append`` that finds the writer waiting wakes it (the
leader), and every ``append`` that comes while the writer commits joins the next batch without waking anyone (the
followers), so under load one ``fdatasync`` covers many records and with one caller the latency is one
``fdatasync``.

How the two threads meet, and why:

* trio -> writer: the open batch and a job queue sit behind a plain lock; a waiting writer blocks on a
  ``queue.SimpleQueue`` (C, releases the GIL), into which the leader puts one token. The writer says, under the
  lock, whether it waits and until when, so a token is put only when it is needed: never while the writer is
  committing, never for a record nothing waits on while the writer will wake for it by itself (below).
* writer -> trio: ``TrioToken.run_sync_soon``, which writes to the wakeup socket the trio loop always watches and
  runs the callback on the trio thread: no file descriptor, task or thread of the log's own, and from a thread
  the one way trio offers. The callback sets the batch's ``trio.Event``, waking its waiters. The writer posts it
  as the last thing it does for the batch before it waits again, so the woken trio thread does not have to
  fight it for the GIL.

``append`` returns only when the record is durable. ``append_then`` is the same append for a caller that must not
wait (the host's reader deciding a call): instead of a waiter it leaves a continuation on the batch, run on the
trio thread by the same wakeup that sets the batch's event, with the record's index or the error ``append`` would
have raised.  Any write or fsync error fails the log for good: the batch
in flight, the batch gathering and every later ``append`` raise :class:`AuditLogFailed`, so a gateway that awaits
``append`` before forwarding fails closed (write-ahead); so does any error of the writer thread itself. Only a
restart, whose recovery re-reads the disk, clears it. A full disk is not such an error: the log pauses
(``audit.paused``, written into its reserve) and batches raise :class:`~warden.audit._errors.AuditDiskFull` until
there is room again (``warden.audit._reserve``).

``append_later`` is for records nothing waits on (a call's outcome: its decision was made durable before the call
went out). Such a record joins the gathering batch without starting a commit of its own: the next ``append``
carries it, or the writer commits it alone after at most :data:`LATER_WITHIN` seconds. After each batch the writer
lingers that long before it waits untimed, so the outcome that follows a decision never has to wake it. A sequence
of calls thus costs one ``fdatasync`` and one wakeup each way per call, and an outcome is durable within that bound.

Recurring records can be appended as a :class:`~warden.audit._records.FilledRecord` of a
:class:`~warden.audit._records.RecordTemplate`: the same bytes, with only the changing fields encoded per record.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Collection
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar, final

import msgspec
import trio

from warden.audit._checkpoint import SignedCheckpoint
from warden.audit._errors import AuditDiskFull, AuditLogFailed
from warden.audit._note import Ed25519Verifier
from warden.audit._records import Event, FilledRecord, PreparedRecord, Record, prepare_filled, prepare_record
from warden.audit._store import Store, format_time
from warden.canonical import canonical_json
from warden.errors import AuditError
from warden.secrets import MIN_SECRET_LENGTH, Redactor, load_redactor, redactable

__all__ = ["LATER_WITHIN", "AuditLog", "AuditLogStatistics", "open_audit_log"]

#: Longest a record given to ``append_later`` waits for an ``append`` to carry it before it is committed alone (s).
LATER_WITHIN = 0.05
_T = TypeVar("_T")


#: What :meth:`AuditLog.append_then` is given: called once, on the trio thread, with the durable record's index or
#: the error that refused it. It must neither wait nor raise (it runs as a callback of the event loop).
_Then = Callable[[int | AuditError], None]


@dataclass(slots=True, eq=False)
class _Batch:
    items: list[PreparedRecord] = field(default_factory=list)
    done: trio.Event = field(default_factory=trio.Event)
    urgent: bool = False  # someone awaits this batch (``append``), so it is committed as soon as possible
    due: float = 0.0  # monotonic time by which a batch nobody awaits is committed anyway
    first: int = -1
    error: AuditError | None = None
    then: list[tuple[int, _Then]] = field(default_factory=list)  # continuations, by position in the batch

    def settle(self) -> None:
        """On the trio thread: the batch is durable (or failed); wake its waiters, run its continuations."""
        self.done.set()
        error = self.error
        for position, then in self.then:
            then(self.first + position if error is None else error)


@dataclass(slots=True, eq=False)
class _Job:
    """Other work for the writer thread (a checkpoint, the closing record): run in order with the batches."""

    fn: Callable[[], object]
    done: trio.Event = field(default_factory=trio.Event)
    result: object = None
    error: BaseException | None = None

    def settle(self) -> None:
        """On the trio thread: the job ran (or never will); wake its waiter."""
        self.done.set()


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
        self._closed = False
        self._failed: AuditLogFailed | None = None
        self._redactor = Redactor()
        # Shared by the trio thread and the writer thread, under _lock: the open batch, the jobs, and what the
        # writer is doing (so that a wakeup token is put only when one is needed).
        self._lock = threading.Lock()
        self._open = _Batch()
        self._jobs: deque[_Job] = deque()
        self._stopping = False
        self._writer_waits = False
        self._writer_until: float | None = None  # when the writer's wait ends by itself (None: only a token ends it)
        self._trailing_due: float | None = None
        """When the writer publishes a checkpoint for records that came after the last one, if no batch does it
        first: a log that goes quiet does not leave its last records unsigned (and unwitnessed) until it closes."""
        self._wakeups: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._token: trio.lowlevel.TrioToken | None = None
        self._thread: threading.Thread | None = None
        self._stopped = trio.Event()
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
        """Register more secret values (tokens, passwords given to a server): they are cut out of every later
        record, like the state directory's registry that :func:`open_audit_log` loaded. Values the registry cannot
        hold (shorter than ``MIN_SECRET_LENGTH``) are refused.

        Raises:
            AuditError: a value is too short to redact reliably.
        """
        short = [v for v in values if not redactable(v)]
        if short:
            raise AuditError(f"a secret of {len(short[0])} characters is too short to redact reliably",
                             hint=f"secrets must be at least {MIN_SECRET_LENGTH} characters")
        self._redactor = self._redactor.with_values(values)

    async def append(self, record: Record | FilledRecord) -> int:
        """Append ``record`` and return its index once it is durable (fdatasync'ed).

        The log fills ``v``, ``index``, ``untrusted_time`` and ``pid``. Cancelling the wait does not withdraw the
        record: it may still be written; the caller must simply not act on it.

        Raises:
            AuditLogFailed: the log failed now or earlier (write-ahead: refuse the action).
            AuditDiskFull: the disk is full and the log paused (refuse the action; it resumes by itself).
            InvalidRecord: a field of the record is malformed (refuse the action; the log is fine).
            AuditError: the log is closed.
        """
        batch, position = self._join(record, urgent=True)
        await batch.done.wait()
        if batch.error is not None:
            raise batch.error
        return batch.first + position

    def append_then(self, record: Record | FilledRecord, then: _Then) -> None:
        """Append ``record`` as :meth:`append` does, without waiting: ``then`` gets its index once it is durable
        (on the trio thread, from the writer's wakeup), or the error :meth:`append` would raise then. A caller
        that acts on the record acts only in ``then`` (write-ahead).

        Raises:
            AuditLogFailed, AuditDiskFull, InvalidRecord, AuditError: as :meth:`append`, checked before queueing
                (``then`` is not called).
        """
        batch, position = self._join(record, urgent=True)
        batch.then.append((position, then))  # the batch settles on this thread: not before this returns

    def append_later(self, record: Record | FilledRecord) -> None:
        """Queue ``record`` to be made durable with the next batch, within :data:`LATER_WITHIN` seconds; return at
        once. For records nothing waits on: if their batch fails, the log fails and the next ``append`` raises.

        Raises:
            AuditLogFailed, InvalidRecord, AuditError: as :meth:`append`, checked before queueing.
        """
        self._join(record, urgent=False)

    def _join(self, record: Record | FilledRecord, *, urgent: bool) -> tuple[_Batch, int]:
        if self._failed is not None:
            raise self._failed
        if self._closed:
            raise AuditError("the audit log is closed", hint="this is a bug: append after the log's context ended")
        prepared = self._prepare(record)
        with self._lock:
            batch = self._open
            if not batch.items:
                batch.due = time.monotonic() + LATER_WITHIN
            batch.items.append(prepared)
            batch.urgent = batch.urgent or urgent
            position = len(batch.items) - 1
            # Lead (wake the writer) only if it waits and would not wake in time by itself.
            wake = self._writer_waits and (urgent or self._writer_until is None or self._writer_until > batch.due)
            if wake:
                self._writer_waits = False
        if wake:
            self._wakeups.put(None)
        return batch, position

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
        """Run a Store call on the writer thread, in order with the batches. Never abandoned: a write in progress
        finishes (the wait is shielded).

        Raises:
            AuditLogFailed: the writer thread stopped (the log failed) before it ran ``fn``; or what ``fn`` raised.
        """
        if self._failed is not None:
            raise self._failed
        job = _Job(fn)
        with self._lock:
            self._jobs.append(job)
            wake, self._writer_waits = self._writer_waits, False
        if wake:
            self._wakeups.put(None)
        with trio.CancelScope(shield=True):
            await job.done.wait()
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[return-value]

    def _prepare(self, record: Record | FilledRecord) -> PreparedRecord:
        """The one redaction point of the audit channel: the encoded record is searched once (one automaton
        pass over its bytes); only a record that holds a registered value is redacted field by field and encoded
        again. Redaction comes before ``fit_record`` shortens anything, so a cut never halves a secret. A filled
        template searches only what its holes add (its fixed part was searched when it was compiled)."""
        now = format_time(self._clock())
        if isinstance(record, FilledRecord):
            spliced = prepare_filled(record, untrusted_time=now, pid=self._pid, redactor=self._redactor)
            if spliced is not None:
                return spliced
            record = record.record()
        prepared = prepare_record(record, untrusted_time=now, pid=self._pid)
        if self._redactor and (self._redactor.wire(prepared.prefix) is not prepared.prefix
                               or self._redactor.wire(prepared.suffix) is not prepared.suffix):
            prepared = prepare_record(_redact_record(record, self._redactor), untrusted_time=now, pid=self._pid)
        return prepared

    def _fail(self, exc: AuditLogFailed) -> None:
        """Fail the log (on the trio thread): the gathering batch and every later append raise ``exc``."""
        if self._failed is None:
            self._failed = exc
        with self._lock:
            pending, self._open = self._open, _Batch()
        if pending.items and pending.error is None:
            pending.error = exc
            pending.settle()

    def _writer_died(self, exc: AuditLogFailed, work: _Batch | _Job | None) -> None:
        """The writer thread ended with an error of its own (on the trio thread): fail the log, the work it held
        (if it had taken any), and every job it will never run."""
        self._fail(exc)
        with self._lock:
            jobs: list[_Batch | _Job] = list(self._jobs)
            self._jobs = deque()
        if work is not None and not work.done.is_set():
            jobs.append(work)
        for job in jobs:
            job.error = exc
            job.settle()

    # -- the writer thread ----------------------------------------------------------------------------------

    def _start_writer(self) -> None:
        """Start the writer thread; :meth:`_stop_writer` must follow (``open_audit_log`` does both). Not a daemon:
        a writer that outlived its owner would hold up the interpreter's exit rather than vanish mid-write."""
        self._token = trio.lowlevel.current_trio_token()
        self._thread = threading.Thread(target=self._write_loop, name="warden-audit-writer", daemon=False)
        self._thread.start()

    async def _stop_writer(self) -> None:
        """Ask the writer to commit what it holds and end, and wait for it (shielded: a write is never abandoned).
        It says it is done through the trio loop, so the final ``join`` returns at once."""
        with self._lock:
            self._stopping = True
            wake, self._writer_waits = self._writer_waits, False
        if wake:
            self._wakeups.put(None)
        if self._thread is not None:
            with trio.CancelScope(shield=True):
                await self._stopped.wait()
            self._thread.join()

    def _next_work(self) -> _Batch | _Job | None:
        """Block until there is something to do: a job, an awaited batch, or a batch that is due. None: stop."""
        linger_until = time.monotonic() + LATER_WITHIN
        while True:
            with self._lock:
                self._writer_waits = False
                now = time.monotonic()
                if self._jobs:
                    return self._jobs.popleft()
                batch = self._open
                if batch.items and (batch.urgent or self._stopping or now >= batch.due):
                    self._open = _Batch()
                    return batch
                if self._stopping:
                    return None
                trailing = self._trailing_due
                if trailing is not None and not batch.items and now >= trailing:
                    self._trailing_due = None
                    return _Job(self._publish_trailing)
                until = batch.due if batch.items else trailing
                if not batch.items and now < linger_until:
                    until = linger_until if until is None else min(until, linger_until)
                self._writer_waits, self._writer_until = True, until
            with suppress(queue.Empty):  # the wait ended by itself
                self._wakeups.get(timeout=None if until is None else max(0.0, until - now))

    def _publish_trailing(self) -> None:
        """The checkpoint a quiet log still owes (on the writer thread). A full disk publishes it later; a failed
        log fails the next append, as any failure of the writer does."""
        try:
            if self._store.unpublished:
                self._store.publish()
        except AuditDiskFull:
            pass
        except AuditLogFailed as exc:
            token = self._token
            assert token is not None
            token.run_sync_soon(self._fail, exc)

    def _write_loop(self) -> None:
        token = self._token
        assert token is not None
        work: _Batch | _Job | None = None
        try:
            while (work := self._next_work()) is not None:
                if isinstance(work, _Job):
                    try:
                        work.result = work.fn()
                    except BaseException as exc:  # handed to the awaiting task
                        work.error = exc
                    token.run_sync_soon(work.done.set)
                else:
                    self._commit(work, token)
                work = None
        except BaseException as exc:  # a bug of the writer itself: every waiter must hear of it
            token.run_sync_soon(self._writer_died, AuditLogFailed(
                f"the audit log's writer stopped: {exc!r}", hint="restart warden; recovery checks the log"), work)
        finally:
            token.run_sync_soon(self._stopped.set)

    def _commit(self, batch: _Batch, token: trio.lowlevel.TrioToken) -> None:
        """Commit one batch (on the writer thread; a checkpoint that is due is published with it, before its
        waiters hear of it, as :meth:`Store.commit_prepared` does) and hand the outcome to the trio thread."""
        try:
            batch.first = self._store.commit_prepared(batch.items)
            with self._lock:
                if not self._store.unpublished:
                    self._trailing_due = None
                elif self._trailing_due is None:
                    self._trailing_due = time.monotonic() + self._store.checkpoint_interval
        except (AuditLogFailed, AuditDiskFull) as exc:
            batch.error = exc
        except BaseException as exc:
            batch.error = AuditLogFailed(f"the audit log stopped: {exc!r}",
                                         hint="restart warden; recovery checks the log")
        token.run_sync_soon(self._committed, batch)

    def _committed(self, batch: _Batch) -> None:
        """On the trio thread: a batch is durable (or failed, or refused by a full disk); wake its waiters."""
        if isinstance(batch.error, AuditLogFailed):
            self._fail(batch.error)
        elif batch.error is None:
            self._records += len(batch.items)
            self._batches += 1
            self._largest = max(self._largest, len(batch.items))
        # (AuditDiskFull: nothing was written; the log paused, and says so, until there is room)
        batch.settle()

    async def _drain(self) -> None:
        """Commit whatever is gathering, then stop accepting appends."""
        self._closed = True
        with self._lock:
            batch = self._open
            batch.urgent = True
            wake = self._writer_waits and bool(batch.items)
            if wake:
                self._writer_waits = False
        if wake:
            self._wakeups.put(None)
        if batch.items:
            with trio.CancelScope(shield=True):
                await batch.done.wait()


def _redact_record(record: Record, redactor: Redactor) -> Record:
    """Cut registered secret values out of every string of a record, nested ones and the arguments included."""
    changes: dict[str, object] = {}
    for name in record.__struct_fields__:
        value = getattr(record, name)
        if isinstance(value, str):
            cleaned = redactor.text(value)
            if cleaned != value:
                changes[name] = cleaned
        elif isinstance(value, msgspec.Struct) and name != "arguments":
            changes[name] = _redact_record(value, redactor)  # type: ignore[arg-type]
        elif isinstance(value, tuple) and any(isinstance(v, str) for v in value):
            changes[name] = tuple(redactor.text(v) if isinstance(v, str) else v for v in value)
    args = record.arguments if isinstance(record, Record) else None
    if args is not None and args.has_value:
        raw = bytes(args.value)
        if redactor.wire(raw) is not raw:
            value = redactor.json_value(msgspec.json.decode(raw))
            changes["arguments"] = msgspec.structs.replace(args, value=msgspec.Raw(canonical_json(value)))
    return msgspec.structs.replace(record, **changes) if changes else record


@asynccontextmanager
async def open_audit_log(state_dir: Path, *, clock: Callable[[], float] = time.time,
                         checkpoint_interval: float = 1.0, origin: str | None = None,
                         secrets: Collection[str] = ()) -> AsyncIterator[AuditLog]:
    """Open the audit log of ``state_dir`` (creating it and its key on first use) for the duration of the block.

    Every record is redacted with the state directory's secrets registry (:func:`warden.secrets.load_redactor`:
    the secrets set by name and every value a launch handed a server) plus ``secrets`` — whichever process writes
    (``warden run``, ``warden pins approve`` in another terminal), so none needs to have seen the launch.

    On entry: take the lock, recover (cut a torn tail, check the tree against what was committed and published),
    append ``audit.opened`` (and ``audit.recovered`` if recovery changed anything). On exit: commit what is
    pending, append ``audit.closed`` and publish a final checkpoint (shielded, bounded to 10 s).

    ``clock`` gives POSIX seconds for ``untrusted_time`` and checkpoint pacing; ``checkpoint_interval`` is the
    least time between two published checkpoints while records flow.

    Raises:
        StateError, AuditUnavailable: the state directory, its secrets registry or the log's files are unusable.
        VerificationError: the log is shorter than or inconsistent with what it committed or published.
        AuditLogFailed: an I/O error.
    """
    store = await trio.to_thread.run_sync(lambda: Store.open(state_dir, clock=clock,
                                                             checkpoint_interval=checkpoint_interval,
                                                             origin=origin))
    log = AuditLog(store, clock=clock)
    try:
        log._redactor = await trio.to_thread.run_sync(load_redactor, state_dir, tuple(secrets))
        log._start_writer()
        try:
            await log.append(Record(event=Event.AUDIT_OPENED))
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
                    except AuditDiskFull:
                        pass  # paused: audit.paused is the log's last word until a later run resumes it
            await log._stop_writer()
    finally:
        store.close()

