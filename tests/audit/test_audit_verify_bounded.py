"""verify_log keeps only O(1) recomputed hashes (it compares them with hashes.bin every 65,536 records and drops
them) and reports, through a VerifyTrail, how far it got: both must still catch and name every damage."""

from __future__ import annotations

from pathlib import Path

import pytest

from warden.audit._reader import LogReader
from warden.audit._store import Store
from warden.audit._verify import VerifyTrail, verify_log
from warden.errors import VerificationError

from .helpers import decision

RECORDS = 70_000  # past one 65,536-record comparison chunk


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    state_dir = tmp_path_factory.mktemp("big") / "state"
    state_dir.mkdir(mode=0o700)
    store = Store.open(state_dir, clock=lambda: 1_800_000_000.0)
    prepared = [store.prepare(decision(i)) for i in range(64)]
    for start in range(0, RECORDS, 10_000):
        store.commit_prepared([prepared[i % 64] for i in range(10_000)], publish=start == 60_000)
    store.close()
    return state_dir


def verify(state_dir: Path, hashes: bytes | None = None) -> tuple[VerifyTrail, VerificationError | None]:
    trail = VerifyTrail()
    with LogReader(state_dir) as reader:
        try:
            verify_log(reader.committed, log_key=reader.local_verifier(), checkpoints=reader.checkpoint_notes(),
                       hashes=hashes if hashes is not None else reader.hashes, trail=trail)
        except VerificationError as exc:
            return trail, exc
    return trail, None


def test_an_intact_large_log_verifies_and_the_trail_says_so(big_log: Path) -> None:
    trail, error = verify(big_log)
    assert error is None
    assert trail.records == RECORDS
    assert trail.trusted is not None
    assert trail.trusted.size == RECORDS


@pytest.mark.parametrize("position", [100, 2 * RECORDS - 40])  # caught at the first chunk, and at the end
def test_a_changed_stored_hash_is_named_in_either_chunk(big_log: Path, position: int) -> None:
    hashes = bytearray((big_log / "audit" / "hashes.bin").read_bytes())
    hashes[position * 32] ^= 1
    _, error = verify(big_log, bytes(hashes))
    assert error is not None
    assert f"hashes.bin differs from the records at stored hash {position}" in error.message


def test_a_truncated_large_log_trusts_what_its_last_matching_checkpoint_covers(big_log: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(big_log, copy)
    entries = copy / "audit" / "entries.log"
    entries.write_bytes(entries.read_bytes()[:-100])
    (copy / "audit" / "head").unlink()
    trail, error = verify(copy)
    assert error is not None
    assert f"entries.log ends inside record {RECORDS - 1}" in error.message
    assert trail.records == RECORDS - 1
    assert trail.trusted is not None
    assert trail.trusted.size == 10_000  # the first batch's checkpoint; the one at 70,000 is beyond the cut
