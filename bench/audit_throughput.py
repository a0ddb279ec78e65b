"""Audit log throughput: durable appends/s with group commit, against the physical limit measured in the same run.

Prints one markdown table:

* bare ``fdatasync`` rates on the log's disk (one small append each, and nothing to write);
* the audit log with 1, 8 and 64 concurrent writer tasks: durable appends/s, mean batch size, p50/p99 latency;
* for each, the *minimal batched loop*: the same record size, appended in batches of the log's mean batch size,
  one ``fdatasync`` per batch, nothing else: what the disk allows for that batching;
* several processes sharing one log (the ``warden run`` per server case);
* ``warden audit verify`` speed on a 1,000,000-record log (fast and ``--deep``);
* TODO row: the added latency per tools/call with audit on vs off needs the gateway; bench/proxy_overhead.py
  measures it (its 'warden (sandbox, pins, audit)' and 'warden, audit off' rows).

Targets (issue 5): 64 writers >= 10x one writer and >= 50 % of the minimal loop; verify >= 100,000 records/s.
Runs in a temporary directory next to the repository (the same disk as a real state dir) unless --dir is given.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from warden.audit import Arguments, Consent, Decision, Detail, Event, Record, digest, open_audit_log
from warden.audit._format import FRAME_RECORD, encode_frame, scan_frames
from warden.audit._reader import LogReader
from warden.audit._store import Store
from warden.audit._verify import verify_log


def decision(n: int) -> Record:
    """A typical tools/call decision (about 800 bytes stored)."""
    return Record(event=Event.CALL_DECIDED, method="tools/call", server_name="fs", server_id=digest(b"fs-manifest"),
                  target="read_file", target_digest=digest(b"read_file-def"), policy_digest=digest(b"policy"),
                  rule="tools.read_file", decision=Decision.ALLOW, consent=Consent.POLICY,
                  request_digest=digest(b"request %d" % n),
                  arguments=Arguments.capture({"path": f"/tmp/{n}"}, Detail.HASH), sandbox_digest=digest(b"profile"))


def fsync_rates(directory: Path, seconds: float) -> tuple[float, float]:
    path = directory / "fsync.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        n, end = 0, time.perf_counter() + seconds
        start = time.perf_counter()
        while time.perf_counter() < end:
            os.write(fd, b"x" * 64)
            os.fdatasync(fd)
            n += 1
        with_write = n / (time.perf_counter() - start)
        n, end = 0, time.perf_counter() + seconds
        start = time.perf_counter()
        while time.perf_counter() < end:
            os.fdatasync(fd)
            n += 1
        bare = n / (time.perf_counter() - start)
    finally:
        os.close(fd)
        path.unlink()
    return with_write, bare


def minimal_loop(directory: Path, record_size: int, batch: int, seconds: float) -> float:
    """Append ``batch`` records of ``record_size`` bytes and fdatasync, repeatedly: records/s."""
    path = directory / "minimal.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    chunk = b"r" * record_size * batch
    try:
        n, end = 0, time.perf_counter() + seconds
        start = time.perf_counter()
        while time.perf_counter() < end:
            os.write(fd, chunk)
            os.fdatasync(fd)
            n += batch
        return n / (time.perf_counter() - start)
    finally:
        os.close(fd)
        path.unlink()


async def log_writers(state_dir: Path, writers: int, seconds: float) -> tuple[float, float, float, float]:
    """``writers`` tasks appending as fast as durability allows: (appends/s, mean batch, p50 ms, p99 ms)."""
    latencies: list[float] = []
    record = decision(1)
    async with open_audit_log(state_dir) as log:
        before = log.statistics()
        stop = time.perf_counter() + seconds

        async def writer() -> None:
            while time.perf_counter() < stop:
                t = time.perf_counter()
                await log.append(record)
                latencies.append(time.perf_counter() - t)

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(writers):
                nursery.start_soon(writer)
        elapsed = time.perf_counter() - start
        after = log.statistics()
    batches = after.batches - before.batches
    records = after.records - before.records
    q = statistics.quantiles(latencies, n=100)
    return len(latencies) / elapsed, records / max(batches, 1), q[49] * 1000, q[98] * 1000


_CHILD = """
import sys, time, trio
sys.path.insert(0, {bench!r})
from audit_throughput import decision
from warden.audit import open_audit_log
async def main():
    n = 0
    async with open_audit_log(__import__("pathlib").Path({state!r})) as log:
        stop = {start!r} + {seconds!r}
        while time.time() < {start!r}:
            await trio.sleep(0.001)
        async def w():
            nonlocal n
            while time.time() < stop:
                await log.append(decision(1)); n += 1
        async with trio.open_nursery() as nursery:
            for _ in range({tasks}):
                nursery.start_soon(w)
    print(n)
