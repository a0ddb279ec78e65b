"""C2SP signed notes (``c2sp.org/signed-note@v1.0.0``), Ed25519 keys, and ``cosignature/v1`` witness signatures.

Pure code: bytes and strings in, values or one :class:`NoteError` out. A note is UTF-8 text ending in a newline,
a blank line, then signature lines ``"— <name> base64(keyID[4] || signature)"``. Verification follows the spec:
signatures from keys we do not know are ignored, a known key whose signature fails rejects the whole note, and a
note with no verified known signature is rejected.

Key ID (C2SP): ``SHA-256(name || 0x0A || type || public key)[:4]``, big-endian. Verifier keys are
``name+hex(keyID)+base64(type || public key)``; the private form warden stores is Go's
``PRIVATE+KEY+name+hex(keyID)+base64(0x01 || seed)``. Standard base64 contains ``+``, so both are split a fixed
number of times from the left, never on every ``+``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from warden.errors import VerificationError

__all__ = [
    "ALG_COSIGNATURE_V1",
    "ALG_ED25519",
    "MAX_SIGNATURES",
    "CosignatureVerifier",
    "Ed25519Signer",
    "Ed25519Verifier",
    "Note",
    "NoteError",
    "NoteSignature",
    "NoteVerifier",
    "check_key_name",
    "key_id",
    "open_note",
    "parse_note",
    "parse_skey",
    "parse_vkey",
    "sign_note",
]

ALG_ED25519: Final = 0x01
ALG_COSIGNATURE_V1: Final = 0x04
#: Signature lines accepted per note (the spec asks for at least 16; Go caps at 100).
MAX_SIGNATURES: Final = 100
_EM_DASH: Final = "\u2014"
_SIG_PREFIX: Final = _EM_DASH + " "


class NoteError(VerificationError):
    """A signed note, key or signature is malformed or does not verify; the message says which."""


def key_id(name: str, alg: int, public_key: bytes) -> int:
    """The C2SP key ID: the first four bytes of ``SHA-256(name || "\\n" || alg || public_key)``, big-endian."""
    digest = hashlib.sha256(name.encode() + b"\n" + bytes([alg]) + public_key).digest()
    return int.from_bytes(digest[:4], "big")


def check_key_name(name: str) -> None:
    """Key names (and checkpoint origins) must be non-empty, without Unicode spaces and without ``+``."""
    if not name:
        raise NoteError("key name is empty")
    if "+" in name or any(c.isspace() for c in name):
        raise NoteError(f"key name {name!r} contains a space or '+'")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        raise NoteError(f"key name {name!r} contains a control character")


def _b64decode(what: str, text: str) -> bytes:
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
        raise NoteError(f"{what} is not valid base64") from exc
    if base64.b64encode(raw).decode("ascii") != text:
        raise NoteError(f"{what} is not canonical base64")
    return raw


class NoteVerifier(Protocol):
    """Something that can check one signature line's payload against the note text."""

    @property
    def name(self) -> str: ...

    @property
    def key_id(self) -> int: ...

    def verify(self, text: bytes, signature: bytes) -> bool:
        """True when ``signature`` (without the 4-byte key ID) is valid for ``text``."""
        ...


def _check_public_key(name: str, public_key: bytes) -> None:
    check_key_name(name)
    if len(public_key) != 32:
        raise NoteError(f"Ed25519 public key is {len(public_key)} bytes, not 32")


