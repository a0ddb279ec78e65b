"""SIGKILL of a writer in the middle of group commits (64 tasks, templated decisions, outcomes queued with
``append_later``): after each kill, recovery succeeds, the log verifies up to its last committed record, every
acknowledged decision is in it at its index, and every outcome that made it points at a decision before it."""

from __future__ import annotations

import json
import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from warden.audit._reader import LogReader

from .audit_crash_driver import check

CHILD = Path(__file__).with_name("audit_group_crash_child.py")
ENV = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}


def _run_and_kill(state_dir: Path, seed: int, want: int, rng: random.Random) -> dict[int, str]:
    proc = subprocess.Popen([sys.executable, str(CHILD), str(state_dir), str(seed)], stdout=subprocess.PIPE,
                            env=ENV)
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    data = bytearray()
    deadline = time.monotonic() + 60
    try:
        while data.count(b"\n") < want and time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.05)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                data += chunk
        end = time.perf_counter() + rng.uniform(0, 0.004)
        while time.perf_counter() < end:  # a sub-millisecond point inside the next batch
            pass
        proc.send_signal(signal.SIGKILL)
        while chunk := os.read(fd, 65536):
            data += chunk
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL, "the writer ended before it was killed"
    lines = data.decode().splitlines()
    complete = lines if data.endswith(b"\n") else lines[:-1]
    return {int(i): t for _, i, t in (line.split() for line in complete)}


@pytest.mark.slow
def test_sigkill_mid_group_commit_keeps_every_acknowledged_record(tmp_path: Path) -> None:
    seed = int.from_bytes(os.urandom(4), "big") >> 2
    rng = random.Random(seed)
    acked: dict[int, str] = {}
    for i in range(12):
        new = _run_and_kill(tmp_path, seed * 100 + i, rng.randint(1, 400), rng)
        assert not set(new) & set(acked), f"seed {seed}: an index was acknowledged twice"
        acked.update(new)
        size, _ = check(tmp_path, acked)  # recovery, verification up to the last committed record, every ack
        assert size >= len(acked)
    with LogReader(tmp_path) as reader:
        records = [json.loads(raw.data) for raw in reader.records()]
    outcomes = [r for r in records if r["event"] == "call.outcome"]
    assert outcomes, f"seed {seed}: no outcome was ever committed"
    decided = {r["index"] for r in records if r["event"] == "call.decided"}
    for r in outcomes:
        assert r["decision_index"] in decided, f"seed {seed}: {r}"
        assert r["decision_index"] < r["index"], f"seed {seed}: {r}"
