"""Tamper battery: each change is caught by `warden audit verify` (exit 7) with a message that names it.

Cases from the issue: a flipped byte in any record, a deleted record, two swapped records, a truncated tail, a log
rolled back to an older copy, a log rebuilt and re-hashed without the key, a checkpoint from another log; plus a
fork (two checkpoints for one size, both signed) and forged checkpoints.
"""

from __future__ import annotations

import json
import shutil
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from warden.audit._checkpoint import Checkpoint, sign_checkpoint
from warden.audit._format import FRAME_RECORD, Head, State, encode_frame, encode_head, encode_state, scan_frames
from warden.audit._merkle import Frontier, leaf_hash
from warden.audit._note import Ed25519Signer, parse_skey
from warden.audit._store import Store
from warden.cli import main
from warden.errors import VerificationError

from .helpers import decision

AUDIT = "audit"


def verify(capsys: pytest.CaptureFixture[str], state_dir: Path, *extra: str) -> tuple[int, str]:
    code = main(["--state-dir", str(state_dir), "audit", "verify", *extra])
    out = capsys.readouterr()
    return code, out.out + out.err


def build(state_dir: Path, batches: int = 6, per_batch: int = 5) -> None:
    store = Store.open(state_dir)
    for b in range(batches):
        store.commit([decision(b * per_batch + i) for i in range(per_batch)], publish=True)
    store.close()


def frames(state_dir: Path) -> list[bytes]:
    data = (state_dir / AUDIT / "entries.log").read_bytes()
    return [f.payload for f in scan_frames(data, 0, FRAME_RECORD)]


def write_frames(state_dir: Path, payloads: list[bytes]) -> None:
    (state_dir / AUDIT / "entries.log").write_bytes(b"".join(encode_frame(FRAME_RECORD, p) for p in payloads))


def rebuild(state_dir: Path, payloads: list[bytes]) -> None:
    """What an attacker without the key can do: rewrite records, CRCs, the hash file, head and state to match."""
    write_frames(state_dir, payloads)
    frontier = Frontier()
    stored = b"".join(h for p in payloads for h in frontier.append(leaf_hash(p)))
    (state_dir / AUDIT / "hashes.bin").write_bytes(stored)
    end = (state_dir / AUDIT / "entries.log").stat().st_size
    notes = (state_dir / AUDIT / "checkpoints.log").stat().st_size
    (state_dir / AUDIT / "head").write_bytes(encode_head(Head(frontier.size, end, frontier.root(), 0,
                                                               frontier.root(), 0, notes)))
    (state_dir / AUDIT / "state").write_bytes(encode_state(State(frontier.size, end, frontier.root())))


