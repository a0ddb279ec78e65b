"""Verify an audit log from its bytes: a full recompute, every checkpoint, and one specific error.

Pure: takes the bytes of ``entries.log`` (the committed part), the signed checkpoints to check it against (from
``checkpoints.log``, the ``checkpoint`` file, or handed in from elsewhere) and the log's public key; returns a
:class:`VerifiedLog` or raises exactly one :class:`~warden.errors.VerificationError` whose message says what is
wrong and where. It never repairs and never trusts ``hashes.bin`` or the head: everything is recomputed.

What is checked, in order:

1. Every checkpoint: a well-formed signed note, signed by the log key, for this log's origin, no extension lines,
   and (for external ones) the required witness cosignatures. Two checkpoints of one size with different roots are
   a fork (:class:`ForkEvidence`).
2. Every frame: magic, length, CRC-32; the file must end exactly after a complete frame.
3. Every record: valid JSON of the record schema, version tag, ``index`` equal to its position (this names the
   place of a deleted, inserted or swapped record). ``deep`` adds per-field content checks and that the bytes are
   the record's RFC 8785 canonical form.
4. The tree: leaf hashes and the RFC 6962 root at every checkpoint's size must equal the checkpoint's root; no
   checkpoint may be larger than the log (records removed, or a rollback). Optionally ``hashes.bin`` must equal
   the recomputed stored hashes.

Because every checkpoint is compared with the same recomputed tree, they are pairwise consistent once this
passes. When one does not match, the error carries self-contained evidence: the checkpoint, the nearest one that
does match, and the consistency proof between them computed from the records.
"""

from __future__ import annotations

import base64
import hashlib
import mmap
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import msgspec

from warden.audit._checkpoint import SignedCheckpoint, open_checkpoint
from warden.audit._errors import ForkEvidence
from warden.audit._format import FRAME_HEADER, FRAME_OVERHEAD, FRAME_RECORD, MAX_FRAME_PAYLOAD
from warden.audit._merkle import EMPTY_ROOT, HASH_SIZE, consistency_proof, fold_frontier
from warden.audit._note import CosignatureVerifier, Ed25519Verifier, NoteError
from warden.audit._records import RECORD_VERSION, Detail, InvalidRecord, Record, decode_record, encode_record
from warden.canonical import CanonicalizationError, canonical_json
from warden.errors import VerificationError

__all__ = ["CheckpointSource", "VerifiedLog", "VerifyTrail", "verify_log"]

_CRC: Final = struct.Struct(">I")
_FAST_DECODER: Final = msgspec.json.Decoder(Record)
_PROGRESS_EVERY: Final = 1 << 16


@dataclass(frozen=True, slots=True)
class CheckpointSource:
    """A checkpoint to verify against and where it came from (for messages), e.g. ``checkpoints.log #3``."""

    label: str
    note: bytes
    external: bool = False


@dataclass(frozen=True, slots=True)
class VerifiedLog:
    """What a successful verification established."""

    origin: str
    size: int
    root: bytes
    checkpoints: int  # how many checkpoints were checked against the records
    latest: SignedCheckpoint | None  # the largest checkpoint (all of them match the records)
    first_time: str
    last_time: str


@dataclass(slots=True)
class VerifyTrail:
    """How far a verification got, filled in as it runs: what can still be trusted when it fails.

    ``trusted`` is the largest checkpoint that matched the records before verification stopped (every record below
    its size is exactly what the log key signed); ``records`` how many records were read and checked (frame,
    schema, index) and ``offset`` where reading stopped in entries.log.
    """

    records: int = 0
    offset: int = 0
    trusted: SignedCheckpoint | None = None


def _evidence(bad: SignedCheckpoint, good: SignedCheckpoint | None, proof: Sequence[bytes] | None) -> str:
    parts = ["SECURITY ERROR", "", "checkpoint that does not match the log's records:", "",
             bad.note.decode("utf-8", "replace")]
    if good is not None:
        parts += ["checkpoint that does match them:", "", good.note.decode("utf-8", "replace")]
        if proof is not None:
            lo, hi = sorted((bad.size, good.size))
            parts += [f"consistency proof from size {lo} to {hi}, computed from the records "
                      f"(it fails for the first checkpoint):"]
            parts += [base64.b64encode(h).decode("ascii") for h in proof]
    return "\n".join(parts) + "\n"


