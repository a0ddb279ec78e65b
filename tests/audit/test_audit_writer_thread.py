"""The async log's one writer thread: leader/follower group commit, the wakeup back into trio, and what happens when
the thread itself goes wrong (fail closed: every waiting and later append is refused, never left unaudited or
hanging), when the disk returns EIO through it, and when the log's context ends (flush, then join)."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from warden.audit import AuditLogFailed, Event, Record, open_audit_log
from warden.audit._log import AuditLog
from warden.errors import AuditError

from .helpers import decision
from .test_audit_log import verify_dir


def _writers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "warden-audit-writer"]


async def test_64_concurrent_appends_share_few_fdatasyncs(tmp_path: Path) -> None:
    """Leader/follower: the first append wakes the writer, the 63 that come while it syncs follow in one batch."""
    async with open_audit_log(tmp_path) as log:
        before = log.statistics()
        indexes: list[int] = []

        async def one(n: int) -> None:
            indexes.append(await log.append(decision(n)))

        async with trio.open_nursery() as nursery:
            for n in range(64):
                nursery.start_soon(one, n)
        after = log.statistics()
    assert sorted(indexes) == list(range(min(indexes), min(indexes) + 64))
    assert after.records - before.records == 64
    assert after.batches - before.batches <= 3  # one leader batch, the followers in one or two more
    _, records = verify_dir(tmp_path)
    assert [r["event"] for r in records].count("call.decided") == 64


async def test_a_record_nobody_awaits_is_committed_within_the_bound(tmp_path: Path) -> None:
    """``append_later`` never wakes a lingering writer, yet its record is durable within LATER_WITHIN (plus slack),
    with no later append to carry it."""
    async with open_audit_log(tmp_path) as log:
        await log.append(decision(0))
        batches = log.statistics().batches
        log.append_later(Record(event=Event.CALL_OUTCOME, method="tools/call", decision_index=1))
        with trio.fail_after(5):
            while log.statistics().batches == batches:
                await trio.sleep(0.01)
        assert log.statistics().records >= 3  # opened, the decision, the outcome


async def test_the_writer_wakes_trio_through_the_run_token_not_a_borrowed_thread(tmp_path: Path,
                                                                                monkeypatch: Any) -> None:
    """No ``trio.to_thread`` per batch: one long-lived thread for the log's whole life, whatever the batch count."""
    calls = 0
    real = trio.to_thread.run_sync

    async def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return await real(*args, **kwargs)

    async with open_audit_log(tmp_path) as log:
        monkeypatch.setattr(trio.to_thread, "run_sync", counting)
        assert len(_writers()) == 1
        for n in range(50):
            await log.append(decision(n))
        assert calls == 0
        assert log.statistics().batches >= 50


async def test_writer_thread_death_refuses_every_append(tmp_path: Path, monkeypatch: Any) -> None:
    """A bug that ends the writer thread itself fails the log: the append waiting on it and every later one raise
    AuditLogFailed (write-ahead: the gateway refuses the call), and the context still exits and joins."""
    async with open_audit_log(tmp_path) as log:
        await log.append(decision(0))

        def broken(self: AuditLog, *_: Any) -> None:
            raise RuntimeError("writer bug")

        # The batch the writer takes next is lost with the thread: its waiter must still hear of it.
        monkeypatch.setattr(AuditLog, "_commit", broken)
        with pytest.raises(AuditLogFailed, match="writer stopped"):
            with trio.fail_after(10):
                await log.append(decision(1))
        assert log.failed
        with pytest.raises(AuditLogFailed):
            await log.append(decision(2))
        with pytest.raises(AuditLogFailed):
            log.append_later(decision(3))
        with pytest.raises(AuditLogFailed):
            await log.checkpoint()
    assert _writers() == []
    _, records = verify_dir(tmp_path)
    assert [r.get("request_digest") for r in records if r["event"] == "call.decided"] == [
        decision(0).request_digest]


async def test_a_store_bug_in_the_writer_fails_the_batch_and_the_log(tmp_path: Path, monkeypatch: Any) -> None:
    """An exception from the store that is not an I/O error (a bug) is the batch's failure, and the log's."""
    async with open_audit_log(tmp_path) as log:
        def boom(*_: Any, **__: Any) -> int:
            raise ZeroDivisionError("store bug")

        monkeypatch.setattr(log._store, "commit_prepared", boom)
        with pytest.raises(AuditLogFailed, match="ZeroDivisionError"):
            await log.append(decision(1))
        with pytest.raises(AuditLogFailed):
            await log.append(decision(2))
    assert _writers() == []


