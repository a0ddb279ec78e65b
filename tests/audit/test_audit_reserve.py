"""The audit log's disk reserve (issue 11 item 5, battery row B08-42): a full disk pauses the log with a record
that says so, every audited action is refused with that reason meanwhile, and the log resumes by itself once
there is room. Tested on a real, small file system: a 4 MiB tmpfs mounted for the test (root only), filled by a
real file, with real fdatasync and fallocate.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from warden.audit import AuditLog, AuditLogFailed, Event, Record, open_audit_log
from warden.audit._errors import AuditDiskFull
from warden.audit._reserve import ENTRIES_RESERVE, fallocate_supported

from .test_audit_log import verify_dir

IS_ROOT = os.geteuid() == 0
pytestmark = pytest.mark.skipif(not IS_ROOT, reason="mounting a small tmpfs needs root")
BIG = "x" * 60_000  # a record of ~60 KB: the reserve boundary is a few dozen appends away


@contextlib.contextmanager
def small_fs(size: str = "4m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on a fresh directory (unmounted afterwards)."""
    mount_point = Path(tempfile.mkdtemp(prefix="warden-reserve-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mount_point)], check=True)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)
        mount_point.rmdir()


def fill(directory: Path) -> Path:
    """Write a file until the file system refuses (ENOSPC); returns it."""
    filler = directory / "filler"

    def write_until_full() -> None:
        with open(filler, "wb") as handle:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()

    with pytest.raises(OSError, match="No space left on device"):
        write_until_full()
    return filler


async def fill_log(log: AuditLog) -> AuditDiskFull | AuditLogFailed | None:
    """Append ~60 KB records (at most ~12 MiB of them) until the log refuses one; returns why, or None."""
    for _ in range(200):
        try:
            await log.append(Record(event=Event.POLICY_LOADED, reason=BIG))
        except (AuditDiskFull, AuditLogFailed) as exc:
            return exc
    return None


def test_B08_42_small_tmpfs_supports_the_reserve() -> None:
    """The test file system can hold a reserve at all (fallocate with FALLOC_FL_KEEP_SIZE), else the tests below
    would pass for the wrong reason."""
    with small_fs() as base:
        fd = os.open(base, os.O_TMPFILE | os.O_RDWR, 0o600)
        try:
            assert fallocate_supported(fd)
        finally:
            os.close(fd)


async def test_B08_42_a_full_disk_pauses_the_log_with_a_record_then_it_resumes() -> None:
    with small_fs() as base:
        state = base / "state"
        state.mkdir(mode=0o700)
        async with open_audit_log(state) as log:
            await log.append(Record(event=Event.POLICY_LOADED))
            entries = state / "audit" / "entries.log"
            assert entries.stat().st_blocks * 512 >= entries.stat().st_size + ENTRIES_RESERVE
            filler = fill(base)
            refused = await fill_log(log)
            assert isinstance(refused, AuditDiskFull), refused
            assert refused.message.startswith(f"the disk holding warden's audit log ({state / 'audit'}) is full (")
            assert refused.message.endswith("KiB free): warden refuses every audited action until space is freed")
            assert not log.failed  # paused, not failed: nothing acknowledged is lost and it can resume
            with pytest.raises(AuditDiskFull):
                await log.append(Record(event=Event.POLICY_LOADED))
            with pytest.raises(AuditDiskFull):
                await log.checkpoint()
            filler.unlink()
            index = await log.append(Record(event=Event.POLICY_LOADED, reason="after"))
        _, records = verify_dir(state)
    events = [r["event"] for r in records]
    assert events.count("audit.paused") == 1
    paused = records[events.index("audit.paused")]
    assert paused["reason"] == refused.message
    resumed = events.index("audit.resumed")
    assert resumed > events.index("audit.paused")
    assert records[index]["reason"] == "after"
    assert index == resumed + 1
    assert events[-1] == "audit.closed"


async def test_B08_42_a_restart_on_a_still_full_disk_pauses_again_before_the_reserve_is_touched() -> None:
    """The paused state is not kept across processes: a new warden on a still-full disk writes while the reserve
    stays whole, then pauses again at the first batch that would eat into it, with its own audit.paused."""
    with small_fs() as base:
        state = base / "state"
        state.mkdir(mode=0o700)
        async with open_audit_log(state) as log:
            fill(base)
            assert isinstance(await fill_log(log), AuditDiskFull)
        async with open_audit_log(state) as log:
            assert isinstance(await fill_log(log), AuditDiskFull)
        (base / "filler").unlink()
        async with open_audit_log(state) as log:
            await log.append(Record(event=Event.POLICY_LOADED, reason="back"))
        _, records = verify_dir(state)
    events = [r["event"] for r in records]
    assert events.count("audit.paused") == 2
    assert events.count("audit.opened") == 3
    assert records[-2]["reason"] == "back"


async def test_B08_42_control_without_a_reserve_a_full_disk_fails_the_log_silently() -> None:
    """What the reserve prevents, shown on the same file system: writes that meet ENOSPC fail the log for good
    and nothing in it says why (here the reserve is disabled by hand)."""
    with small_fs() as base:
        state = base / "state"
        state.mkdir(mode=0o700)
        async with open_audit_log(state) as log:
            log._store._reserve.supported = False  # type: ignore[union-attr]
            fill(base)
            failure = await fill_log(log)
            assert isinstance(failure, AuditLogFailed)
            assert "No space left on device" in failure.message
            assert log.failed
        (base / "filler").unlink()
        _, records = verify_dir(state)
    assert "audit.paused" not in [r["event"] for r in records]


def test_events_are_in_the_schema() -> None:
    schema = (Path(__file__).resolve().parents[2] / "audit" / "record.schema.json").read_text()
    for event in ("audit.paused", "audit.resumed"):
        assert f'"{event}"' in schema