trio.run(main)
"""


def processes(state_dir: Path, procs: int, tasks: int, seconds: float) -> float:
    start = time.time() + 1.5  # all processes open the log first, then write together
    code = _CHILD.format(bench=str(Path(__file__).resolve().parent), state=str(state_dir),
                         start=start, seconds=seconds, tasks=tasks)
    children = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE) for _ in range(procs)]
    total = sum(int(c.communicate()[0]) for c in children)
    return total / seconds


def verify_speed(state_dir: Path, records: int) -> tuple[float, float, float, int]:
    store = Store.open(state_dir)
    prepared = [store.prepare(decision(i)) for i in range(256)]
    batch = 8192
    for start in range(0, records, batch):
        store.commit_prepared([prepared[i % 256] for i in range(min(batch, records - start))])
    store.publish()
    store.close()
    with LogReader(state_dir) as reader:
        key, notes = reader.local_verifier(), reader.checkpoint_notes()
        t, cpu = time.perf_counter(), time.process_time()
        result = verify_log(reader.committed, log_key=key, checkpoints=notes, hashes=reader.hashes)
        fast = result.size / (time.perf_counter() - t)
        per_cpu = result.size / (time.process_time() - cpu)
        subset = reader.committed[: len(reader.committed) // 10]
        end = 0
        for frame in scan_frames(subset, 0, FRAME_RECORD):
            end = frame.end
        t = time.perf_counter()
        part = verify_log(subset[:end], log_key=key, checkpoints=[], require_checkpoint=False, deep=True)
        deep = part.size / (time.perf_counter() - t)
        subset.release()
    return fast, per_cpu, deep, result.size


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", type=Path, help="where to put the temporary logs (default: next to the repository)")
    p.add_argument("--seconds", type=float, default=2.0, help="duration of each throughput run")
    p.add_argument("--rounds", type=int, default=3, help="paired log/baseline runs per writer count (median)")
    p.add_argument("--verify-records", type=int, default=1_000_000)
    args = p.parse_args()
    base = Path(tempfile.mkdtemp(prefix="warden-audit-bench-", dir=args.dir or Path(__file__).resolve().parents[1]))
    os.chmod(base, 0o700)
    rows: list[tuple[str, str, str]] = []
    try:
        record_size = len(encode_frame(FRAME_RECORD, b"x" * 0)) + len(
            Store.open(base / "probe").prepare(decision(1)).at(123456))
        shutil.rmtree(base / "probe")
        with_write, bare = fsync_rates(base, 2.0)
        rows.append(("fdatasync after one small append (unbatched limit)", f"{with_write:,.0f} /s", ""))
        rows.append(("fdatasync with nothing to write", f"{bare:,.0f} /s", ""))
        rates: dict[int, float] = {}
        for writers in (1, 8, 64):
            # Alternate log runs with their baseline so both see the same disk and CPU weather (a shared box).
            runs = []
            for r in range(args.rounds):
                rate, batch, p50, p99 = trio.run(log_writers, base / f"w{writers}-{r}", writers, args.seconds)
                limit = minimal_loop(base, record_size, max(1, round(batch)), args.seconds)
                runs.append((rate, batch, p50, p99, limit, rate / limit))
            rate, batch, p50, p99, limit, _ = (statistics.median(col) for col in zip(*runs, strict=True))
            ratio = statistics.median(r[5] for r in runs)
            rates[writers] = rate
            rows.append((f"audit log, {writers} concurrent writer{'s' * (writers > 1)}",
                         f"{rate:,.0f} appends/s",
                         f"mean batch {batch:.1f}, latency p50 {p50:.2f} ms, p99 {p99:.2f} ms"))
            rows.append((f"  minimal loop: {record_size}-byte records, batches of {max(1, round(batch))}, "
                         f"one fdatasync each", f"{limit:,.0f} records/s",
                         f"log reaches {ratio:.0%} of it (median of {args.rounds} paired runs)"))
        rows.append(("64 writers vs 1 writer", f"{rates[64] / rates[1]:.1f}x", "target >= 10x"))
        mp = processes(base / "mp", 4, 16, args.seconds)
        rows.append(("4 processes x 16 writers, one shared log", f"{mp:,.0f} appends/s", "flock per batch"))
        rows.append(("added latency per tools/call, audit on vs off",
                     "TODO: not here", "needs the gateway; measured by bench/proxy_overhead.py (rows "
                                       "'warden (sandbox, pins, audit)' vs 'warden, audit off')"))
        fast, per_cpu, deep, size = verify_speed(base / "verify", args.verify_records)
        rows.append((f"warden audit verify, {size:,}-record log", f"{fast:,.0f} records/s",
                     f"{per_cpu:,.0f} per CPU-second (one core, so load-independent); target >= 100,000/s"))
        rows.append(("warden audit verify --deep (canonical form, field syntax)", f"{deep:,.0f} records/s",
                     "on the first 10% of the same log"))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    width = max(len(r[0]) for r in rows)
    print(f"\n| {'measurement':<{width}} | {'result':>20} | notes |")
    print(f"|{'-' * (width + 2)}|{'-' * 22}|-------|")
    for name, value, note in rows:
        print(f"| {name:<{width}} | {value:>20} | {note} |")
    print(f"\n(cpus: {os.cpu_count()}, load average at end: {', '.join(f'{x:.2f}' for x in os.getloadavg())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
