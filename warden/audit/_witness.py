"""Witness cosigning of the log's checkpoints over C2SP tlog-witness, and the record of what was cosigned.

A checkpoint that only its own machine has checked cannot rule out a rewrite by whoever owns that machine. A
witness (``c2sp.org/tlog-witness``) keeps the latest checkpoint it cosigned per log origin and cosigns a new one
only if a consistency proof shows it extends that one, so a log that was rolled back or forked is refused, and a
cosignature (``c2sp.org/tlog-cosignature``, ``cosignature/v1``, Ed25519, key type 0x04) binds the checkpoint to
the witness's clock.

The protocol (``POST <url>/add-checkpoint``): the body is ``old <size>\\n``, up to 63 base64 consistency-proof
lines from that size, an empty line, then the signed checkpoint. ``200``: note signature lines, one of which must
be this witness's valid cosignature of *this* checkpoint. ``409`` (``text/x.tlog.size``): the witness last
cosigned another size (the body says which) — lower than ours: it lost track of us, resubmit from there; higher:
this log holds fewer records than it once published (rollback); equal: the witness holds another root for this
size (fork). ``422``: the consistency proof from the witness's size fails: the tree was rewritten (fork). ``404``:
the witness does not know this log; ``403``: it does not trust this log's key; ``400``: a malformed request.

What is kept: ``<state>/audit/witnessed.log``, frames of cosigned checkpoints (the checkpoint note with the
witness's cosignature line appended), appended and fdatasync'ed; the witnesses themselves in
``<state>/witnesses.json`` (name, URL, verifier key). Nothing here ever changes the log or its checkpoints: a
refused or failed cosigning leaves both as they were, and says why.

Pure except :class:`WitnessClient` (HTTP), :func:`load_witnesses` / :func:`save_witnesses` and the
``witnessed.log`` helpers.
"""

from __future__ import annotations

import base64
import fcntl
import functools
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from warden.audit._checkpoint import SignedCheckpoint, open_checkpoint
from warden.audit._files import open_private, read_all
from warden.audit._format import FRAME_NOTE, encode_frame, scan_frames
from warden.audit._merkle import HASH_SIZE, HashReader, ProofError, consistency_proof, verify_consistency
from warden.audit._note import (
    CosignatureVerifier,
    Ed25519Verifier,
    NoteError,
    NoteSignature,
    check_key_name,
    parse_note,
    parse_vkey,
)
from warden.audit._store import AUDIT_DIR
from warden.audit._verify import CheckpointSource, VerifiedLog
from warden.durable import pwrite_all, replace_path
from warden.errors import AuditError, ConfigError, StateError, VerificationError, WardenError
from warden.paths import ensure_private_dir

if TYPE_CHECKING:
    import httpx

__all__ = [
    "COSIGN_EVERY",
    "MAX_PROOF_LINES",
    "SIZE_CONTENT_TYPE",
    "WITNESSED",
    "WITNESSES_FILE",
    "AddCheckpoint",
    "Cosigned",
    "Refused",
    "Witness",
    "WitnessClient",
    "append_witnessed",
    "cosign_if_new",
    "cosign_in_background",
    "cosign_with",
    "cosigner_vkey",
    "format_add_checkpoint",
    "load_witnesses",
    "parse_add_checkpoint",
    "read_witnessed",
    "rfc3339_utc",
    "save_witnesses",
    "verify_cosignature_response",
    "witness_verdict",
    "witnessed_sources",
]

MAX_PROOF_LINES: Final = 63
SIZE_CONTENT_TYPE: Final = "text/x.tlog.size"
WITNESSED: Final = "witnessed.log"
WITNESSES_FILE: Final = "witnesses.json"
#: A witness answer larger than this is garbage (a few signature lines are a few hundred bytes).
MAX_RESPONSE_BYTES: Final = 64 * 1024
_WITNESSES_FORMAT: Final = "warden-witnesses/1"


# -- the wire format ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AddCheckpoint:
    """A parsed ``add-checkpoint`` request body."""

    old_size: int
    proof: tuple[bytes, ...]
    checkpoint: bytes


