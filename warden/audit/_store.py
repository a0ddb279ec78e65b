"""The audit log on disk: one tree shared by every warden process of a state directory. Synchronous.

Layout (``<state>/audit/``, see ``audit/FORMAT.md`` for the full argument)::

    log.json          {"format", "origin"}: created once, exclusively
    lock              flock(LOCK_EX) held for each batch (never across batches)
    entries.log       frames of canonical JSON records, append-only
    hashes.bin        every tree hash once, 32 bytes each, in stored-hash order (derived; rebuilt on recovery)
    head              112 bytes rewritten in place after each batch (not fsynced): size, entries end, root,
                      last published checkpoint, end of checkpoints.log
    state             durable recovery anchor, replaced atomically whenever a checkpoint is published
    checkpoints.log   frames of every published signed checkpoint, append-only
    checkpoint        the latest signed checkpoint, replaced atomically (for handing to a witness)

and ``<state>/keys/audit-signing.key`` (0600), the Ed25519 key whose name is the log's origin.

One batch (``commit``), under the lock: read the head; if another process appended, load its frontier; if a
process died mid-batch (files longer than the head says), roll its complete frames forward and cut the torn rest;
append the new frames and hashes; ``fdatasync`` entries.log; rewrite the head; maybe publish a checkpoint. The
``fdatasync`` is the commit point: every frame before it is complete and durable, and recovery keeps every
complete frame. Nothing is acknowledged before it returns.

A :class:`Store` is used by one thread at a time; the async layer (``warden.audit._log``) serializes batches.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import hashlib
import json
import os
import secrets
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgspec

from warden.audit._checkpoint import Checkpoint, SignedCheckpoint, open_checkpoint, sign_checkpoint
from warden.audit._errors import AuditDiskFull, AuditLogFailed, AuditUnavailable
from warden.audit._files import KEY_FILE, load_signer, open_private, read_all, read_private_text
from warden.audit._format import (
    FRAME_CRC,
    FRAME_HEADER,
    FRAME_NOTE,
    FRAME_RECORD,
    HEAD_SIZE,
    LOG_FORMAT,
    Head,
    State,
    decode_head,
    decode_state,
    encode_frame,
    encode_head,
    encode_state,
    scan_frames,
)
from warden.audit._merkle import (
    EMPTY_ROOT,
    HASH_SIZE,
    Frontier,
    consistency_proof,
    leaf_hash,
    stored_hash_count,
    tree_hash,
    verify_consistency,
)
from warden.audit._note import Ed25519Signer, NoteError, check_key_name
from warden.audit._records import (
    RECORD_VERSION,
    Event,
    InvalidRecord,
    PreparedRecord,
    Record,
    Recovery,
    decode_record,
    prepare_record,
)
from warden.audit._reserve import RESUME_FREE, DiskReserve, out_of_space
from warden.durable import pwrite_all, replace_file, write_new_file
from warden.errors import VerificationError
from warden.escape import char_class, for_terminal
from warden.paths import ensure_private_dir

__all__ = ["AUDIT_DIR", "Store", "check_origin", "format_time", "new_origin"]

AUDIT_DIR: Final = "audit"
ENTRIES: Final = "entries.log"
HASHES: Final = "hashes.bin"
HEAD: Final = "head"
STATE: Final = "state"
NOTES: Final = "checkpoints.log"
CHECKPOINT: Final = "checkpoint"
META: Final = "log.json"
LOCK: Final = "lock"


_last_second: list[tuple[int, str]] = [(-1, "")]


def format_time(t: float) -> str:
    """RFC 3339 UTC with microseconds, fixed width (so text order is time order).

    Called for every record; the date part is cached per second (``strftime`` costs several µs).
    """
    us = round(t * 1_000_000)
    second, micro = divmod(us, 1_000_000)
    cached_second, text = _last_second[0]
    if second != cached_second:
        text = datetime.datetime.fromtimestamp(second, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _last_second[0] = (second, text)
    return f"{text}.{micro:06d}Z"


def new_origin() -> str:
    """A fresh, unique log identity: a schema-less URL that names no real host."""
    return f"warden.invalid/audit/{secrets.token_hex(16)}"


def check_origin(origin: str) -> None:
    """A log origin is a key name (C2SP) that a person can also read as it is: nothing :func:`char_class` flags.

    The origin is the log key's name, so it is printed by ``verify``, ``key``, ``checkpoint``, ``check-proof`` and
    the report; a log handed to a responder comes with its own ``log.json`` and key. A C1 control (U+009B is a CSI),
    a bidi override or a zero-width character in it would reach the responder's terminal, or make a fresh log's
    origin read exactly like the real one's. warden's own origins are ASCII (:func:`new_origin`).

    Raises:
        NoteError: not a valid key name, or it holds a character that does not read as itself.
    """
    check_key_name(origin)
    bad = next((ch for ch in origin if char_class(ch) is not None), None)
    if bad is not None:
        raise NoteError(f"log origin '{for_terminal(origin)}' holds U+{ord(bad):04X} ({char_class(bad)}): an origin "
                        f"must read as it is")


@dataclass(frozen=True, slots=True)
class _Meta:
    origin: str


class Store:
    """The audit log files of one state directory, opened for writing (see module docstring).

    Every method that touches the disk turns any failure into :class:`AuditLogFailed` and stays failed: a log
    that could not write is never trusted to write again in this process.
    """

    def __init__(self, state_dir: Path, *, clock: Callable[[], float], checkpoint_interval: float) -> None:
        self.state_dir = state_dir
        self.dir = state_dir / AUDIT_DIR
        self._clock = clock
        self._interval_ms = int(checkpoint_interval * 1000)
        self.pid = os.getpid()
        self._fds: dict[str, int] = {}
        self._dir_fd = -1
        self._failed: AuditLogFailed | None = None
        self.origin = ""
        self._signer: Ed25519Signer | None = None
        # The tree as this process last saw it (it may lag other writers until the next lock).
        self.size = 0
        self.entries_end = 0
        self.frontier = Frontier()
        self.published_size = 0
        self.published_root = EMPTY_ROOT
        self.published_at_ms = 0
        self.notes_end = 0
        self.latest: SignedCheckpoint | None = None
        self._notices: list[Record] = []
        self.recovery: Recovery | None = None
        self._reserve: DiskReserve | None = None
        self._paused: AuditDiskFull | None = None
        self._head_bytes = b""
        """The head as this process last wrote it: finding it unchanged (and the files the sizes it gives) under
        the lock means no other writer came between two of this process's batches, so there is nothing to
        catch up on (see :meth:`_sync`)."""

    # ------------------------------------------------------------------------------------------------ open/close

    @classmethod
    def open(cls, state_dir: Path, *, clock: Callable[[], float] = time.time, checkpoint_interval: float = 1.0,
             origin: str | None = None) -> Store:
        """Open (creating on first use) the log under ``state_dir``, take the lock and recover.

        Raises:
            StateError, AuditUnavailable: the state directory or the log's files are unusable.
            VerificationError: recovery found the log shorter than, or inconsistent with, what it had committed
                or published (records removed, a rollback, or damage). Never repaired silently.
            AuditLogFailed: an I/O error.
        """
        store = cls(state_dir, clock=clock, checkpoint_interval=checkpoint_interval)
        try:
            store._open(origin)
        except BaseException:
            store.close()
            raise
        return store

    def _open(self, origin: str | None) -> None:
        ensure_private_dir(self.state_dir)
        ensure_private_dir(self.dir)
        ensure_private_dir(self.state_dir / KEY_FILE.parent)
        try:
            self._dir_fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            self._fds[LOCK] = open_private(self.dir / LOCK, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            raise AuditUnavailable(f"cannot open the audit log in {self.dir}: {exc.strerror}",
                                   hint="check the state directory's permissions and free space") from exc
        with self._locked():
            try:
                for name in (ENTRIES, HASHES, HEAD, NOTES):
                    self._fds[name] = open_private(self.dir / name, os.O_RDWR | os.O_CREAT)
                self._reserve = DiskReserve(self._fds[ENTRIES], self._fds[HASHES], self._fds[NOTES])
                os.fsync(self._dir_fd)
                meta = self._init_meta(origin)
                self.origin = meta.origin
                self._signer = self._init_key(meta.origin)
                self._recover(reason="opened")
            except OSError as exc:
                raise self._fail(exc) from exc

    def close(self) -> None:
        """Close every file (releasing the lock). Publishing a last checkpoint is the caller's job."""
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()
        if self._dir_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._dir_fd)
            self._dir_fd = -1

    @property
    def failed(self) -> AuditLogFailed | None:
        return self._failed

    @property
    def paused(self) -> AuditDiskFull | None:
        """Set while the disk is full (see ``warden.audit._reserve``): every batch is refused with it."""
        return self._paused

    @property
    def signer(self) -> Ed25519Signer:
        assert self._signer is not None
        return self._signer

    @property
    def root(self) -> bytes:
        return self.frontier.root()

    # ------------------------------------------------------------------------------------------------ helpers

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = self._fds[LOCK]
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _fail(self, exc: BaseException) -> AuditLogFailed:
        if self._failed is None:
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            self._failed = AuditLogFailed(
                f"the audit log could not be written ({detail}); warden allows no further actions",
                hint="fix the disk (space, permissions, errors), then restart warden; recovery checks the log")
        return self._failed

    def _read_hashes(self, positions: Sequence[int]) -> list[bytes]:
        fd = self._fds[HASHES]
        out = []
        for pos in positions:
            h = os.pread(fd, HASH_SIZE, pos * HASH_SIZE)
            if len(h) != HASH_SIZE:
                raise VerificationError(f"{HASHES} ends before stored hash {pos}",
                                        hint="the hash file was cut short; run `warden audit verify`")
            out.append(h)
        return out

    def _size_of(self, name: str) -> int:
        return os.fstat(self._fds[name]).st_size

    def _head(self) -> Head:
        return Head(self.size, self.entries_end, self.frontier.root(), self.published_size, self.published_root,
                    self.published_at_ms, self.notes_end)

    def _write_head(self) -> None:
        data = encode_head(self._head())
        pwrite_all(self._fds[HEAD], data, 0)
        self._head_bytes = data

    def _init_meta(self, origin: str | None) -> _Meta:
        path = self.dir / META
        try:
            doc = json.loads(read_private_text(path))
        except FileNotFoundError:
            return self._create_meta(origin)
        except (ValueError, UnicodeDecodeError) as exc:
            raise AuditUnavailable(f"{path} is not valid JSON", hint="restore it from a backup") from exc
        if not isinstance(doc, dict) or doc.get("format") != LOG_FORMAT or not isinstance(doc.get("origin"), str):
            raise AuditUnavailable(f"{path} is not a {LOG_FORMAT} log",
                                   hint="this state directory holds a log warden cannot read")
        try:
            check_origin(doc["origin"])
        except NoteError as exc:
            raise AuditUnavailable(f"{path} is not a log warden wrote: {exc}",
                                   hint="keep this state directory as evidence") from exc
        if origin is not None and origin != doc["origin"]:
            raise AuditUnavailable(f"the log in {self.dir} is '{for_terminal(doc['origin'])}', not "
                                   f"'{for_terminal(origin)}'")
        return _Meta(doc["origin"])

    def _create_meta(self, origin: str | None) -> _Meta:
        if self._size_of(ENTRIES) or self._size_of(NOTES):
            raise AuditUnavailable(f"{self.dir / META} is missing but the log has records",
                                   hint="restore log.json from a backup; warden will not guess a log's identity")
        if (self.state_dir / KEY_FILE).exists():
            raise AuditUnavailable(
                f"an audit signing key exists ({self.state_dir / KEY_FILE}) but its log is gone",
                hint="the log was deleted or moved: restore it. To start a new log on purpose, move the old key "
                     "away first (it still verifies the old log's checkpoints)")
        origin = origin or new_origin()
        try:
            check_origin(origin)
        except NoteError as exc:
            raise AuditUnavailable(f"invalid log origin: {exc}") from exc
        doc = {"format": LOG_FORMAT, "origin": origin}
        write_new_file(self.dir / META, (json.dumps(doc, sort_keys=True) + "\n").encode())
        return _Meta(origin)

    def _init_key(self, origin: str) -> Ed25519Signer:
        path = self.state_dir / KEY_FILE
        try:
            signer = load_signer(path)
        except FileNotFoundError:
            if self._size_of(NOTES):
                raise AuditUnavailable(f"the audit signing key {path} is missing but the log has signed "
                                       f"checkpoints", hint="restore the key from a backup; a log never changes "
                                       "keys") from None
            signer = Ed25519Signer.generate(origin)
            write_new_file(path, (signer.skey + "\n").encode())
            return signer
        if signer.name != origin:
            raise AuditUnavailable(f"the signing key {path} belongs to log {signer.name!r}, not {origin!r}",
                                   hint="restore this log's own key")
        return signer

    # ------------------------------------------------------------------------------------------------ recovery

    def _last_note(self) -> tuple[SignedCheckpoint | None, int]:
        """The last complete checkpoint in checkpoints.log and the offset where complete frames end."""
        fd = self._fds[NOTES]
        data = read_all(fd, 0, self._size_of(NOTES))
        last = None
        for frame in scan_frames(data, 0, FRAME_NOTE):
            last = frame
        if last is None:
            return None, 0
        # Only the newest is checked here (each open stays O(1) in the history); `verify` checks them all.
        return self._open_note(last.payload, f"{NOTES} at byte {last.start}"), last.end

    def _open_note(self, note: bytes, where: str) -> SignedCheckpoint:
        try:
            signed, _ = open_checkpoint(note, self.signer.verifier, origin=self.origin)
        except NoteError as exc:
            raise VerificationError(f"the checkpoint in {where} does not verify with this log's key: {exc}",
                                    hint="checkpoints were replaced or forged; run `warden audit verify`") from exc
        return signed

    def _recover(self, *, reason: str) -> None:
        """Full recovery from the durable anchor. Lock held. See FORMAT.md "Recovery"."""
        state = self._read_state()
        head = decode_head(os.pread(self._fds[HEAD], HEAD_SIZE, 0))
        last_note, notes_end = self._last_note()
        torn_notes = self._size_of(NOTES) - notes_end
        if torn_notes:
            os.ftruncate(self._fds[NOTES], notes_end)
            os.fdatasync(self._fds[NOTES])
        file_cp = self._read_checkpoint_file()
        published = [cp for cp in (last_note, file_cp) if cp is not None]
        lower = max([state.size, head.size if head else 0, *(cp.size for cp in published)])
        recovery = self._roll_forward(state.size, state.entries_end, state.root, lower, reason)
        for cp in published:
            self._check_against(cp)
        self.notes_end = notes_end
        if last_note is not None:
            self.latest = last_note
            self.published_size, self.published_root = last_note.size, last_note.root
            self.published_at_ms = head.published_at_ms if head and head.published_size == last_note.size else 0
            if file_cp is None or file_cp.note != last_note.note:
                replace_file(self._dir_fd, CHECKPOINT, last_note.note)
        elif file_cp is not None:
            raise VerificationError(f"{CHECKPOINT} holds a checkpoint that {NOTES} does not",
                                    hint="checkpoint history was removed; run `warden audit verify`")
        os.fdatasync(self._fds[ENTRIES])
        os.fdatasync(self._fds[HASHES])
        try:
            replace_file(self._dir_fd, STATE, encode_state(State(self.size, self.entries_end, self.frontier.root())))
        except OSError as exc:
            if not out_of_space(exc):
                raise
            # A full disk: the older anchor stays, and is valid (recovery rolls forward from it); the first batch
            # will pause the log if there is no room for it (see warden.audit._reserve).
        self._write_head()
        why = []
        if recovery.truncated_bytes:
            why.append(f"cut a torn tail of {recovery.truncated_bytes} bytes from {ENTRIES}")
        if torn_notes:
            why.append(f"cut a torn tail of {torn_notes} bytes from {NOTES}")
        if self.size and (head is None or head.size != self.size or head.entries_end != self.entries_end):
            why.append("the shared head was missing or stale (a crash)")
        if why:
            self.recovery = msgspec.structs.replace(recovery, truncated_bytes=recovery.truncated_bytes + torn_notes,
                                                    reason=f"{reason}: {'; '.join(why)}"[:256])
            self._notices.append(Record(event=Event.AUDIT_RECOVERED, recovered=self.recovery))

    def _read_state(self) -> State:
        path = self.dir / STATE
        try:
            data = read_private_text(path).encode()
        except FileNotFoundError:
            if self._size_of(NOTES):
                raise VerificationError(f"{path} is missing but checkpoints were published",
                                        hint="the log's state was removed; run `warden audit verify`") from None
            return State(0, 0, EMPTY_ROOT)
        try:
            return decode_state(data)
        except ValueError as exc:
            raise VerificationError(f"{path} is damaged: {exc}", hint="run `warden audit verify`") from exc

    def _read_checkpoint_file(self) -> SignedCheckpoint | None:
        path = self.dir / CHECKPOINT
        try:
            data = read_private_text(path).encode()
        except FileNotFoundError:
            return None
        return self._open_note(data, CHECKPOINT)

    def _check_against(self, cp: SignedCheckpoint) -> None:
        """The tree must contain a published checkpoint: at least its size, and its root at that size."""
        if cp.size > self.size:
            raise VerificationError(
                f"the log holds {self.size} records but a checkpoint it published says {cp.size}: records were "
                f"removed or the log was rolled back", hint="keep this state directory as evidence; run "
                "`warden audit verify` with an external checkpoint")
        if cp.size and tree_hash(cp.size, self._read_hashes) != cp.root:
            raise VerificationError(
                f"the log's tree at size {cp.size} differs from the checkpoint it published for that size: "
                f"records were rewritten", hint="keep this state directory as evidence; run `warden audit verify`")

    def _roll_forward(self, anchor_size: int, anchor_end: int, anchor_root: bytes, lower: int,
                      reason: str) -> Recovery:
        """Keep every complete record frame after the anchor, cut a torn tail, rebuild their hashes.

        ``lower`` is the least size the log is known to have had (durable state, head, published checkpoints):
        ending below it means records were removed, which is reported, never repaired.
        """
        entries_fd, hashes_fd = self._fds[ENTRIES], self._fds[HASHES]
        file_size = self._size_of(ENTRIES)
        if file_size < anchor_end or self._size_of(HASHES) < stored_hash_count(anchor_size) * HASH_SIZE:
            raise VerificationError(
                f"{ENTRIES} or {HASHES} is shorter than the {anchor_size} records they held durably: records "
                f"were removed", hint="keep this state directory as evidence; run `warden audit verify`")
        frontier = Frontier.load(anchor_size, self._read_hashes)
        if frontier.root() != anchor_root:
            raise VerificationError(f"{HASHES} does not match the durable state at size {anchor_size}",
                                    hint="run `warden audit verify` to find the damage")
        tail = read_all(entries_fd, anchor_end, file_size - anchor_end)
        new_hashes = bytearray()
        end = 0
        for frame in scan_frames(tail, 0, FRAME_RECORD):
            try:
                record = decode_record(frame.payload, deep=False)
            except (msgspec.ValidationError, msgspec.DecodeError, InvalidRecord):
                break
            if record.index != frontier.size or record.v != RECORD_VERSION:
                raise VerificationError(
                    f"the record at byte {anchor_end + frame.start} of {ENTRIES} claims index {record.index}, "
                    f"but it is record {frontier.size}", hint="run `warden audit verify` to find the damage")
            for h in frontier.append(leaf_hash(frame.payload)):
                new_hashes += h
            end = frame.end
        if frontier.size < lower:
            raise VerificationError(
                f"the log ends after {frontier.size} records, but {lower} were committed or published: records "
                f"were removed or damaged, or the log was rolled back to an older copy",
                hint="keep this state directory as evidence; run `warden audit verify`")
        torn = len(tail) - end
        if torn:
            os.ftruncate(entries_fd, anchor_end + end)
        hashes_at = stored_hash_count(anchor_size) * HASH_SIZE
        pwrite_all(hashes_fd, new_hashes, hashes_at)
        os.ftruncate(hashes_fd, hashes_at + len(new_hashes))
        self.size, self.entries_end, self.frontier = frontier.size, anchor_end + end, frontier
        return Recovery(anchor_size=anchor_size, size=frontier.size, truncated_bytes=torn, reason=reason)

    def _sync(self) -> None:
        """Catch up with the shared head (lock held): other writers' batches, or a writer that died mid-batch.

        Every writer rewrites the head after each batch and each published checkpoint, so when the head still holds
        the bytes this process last wrote and no file has grown or shrunk since, nobody else committed,
        published or died mid-batch in between: the common case of one busy process costs one read and three
        ``fstat``s. Anything else takes the full check below.
        """
        data = os.pread(self._fds[HEAD], HEAD_SIZE, 0)
        if data == self._head_bytes and self._size_of(ENTRIES) == self.entries_end and \
                self._size_of(HASHES) == stored_hash_count(self.size) * HASH_SIZE and \
                self._size_of(NOTES) == self.notes_end:
            return
        head = decode_head(data)
        if head is None:
            self._recover(reason="head unreadable")
            return
        if head.size != self.size or head.entries_end != self.entries_end or head.root != self.frontier.root():
            frontier = Frontier.load(head.size, self._read_hashes)
            if frontier.root() != head.root:
                raise VerificationError(f"{HASHES} does not match the head at size {head.size}",
                                        hint="run `warden audit verify` to find the damage")
            self.size, self.entries_end, self.frontier = head.size, head.entries_end, frontier
        self.published_size, self.published_root = head.published_size, head.published_root
        self.published_at_ms, self.notes_end = head.published_at_ms, head.notes_end
        entries, hashes = self._size_of(ENTRIES), self._size_of(HASHES)
        want_hashes = stored_hash_count(self.size) * HASH_SIZE
        if entries < self.entries_end or hashes < want_hashes:
            raise VerificationError(f"{ENTRIES} or {HASHES} is shorter than the committed head: records were "
                                    f"removed while warden was running", hint="keep this state directory as evidence")
        if entries > self.entries_end or hashes > want_hashes:
            rec = self._roll_forward(self.size, self.entries_end, self.frontier.root(), self.size,
                                     "a writer stopped mid-batch")
            os.fdatasync(self._fds[ENTRIES])
            self._write_head()
            self._notices.append(Record(event=Event.AUDIT_RECOVERED, recovered=rec))
        notes = self._size_of(NOTES)
        if notes != self.notes_end:
            self._sync_notes(notes)

    def _sync_notes(self, file_size: int) -> None:
        """checkpoints.log does not end where the head says: adopt complete checkpoints, cut a torn one."""
        if file_size < self.notes_end:
            raise VerificationError(f"{NOTES} is shorter than the head says: checkpoint history was removed",
                                    hint="keep this state directory as evidence")
        data = read_all(self._fds[NOTES], self.notes_end, file_size - self.notes_end)
        end = 0
        for frame in scan_frames(data, 0, FRAME_NOTE):
            cp = self._open_note(frame.payload, f"{NOTES} at byte {self.notes_end + frame.start}")
            self._check_against(cp)
            self.latest, self.published_size, self.published_root = cp, cp.size, cp.root
            end = frame.end
        if end != len(data):
            os.ftruncate(self._fds[NOTES], self.notes_end + end)
        self.notes_end += end
        os.fdatasync(self._fds[NOTES])
        self._write_head()

    # ------------------------------------------------------------------------------------------------ writing

    def prepare(self, record: Record) -> PreparedRecord:
        """Check and encode a record for :meth:`commit_prepared`, stamping it with this writer's clock and pid."""
        return prepare_record(record, untrusted_time=record.untrusted_time or format_time(self._clock()),
                              pid=self.pid)

    @property
    def checkpoint_interval(self) -> float:
        """The least time, in seconds, between two checkpoints this store publishes while records flow."""
        return self._interval_ms / 1000

    @property
    def unpublished(self) -> bool:
        """Whether records were committed that no published checkpoint covers yet."""
        return self.size > self.published_size

    def _due(self, now_ms: int) -> bool:
        return now_ms - self.published_at_ms >= self._interval_ms or now_ms < self.published_at_ms

    def commit(self, records: Sequence[Record], *, publish: bool = False) -> int:
        """Check, encode and append ``records`` (see :meth:`commit_prepared`)."""
        return self.commit_prepared([self.prepare(r) for r in records], publish=publish)

    def commit_prepared(self, records: Sequence[PreparedRecord], *, publish: bool = False) -> int:
        """Append ``records`` durably, in order, and return the index of the first one.

        Pending notices (e.g. ``audit.recovered``) go first. ``publish`` forces a checkpoint; otherwise one is
        published when the interval has passed.

        Raises:
            AuditLogFailed: now or earlier; the log is failed for good.
            AuditDiskFull: the disk is full: nothing of the batch was written and the log is paused (see
                ``warden.audit._reserve``).
        """
        if self._failed is not None:
            raise self._failed
        try:
            with self._locked():
                self._sync()
                if self._paused is not None:
                    self._try_resume()
                batch = [*(self.prepare(n) for n in self._notices), *records]
                first = self.size + len(batch) - len(records)
                self._append(batch)
                self._notices.clear()
                self._maybe_publish(force=publish)
                return first
        except VerificationError as exc:
            self._failed = AuditLogFailed(f"the audit log is damaged: {exc.message}; warden allows no further "
                                          f"actions", hint=exc.hint)
            raise self._failed from exc
        except AuditDiskFull:
            raise
        except Exception as exc:
            raise self._fail(exc) from exc

    def _pause(self) -> AuditDiskFull:
        """The disk is full: write ``audit.paused`` into the reserve and refuse batches until there is room."""
        free = os.fstatvfs(self._dir_fd)
        self._paused = AuditDiskFull(
            f"the disk holding warden's audit log ({self.dir}) is full ({free.f_bavail * free.f_frsize // 1024} "
            "KiB free): warden refuses every audited action until space is freed",
            hint="free space on that file system; warden resumes by itself, and the audit log records the pause "
                 "and the resumption")
        notice = Record(event=Event.AUDIT_PAUSED, reason=self._paused.message)
        self._append([self.prepare(notice)], reserved=True)
        return self._paused

    def _try_resume(self) -> None:
        """While paused: resume once the disk has a whole reserve free again and the reserve is topped up (then
        ``audit.resumed`` goes first). Waiting for free space, not just for a batch small enough to fit, keeps
        the log from flapping between paused and resumed on a disk that stays full."""
        assert self._reserve is not None
        assert self._paused is not None
        free = os.fstatvfs(self._dir_fd)
        if free.f_bavail * free.f_frsize < RESUME_FREE or \
                not self._reserve.make_room(self.entries_end, 0, stored_hash_count(self.size) * HASH_SIZE, 0):
            raise self._paused
        self._paused = None
        self._notices.insert(0, Record(event=Event.AUDIT_RESUMED, reason="the disk has room again for the audit "
                                                                        "log's reserve: audited actions resume"))

    def _append(self, batch: Sequence[PreparedRecord], *, reserved: bool = False) -> None:
        """Write and sync ``batch``. ``reserved``: write into the reserve itself (the paused notice), without
        topping it up.

        Raises:
            AuditDiskFull: the disk cannot keep the reserve after this batch: nothing of it was written, and the log
                paused (:meth:`_pause`).
        """
        if not batch:
            return
        frames = bytearray()
        hashes = bytearray()
        frontier = self.frontier
        index = self.size
        header, crc_of = FRAME_HEADER.pack, zlib.crc32
        crc_pack = FRAME_CRC.pack
        sha256 = hashlib.sha256
        datas = []
        for prepared in batch:
            data = prepared.at(index)
            head = header(0xFF, FRAME_RECORD, len(data))
            frames += head
            frames += data
            frames += crc_pack(crc_of(data, crc_of(head[1:])))
            datas.append(data)
            index += 1
        hashes_at = stored_hash_count(self.size) * HASH_SIZE
        if not reserved and self._reserve is not None and not self._reserve.make_room(
                self.entries_end, len(frames), hashes_at, stored_hash_count(index) * HASH_SIZE - hashes_at):
            raise self._pause()  # before the frontier below moves: nothing of this batch exists
        for data in datas:
            for h in frontier.append(sha256(b"\x00" + data).digest()):
                hashes += h
        pwrite_all(self._fds[ENTRIES], frames, self.entries_end)
        pwrite_all(self._fds[HASHES], hashes, hashes_at)
        os.fdatasync(self._fds[ENTRIES])
        self.size = index
        self.entries_end += len(frames)
        self._write_head()

    def publish(self) -> SignedCheckpoint:
        """Publish a checkpoint for everything committed so far (by any process) and return it.

        Raises:
            AuditLogFailed: now or earlier.
            AuditDiskFull: paused, or no room for the checkpoint.
        """
        if self._failed is not None:
            raise self._failed
        if self._paused is not None:
            raise self._paused
        try:
            with self._locked():
                self._sync()
                batch = [self.prepare(n) for n in self._notices]
                self._append(batch)
                self._notices.clear()
                self._maybe_publish(force=True)
        except VerificationError as exc:
            self._failed = AuditLogFailed(f"the audit log is damaged: {exc.message}", hint=exc.hint)
            raise self._failed from exc
        except AuditDiskFull:
            raise
        except Exception as exc:
            raise self._fail(exc) from exc
        if self.latest is None or self.latest.size != self.size:
            raise AuditDiskFull(f"no room on the disk holding warden's audit log ({self.dir}) to publish a "
                                "checkpoint", hint="free space on that file system")
        return self.latest

    def _maybe_publish(self, *, force: bool) -> None:
        if self.notes_end and self.size == self.published_size:
            if self.latest is None or self.latest.size != self.size:
                self.latest = self._read_checkpoint_file()  # another process published it
            return  # nothing new since the last checkpoint
        now_ms = int(self._clock() * 1000)
        if not force and not (self.size and self._due(now_ms)):
            return
        root = self.frontier.root()
        if self.published_size:
            # Never sign a tree that does not extend the last published one (C2SP tlog-checkpoint).
            if tree_hash(self.published_size, self._read_hashes) != self.published_root:
                raise VerificationError(f"refusing to sign: the tree no longer matches the checkpoint published "
                                        f"at size {self.published_size}", hint="run `warden audit verify`")
            if self.size > self.published_size:
                proof = consistency_proof(self.published_size, self.size, self._read_hashes)
                verify_consistency(self.published_size, self.size, proof, self.published_root, root)
        signed = sign_checkpoint(Checkpoint(self.origin, self.size, root), self.signer)
        frame = encode_frame(FRAME_NOTE, signed.note)
        if self._reserve is not None and not self._reserve.room_for_checkpoint(self.notes_end, len(frame)):
            return  # a full disk: published later (see warden.audit._reserve); the records are durable already
        os.fdatasync(self._fds[HASHES])
        pwrite_all(self._fds[NOTES], frame, self.notes_end)
        os.fdatasync(self._fds[NOTES])
        self.notes_end += len(frame)
        try:
            replace_file(self._dir_fd, STATE, encode_state(State(self.size, self.entries_end, root)))
            replace_file(self._dir_fd, CHECKPOINT, signed.note)
        except OSError as exc:
            if not out_of_space(exc):
                raise
            # The checkpoint is durable in checkpoints.log; these two copies lag until there is room (recovery
            # rebuilds the checkpoint file from checkpoints.log, and an older state is a valid anchor).
        self.latest = signed
        self.published_size, self.published_root, self.published_at_ms = self.size, root, now_ms
        self._write_head()
