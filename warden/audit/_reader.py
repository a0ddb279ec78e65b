"""Read an audit log without writing to it or taking its lock: for verify, show, tail, prove and export.

Writers only ever append past the committed end recorded in the head, and recovery only cuts bytes past it, so a
reader that stops at the head's ``entries_end`` sees a stable, complete prefix even while several warden
processes keep appending. A head that is missing or damaged (a crash) makes the reader use the whole file; the
verifier then reports a torn tail, which the next writer's recovery removes.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from warden.audit._files import KEY_FILE, load_signer, read_all
from warden.audit._format import FRAME_NOTE, FRAME_OVERHEAD, FRAME_RECORD, HEAD_SIZE, Head, decode_head, scan_frames
from warden.audit._merkle import HASH_SIZE, inclusion_proof
from warden.audit._note import Ed25519Verifier, NoteError
from warden.audit._store import AUDIT_DIR, CHECKPOINT, ENTRIES, HASHES, HEAD, META, NOTES, check_origin
from warden.audit._verify import CheckpointSource
from warden.errors import AuditError, StateError, VerificationError

__all__ = ["LogFollower", "LogReader", "RawRecord"]


@dataclass(frozen=True, slots=True)
class RawRecord:
    index: int
    offset: int
    data: bytes

    @property
    def end(self) -> int:
        """Where the next frame starts."""
        return self.offset + FRAME_OVERHEAD + len(self.data)


class LogReader:
    """A read-only view of one audit log (a context manager; it maps entries.log)."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir / AUDIT_DIR
        self.state_dir = state_dir
        meta = self.dir / META
        try:
            doc = json.loads(meta.read_text())
        except FileNotFoundError:
            raise AuditError(f"no audit log in {self.dir}", hint="run warden at least once, or pass --state-dir"
                             ) from None
        except (OSError, ValueError) as exc:
            raise AuditError(f"cannot read {meta}: {exc}") from exc
        if not isinstance(doc, dict) or not isinstance(doc.get("origin"), str):
            raise AuditError(f"{meta} is not a warden audit log description")
        try:
            check_origin(doc["origin"])  # printed by every reading command: it must read as it is
        except NoteError as exc:
            raise AuditError(f"{meta} is not a log warden wrote: {exc}",
                             hint="keep this state directory as evidence") from exc
        self.origin: str = doc["origin"]
        self._fds: list[int] = []
        self._maps: list[mmap.mmap] = []
        # Order matters with live writers. A head read *before* the checkpoints says how much of checkpoints.log
        # must be complete; a head read *after* them covers every checkpoint read (checkpoints are published only
        # once the head covers their records), so the records mapped after it are never behind a checkpoint.
        self._notes_head = self._read_head()
        self._notes = self._read_optional(NOTES) or b""
        self._latest = self._read_optional(CHECKPOINT)
        self.head: Head | None = self._read_head()
        self.entries, self.file_size = self._map(ENTRIES)
        committed = self.head.entries_end if self.head and self.head.entries_end <= self.file_size else self.file_size
        #: How many bytes past the committed end exist (a batch being written right now, or a crash's torn tail).
        self.uncommitted = self.file_size - committed
        self.committed = memoryview(self.entries)[:committed] if self.entries is not None else memoryview(b"")
        self.hashes, _ = self._map(HASHES)

    def __enter__(self) -> LogReader:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self.committed.release()
        for m in self._maps:
            with contextlib.suppress(BufferError):
                m.close()
        for fd in self._fds:
            os.close(fd)
        self._maps.clear()
        self._fds.clear()

    def _read_head(self) -> Head | None:
        try:
            with open(self.dir / HEAD, "rb") as f:
                return decode_head(f.read(HEAD_SIZE))
        except FileNotFoundError:
            return None

    def _map(self, name: str) -> tuple[mmap.mmap | None, int]:
        try:
            fd = os.open(self.dir / name, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None, 0
        except OSError as exc:
            raise StateError(f"cannot open {self.dir / name}: {exc.strerror}") from exc
        self._fds.append(fd)
        size = os.fstat(fd).st_size
        if size == 0:
            return None, 0
        m = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
        self._maps.append(m)
        return m, size

    # -- keys and checkpoints -----------------------------------------------------------------------------------

    def local_verifier(self) -> Ed25519Verifier:
        """The log's public key, derived from the signing key next to it (only as good as that key's safety)."""
        path = self.state_dir / KEY_FILE
        try:
            return load_signer(path).verifier
        except FileNotFoundError:
            raise AuditError(f"no signing key at {path} to take the verifier key from",
                             hint="pass --vkey with the log's verifier key") from None

    def _read_optional(self, name: str) -> bytes | None:
        try:
            return (self.dir / name).read_bytes()
        except FileNotFoundError:
            return None

    def checkpoint_notes(self) -> list[CheckpointSource]:
        """Every published checkpoint: each frame of checkpoints.log, then the ``checkpoint`` file."""
        out: list[CheckpointSource] = []
        data = self._notes
        end = 0
        for n, frame in enumerate(scan_frames(data, 0, FRAME_NOTE)):
            out.append(CheckpointSource(f"{NOTES} checkpoint #{n + 1}", frame.payload))
            end = frame.end
        if end != len(data) and (self._notes_head is None or end < self._notes_head.notes_end):
            raise VerificationError(f"{NOTES} is damaged at byte {end}: checkpoint history was changed")
        latest = self.latest_note()
        if latest is not None:
            out.append(CheckpointSource(f"the {CHECKPOINT} file", latest))
        return out

    def release(self, upto: int) -> None:
        """Let go of the mapped pages of entries.log below byte ``upto`` (a pass over the log is past them), and
        of hashes.bin's.

        They stay in the page cache; a later read faults them back in. Without this, one pass over a large log
        keeps every page it touched resident in this process (RSS as large as the file)."""
        upto -= upto % mmap.PAGESIZE
        if self.entries is not None and upto > 0:
            self.entries.madvise(mmap.MADV_DONTNEED, 0, upto)
        if self.hashes is not None:  # read in order by verify, then a few pages per proof: fault back as needed
            self.hashes.madvise(mmap.MADV_DONTNEED)

    def latest_note(self) -> bytes | None:
        return self._latest

    # -- records ------------------------------------------------------------------------------------------------

    def records(self, start: int = 0) -> Iterator[RawRecord]:
        """Committed records in order from index ``start`` (no checks beyond the frame CRC: use verify for that)."""
        for index, frame in enumerate(scan_frames(self.committed, 0, FRAME_RECORD)):
            if index >= start:
                yield RawRecord(index, frame.start, frame.payload)

    def record_at(self, index: int) -> bytes:
        for raw in self.records():
            if raw.index == index:
                return raw.data
        raise AuditError(f"the log has no record {index}")

    def count(self) -> int:
        """Committed records (from the head, else by scanning)."""
        if self.head is not None and self.head.entries_end <= self.file_size:
            return self.head.size
        return sum(1 for _ in scan_frames(self.committed, 0, FRAME_RECORD))

    def inclusion_path(self, index: int, size: int) -> list[bytes]:
        """The inclusion proof of record ``index`` in the tree of ``size``, from hashes.bin (verify it!)."""
        hashes = self.hashes
        if hashes is None:
            raise AuditError("the log has no hash file", hint="start warden once to rebuild it")

        def read(positions: Sequence[int]) -> list[bytes]:
            assert hashes is not None
            out = []
            for p in positions:
                h = hashes[p * HASH_SIZE : (p + 1) * HASH_SIZE]
                if len(h) != HASH_SIZE:
                    raise AuditError("hashes.bin is shorter than the tree", hint="start warden once to rebuild it")
                out.append(bytes(h))
            return out

        return inclusion_proof(index, size, read)



class LogFollower:
    """Committed records as writers commit them, from a known position: for ``export --follow`` (``tail -f``).

    Each :meth:`poll` reads the head (112 bytes) and, when it says more is committed, only the new bytes of
    entries.log, so following a large log costs nothing per poll while it is idle. Like :class:`LogReader` it
    takes no lock and never reads past the head's committed end.
    """

    def __init__(self, state_dir: Path, *, index: int, offset: int) -> None:
        self.dir = state_dir / AUDIT_DIR
        self.index = index
        self.offset = offset

    def poll(self) -> list[RawRecord]:
        """The records committed since the last poll (possibly none)."""
        try:
            with open(self.dir / HEAD, "rb") as f:
                head = decode_head(f.read(HEAD_SIZE))
        except FileNotFoundError:
            return []
        if head is None or head.entries_end <= self.offset:
            return []  # a head being rewritten, or nothing new
        try:
            fd = os.open(self.dir / ENTRIES, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError as exc:
            raise StateError(f"cannot open {self.dir / ENTRIES}: {exc.strerror}") from exc
        try:
            data = read_all(fd, self.offset, head.entries_end - self.offset)
        finally:
            os.close(fd)
        out = []
        for frame in scan_frames(data, 0, FRAME_RECORD):
            out.append(RawRecord(self.index, self.offset + frame.start, frame.payload))
            self.index += 1
        if out:
            self.offset = out[-1].end
        return out