def _decimal(what: str, text: str) -> int:
    if not text.isascii() or not text.isdigit() or (len(text) > 1 and text[0] == "0") or len(text) > 19:
        raise NoteError(f"{what} {text[:30]!r} is not a decimal number without leading zeros")
    return int(text)


def format_add_checkpoint(old_size: int, proof: Sequence[bytes], checkpoint: bytes) -> bytes:
    """The request body: ``old N``, one base64 proof hash per line, an empty line, the signed checkpoint."""
    if len(proof) > MAX_PROOF_LINES:
        raise NoteError(f"a consistency proof of {len(proof)} hashes is longer than tlog-witness allows")
    lines = [f"old {old_size}", *(base64.b64encode(h).decode("ascii") for h in proof)]
    return ("\n".join(lines) + "\n\n").encode() + checkpoint


def parse_add_checkpoint(body: bytes) -> AddCheckpoint:
    """Parse an ``add-checkpoint`` body strictly (the witness side; also what tests hold the client to)."""
    head, sep, note = body.partition(b"\n\n")
    if not sep:
        raise NoteError("add-checkpoint body has no empty line before its checkpoint")
    try:
        lines = head.decode("ascii").split("\n")
    except UnicodeDecodeError as exc:
        raise NoteError("add-checkpoint header is not ASCII") from exc
    if not lines[0].startswith("old "):
        raise NoteError("add-checkpoint body does not start with an old size line")
    old = _decimal("old size", lines[0][4:])
    if len(lines) - 1 > MAX_PROOF_LINES:
        raise NoteError(f"more than {MAX_PROOF_LINES} consistency proof lines")
    proof = []
    for i, line in enumerate(lines[1:]):
        try:
            raw = base64.b64decode(line.encode("ascii"), validate=True)
        except ValueError as exc:
            raise NoteError(f"consistency proof line {i} is not base64") from exc
        if len(raw) != HASH_SIZE or base64.b64encode(raw).decode("ascii") != line:
            raise NoteError(f"consistency proof line {i} is not a base64-encoded 32-byte hash")
        proof.append(raw)
    if old == 0 and proof:
        raise NoteError("a consistency proof from size 0 must be empty")
    return AddCheckpoint(old, tuple(proof), note)


def verify_cosignature_response(body: bytes, checkpoint: SignedCheckpoint, witness: CosignatureVerifier
                                ) -> NoteSignature:
    """The witness's cosignature of ``checkpoint`` from a ``200`` answer, verified.

    The answer must be note signature lines only. Lines by other keys are ignored (as the spec says); there must be
    one by this witness's key, and it must verify over this checkpoint's text: a cosignature of another checkpoint
    (another size or root) fails here, as does garbage.

    Raises:
        NoteError: with the reason.
    """
    if len(body) > MAX_RESPONSE_BYTES:
        raise NoteError(f"the answer is {len(body)} bytes, far more than a few signature lines")
    if not body.endswith(b"\n") or not body.startswith("\u2014 ".encode()):
        raise NoteError("the answer is not note signature lines")
    parsed = parse_note(checkpoint.note + body)  # concatenated, as the spec suggests: one strict parser
    ours = [s for s in parsed.signatures if (s.name, s.key_id) == (witness.name, witness.key_id)]
    if not ours:
        raise NoteError(f"the answer has no cosignature by {witness.name} (key {witness.key_id:08x})")
    text = checkpoint.checkpoint.text().encode()
    for sig in ours:
        if witness.verify(text, sig.signature):
            return sig
    raise NoteError(f"the cosignature by {witness.name} does not verify for this checkpoint (size "
                    f"{checkpoint.size}): it is for another checkpoint, or forged")


# -- configuration -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Witness:
    """A configured witness: a name for messages, its ``add-checkpoint`` URL prefix and its cosigner key."""

    name: str
    url: str
    key: CosignatureVerifier

    @classmethod
    def of(cls, name: str, url: str, vkey: str) -> Witness:
        """Check and build one (``warden audit witness add``).

        Raises:
            ConfigError: a bad name, URL or key.
        """
        try:
            check_key_name(name)
        except NoteError as exc:
            raise ConfigError(f"witness name: {exc}") from exc
        import httpx  # here, not at the top: `warden run` loads httpx only when it is used (startup time)

        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL as exc:
            raise ConfigError(f"witness URL {url!r} is not a URL: {exc}") from exc
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ConfigError(f"witness URL {url!r} must be http:// or https:// with a host")
        try:
            key = parse_vkey(vkey)
        except NoteError as exc:
            raise ConfigError(f"witness key: {exc}") from exc
        if not isinstance(key, CosignatureVerifier):
            raise ConfigError("the witness key is a log key (type 0x01); a witness cosigns with a type 0x04 key",
                              hint="ask the witness operator for its cosignature/v1 verifier key")
        return cls(name, url.rstrip("/"), key)

    @property
    def vkey(self) -> str:
        return cosigner_vkey(self.key)


