"""Signed notes, keys, checkpoints and tlog-proof files: the Go ``note_test.go`` mangling loops (every substring
and every byte+1 of a key must be rejected), the C2SP verification rules, and hypothesis fuzzing whose only
allowed failure is ``NoteError``."""

from __future__ import annotations

import base64
import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warden.audit._checkpoint import (
    Checkpoint,
    format_tlog_proof,
    open_checkpoint,
    parse_checkpoint_text,
    parse_tlog_proof,
    sign_checkpoint,
    verify_tlog_proof,
)
from warden.audit._merkle import Frontier, inclusion_proof, leaf_hash
from warden.audit._note import (
    Ed25519Signer,
    Ed25519Verifier,
    NoteError,
    open_note,
    parse_note,
    parse_skey,
    parse_vkey,
    sign_note,
)

from .helpers import load_json

GO = load_json("signed_notes.json")["go_testsign"]
SIGNER = parse_skey(GO["skey"])
NOTE = (GO["text"] + "\n" + GO["line"] + "\n").encode()


def test_every_mangled_vkey_and_skey_is_rejected() -> None:
    for text, parse in ((GO["vkey"], parse_vkey), (GO["skey"], parse_skey)):
        for i in range(len(text)):
            for j in range(i + 1, len(text) + 1):
                if (i, j) != (0, len(text)):
                    with pytest.raises(NoteError):
                        parse(text[i:j])
        for i in range(len(text)):
            mangled = text[:i] + chr(ord(text[i]) + 1) + text[i + 1 :]
            with pytest.raises(NoteError):
                parse(mangled)


def test_note_verification_rules() -> None:
    known = SIGNER.verifier
    note, verified = open_note(NOTE, [known])
    assert note.text == GO["text"]
    assert [s.name for s in verified] == ["PeterNeumann"]
    other = Ed25519Signer.generate("example.com/other")
    # unknown keys are ignored, but a note with no known signature is rejected
    with pytest.raises(NoteError, match="not signed by any trusted key"):
        open_note(NOTE, [other.verifier])
    # same name, different key: ignored (not "a failing known key"), so still rejected as unsigned
    impostor = Ed25519Verifier("PeterNeumann", other.verifier.public_key)
    with pytest.raises(NoteError, match="not signed by any trusted key"):
        open_note(NOTE, [impostor])
    # a known key whose signature fails rejects the whole note, even if another known key verifies
    sig = base64.b64decode(GO["line"].split(" ")[2])
    broken = sig[:4] + bytes([sig[4] ^ 1]) + sig[5:]
    bad_line = "— PeterNeumann " + base64.b64encode(broken).decode()
    second = sign_note(GO["text"], [other]).decode().split("\n\n", 1)[1]
    with pytest.raises(NoteError, match="does not verify"):
        open_note((GO["text"] + "\n" + bad_line + "\n" + second).encode(), [known, other.verifier])
    # extra unknown signatures are fine
    both = (GO["text"] + "\n" + GO["line"] + "\n" + second).encode()
    assert len(open_note(both, [known])[1]) == 1
    # duplicates collapse
    dup = (GO["text"] + "\n" + GO["line"] + "\n" + GO["line"] + "\n").encode()
    assert len(parse_note(dup).signatures) == 1


@pytest.mark.parametrize(("data", "why"), [
    (b"no blank line\n", "no blank line"),
    (NOTE[:-1], "does not end with a newline"),
    (NOTE.replace(b"\xe2\x80\x94 ", b"- "), "malformed signature line"),
    (NOTE.replace(b"If you", b"If\x01you"), "control character"),
    (NOTE + b"\xff", "UTF-8"),
    (NOTE.replace(b"PeterNeumann x08", b"Peter+Neumann x08"), "space or '\\+'"),
    (GO["text"].encode() + b"\n" + "— PeterNeumann AAAA\n".encode(), "too short"),
    (GO["text"].encode() + b"\n" + "— PeterNeumann x08go!\n".encode(), "base64"),
])
def test_malformed_notes(data: bytes, why: str) -> None:
    with pytest.raises(NoteError, match=why):
        parse_note(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_fuzzed_notes_only_raise_note_error(data: bytes) -> None:
    with contextlib.suppress(NoteError):
        open_note(data, [SIGNER.verifier])


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(NOTE) - 1), st.integers(1, 255))
def test_any_changed_byte_breaks_a_signed_note(pos: int, delta: int) -> None:
    mangled = bytearray(NOTE)
    mangled[pos] = (mangled[pos] + delta) % 256
    with pytest.raises(NoteError):
        open_note(bytes(mangled), [SIGNER.verifier])


@pytest.mark.parametrize(("text", "why"), [
    ("example.com/log\n01\nAAAA\n", "leading zeros"),
    ("example.com/log\n1\n" + base64.b64encode(b"x" * 31).decode() + "\n", "32-byte hash"),
    ("example.com/log\n1\n", "three lines"),
    ("example.com/log\n-1\n" + base64.b64encode(b"x" * 32).decode() + "\n", "decimal"),
    ("example.com/log\n1\n" + base64.b64encode(b"x" * 32).decode() + "\n\n", "empty extension"),
    ("example log\n1\n" + base64.b64encode(b"x" * 32).decode() + "\n", "space"),
])
def test_malformed_checkpoints(text: str, why: str) -> None:
    with pytest.raises(NoteError, match=why):
        parse_checkpoint_text(text)


def _log(n: int) -> tuple[Ed25519Signer, list[bytes], list[bytes]]:
    signer = Ed25519Signer.generate("example.com/test-log")
    entries = [b'{"n":%d}' % i for i in range(n)]
    stored: list[bytes] = []
    f = Frontier()
    for e in entries:
        stored.extend(f.append(leaf_hash(e)))
    return signer, entries, stored


def test_checkpoint_and_tlog_proof_roundtrip() -> None:
    signer, entries, stored = _log(13)
    read = lambda ps: [stored[p] for p in ps]  # noqa: E731
    f = Frontier()
    for e in entries:
        f.append(leaf_hash(e))
    signed = sign_checkpoint(Checkpoint(signer.name, 13, f.root()), signer)
    assert open_checkpoint(signed.note, signer.verifier)[0] == signed
    proof = format_tlog_proof(7, inclusion_proof(7, 13, read), signed, extra=entries[7])
    parsed, cp = verify_tlog_proof(proof, signer.verifier)
    assert (parsed.index, parsed.extra, cp.size) == (7, entries[7], 13)
    assert parse_tlog_proof(proof).path == tuple(inclusion_proof(7, 13, read))
    # the record given must match, and a wrong record or index fails
    with pytest.raises(NoteError, match="differs"):
        verify_tlog_proof(proof, signer.verifier, entry=entries[6])
    wrong = format_tlog_proof(6, inclusion_proof(7, 13, read), signed, extra=entries[7])
    with pytest.raises(Exception, match="does not lead to the root"):
        verify_tlog_proof(wrong, signer.verifier)
    other = Ed25519Signer.generate("example.com/test-log")
    with pytest.raises(NoteError, match="not signed by any trusted key"):
        verify_tlog_proof(proof, other.verifier)
    with pytest.raises(NoteError, match="is for log"):
        open_checkpoint(signed.note, Ed25519Signer.generate("example.com/another").verifier)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_fuzzed_tlog_proofs_only_raise_verification_errors(data: bytes) -> None:
    from warden.errors import VerificationError

    with contextlib.suppress(VerificationError):
        verify_tlog_proof(b"c2sp.org/tlog-proof@v1\n" + data, SIGNER.verifier)