def verify_log(entries: bytes | memoryview, *, log_key: Ed25519Verifier, checkpoints: Sequence[CheckpointSource],
               hashes: bytes | memoryview | mmap.mmap | None = None, witnesses: Sequence[CosignatureVerifier] = (),
               quorum: int = 0, deep: bool = False, require_checkpoint: bool = True,
               progress: Callable[[int], None] | None = None, trail: VerifyTrail | None = None) -> VerifiedLog:
    """Verify the committed bytes of ``entries.log`` against ``checkpoints`` (see module docstring).

    ``witnesses``/``quorum`` apply to external checkpoints. ``require_checkpoint`` makes a log with records but no
    checkpoint fail (nothing would bind its records to the key). ``progress`` is called with the number of records
    checked so far, every 65,536 records. ``trail``, if given, records how far verification got (see
    :class:`VerifyTrail`), also when it raises; it is up to date whenever ``progress`` is called.

    Memory: the recomputed stored hashes are compared with ``hashes`` (when given) every 65,536 records and then
    dropped, so verifying keeps O(1) hashes beyond what ``hashes`` does not cover.

    Raises:
        VerificationError: the first problem found (``ForkEvidence`` when a signed checkpoint contradicts the
            records; its ``evidence`` holds both notes and the proof).
    """
    origin = log_key.name
    # (1) checkpoints
    signed: list[tuple[CheckpointSource, SignedCheckpoint]] = []
    for source in checkpoints:
        try:
            cp, _ = open_checkpoint(source.note, log_key, origin=origin,
                                    witnesses=witnesses if source.external else (),
                                    quorum=quorum if source.external else 0)
        except NoteError as exc:
            raise VerificationError(f"{source.label}: {exc}",
                                    hint="a checkpoint of another log, a forged one, or the wrong --vkey") from exc
        signed.append((source, cp))
    by_size: dict[int, tuple[CheckpointSource, SignedCheckpoint]] = {}
    for source, cp in signed:
        other = by_size.get(cp.size)
        if other is not None and other[1].root != cp.root:
            raise ForkEvidence(f"{source.label} and {other[0].label} are both signed by this log's key for size "
                               f"{cp.size} but have different roots: the log forked",
                               evidence=_evidence(cp, other[1], None),
                               hint="keep both checkpoints as evidence; the key holder signed two histories")
        by_size.setdefault(cp.size, (source, cp))
    sizes = sorted(by_size)

    # (2)-(4) records and tree
    view = memoryview(entries)
    total = len(view)
    stored = bytearray()  # recomputed stored hashes from position ``base`` on (earlier ones matched hashes.bin)
    base = 0
    hashes_view = memoryview(hashes) if hashes is not None else None
    if trail is None:
        trail = VerifyTrail()
    header = FRAME_HEADER
    sha256 = hashlib.sha256
    crc32 = zlib.crc32
    offset = 0
    index = 0
    next_cp = 0
    last_match: SignedCheckpoint | None = None
    first_time = last_time = ""

    def check_checkpoints_at(n: int, root: bytes) -> None:
        nonlocal next_cp, last_match
        while next_cp < len(sizes) and sizes[next_cp] == n:
            source, cp = by_size[n]
            if cp.root != root:
                proof = None
                if last_match is not None and last_match.size > 0:
                    proof = consistency_proof(last_match.size, n, _reader(stored, base, hashes_view))
                raise ForkEvidence(
                    f"{source.label} (size {n}) does not match the log's records: a record before index {n} "
                    f"was modified, removed, inserted or reordered"
                    + (f" after the checkpoint at size {last_match.size}" if last_match else ""),
                    evidence=_evidence(cp, last_match, proof),
                    hint="keep this state directory and the checkpoint as evidence")
            last_match = cp
            trail.trusted = cp
            next_cp += 1

    check_checkpoints_at(0, EMPTY_ROOT)
    # The hot loop (about 10 µs a record): no copies of the payload, one CRC call over type+length+payload
    # (contiguous in the frame), a fast decode, and an inlined frontier that writes stored hashes as it goes.
    levels: list[int] = []
    nodes: list[bytes] = []
    decode = _FAST_DECODER.decode
    leaf_prefix = sha256(b"\x00")
    data: memoryview | bytes = b""
    try:
        while offset < total:
            if total - offset < FRAME_OVERHEAD:
                raise VerificationError(f"entries.log ends inside {_where(index, offset)}: the file was truncated "
                                        f"or torn")
            magic, kind, length = header.unpack_from(view, offset)
            if magic != 0xFF or kind != FRAME_RECORD:
                raise VerificationError(f"{_where(index, offset)} does not start a record frame: bytes were "
                                        f"inserted, removed or overwritten")
            if length > MAX_FRAME_PAYLOAD:
                raise VerificationError(f"{_where(index, offset)} claims {length} bytes, more than a record may "
                                        f"hold")
            end = offset + FRAME_OVERHEAD + length
            if end > total:
                raise VerificationError(f"entries.log ends inside {_where(index, offset)}: the file was truncated "
                                        f"or torn")
            if _CRC.unpack_from(view, end - 4)[0] != crc32(view[offset + 1 : end - 4]):
                raise VerificationError(f"{_where(index, offset)} fails its CRC: its bytes were changed")
            data = view[offset + 6 : end - 4]
            try:
                record = decode(data)
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                raise VerificationError(f"{_where(index, offset)} is not a valid audit record: {exc}") from exc
            except RecursionError as exc:  # JSON nested deeper than msgspec parses (no writer produces it)
                raise VerificationError(f"{_where(index, offset)} is not a valid audit record: its JSON is nested "
                                        f"too deeply") from exc
            args = record.arguments
            if record.index != index or record.v != RECORD_VERSION or deep or (
                    args is not None and (args.detail is Detail.HASH) == args.has_value):
                _check_record(bytes(data), index, offset, deep)  # the slow path finds and names the problem
            if index == 0:
                first_time = _time_of(bytes(data))
            h = leaf_prefix.copy()
            h.update(data)
            node = h.digest()
            stored += node
            level = 0
            while levels and levels[-1] == level:
                levels.pop()
                node = sha256(b"\x01" + nodes.pop() + node).digest()
                stored += node
                level += 1
            levels.append(level)
            nodes.append(node)
            index += 1
            offset = end
            if next_cp < len(sizes) and sizes[next_cp] == index:
                check_checkpoints_at(index, fold_frontier(nodes))
            if not index & (_PROGRESS_EVERY - 1):
                base = _compare_hashes(hashes_view, stored, base)
                trail.records, trail.offset = index, offset
                if progress is not None:
                    progress(index)
    finally:
        trail.records, trail.offset = index, offset
    if index:
        last_time = _time_of(bytes(data))
    if next_cp < len(sizes):
        source, cp = by_size[sizes[next_cp]]
        raise VerificationError(
            f"the log holds {index} records but {source.label} says {cp.size}: records were removed from the end, "
            f"or the log was rolled back to an older copy",
            hint="keep this state directory and the checkpoint as evidence")
    if require_checkpoint and index and not sizes:
        raise VerificationError("the log has records but no signed checkpoint: nothing binds them to the log key",
                                hint="a log with its checkpoints removed; verify with a checkpoint kept elsewhere")
    _compare_hashes(hashes_view, stored, base)
    if progress is not None:
        progress(index)
    latest = by_size[sizes[-1]][1] if sizes else None
    return VerifiedLog(origin, index, fold_frontier(nodes), len(signed), latest, first_time, last_time)