def cosigner_vkey(key: CosignatureVerifier) -> str:
    """The verifier key string of a witness key: ``name+hex(keyID)+base64(0x04 || public key)``."""
    blob = base64.b64encode(bytes([0x04]) + key.public_key).decode("ascii")
    return f"{key.name}+{key.key_id:08x}+{blob}"


def load_witnesses(state_dir: Path) -> list[Witness]:
    """The configured witnesses (none when the file does not exist).

    Raises:
        StateError: the file exists but is not ours, not private, or not valid.
    """
    path = state_dir / WITNESSES_FILE
    try:
        fd = open_private(path, os.O_RDONLY)
    except FileNotFoundError:
        return []
    try:
        data = read_all(fd, 0, 1 << 20)
    finally:
        os.close(fd)
    try:
        doc = json.loads(data)
        ok = isinstance(doc, dict) and doc.get("format") == _WITNESSES_FORMAT
        witnesses = [Witness.of(w["name"], w["url"], w["vkey"]) for w in doc["witnesses"]] if ok else None
    except (ValueError, KeyError, TypeError, ConfigError) as exc:
        raise StateError(f"{path} is damaged: {exc}", hint=f"fix or remove {path}, then add the witnesses again"
                         ) from exc
    if witnesses is None:
        raise StateError(f"{path} is not a warden witness list", hint=f"fix or remove {path}")
    return witnesses


def save_witnesses(state_dir: Path, witnesses: Sequence[Witness]) -> None:
    ensure_private_dir(state_dir)
    doc = {"format": _WITNESSES_FORMAT,
           "witnesses": [{"name": w.name, "url": w.url, "vkey": w.vkey} for w in witnesses]}
    replace_path(state_dir / WITNESSES_FILE, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())


# -- what was cosigned -------------------------------------------------------------------------------------------------


