"""C2SP tlog-checkpoints and ``c2sp.org/tlog-proof@v1`` files. Pure code.

A checkpoint is a signed note whose text is exactly ``<origin>\\n<size>\\n<base64 root>\\n`` (optionally followed
by extension lines, which warden never writes and refuses to trust). A tlog-proof bundles a checkpoint, an index,
the inclusion path and, in its ``extra`` line, whatever the verifier needs to rebuild the leaf: for warden, the
audit record's exact bytes, so a third party can check one record with nothing but the log's verifier key.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from warden.audit._merkle import HASH_SIZE, leaf_hash, verify_inclusion
from warden.audit._note import (
    CosignatureVerifier,
    Ed25519Signer,
    Ed25519Verifier,
    NoteError,
    NoteSignature,
    check_key_name,
    open_note,
    parse_note,
    sign_note,
)

__all__ = [
    "PROOF_HEADER",
    "Checkpoint",
    "SignedCheckpoint",
    "TlogProof",
    "format_tlog_proof",
    "open_checkpoint",
    "parse_checkpoint_text",
    "parse_tlog_proof",
    "sign_checkpoint",
    "verify_tlog_proof",
]

PROOF_HEADER: Final = "c2sp.org/tlog-proof@v1"


def _decimal(what: str, text: str) -> int:
    if not text.isascii() or not text.isdigit() or (len(text) > 1 and text[0] == "0") or len(text) > 20:
        raise NoteError(f"{what} {text[:30]!r} is not a decimal number without leading zeros")
    value = int(text)
    if value >= 1 << 63:
        raise NoteError(f"{what} {value} is out of range")
    return value


def _hash_b64(what: str, text: str) -> bytes:
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError) as exc:
        raise NoteError(f"{what} is not valid base64") from exc
    if len(raw) != HASH_SIZE or base64.b64encode(raw).decode("ascii") != text:
        raise NoteError(f"{what} is not a base64-encoded 32-byte hash")
    return raw


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A tree head: the log's origin, its size and its RFC 6962 root hash."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_key_name(self.origin)
        if self.size < 0 or self.size >= 1 << 63:
            raise NoteError(f"tree size {self.size} is out of range")
        if len(self.root) != HASH_SIZE:
            raise NoteError(f"root hash is {len(self.root)} bytes, not {HASH_SIZE}")
        for ext in self.extensions:
            if not ext or "\n" in ext:
                raise NoteError("checkpoint extension lines must be non-empty single lines")

    def text(self) -> str:
        root = base64.b64encode(self.root).decode("ascii")
        return "".join(f"{line}\n" for line in (self.origin, str(self.size), root, *self.extensions))


def parse_checkpoint_text(text: str) -> Checkpoint:
    """Parse a checkpoint body (origin, size, root, optional extension lines)."""
    if not text.endswith("\n"):
        raise NoteError("checkpoint text does not end with a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise NoteError("checkpoint text needs at least three lines (origin, size, root hash)")
    origin, size, root, *ext = lines
    if any(not line for line in ext):
        raise NoteError("checkpoint has an empty extension line")
    return Checkpoint(origin, _decimal("tree size", size), _hash_b64("root hash", root), tuple(ext))


@dataclass(frozen=True, slots=True)
class SignedCheckpoint:
    """A checkpoint together with the exact signed-note bytes it came from."""

    checkpoint: Checkpoint
    note: bytes

    @property
    def origin(self) -> str:
        return self.checkpoint.origin

    @property
    def size(self) -> int:
        return self.checkpoint.size

    @property
    def root(self) -> bytes:
        return self.checkpoint.root


def sign_checkpoint(checkpoint: Checkpoint, signer: Ed25519Signer) -> SignedCheckpoint:
    """Sign a checkpoint with the log key. Its key name must be the origin (C2SP: SHOULD; warden: MUST)."""
    if signer.name != checkpoint.origin:
        raise NoteError(f"signing key {signer.name!r} is not the key of log {checkpoint.origin!r}")
    return SignedCheckpoint(checkpoint, sign_note(checkpoint.text(), [signer]))


def open_checkpoint(note: bytes, log_key: Ed25519Verifier, *, origin: str | None = None,
                    witnesses: Sequence[CosignatureVerifier] = (), quorum: int = 0,
                    ) -> tuple[SignedCheckpoint, list[NoteSignature]]:
    """Verify a checkpoint note: log signature, origin, no extension lines, and ``quorum`` witness cosignatures.

    Returns the checkpoint and the verified witness cosignatures.
    """
    parsed = parse_note(note)
    checkpoint = parse_checkpoint_text(parsed.text)
    want_origin = origin if origin is not None else log_key.name
    if checkpoint.origin != want_origin:
        raise NoteError(f"checkpoint is for log {checkpoint.origin!r}, not {want_origin!r}")
    if checkpoint.extensions:
        raise NoteError("checkpoint carries extension lines, which warden does not sign")
    open_note(note, [log_key])
    cosigs: list[NoteSignature] = []
    if witnesses:
        wanted = {(w.name, w.key_id): w for w in witnesses}
        text = parsed.text.encode()
        for sig in parsed.signatures:
            w = wanted.get((sig.name, sig.key_id))
            if w is None:
                continue
            if not w.verify(text, sig.signature):
                raise NoteError(f"cosignature by witness {sig.name} does not verify")
            cosigs.append(sig)
    if len({s.name for s in cosigs}) < quorum:
        raise NoteError(f"checkpoint has {len(cosigs)} valid witness cosignatures, {quorum} required")
    return SignedCheckpoint(checkpoint, note), cosigs


@dataclass(frozen=True, slots=True)
class TlogProof:
    """A parsed ``c2sp.org/tlog-proof@v1`` file."""

    index: int
    path: tuple[bytes, ...]
    checkpoint_note: bytes
    extra: bytes | None = None


def format_tlog_proof(index: int, path: Sequence[bytes], checkpoint: SignedCheckpoint,
                      extra: bytes | None = None) -> bytes:
    """Write a tlog-proof: header, optional ``extra``, ``index``, one base64 hash per line, blank, checkpoint."""
    lines = [PROOF_HEADER]
    if extra is not None:
        lines.append("extra " + base64.b64encode(extra).decode("ascii"))
    lines.append(f"index {index}")
    lines.extend(base64.b64encode(h).decode("ascii") for h in path)
    return ("\n".join(lines) + "\n\n").encode() + checkpoint.note


def parse_tlog_proof(data: bytes) -> TlogProof:
    """Parse a tlog-proof file strictly."""
    head, sep, note = data.partition(b"\n\n")
    if not sep:
        raise NoteError("tlog-proof has no blank line before its checkpoint")
    try:
        lines = head.decode("ascii").split("\n")
    except UnicodeDecodeError as exc:
        raise NoteError("tlog-proof header is not ASCII") from exc
    if lines[0] != PROOF_HEADER:
        raise NoteError(f"not a tlog-proof: first line must be {PROOF_HEADER!r}")
    pos = 1
    extra: bytes | None = None
    if pos < len(lines) and lines[pos].startswith("extra "):
        blob = lines[pos][len("extra "):]
        try:
            extra = base64.b64decode(blob.encode("ascii"), validate=True)
        except ValueError as exc:
            raise NoteError("tlog-proof extra data is not valid base64") from exc
        pos += 1
    if pos >= len(lines) or not lines[pos].startswith("index "):
        raise NoteError("tlog-proof has no index line")
    index = _decimal("index", lines[pos][len("index "):])
    path = tuple(_hash_b64(f"proof hash {i}", line) for i, line in enumerate(lines[pos + 1:]))
    return TlogProof(index, path, note, extra)


def verify_tlog_proof(data: bytes, log_key: Ed25519Verifier, *, entry: bytes | None = None,
                      witnesses: Iterable[CosignatureVerifier] = (), quorum: int = 0) -> tuple[TlogProof, Checkpoint]:
    """Verify a tlog-proof for a warden record: checkpoint signature, witnesses, then the inclusion path.

    The leaf is ``entry`` when given, else the proof's ``extra`` data (warden puts the record bytes there); when
    both are given they must be equal.
    """
    proof = parse_tlog_proof(data)
    signed, _ = open_checkpoint(proof.checkpoint_note, log_key, witnesses=list(witnesses), quorum=quorum)
    if entry is None:
        if proof.extra is None:
            raise NoteError("tlog-proof carries no record and none was given")
        entry = proof.extra
    elif proof.extra is not None and proof.extra != entry:
        raise NoteError("the record given differs from the record inside the tlog-proof")
    verify_inclusion(proof.index, signed.size, leaf_hash(entry), proof.path, signed.root)
    return proof, signed.checkpoint