@pytest.fixture
def log(state_dir: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    build(state_dir)
    code, out = verify(capsys, state_dir)
    assert code == 0, out
    assert "audit log OK: 30 records, 7 signed checkpoints match them" in out
    return state_dir


def renumber(payload: bytes, index: int) -> bytes:
    doc = json.loads(payload)
    return payload.replace(b'"index":%d,' % doc["index"], b'"index":%d,' % index)


def test_flipped_byte_is_caught_by_the_crc(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = log / AUDIT / "entries.log"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    code, out = verify(capsys, log)
    assert code == 7
    assert "fails its CRC: its bytes were changed" in out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(record=st.integers(0, 29), offset=st.integers(0, 10_000), bit=st.integers(0, 7))
def test_flipped_byte_in_any_record_with_the_crc_fixed(tmp_path_factory: pytest.TempPathFactory,
                                                       capsys: pytest.CaptureFixture[str], record: int, offset: int,
                                                       bit: int) -> None:
    state_dir = tmp_path_factory.mktemp("flip")
    build(state_dir)
    payloads = frames(state_dir)
    target = bytearray(payloads[record])
    target[offset % len(target)] ^= 1 << bit
    payloads[record] = bytes(target)
    write_frames(state_dir, payloads)  # the attacker fixes every CRC
    code, out = verify(capsys, state_dir)
    assert code == 7
    assert (f"record {record} (byte" in out and "is not a valid audit record" in out) or \
        f"a record before index {_next_checkpoint(record)} was modified" in out or "says it is record" in out


def _next_checkpoint(record: int) -> int:
    return (record // 5 + 1) * 5


def test_deleted_record(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    payloads = frames(log)
    del payloads[12]
    write_frames(log, payloads)
    code, out = verify(capsys, log)
    assert code == 7
    assert "record 12 (byte" in out
    assert "says it is record 13: records are missing before it" in out


def test_deleted_record_with_the_rest_renumbered(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    payloads = frames(log)
    del payloads[12]
    rebuild(log, [renumber(p, i) for i, p in enumerate(payloads)])
    code, out = verify(capsys, log)
    assert code == 7
    assert "(size 15) does not match the log's records: a record before index 15 was modified, removed, " \
           "inserted or reordered after the checkpoint at size 10" in out
    assert "SECURITY ERROR" in out


def test_swapped_records(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    payloads = frames(log)
    payloads[7], payloads[8] = payloads[8], payloads[7]
    write_frames(log, payloads)
    code, out = verify(capsys, log)
    assert code == 7
    assert "record 7 (byte" in out
    assert "says it is record 8: records are missing before it (or two records were swapped)" in out


def test_truncated_tail_inside_a_record(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = log / AUDIT / "entries.log"
    path.write_bytes(path.read_bytes()[:-40])
    code, out = verify(capsys, log)
    assert code == 7
    assert "entries.log ends inside record 29" in out


def test_truncated_tail_at_a_record_boundary(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_frames(log, frames(log)[:27])
    code, out = verify(capsys, log)
    assert code == 7
    assert "the log holds 27 records but" in out
    assert "records were removed from the end, or the log was rolled back" in out


def test_rollback_to_an_older_copy(log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = tmp_path / "old-copy"
    shutil.copytree(log, old)
    store = Store.open(log)
    store.commit([decision(100 + i) for i in range(4)], publish=True)
    store.close()
    kept_elsewhere = tmp_path / "checkpoint-kept-elsewhere"
    kept_elsewhere.write_bytes((log / AUDIT / "checkpoint").read_bytes())
    shutil.rmtree(log / AUDIT)
    shutil.copytree(old / AUDIT, log / AUDIT)
    # Alone, an older copy is a consistent log: rollback is only detectable against a checkpoint kept elsewhere.
    code, out = verify(capsys, log)
    assert code == 0, out
    code, out = verify(capsys, log, "--checkpoint", str(kept_elsewhere))
    assert code == 7
    assert f"the log holds 30 records but --checkpoint {kept_elsewhere} says 34" in out
    assert "or the log was rolled back to an older copy" in out
    # and a writer refuses to start from it once it sees the newer checkpoint
    shutil.copy(kept_elsewhere, log / AUDIT / "checkpoint")
    (log / AUDIT / "checkpoint").chmod(0o600)
    with pytest.raises(VerificationError, match="or the log was rolled back to an older copy"):
        Store.open(log)


def test_rebuilt_and_rehashed_without_the_key(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    payloads = frames(log)
    payloads[3] = payloads[3].replace(b'"decision":"allow"', b'"decision":"deny"')
    rebuild(log, payloads)
    code, out = verify(capsys, log)
    assert code == 7
    assert "(size 5) does not match the log's records: a record before index 5 was modified" in out
    assert "SECURITY ERROR" in out


def test_rebuilt_with_the_checkpoints_removed(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    payloads = frames(log)
    payloads[3] = payloads[3].replace(b'"decision":"allow"', b'"decision":"deny"')
    rebuild(log, payloads)
    (log / AUDIT / "checkpoints.log").write_bytes(b"")
    (log / AUDIT / "checkpoint").unlink()
    code, out = verify(capsys, log)
    assert code == 7
    assert "the log has records but no signed checkpoint" in out


def test_rebuilt_and_resigned_with_another_key(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key_file = log / "keys" / "audit-signing.key"
    real = parse_skey(key_file.read_text())
    payloads = frames(log)
    payloads[3] = payloads[3].replace(b'"decision":"allow"', b'"decision":"deny"')
    rebuild(log, payloads)
    fake = Ed25519Signer.generate(real.name)  # same log name, the attacker's own key
    frontier = Frontier()
    for p in payloads:
        frontier.append(leaf_hash(p))
    note = sign_checkpoint(Checkpoint(real.name, frontier.size, frontier.root()), fake).note
    (log / AUDIT / "checkpoints.log").write_bytes(encode_frame(0x02, note))
    (log / AUDIT / "checkpoint").write_bytes(note)
    key_file.write_text(fake.skey + "\n")
    code, out = verify(capsys, log)  # with only the local key, a full rewrite by someone holding the box passes
    assert code == 0, out
    code, out = verify(capsys, log, "--vkey", real.verifier.vkey)
    assert code == 7
    assert "checkpoints.log checkpoint #1: note is not signed by any trusted key" in out


def test_checkpoint_from_another_log(log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other-state"
    build(other, batches=1)
    code, out = verify(capsys, log, "--checkpoint", str(other / AUDIT / "checkpoint"))
    assert code == 7
    assert "checkpoint is for log" in out
    assert "a checkpoint of another log" in out


def test_fork_two_signed_checkpoints_for_one_size(log: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    signer = parse_skey((log / "keys" / "audit-signing.key").read_text())
    forged = sign_checkpoint(Checkpoint(signer.name, 20, b"\x07" * 32), signer).note  # the key holder equivocates
    other = tmp_path / "forked-checkpoint"
    other.write_bytes(forged)
    code, out = verify(capsys, log, "--checkpoint", str(other))
    assert code == 7
    assert "are both signed by this log's key for size 20 but have different roots: the log forked" in out
    assert out.count("\u2014 " + signer.name) == 2  # both signed notes printed as evidence
    assert "SECURITY ERROR" in out


def test_forged_checkpoint_signature(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = log / AUDIT / "checkpoint"
    note = path.read_bytes().replace(b"\n30\n", b"\n31\n")
    path.write_bytes(note)
    code, out = verify(capsys, log)
    assert code == 7
    assert "does not verify" in out


def test_damaged_hash_cache(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = log / AUDIT / "hashes.bin"
    data = bytearray(path.read_bytes())
    data[5 * 32] ^= 1
    path.write_bytes(bytes(data))
    code, out = verify(capsys, log)
    assert code == 7
    assert "hashes.bin differs from the records at stored hash 5" in out


def test_crc_is_the_frame_crc() -> None:
    frame = encode_frame(FRAME_RECORD, b"{}")
    assert int.from_bytes(frame[-4:], "big") == zlib.crc32(frame[1:-4])


def rebuild_signed(state_dir: Path, payloads: list[bytes]) -> None:
    """What a holder of the log's key can do: :func:`rebuild`, then sign a checkpoint over the rewritten tree."""
    rebuild(state_dir, payloads)
    signer = parse_skey((state_dir / "keys" / "audit-signing.key").read_text())
    frontier = Frontier()
    for p in payloads:
        frontier.append(leaf_hash(p))
    note = sign_checkpoint(Checkpoint(signer.name, frontier.size, frontier.root()), signer).note
    (state_dir / AUDIT / "checkpoints.log").write_bytes(encode_frame(0x02, note))
    (state_dir / AUDIT / "checkpoint").write_bytes(note)


def test_signed_but_malformed_record_is_rejected(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Even records signed with the real key (a buggy or hostile writer) must be well-formed warden records."""
    payloads = frames(log)
    payloads[4] = payloads[4].replace(b'"detail":"hash",', b'"detail":"hash","value":1,', 1)
    assert b'"value":1' in payloads[4]
    rebuild_signed(log, payloads)
    code, out = verify(capsys, log)
    assert code == 7
    assert "record 4 (byte" in out
    assert "arguments at detail 'hash' must not carry a value" in out


def test_signed_record_nested_too_deeply_fails_verify_report_and_recovery_cleanly(
        log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A hostile log handed to a responder: one signed record whose ``arguments.value`` nests 20,000 arrays deep (no
    writer makes it: arguments deeper than 64 levels are refused). Before, msgspec's RecursionError escaped every
    reader: `audit verify` (fast and --deep), show, export and report stopped with "internal error ... a bug in
    warden" instead of naming the record, the report (written whatever verification finds) was not written at all,
    and opening the log for writing crashed. Now each names record 4 as invalid and the report says FAILED."""
    payloads = frames(log)
    deep = b"[" * 20_000 + b"]" * 20_000
    head, _, rest = payloads[4].partition(b'"detail":"hash","digest":"')
    payloads[4] = head + b'"detail":"full","digest":"' + rest[:71] + b'","value":' + deep + rest[72:]
    assert deep in payloads[4]
    rebuild_signed(log, payloads)
    for extra in ((), ("--deep",)):
        code, out = verify(capsys, log, *extra)
        assert code == 7, out
        assert "record 4 (byte" in out
        assert "nested too deeply" in out
        assert "internal error" not in out
    for args in (("show",), ("show", "--json"), ("export", "--format", "ocsf")):
        code = main(["--state-dir", str(log), "audit", *args])
        out = capsys.readouterr()
        assert code == 7, out
        assert "record 4 is not a valid audit record" in out.err
    report = tmp_path / "report.html"
    code = main(["--state-dir", str(log), "audit", "report", "-o", str(report)])
    out = capsys.readouterr()
    assert "VERIFICATION FAILED" in out.out
    assert "nested too deeply" in out.out
    assert "VERIFICATION FAILED" in report.read_text()
    # recovery reads every record after its durable anchor: anchored at the start, it meets record 4
    (log / AUDIT / "state").write_bytes(encode_state(State(0, 0, Frontier().root())))
    with pytest.raises(VerificationError, match="log ends after 4 records, but 30 were committed"):
        Store.open(log)