def read_witnessed(state_dir: Path) -> list[bytes]:
    """Every cosigned checkpoint note kept in ``witnessed.log``, oldest first (a torn last frame is ignored)."""
    try:
        fd = open_private(state_dir / AUDIT_DIR / WITNESSED, os.O_RDONLY)
    except FileNotFoundError:
        return []
    try:
        data = read_all(fd, 0, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    return [frame.payload for frame in scan_frames(data, 0, FRAME_NOTE)]


def append_witnessed(state_dir: Path, note: bytes) -> None:
    """Append one cosigned checkpoint and fdatasync it (after a torn frame, the new one starts where it began)."""
    fd = open_private(state_dir / AUDIT_DIR / WITNESSED, os.O_RDWR | os.O_CREAT)
    try:
        data = read_all(fd, 0, os.fstat(fd).st_size)
        end = 0
        for frame in scan_frames(data, 0, FRAME_NOTE):
            end = frame.end
        frame_bytes = encode_frame(FRAME_NOTE, note)
        pwrite_all(fd, frame_bytes, end)
        os.ftruncate(fd, end + len(frame_bytes))
        os.fdatasync(fd)
    finally:
        os.close(fd)


def last_cosigned(notes: Sequence[bytes], log_key: Ed25519Verifier, witness: CosignatureVerifier
                  ) -> SignedCheckpoint | None:
    """The largest checkpoint in ``notes`` that this witness validly cosigned (what it should hold for us)."""
    best: SignedCheckpoint | None = None
    for note in notes:
        try:
            cp, cosigs = open_checkpoint(note, log_key, witnesses=[witness], quorum=1)
        except NoteError:
            continue
        if cosigs and (best is None or cp.size > best.size):
            best = cp
    return best


# -- the client --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cosigned:
    witness: Witness
    checkpoint: SignedCheckpoint  # with the new cosignature line appended
    timestamp: int


@dataclass(frozen=True, slots=True)
class Refused:
    """The witness did not cosign. ``evidence`` is True when its answer proves the log misbehaved (a rollback or a
    fork), not merely that the witness was unreachable or broken."""

    witness: Witness
    reason: str
    evidence: bool = False


class WitnessClient:
    """``add-checkpoint`` over HTTP with a deadline; every failure becomes a :class:`Refused`, never an exception."""

    def __init__(self, *, timeout: float = 10.0, transport: httpx.BaseTransport | None = None) -> None:
        import httpx  # here, not at the top: `warden run` loads httpx only when it is used (startup time)

        self._http = httpx.Client(timeout=timeout, transport=transport, follow_redirects=False,
                                  headers={"User-Agent": "warden-audit-witness-client"})

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> WitnessClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add_checkpoint(self, witness: Witness, body: bytes) -> tuple[int, str, bytes] | str:
        """POST the body; (status, content type, body) or the reason it could not be done."""
        import httpx

        try:
            with self._http.stream("POST", witness.url + "/add-checkpoint", content=body) as response:
                data = b""
                for chunk in response.iter_bytes():
                    data += chunk
                    if len(data) > MAX_RESPONSE_BYTES:
                        return f"the answer is larger than {MAX_RESPONSE_BYTES} bytes"
                return response.status_code, response.headers.get("content-type", ""), data
        except httpx.TimeoutException:
            return f"no answer within {self._http.timeout.read} s"
        except httpx.HTTPError as exc:
            return f"the request failed: {type(exc).__name__}: {exc}"


def _submit(client: WitnessClient, witness: Witness, latest: SignedCheckpoint, old: SignedCheckpoint | None,
            read: HashReader) -> tuple[int, str, bytes] | str:
    old_size = old.size if old is not None else 0
    proof: list[bytes] = []
    if 0 < old_size < latest.size:
        proof = consistency_proof(old_size, latest.size, read)
        assert old is not None
        verify_consistency(old_size, latest.size, proof, old.root, latest.root)  # never send a proof that fails
    return client.add_checkpoint(witness, format_add_checkpoint(old_size, proof, latest.note))


def _size_from_409(content_type: str, body: bytes) -> int | None:
    if content_type.split(";")[0].strip() != SIZE_CONTENT_TYPE or not body.endswith(b"\n"):
        return None
    try:
        return _decimal("size", body[:-1].decode("ascii"))
    except (NoteError, UnicodeDecodeError):
        return None


def cosign_with(client: WitnessClient, witness: Witness, latest: SignedCheckpoint, *,
                known: Callable[[int], SignedCheckpoint | None], last: SignedCheckpoint | None,
                read: HashReader, now: Callable[[], float] = time.time) -> Cosigned | Refused:
    """Ask one witness to cosign ``latest``, starting from ``last`` (the largest checkpoint it cosigned for us).

    It always asks, even when ``last`` is ``latest``: a fresh cosignature renews the witness's "largest tree as
    of now", and asking is what finds a rollback to a copy the witness has seen beyond. ``known(size)`` gives this
    log's own checkpoint of a size (to resubmit from after a ``409`` that names another size); ``read`` reads the
    stored hashes the consistency proofs come from. The cosignature is checked
    (key, this very checkpoint) before it is accepted.
    """
    old = last if last is not None and last.size <= latest.size else None
    tried: set[int] = set()
    for _attempt in range(3):
        tried.add(old.size if old is not None else 0)
        try:
            answer = _submit(client, witness, latest, old, read)
        except ProofError:
            assert old is not None
            return Refused(witness, f"this log's tree no longer extends the checkpoint of size {old.size} the "
                                    f"witness cosigned: the log was rewritten (not submitted)", evidence=True)
        if isinstance(answer, str):
            return Refused(witness, answer)
        status, content_type, body = answer
        if status == 200:
            try:
                sig = verify_cosignature_response(body, latest, witness.key)
            except NoteError as exc:
                return Refused(witness, f"its answer was refused: {exc.message}")
            timestamp = CosignatureVerifier.timestamp(sig.signature)
            if timestamp > now() + 600:
                return Refused(witness, f"its cosignature is dated {timestamp}, in the future")
            note = latest.note + sig.line().encode()
            return Cosigned(witness, SignedCheckpoint(latest.checkpoint, note), timestamp)
        if status == 409:
            theirs = _size_from_409(content_type, body)
            if theirs is None:
                return Refused(witness, f"it answered 409 without its size ({content_type or 'no content type'})")
            if theirs > latest.size:
                return Refused(witness, f"it has cosigned size {theirs} for this log, but the log's latest "
                                        f"checkpoint is size {latest.size}: records were removed or the log was "
                                        f"rolled back to an older copy", evidence=True)
            if theirs in tried:
                if theirs == latest.size:
                    return Refused(witness, f"it has cosigned another root for size {theirs}: the log forked (two "
                                            f"histories signed with this log's key)", evidence=True)
                return Refused(witness, f"it answered 409 (size {theirs}) to a request from that very size")
            old = known(theirs) if theirs else None
            if theirs and old is None:
                return Refused(witness, f"it last cosigned size {theirs}, a checkpoint this log never published",
                               evidence=True)
            continue  # it lost track of us, or we of it: resubmit from the size it holds
        reasons = {
            422: ("it refused the consistency proof from the size it holds: this log's tree does not extend the "
                  "one it cosigned (the log was rewritten)", True),
            404: ("it does not know this log's origin (the witness operator must add the log's key)", False),
            403: ("it does not trust this log's key for this origin", False),
            400: ("it called the request malformed", False),
        }
        reason, evidence = reasons.get(status, (f"it answered HTTP {status}", False))
        return Refused(witness, reason, evidence=evidence)
    return Refused(witness, "it answered 409 three times in a row")


# -- a cosigning round, and what verify makes of it --------------------------------------------------------------------


REFUSALS: Final = "witness-refusals.log"


def record_refusal(state_dir: Path, refused: Refused, checkpoint: SignedCheckpoint, now: float) -> None:
    """Keep a refusal whose answer is evidence against the log (a rollback or fork), for ``verify --witness``.

    One JSON line per refusal, fdatasync'ed. It is the witness's word (a 409 or 422 is not signed): the proof is
    the cosigned checkpoint the witness holds, which its operator can produce.
    """
    line = json.dumps({"time": int(now), "witness": refused.witness.name, "vkey": refused.witness.vkey,
                       "size": checkpoint.size, "reason": refused.reason}, sort_keys=True) + "\n"
    fd = open_private(state_dir / AUDIT_DIR / REFUSALS, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        os.write(fd, line.encode())
        os.fdatasync(fd)
    finally:
        os.close(fd)


def read_refusals(state_dir: Path) -> list[dict[str, object]]:
    try:
        fd = open_private(state_dir / AUDIT_DIR / REFUSALS, os.O_RDONLY)
    except FileNotFoundError:
        return []
    try:
        data = read_all(fd, 0, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    out = []
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            out.append(doc)
    return out


@dataclass(frozen=True, slots=True)
class WitnessView:
    """What one witness's cosignatures prove: the largest checkpoint it cosigned and when (None: nothing)."""

    key: CosignatureVerifier
    size: int | None
    timestamp: int | None


@dataclass(frozen=True, slots=True)
class WitnessSummary:
    """The largest checkpoint at least ``quorum`` of the given witnesses cosigned (``proven``; None when none
    did), and each witness's own view."""

    quorum: int
    proven: SignedCheckpoint | None
    views: tuple[WitnessView, ...]


def summarize_witnesses(notes: Sequence[bytes], log_key: Ed25519Verifier, witnesses: Sequence[CosignatureVerifier],
              quorum: int) -> WitnessSummary:
    """Pure: which checkpoints of this log the witnesses cosigned (each cosignature verified).

    A cosignature of size N vouches for every record below N (the witness checked consistency with what it saw
    before), so a checkpoint counts for a witness that cosigned it or any larger one of the same tree; that the
    trees agree is what verify checks against the records.
    """
    by_size: dict[int, tuple[SignedCheckpoint, set[str]]] = {}
    views: list[WitnessView] = []
    for w in witnesses:
        best: tuple[int, int] | None = None
        for note in notes:
            try:
                cp, cosigs = open_checkpoint(note, log_key, witnesses=[w], quorum=1)
            except NoteError:
                continue
            ts = CosignatureVerifier.timestamp(cosigs[0].signature)
            entry = by_size.setdefault(cp.size, (cp, set()))
            entry[1].add(f"{w.name}+{w.key_id:08x}")
            if best is None or cp.size > best[0]:
                best = (cp.size, ts)
        views.append(WitnessView(w, best[0] if best else None, best[1] if best else None))
    proven = None
    for size in sorted(by_size, reverse=True):
        vouching = {v.key.name for v in views if v.size is not None and v.size >= size}
        if len(vouching) >= quorum and by_size[size][1]:
            proven = by_size[size][0]
            break
    return WitnessSummary(quorum, proven, tuple(views))


def cosign_latest(state_dir: Path, witnesses: Sequence[Witness], client: WitnessClient, *,
                  now: Callable[[], float] = time.time) -> tuple[SignedCheckpoint, list[Cosigned | Refused]]:
    """One cosigning round: ask every witness to cosign the log's latest checkpoint, keep what they cosign.

    New cosignatures are appended to ``witnessed.log`` (one frame: the checkpoint with every new cosignature
    line); refusals that are evidence against the log go to ``witness-refusals.log``. The log itself and its
    checkpoints are never touched, whatever a witness answers.

    Raises:
        AuditError: no checkpoint has been published yet (nothing to cosign).
        VerificationError: the log's own checkpoints do not verify with its key.
    """
    from warden.audit._reader import LogReader  # the reader imports the store; this module is imported by both

    with LogReader(state_dir) as reader:
        key = reader.local_verifier()
        own: dict[int, SignedCheckpoint] = {}
        for source in reader.checkpoint_notes():
            cp, _ = open_checkpoint(source.note, key)
            own[cp.size] = cp
        if not own:
            raise AuditError("no checkpoint has been published yet", hint="run `warden audit checkpoint --refresh`")
        latest = own[max(own)]
        hashes = reader.hashes

        def read(positions: Sequence[int]) -> list[bytes]:
            if hashes is None:
                raise AuditError("the log has no hash file", hint="start warden once to rebuild it")
            out = [bytes(hashes[p * HASH_SIZE : (p + 1) * HASH_SIZE]) for p in positions]
            if any(len(h) != HASH_SIZE for h in out):
                raise AuditError("hashes.bin is shorter than the tree", hint="start warden once to rebuild it")
            return out

        witnessed = read_witnessed(state_dir)
        results: list[Cosigned | Refused] = []
        for w in witnesses:
            last = last_cosigned(witnessed, key, w.key)
            results.append(cosign_with(client, w, latest, known=own.get, last=last, read=read, now=now))
    fresh = b"".join(r.checkpoint.note[len(latest.note):] for r in results if isinstance(r, Cosigned))
    if fresh:
        append_witnessed(state_dir, latest.note + fresh)
    for r in results:
        if isinstance(r, Refused) and r.evidence:
            record_refusal(state_dir, r, latest, now())
    return latest, results


# -- what `audit verify --witness` and the report add ----------------------------------------------------------------


def witnessed_sources(state_dir: Path) -> list[CheckpointSource]:
    """The cosigned checkpoints kept in witnessed.log: verify checks each against the records like any other."""
    return [CheckpointSource(f"{WITNESSED} entry #{n}", note) for n, note in enumerate(read_witnessed(state_dir), 1)]


def witness_verdict(state_dir: Path, key: Ed25519Verifier, witnesses: Sequence[CosignatureVerifier], quorum: int,
                    result: VerifiedLog, notes: Sequence[bytes]) -> list[str]:
    """After the records verified: what the given witnesses prove, as lines for the verify report.

    Raises:
        VerificationError: a witness refused this log with evidence of a rollback or fork, or no checkpoint
            carries ``quorum`` cosignatures by the given witnesses (the message says what was not proven).
    """
    if not witnesses:
        return []
    vkeys = {cosigner_vkey(w) for w in witnesses}
    for refusal in read_refusals(state_dir):
        if refusal.get("vkey") in vkeys:
            raise VerificationError(
                f"SECURITY ERROR: witness {refusal.get('witness')} refused this log's checkpoint of size "
                f"{refusal.get('size')} at {rfc3339_utc(_int(refusal.get('time')))}: {refusal.get('reason')}",
                hint="the witness holds a newer or different cosigned checkpoint of this log: ask its operator for "
                     "it and verify with --checkpoint; keep this state directory as evidence")
    summary = summarize_witnesses(notes, key, witnesses, quorum)
    views = [f"    {v.key.name}: cosigned size {v.size} at {rfc3339_utc(v.timestamp)}" if v.size is not None else
             f"    {v.key.name}: no cosignature of this log: nothing shows this witness saw it" for v in summary.views]
    if summary.proven is None:
        raise VerificationError(
            f"no checkpoint of this log carries cosignatures by {quorum} of the {len(witnesses)} given witnesses: "
            f"not proven: that anyone off this machine saw any of its {result.size} records (the records and "
            f"the log key's checkpoints themselves verified)\n" + "\n".join(views),
            hint="run `warden audit witness cosign` (the witnesses must be reachable), or lower --quorum")
    proven = summary.proven.size
    lines = [f"  witnessed: records 0..{proven - 1} are under a checkpoint cosigned by at least {quorum} of "
             f"{len(witnesses)} witnesses" if proven else "  witnessed: the empty log only", *views]
    if proven < result.size:
        lines.append(f"  not witnessed: records {proven}..{result.size - 1} (`warden audit witness cosign`)")
    return lines


def _int(value: object) -> int | None:
    return value if isinstance(value, int) else None


def rfc3339_utc(ts: int | None) -> str:
    """A POSIX time as RFC 3339 UTC (a witness's clock, in messages)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts)) if ts is not None else "?"


# -- cosigning while warden runs ------------------------------------------------------------------------------------

#: How often a running warden looks for a newly published checkpoint to have cosigned (seconds).
COSIGN_EVERY: Final = 5.0
_LOCK: Final = "witness.lock"


def cosign_if_new(state_dir: Path, last_size: int, *, timeout: float = 10.0) -> tuple[int, list[Refused]]:
    """Have the configured witnesses cosign the latest checkpoint if it is larger than ``last_size``.

    Several ``warden run`` processes share a state directory: one round at a time runs, under an ``flock`` that
    the others skip rather than wait for (whoever holds it cosigns for all). Returns the size now handled and the
    refusals (logged by the caller).
    """
    from warden.audit._format import HEAD_SIZE, decode_head
    from warden.audit._store import HEAD

    witnesses = load_witnesses(state_dir)
    if not witnesses:
        return last_size, []
    try:
        with open(state_dir / AUDIT_DIR / HEAD, "rb") as f:
            head = decode_head(f.read(HEAD_SIZE))
    except FileNotFoundError:
        return last_size, []
    if head is None or head.published_size <= last_size:
        return last_size, []
    fd = open_private(state_dir / AUDIT_DIR / _LOCK, os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return last_size, []  # another warden process is cosigning right now
        with WitnessClient(timeout=timeout) as client:
            latest, results = cosign_latest(state_dir, witnesses, client)
        return latest.size, [r for r in results if isinstance(r, Refused)]
    finally:
        os.close(fd)


async def cosign_in_background(state_dir: Path, *, every: float = COSIGN_EVERY) -> None:
    """Run for the life of a ``warden run``: each new checkpoint is sent to the configured witnesses, in a worker
    thread (the HTTP calls never touch the event loop or the audit commit path). Failures are logged, never
    raised: witnessing adds evidence, and a witness that is down must not stop the servers."""
    import trio

    log = logging.getLogger("warden.audit.witness")
    last = 0
    while True:
        try:
            last, refused = await trio.to_thread.run_sync(functools.partial(cosign_if_new, state_dir, last),
                                                          abandon_on_cancel=True)
        except WardenError as exc:
            log.warning("witness cosigning: %s", exc.message)
        else:
            for r in refused:
                log.warning("witness %s did not cosign checkpoint size %d: %s%s", r.witness.name, last, r.reason,
                            " (SECURITY: evidence against this log)" if r.evidence else "")
        await trio.sleep(every)