def _ed25519_valid(public_key: bytes, signature: bytes, message: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except InvalidSignature:
        return False
    return True


@dataclass(frozen=True, slots=True)
class Ed25519Verifier:
    """An Ed25519 note verifier (signature type 0x01): a log's public key."""

    name: str
    public_key: bytes

    def __post_init__(self) -> None:
        _check_public_key(self.name, self.public_key)

    @property
    def key_id(self) -> int:
        return key_id(self.name, ALG_ED25519, self.public_key)

    @property
    def vkey(self) -> str:
        """The verifier key string: ``name+hex(keyID)+base64(0x01 || public key)``."""
        blob = base64.b64encode(bytes([ALG_ED25519]) + self.public_key).decode("ascii")
        return f"{self.name}+{self.key_id:08x}+{blob}"

    def verify(self, text: bytes, signature: bytes) -> bool:
        return len(signature) == 64 and _ed25519_valid(self.public_key, signature, text)


@dataclass(frozen=True, slots=True)
class CosignatureVerifier:
    """A witness key for ``cosignature/v1`` (type 0x04): signs ``cosignature/v1\\ntime T\\n`` + the checkpoint text."""

    name: str
    public_key: bytes

    def __post_init__(self) -> None:
        _check_public_key(self.name, self.public_key)

    @property
    def key_id(self) -> int:
        return key_id(self.name, ALG_COSIGNATURE_V1, self.public_key)

    def verify(self, text: bytes, signature: bytes) -> bool:
        if len(signature) != 8 + 64:
            return False
        timestamp = self.timestamp(signature)
        if timestamp >= 1 << 63:
            return False
        return _ed25519_valid(self.public_key, signature[8:], b"cosignature/v1\ntime %d\n" % timestamp + text)

    @staticmethod
    def timestamp(signature: bytes) -> int:
        """The POSIX time a cosignature claims (only meaningful once it verified)."""
        (ts,) = struct.unpack(">Q", signature[:8])
        return int(ts)


class Ed25519Signer:
    """An Ed25519 note signer (type 0x01). Holds the private key; never logged, never repr'd."""

    __slots__ = ("_private", "name", "verifier")

    def __init__(self, name: str, private_key: Ed25519PrivateKey) -> None:
        check_key_name(name)
        self.name = name
        self._private = private_key
        self.verifier = Ed25519Verifier(name, private_key.public_key().public_bytes_raw())

    def __repr__(self) -> str:
        return f"Ed25519Signer({self.verifier.vkey!r})"

    @classmethod
    def generate(cls, name: str) -> Ed25519Signer:
        return cls(name, Ed25519PrivateKey.generate())

    @property
    def key_id(self) -> int:
        return self.verifier.key_id

    @property
    def skey(self) -> str:
        """The private key string ``PRIVATE+KEY+name+hex(keyID)+base64(0x01 || seed)`` (Go ``note`` format)."""
        blob = base64.b64encode(bytes([ALG_ED25519]) + self._private.private_bytes_raw()).decode("ascii")
        return f"PRIVATE+KEY+{self.name}+{self.key_id:08x}+{blob}"

    def sign(self, text: bytes) -> bytes:
        return self._private.sign(text)


def parse_vkey(vkey: str) -> Ed25519Verifier | CosignatureVerifier:
    """Parse ``name+hexid+base64(type || key)`` for type 0x01 (log) or 0x04 (witness cosigner)."""
    parts = vkey.strip().split("+", 2)
    if len(parts) != 3:
        raise NoteError("verifier key must look like name+hexid+base64key")
    name, hexid, blob = parts
    check_key_name(name)
    if len(hexid) != 8 or hexid.lower() != hexid:
        raise NoteError("verifier key ID must be 8 lowercase hex digits")
    try:
        wanted = int(hexid, 16)
    except ValueError as exc:
        raise NoteError("verifier key ID must be 8 lowercase hex digits") from exc
    raw = _b64decode("verifier key", blob)
    if len(raw) != 33:
        raise NoteError(f"verifier key material is {len(raw)} bytes, want 33 (type byte + Ed25519 key)")
    verifier: Ed25519Verifier | CosignatureVerifier
    if raw[0] == ALG_ED25519:
        verifier = Ed25519Verifier(name, raw[1:])
    elif raw[0] == ALG_COSIGNATURE_V1:
        verifier = CosignatureVerifier(name, raw[1:])
    else:
        raise NoteError(f"unsupported verifier key type 0x{raw[0]:02x}")
    if verifier.key_id != wanted:
        raise NoteError(f"verifier key ID {hexid} does not match its name and key ({verifier.key_id:08x})")
    return verifier


def parse_skey(skey: str) -> Ed25519Signer:
    """Parse ``PRIVATE+KEY+name+hexid+base64(0x01 || seed)``."""
    parts = skey.strip().split("+", 4)
    if len(parts) != 5 or parts[0] != "PRIVATE" or parts[1] != "KEY":
        raise NoteError("signing key must look like PRIVATE+KEY+name+hexid+base64key")
    _, _, name, hexid, blob = parts
    raw = _b64decode("signing key", blob)
    if len(raw) != 33 or raw[0] != ALG_ED25519:
        raise NoteError("signing key must be an Ed25519 seed (type 0x01, 32 bytes)")
    signer = Ed25519Signer(name, Ed25519PrivateKey.from_private_bytes(raw[1:]))
    if f"{signer.key_id:08x}" != hexid:
        raise NoteError(f"signing key ID {hexid} does not match its name and key")
    return signer


@dataclass(frozen=True, slots=True)
class NoteSignature:
    """One signature line: the key name, key ID and signature bytes (without the ID)."""

    name: str
    key_id: int
    signature: bytes

    def line(self) -> str:
        blob = base64.b64encode(self.key_id.to_bytes(4, "big") + self.signature).decode("ascii")
        return f"{_SIG_PREFIX}{self.name} {blob}\n"


@dataclass(frozen=True, slots=True)
class Note:
    """A parsed note: its text (ending in a newline) and its signature lines, in order."""

    text: str
    signatures: tuple[NoteSignature, ...]

    def to_bytes(self) -> bytes:
        return (self.text + "\n" + "".join(s.line() for s in self.signatures)).encode()


def parse_note(data: bytes) -> Note:
    """Parse a signed note strictly (UTF-8, no control characters but newline, well-formed signature lines).

    Does not verify anything: see :func:`open_note`.
    """
    try:
        note = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NoteError("note is not valid UTF-8") from exc
    if any(ord(c) < 0x20 and c != "\n" for c in note):
        raise NoteError("note contains a control character")
    split = note.rfind("\n\n")
    if split < 0:
        raise NoteError("note has no blank line before its signatures")
    text, sig_block = note[: split + 1], note[split + 2 :]
    if not sig_block.endswith("\n"):
        raise NoteError("note does not end with a newline")
    lines = sig_block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise NoteError(f"note has more than {MAX_SIGNATURES} signatures")
    signatures: list[NoteSignature] = []
    for line in lines:
        if not line.startswith(_SIG_PREFIX):
            raise NoteError(f"malformed signature line {line[:60]!r}")
        name, sep, blob = line[len(_SIG_PREFIX):].partition(" ")
        if not sep or " " in blob:
            raise NoteError(f"malformed signature line {line[:60]!r}")
        check_key_name(name)
        raw = _b64decode("signature", blob)
        if len(raw) < 5:
            raise NoteError("signature is too short to hold a key ID and a signature")
        sig = NoteSignature(name, int.from_bytes(raw[:4], "big"), raw[4:])
        if sig not in signatures:
            signatures.append(sig)
    return Note(text, tuple(signatures))


def open_note(data: bytes, verifiers: Iterable[NoteVerifier]) -> tuple[Note, list[NoteSignature]]:
    """Parse and verify a note; return it and the signatures made by known keys (all of which verified).

    Raises:
        NoteError: malformed, a known key's signature fails, or no known key signed it.
    """
    note = parse_note(data)
    known = {(v.name, v.key_id): v for v in verifiers}
    text = note.text.encode()
    verified: list[NoteSignature] = []
    for sig in note.signatures:
        verifier = known.get((sig.name, sig.key_id))
        if verifier is None:
            continue
        if not verifier.verify(text, sig.signature):
            raise NoteError(f"signature by {sig.name} (key {sig.key_id:08x}) does not verify")
        verified.append(sig)
    if not verified:
        names = ", ".join(sorted({f"{n}+{i:08x}" for n, i in known})) or "none"
        raise NoteError(f"note is not signed by any trusted key (trusted: {names})")
    return note, verified


def sign_note(text: str, signers: Sequence[Ed25519Signer]) -> bytes:
    """Sign ``text`` (which must end in a newline and hold no control characters but newlines)."""
    if not text.endswith("\n") or any(ord(c) < 0x20 and c != "\n" for c in text):
        raise NoteError("note text must end in a newline and hold no control characters")
    if not signers:
        raise NoteError("a note needs at least one signer")
    raw = text.encode()
    sigs = tuple(NoteSignature(s.name, s.key_id, s.sign(raw)) for s in signers)
    return Note(text, sigs).to_bytes()