async def test_eio_from_fdatasync_on_the_writer_thread_surfaces_to_every_waiter(tmp_path: Path,
                                                                                monkeypatch: Any) -> None:
    """EIO at the commit point, raised on the writer thread, reaches all appends of the batch and every later one;
    nothing after the last acknowledged record is claimed, and the log verifies up to it after a restart."""
    async with open_audit_log(tmp_path) as log:
        acked = await log.append(decision(0))
        real = os.fdatasync

        def failing(fd: int) -> None:
            if threading.current_thread().name == "warden-audit-writer":
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            real(fd)

        monkeypatch.setattr(os, "fdatasync", failing)
        results: list[BaseException | int] = []

        async def one(n: int) -> None:
            try:
                results.append(await log.append(decision(n)))
            except AuditLogFailed as exc:
                results.append(exc)

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                for n in range(1, 17):
                    nursery.start_soon(one, n)
        assert len(results) == 16
        assert all(isinstance(r, AuditLogFailed) for r in results)
        assert "Input/output error" in str(results[0])
        with pytest.raises(AuditLogFailed):
            await log.append(decision(99))
        monkeypatch.setattr(os, "fdatasync", real)
    assert _writers() == []
    _, records = verify_dir(tmp_path)  # the restart's recovery keeps what was complete; it verifies
    indexes = {r["index"]: r for r in records}
    assert indexes[acked]["request_digest"] == decision(0).request_digest


async def test_shutdown_flushes_queued_records_then_joins(tmp_path: Path) -> None:
    """Records nothing awaited are committed before ``audit.closed``, and no writer thread outlives the block."""
    async with open_audit_log(tmp_path, checkpoint_interval=3600) as log:
        await log.append(decision(0))
        for n in range(10):
            log.append_later(Record(event=Event.CALL_OUTCOME, method="tools/call", decision_index=1 + n))
    assert _writers() == []
    _, records = verify_dir(tmp_path)
    events = [r["event"] for r in records]
    assert events.count("call.outcome") == 10
    assert events[-1] == "audit.closed"
    with pytest.raises(AuditError, match="closed"):
        log.append_later(decision(1))


async def test_shutdown_under_cancellation_still_flushes_and_joins(tmp_path: Path) -> None:
    """Cancelled while 32 appends wait: the block's exit is shielded, commits what was queued and joins the thread;
    the log verifies."""
    with trio.CancelScope() as scope:
        async with open_audit_log(tmp_path) as log, trio.open_nursery() as nursery:
            for n in range(32):
                nursery.start_soon(log.append, decision(n))
            await trio.testing.wait_all_tasks_blocked()
            scope.cancel()
    assert _writers() == []
    _, records = verify_dir(tmp_path)
    assert records[-1]["event"] == "audit.closed"


async def test_write_ahead_append_then_runs_each_continuation_once_its_record_is_durable(tmp_path: Path,
                                                                                       monkeypatch: Any) -> None:
    """covers: write-ahead. ``append_then`` does not wait: each continuation runs on the trio thread with its
    record's index once the batch holding it is durable (never before its ``fdatasync`` returned), in commit
    order; EIO at the commit hands every continuation of the batch the error, and later ones are refused at once."""
    async with open_audit_log(tmp_path) as log:
        real = os.fdatasync
        synced = 0

        def counting(fd: int) -> None:
            nonlocal synced
            real(fd)
            if threading.current_thread().name == "warden-audit-writer":
                synced += 1

        monkeypatch.setattr(os, "fdatasync", counting)
        trio_thread = threading.current_thread()
        got: list[tuple[int, int | AuditError]] = []

        def then(n: int) -> Any:
            def settled(result: int | AuditError) -> None:
                assert threading.current_thread() is trio_thread
                assert synced > base  # a continuation never runs before the commit point of its batch
                got.append((n, result))
            return settled

        base = synced
        for n in range(16):
            log.append_then(decision(n), then(n))
        assert got == []  # nothing ran inline: the caller went on at once
        with trio.fail_after(10):
            while len(got) < 16:
                await trio.sleep(0.005)
        assert [n for n, _ in got] == list(range(16))
        indexes = [r for _, r in got]
        assert all(isinstance(i, int) for i in indexes)
        assert indexes == sorted(indexes)
        assert len(set(indexes)) == 16

        def failing(fd: int) -> None:
            if threading.current_thread().name == "warden-audit-writer":
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            real(fd)

        monkeypatch.setattr(os, "fdatasync", failing)
        failed: list[int | AuditError] = []
        for n in range(4):
            log.append_then(decision(100 + n), failed.append)
        with trio.fail_after(10):
            while len(failed) < 4:
                await trio.sleep(0.005)
        assert all(isinstance(r, AuditLogFailed) for r in failed)
        with pytest.raises(AuditLogFailed):
            log.append_then(decision(200), failed.append)
        assert len(failed) == 4
        monkeypatch.setattr(os, "fdatasync", real)
    _, records = verify_dir(tmp_path)
    by_index = {r["index"]: r for r in records}
    assert [by_index[i]["request_digest"] for _, i in got] == [decision(n).request_digest for n in range(16)]


async def test_write_ahead_append_then_hears_of_a_writer_thread_death(tmp_path: Path, monkeypatch: Any) -> None:
    """covers: write-ahead. The writer thread dies with a batch of continuations: each gets AuditLogFailed."""
    async with open_audit_log(tmp_path) as log:
        await log.append(decision(0))

        def broken(self: AuditLog, *_: Any) -> None:
            raise RuntimeError("writer bug")

        monkeypatch.setattr(AuditLog, "_commit", broken)
        got: list[int | AuditError] = []
        log.append_then(decision(1), got.append)
        with trio.fail_after(10):
            while not got:
                await trio.sleep(0.005)
        assert len(got) == 1
        assert isinstance(got[0], AuditLogFailed)
        assert "writer stopped" in got[0].message
