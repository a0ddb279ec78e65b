"""Several warden processes share one state directory: they append to one log, concurrently, with one
consistent tree; a writer killed mid-run costs nothing that was acknowledged."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from warden.audit._reader import LogReader
from warden.audit._verify import verify_log

WRITER = [sys.executable, str(Path(__file__).with_name("audit_writer.py"))]


def start(state_dir: Path, out: Path, tag: str, tasks: int, records: int, interval: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*WRITER, str(state_dir), "--tag", tag, "--tasks", str(tasks), "--records",
                             str(records), "--interval", str(interval)], stdout=out.open("wb"),
                            stderr=subprocess.PIPE)


def acks(out: Path) -> list[tuple[int, str]]:
    return [(int(i), t) for _, i, t in (line.split() for line in out.read_text().splitlines()
                                        if line.startswith("ack "))]


def check(state_dir: Path, all_acks: list[tuple[int, str]]) -> list[dict[str, object]]:
    with LogReader(state_dir) as reader:
        result = verify_log(reader.committed, log_key=reader.local_verifier(), checkpoints=reader.checkpoint_notes(),
                            hashes=reader.hashes, deep=True)
        records = [json.loads(raw.data) for raw in reader.records()]
    assert result.size == len(records)
    for index, token in all_acks:
        assert records[index]["request_digest"] == token, f"acknowledged record {index} is missing or changed"
    assert len({i for i, _ in all_acks}) == len(all_acks), "two writers got the same index"
    return records


def test_concurrent_processes_share_one_consistent_log(state_dir: Path, tmp_path: Path) -> None:
    procs = [(start(state_dir, tmp_path / f"w{n}.out", f"w{n}", 3, 60, 0.01), tmp_path / f"w{n}.out")
             for n in range(4)]
    for proc, _ in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    all_acks = [a for _, out in procs for a in acks(out)]
    assert len(all_acks) == 4 * 3 * 60
    records = check(state_dir, all_acks)
    events = [r["event"] for r in records]
    assert events.count("audit.opened") == events.count("audit.closed") == 4
    assert "audit.recovered" not in events
    assert len({r["pid"] for r in records}) == 4
    # the checkpoint history is one chain: every stored checkpoint matched the same tree (checked by verify)
    assert len((state_dir / "audit" / "checkpoints.log").read_bytes()) > 0


def test_writer_killed_mid_run_while_others_continue(state_dir: Path, tmp_path: Path) -> None:
    victim_out = tmp_path / "victim.out"
    victim = start(state_dir, victim_out, "victim", 6, 100_000, 0.01)
    others = [(start(state_dir, tmp_path / f"o{n}.out", f"o{n}", 2, 150, 0.01), tmp_path / f"o{n}.out")
              for n in range(2)]
    deadline = time.monotonic() + 60
    while len(acks(victim_out)) < 300 and time.monotonic() < deadline:
        time.sleep(0.01)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    assert victim.returncode == -signal.SIGKILL
    for proc, _ in others:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    # one more start runs recovery on whatever the victim left
    subprocess.run([*WRITER, str(state_dir), "--tag", "after", "--tasks", "1", "--records", "1"], check=True,
                   capture_output=True, timeout=60)
    all_acks = acks(victim_out) + [a for _, out in others for a in acks(out)]
    assert len(all_acks) >= 300 + 2 * 2 * 150
    records = check(state_dir, all_acks)
    assert [r["event"] for r in records].count("audit.closed") == 3  # the victim never closed


def test_verify_while_writers_append(state_dir: Path, tmp_path: Path) -> None:
    """Readers take no lock: verify, run again and again while two processes append and publish checkpoints
    every few milliseconds, must always see a consistent committed prefix."""
    writers = [start(state_dir, tmp_path / f"v{n}.out", f"v{n}", 4, 150, 0.005) for n in range(2)]
    try:
        deadline = time.monotonic() + 60
        while not (state_dir / "audit" / "checkpoint").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        sizes: list[int] = []
        while True:
            running = any(w.poll() is None for w in writers)
            with LogReader(state_dir) as reader:
                result = verify_log(reader.committed, log_key=reader.local_verifier(),
                                    checkpoints=reader.checkpoint_notes(), hashes=reader.hashes)
            sizes.append(result.size)
            if not running:
                break
        assert sizes == sorted(sizes)
        assert sizes[-1] > sizes[0]
        assert sizes[-1] == 2 * (4 * 150 + 2)  # and at the end, everything
    finally:
        for w in writers:
            w.send_signal(signal.SIGKILL)
            w.wait(timeout=30)
