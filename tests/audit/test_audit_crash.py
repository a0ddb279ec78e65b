"""Crash battery: SIGKILL at 220 random points of a writer under load, and strace fault injection (EIO, and
SIGKILL at syscall entry) at every write and fsync of one batch and its checkpoint publication (plus the
renames, opens and unlinks). After each: recovery succeeds, verification passes, and every record whose
append returned (whose call would have been forwarded) is in the log."""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from warden.audit import digest
from warden.audit._reader import LogReader
from warden.audit._store import Store
from warden.audit._verify import verify_log

HERE = Path(__file__).parent
DRIVER = HERE / "audit_crash_driver.py"
FAULT_CHILD = HERE / "audit_fault_child.py"
STRACE = shutil.which("strace")
ENV = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}


@pytest.mark.slow
def test_sigkill_at_220_random_points_loses_nothing_acknowledged(tmp_path: Path) -> None:
    seed = int.from_bytes(os.urandom(4), "big") >> 2
    proc = subprocess.run([sys.executable, str(DRIVER), str(tmp_path), "--iterations", "220", "--seed", str(seed)],
                          capture_output=True, text=True, timeout=600, env=ENV)
    summary = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else {}
    assert proc.returncode == 0, f"seed {seed}: {summary or proc.stderr}"
    assert summary["iterations"] == 220
    assert summary["acked"] > 1000
    assert summary["kills_during_open"] > 0
    assert summary["recovery_found"].get("the shared head was missing or stale (a crash)", 0) > 0


def _trace(state_dir: Path) -> tuple[dict[str, int], list[str]]:
    """Run the child once under strace; return per-syscall counts before the marker and the syscalls after it."""
    assert STRACE is not None
    out = state_dir.with_suffix(".trace")
    subprocess.run([STRACE, "-qq", "-o", str(out), "-e",
                    "trace=write,pwrite64,fsync,fdatasync,openat,rename,renameat,renameat2,unlinkat,ftruncate,"
                    "newfstatat,statx,stat", sys.executable, str(FAULT_CHILD), str(state_dir)],
                   check=True, capture_output=True, timeout=120, env=ENV)
    before: dict[str, int] = {}
    after: list[str] = []
    seen_marker = False
    for line in out.read_text().splitlines():
        m = re.match(r"(\w+)\(", line)
        if not m:
            continue
        name = m.group(1)
        if "warden-audit-fault-marker-batch-b" in line:
            seen_marker = True
            continue
        if seen_marker:
            after.append(name)
        else:
            before[name] = before.get(name, 0) + 1
    assert seen_marker
    return before, after


def _check(state_dir: Path, acked: list[tuple[str, int, int]]) -> None:
    Store.open(state_dir).close()  # recovery must succeed
    with LogReader(state_dir) as reader:
        verify_log(reader.committed, log_key=reader.local_verifier(), checkpoints=reader.checkpoint_notes(),
                   hashes=reader.hashes, deep=True)
        records = {raw.index: raw.data for raw in reader.records()}
    for tag, first, n in acked:
        for i in range(n):
            want = f'"request_digest":"{digest(f"{tag}{i}".encode())}"'.encode()
            assert want in records.get(first + i, b""), f"acknowledged record {tag}{i} missing"


@pytest.mark.slow
@pytest.mark.skipif(STRACE is None, reason="strace is not installed (tests/system-packages.txt installs it)")
def test_fault_injection_at_every_write_and_fsync_of_one_batch(tmp_path: Path) -> None:
    assert STRACE is not None
    before, after = _trace(tmp_path / "count")
    writes = {"write", "pwrite64"}
    syncs = {"fsync", "fdatasync"}
    other = {"openat", "rename", "renameat", "renameat2", "unlinkat"}
    assert sum(name in writes for name in after) >= 5, after
    assert sum(name in syncs for name in after) >= 5, after
    points: list[tuple[str, int, str]] = []
    seen: dict[str, int] = {}
    for name in after:
        seen[name] = seen.get(name, 0) + 1
        when = before.get(name, 0) + seen[name]
        if name in writes | syncs:
            points += [(name, when, "error=EIO"), (name, when, "signal=KILL")]
        elif name in other:
            points.append((name, when, "error=EIO"))

    def run(point: tuple[str, int, str]) -> tuple[tuple[str, int, str], int, str]:
        name, when, action = point
        state_dir = tmp_path / f"{name}-{when}-{action.split('=')[0]}"
        proc = subprocess.run([STRACE, "-qq", "-o", "/dev/null", "-e", f"trace={name}", "-e",
                               f"inject={name}:{action}:when={when}", sys.executable, str(FAULT_CHILD),
                               str(state_dir)], capture_output=True, text=True, timeout=120, env=ENV)
        return point, proc.returncode, proc.stdout

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, points))
    failed_closed = 0
    for (name, when, action), rc, stdout in results:
        state_dir = tmp_path / f"{name}-{when}-{action.split('=')[0]}"
        acks = [(tag, int(first), int(n)) for tag, first, n in (line.split() for line in stdout.splitlines())]
        assert acks[:1] == [("A", 0, 5)], f"{name}#{when} {action}: the fault landed before batch B: {stdout}"
        b_acked = any(tag == "B" for tag, _, _ in acks)
        if action == "signal=KILL":
            assert rc != 0
            assert not b_acked
        elif rc == 3:
            failed_closed += 1
            assert not b_acked  # a failed batch is never acknowledged
        _check(state_dir, acks)
    assert failed_closed >= len([p for p in points if p[2] == "error=EIO"]) - 2  # only the final print may pass
