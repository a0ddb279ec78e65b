"""The async writer and the store: durable appends, group commit, fail-closed on write errors (write-ahead),
recovery notices, checkpoints, key and identity handling."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
import trio

from warden.audit import (
    LATER_WITHIN,
    AuditLogFailed,
    AuditUnavailable,
    Decision,
    Event,
    InvalidRecord,
    Record,
    open_audit_log,
    open_checkpoint,
)
from warden.audit._reader import LogReader
from warden.audit._store import Store
from warden.audit._verify import verify_log
from warden.errors import AuditError, StateError, VerificationError

from .helpers import REPO, decision

WRITER = [sys.executable, str(Path(__file__).with_name("audit_writer.py"))]


def verify_dir(state_dir: Path) -> tuple[int, list[dict[str, object]]]:
    """Full verification the way `warden audit verify` does it; returns the size and the decoded records."""
    with LogReader(state_dir) as reader:
        result = verify_log(reader.committed, log_key=reader.local_verifier(), checkpoints=reader.checkpoint_notes(),
                            hashes=reader.hashes, deep=True)
        records = [json.loads(raw.data) for raw in reader.records()]
    assert result.size == len(records)
    return result.size, records


async def test_append_returns_durable_indices_in_order(state_dir: Path) -> None:
    async with open_audit_log(state_dir) as log:
        first = await log.append(decision(1))
        second = await log.append(decision(2))
        assert (first, second) == (1, 2)  # 0 is audit.opened
        assert log.verifier.name == log.origin
    _, records = verify_dir(state_dir)
    assert [r["event"] for r in records] == ["audit.opened", "call.decided", "call.decided", "audit.closed"]
    assert [r["index"] for r in records] == [0, 1, 2, 3]
    assert all(r["pid"] == os.getpid() for r in records)


async def test_concurrent_appends_share_fdatasyncs(state_dir: Path) -> None:
    async with open_audit_log(state_dir) as log:
        indices: list[int] = []

        async def one(n: int) -> None:
            indices.append(await log.append(decision(n)))

        async with trio.open_nursery() as nursery:
            for n in range(200):
                nursery.start_soon(one, n)
        stats = log.statistics()
    assert sorted(indices) == list(range(1, 201))
    assert stats.records == 201  # with audit.opened
    assert stats.batches < 100  # group commit: far fewer syncs than records
    assert stats.largest_batch > 1
    assert verify_dir(state_dir)[0] == 202


async def test_invalid_record_is_refused_without_failing_the_log(state_dir: Path) -> None:
    async with open_audit_log(state_dir) as log:
        with pytest.raises(InvalidRecord, match="digest"):
            await log.append(decision(server_id="sha256:" + "g" * 64))
        assert not log.failed
        assert await log.append(decision(3)) == 1


async def test_registered_secrets_never_reach_the_log(state_dir: Path) -> None:
    from warden.audit import Arguments, Detail

    secret = "tok-9f8e7d6c5b4a"
    async with open_audit_log(state_dir, secrets=[secret]) as log:
        await log.append(decision(1, error=f"upstream said: bad token {secret}", reason=secret,
                                  arguments=Arguments.capture({"q": f"x{secret}y", "k": [secret]}, Detail.FULL)))
        with pytest.raises(AuditError, match="too short"):
            log.add_secrets(["abc"])
    raw = (state_dir / "audit" / "entries.log").read_bytes()
    assert secret.encode() not in raw
    assert b"[REDACTED]" in raw
    verify_dir(state_dir)


async def test_close_publishes_a_checkpoint_covering_everything(state_dir: Path) -> None:
    async with open_audit_log(state_dir, checkpoint_interval=3600) as log:
        for n in range(5):
            await log.append(decision(n))
        mid = await log.checkpoint()
        assert mid.size == 6
        key = log.verifier
    with LogReader(state_dir) as reader:
        note = reader.latest_note()
    assert note is not None
    final, _ = open_checkpoint(note, key)
    assert final.size == 7  # audit.closed included
    with LogReader(state_dir) as reader:
        history = [open_checkpoint(s.note, key)[0].size for s in reader.checkpoint_notes()]
    assert history == [1, 6, 7, 7]  # the first batch, the explicit one, the final one; then the checkpoint file


async def test_a_quiet_log_publishes_a_checkpoint_for_its_last_records_without_closing(state_dir: Path) -> None:
    """Records that arrive within the checkpoint interval of the last checkpoint are covered by the next one even
    when nothing more comes: the writer publishes it once the interval has passed, while the log stays open (a
    warden that goes idle must not leave its last actions unsigned and unwitnessed until it exits)."""
    import time

    async with open_audit_log(state_dir, checkpoint_interval=0.3) as log:
        for n in range(4):
            await log.append(decision(n))  # the first batch is published; the rest come within the interval
        key = log.verifier

        def latest_size() -> int:
            with LogReader(state_dir) as reader:
                note = reader.latest_note()
            return 0 if note is None else open_checkpoint(note, key)[0].size

        deadline = time.monotonic() + 10  # a hang guard; the bound itself is the interval
        while latest_size() < 5 and time.monotonic() < deadline:
            time.sleep(0.05)  # real time: the writer thread keeps real time whatever clock trio runs on
        assert latest_size() == 5  # audit.opened and the four decisions, signed before the log closed


async def test_cancelled_append_leaves_the_log_usable(state_dir: Path) -> None:
    async with open_audit_log(state_dir) as log:
        with trio.move_on_after(0):
            await log.append(decision(1))
        index = await log.append(decision(2))
        assert index in (1, 2)
    verify_dir(state_dir)


async def test_a_record_nothing_waits_on_rides_with_the_next_append(state_dir: Path) -> None:
    """A call's outcome is queued with append_later; the next call's decision carries it: one fdatasync for both."""
    async with open_audit_log(state_dir) as log:
        before = log.statistics()
        log.append_later(decision(1))
        assert log.statistics().records == before.records  # queued, not yet durable
        assert await log.append(decision(2)) == 2  # the queued record took index 1, in the same batch
        after = log.statistics()
        assert (after.records - before.records, after.batches - before.batches) == (2, 1)
    _, records = verify_dir(state_dir)
    assert [r["request_digest"] for r in records[1:3]] == [decision(1).request_digest, decision(2).request_digest]


async def test_a_record_nothing_waits_on_is_made_durable_alone_when_no_append_comes(state_dir: Path) -> None:
    async with open_audit_log(state_dir) as log:
        before = log.statistics().records
        log.append_later(decision(1))
        with trio.fail_after(5):  # a hang guard; the bound itself is LATER_WITHIN
            while log.statistics().records == before:
                await trio.sleep(LATER_WITHIN / 5)
        with LogReader(state_dir) as reader:  # durable while the writer still runs, not only at close
            assert [json.loads(raw.data)["event"] for raw in reader.records()] == ["audit.opened", "call.decided"]


async def test_a_failed_batch_of_records_nothing_waits_on_still_fails_the_log_closed(state_dir: Path) -> None:
    async with open_audit_log(state_dir) as log:
        log._store._fail(OSError(5, "Input/output error"))
        log.append_later(decision(1))  # queued before anyone knew
        with trio.fail_after(5):
            while not log.failed:
                await trio.sleep(LATER_WITHIN / 5)
        with pytest.raises(AuditLogFailed, match="Input/output error"):
            await log.append(decision(2))  # the next decision is refused: nothing more is forwarded
        with pytest.raises(AuditLogFailed):
            log.append_later(decision(3))


def test_write_ahead_log_made_unwritable_mid_run_refuses_every_later_call(state_dir: Path) -> None:
    """covers: write-ahead. The writer's files become unwritable (RLIMIT_FSIZE: EFBIG on any growth, which works
    as root) after 30 acknowledged calls; every later append fails, so no later call is forwarded. A restart
    recovers and the log verifies with exactly the forwarded calls in it."""
    out = subprocess.run([*WRITER, str(state_dir), "--tasks", "3", "--records", "40", "--limit-after", "30"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    acks = [line.split() for line in out.splitlines() if line.startswith("ack ")]
    summary = out.splitlines()[-1].split()
    assert summary == ["forwarded", str(len(acks)), "refused", str(120 - len(acks)), "failed", "1"]
    assert 30 <= len(acks) < 120
    # restart: recovery, then everything forwarded is in the log, byte for byte
    subprocess.run([*WRITER, str(state_dir), "--tasks", "1", "--records", "1"], check=True, capture_output=True,
                   timeout=60)
    _, records = verify_dir(state_dir)
    for _, index, token in acks:
        assert records[int(index)]["request_digest"] == token


async def test_failed_log_refuses_everything_after(state_dir: Path) -> None:
    async with open_audit_log(state_dir) as log:
        await log.append(decision(1))
        # An fdatasync failure reported by the kernel: the store fails for good (fsyncgate).
        log._store._fail(OSError(5, "Input/output error"))
        with pytest.raises(AuditLogFailed, match="Input/output error"):
            await log.append(decision(2))
        with pytest.raises(AuditLogFailed):
            await log.checkpoint()
        assert log.failed
        assert log.statistics().failed


def test_identity_and_key_are_never_guessed(state_dir: Path) -> None:
    store = Store.open(state_dir)
    store.commit([decision(1)], publish=True)
    store.close()
    key = state_dir / "keys" / "audit-signing.key"
    assert key.stat().st_mode & 0o777 == 0o600
    # the key is the log's: losing it with checkpoints published is fatal, never silently regenerated
    saved = key.read_bytes()
    key.unlink()
    with pytest.raises(AuditUnavailable, match=r"signing key .* is missing"):
        Store.open(state_dir)
    key.write_bytes(saved)
    key.chmod(0o644)
    with pytest.raises(StateError, match="must be ours and 0600"):
        Store.open(state_dir)
    key.chmod(0o600)
    # a log deleted while its key stays: refuse, do not start a new log under the old key
    meta = state_dir / "audit" / "log.json"
    meta_bytes = meta.read_bytes()
    meta.unlink()
    with pytest.raises(AuditUnavailable, match=r"log\.json is missing but the log has records"):
        Store.open(state_dir)
    for f in (state_dir / "audit").iterdir():
        f.unlink()
    with pytest.raises(AuditUnavailable, match="its log is gone"):
        Store.open(state_dir)
    (state_dir / "audit" / "log.json").write_bytes(meta_bytes)


def test_origin_is_unique_per_log(tmp_path: Path) -> None:
    a, b = Store.open(tmp_path / "a"), Store.open(tmp_path / "b")
    try:
        assert a.origin != b.origin
        assert a.origin.startswith("warden.invalid/audit/")
    finally:
        a.close()
        b.close()


def test_recovery_notice_after_a_torn_tail(state_dir: Path) -> None:
    store = Store.open(state_dir)
    store.commit([decision(n) for n in range(3)], publish=True)
    store.close()
    torn = b"\xff\x01\x00\x00\x01\x00{\"torn"  # a frame a crash cut short
    with open(state_dir / "audit" / "entries.log", "ab") as f:
        f.write(torn)
    store = Store.open(state_dir)
    assert store.recovery is not None
    assert store.recovery.truncated_bytes == len(torn)
    first = store.commit([decision(9)])
    store.close()
    _, records = verify_dir(state_dir)
    assert records[first - 1]["event"] == "audit.recovered"
    assert records[first - 1]["recovered"]["truncated_bytes"] == len(torn)


def test_store_refuses_to_sign_a_checkpoint_inconsistent_with_the_last(state_dir: Path) -> None:
    store = Store.open(state_dir)
    store.commit([decision(n) for n in range(4)], publish=True)
    # someone rewrites the stored hash of node (2, 0), the root of the published tree of size 4
    with open(state_dir / "audit" / "hashes.bin", "r+b") as f:
        f.seek(6 * 32)
        f.write(b"\x00" * 32)
    with pytest.raises(AuditLogFailed, match="refusing to sign"):
        store.commit([decision(5)], publish=True)
    with pytest.raises(AuditLogFailed):
        store.commit([decision(6)])
    store.close()


def test_reopen_refuses_a_log_shorter_than_its_checkpoint(state_dir: Path) -> None:
    store = Store.open(state_dir)
    store.commit([decision(n) for n in range(10)], publish=True)
    store.close()
    path = state_dir / "audit" / "entries.log"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(VerificationError, match="records were removed"):
        Store.open(state_dir)


def test_module_is_exported_once() -> None:
    import warden.audit as audit

    assert audit.__all__ == sorted(audit.__all__, key=lambda n: (not n.isupper(), n))  # ruff's RUF022 order
    for name in audit.__all__:
        assert getattr(audit, name) is not None
    assert REPO.joinpath("audit", "FORMAT.md").exists()
    assert msgspec.json.decode(json.dumps({"event": "audit.opened"}).encode(), type=Record).event is Event.AUDIT_OPENED
    assert Decision("allow") is Decision.ALLOW