def _compare_hashes(hashes_view: memoryview | None, stored: bytearray, base: int) -> int:
    """Compare the recomputed stored hashes (from position ``base``) with hashes.bin as far as both go; drop the
    ones that matched and return the new ``base``.

    hashes.bin may run ahead of the committed records (a batch being written) or, after a crash, behind them until
    the next start rebuilds it: only what both have is compared, and what hashes.bin lacks is kept.
    """
    if hashes_view is None:
        return base
    have = max(0, min(len(hashes_view) - base * HASH_SIZE, len(stored)))
    have -= have % HASH_SIZE
    if not have:
        return base
    start = base * HASH_SIZE
    if hashes_view[start : start + have] != memoryview(stored)[:have]:
        bad = next(i for i in range(0, have, HASH_SIZE)
                   if hashes_view[start + i : start + i + HASH_SIZE] != stored[i : i + HASH_SIZE])
        raise VerificationError(f"hashes.bin differs from the records at stored hash {base + bad // HASH_SIZE}: "
                                f"the hash cache was changed", hint="inclusion proofs from this cache would be wrong")
    del stored[:have]
    return base + have // HASH_SIZE


def _reader(stored: bytearray, base: int, hashes_view: memoryview | None) -> Callable[[Sequence[int]], list[bytes]]:
    """Stored hashes by position: below ``base`` from hashes.bin (already compared equal), then recomputed ones."""
    def read(positions: Sequence[int]) -> list[bytes]:
        out = []
        for p in positions:
            if p < base:
                assert hashes_view is not None
                out.append(bytes(hashes_view[p * HASH_SIZE : (p + 1) * HASH_SIZE]))
            else:
                out.append(bytes(stored[(p - base) * HASH_SIZE : (p - base + 1) * HASH_SIZE]))
        return out

    return read


def _time_of(data: bytes) -> str:
    start = data.rfind(b'"untrusted_time":"')
    return data[start + 18 : start + 45].decode("ascii", "replace") if start >= 0 else ""


def _where(index: int, offset: int) -> str:
    return f"record {index} (byte {offset} of entries.log)"


def _check_record(data: bytes, index: int, offset: int, deep: bool) -> None:
    try:
        record = decode_record(data, deep=deep)
    except (msgspec.ValidationError, msgspec.DecodeError, InvalidRecord) as exc:
        raise VerificationError(f"{_where(index, offset)} is not a valid audit record: {exc}") from exc
    if record.v != RECORD_VERSION:
        raise VerificationError(f"{_where(index, offset)} has version {record.v!r}, not {RECORD_VERSION!r}")
    if record.index != index:
        where = _where(index, offset)
        raise VerificationError(
            f"{where} says it is record {record.index}: "
            + ("records are missing before it" if record.index > index else
               "a record was inserted, duplicated or moved") + " (or two records were swapped)")
    if deep:
        where = _where(index, offset)
        if encode_record(record) != data:
            raise VerificationError(f"{where} is not in RFC 8785 canonical form")
        args = record.arguments
        if args is not None and args.has_value:
            raw = bytes(args.value)
            try:
                canonical = canonical_json(msgspec.json.decode(raw))
            except (msgspec.DecodeError, CanonicalizationError) as exc:
                raise VerificationError(f"{where}: its arguments are not canonical JSON: {exc}") from exc
            if canonical != raw:
                raise VerificationError(f"{where}: its arguments are not in RFC 8785 canonical form")
