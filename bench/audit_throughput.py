"""Audit log throughput: durable appends/s with group commit, against the physical limit measured in the same run.

Prints one markdown table:

* bare ``fdatasync`` rates on the log's disk (one small append each, and nothing to write);
* the audit log with 1, 8 and 64 concurrent writer tasks: durable appends/s, mean batch size, p50/p99 latency;
* for each, the *minimal batched loop*: the same record size, appended in batches of the log's mean batch size,
  one ``fdatasync`` per batch, nothing else: what the disk allows for that batching;
* for each, the *event-loop ceiling*: the same number of trio tasks handing records to one committer that writes
  and ``fdatasync``s each batch in a worker thread, as the log does, but with no record work at all (no checking,
  encoding, hashing or locking): what any log built on trio tasks can reach, so the gap between it and the log
  is warden's own per-record work;
* several processes sharing one log (the ``warden run`` per server case);
* the added latency per tools/call through ``warden run`` (sandbox and pins on) with the audit log on vs off
  (``--unsafe-no-audit``), for the raw echo server (warden's own ceiling) and the Python SDK server;
* ``warden audit verify`` speed on a 1,000,000-record log (fast and ``--deep``).

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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proxy_overhead import SERVERS, approve_first, measure, via_warden


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


async def event_loop_ceiling(directory: Path, record_size: int, writers: int, seconds: float) -> float:
    """``writers`` trio tasks appending placeholders that a committer writes and fdatasyncs per batch in a worker
    thread, the log's own shape minus all record work: records/s."""
    path = directory / "ceiling.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    chunk = b"r" * record_size

    def write_batch(size: int) -> None:
        os.write(fd, chunk * size)
        os.fdatasync(fd)

    pending: list[tuple[list[None], trio.Event]] = [([], trio.Event())]
    work = trio.Event()
    done = 0
    stop = time.perf_counter() + seconds

    async def writer() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            items, finished = pending[0]
            items.append(None)
            work.set()
            await finished.wait()
            done += 1

    async def committer() -> None:
        nonlocal work
        while True:
            items, finished = pending[0]
            if not items:
                await work.wait()
                work = trio.Event()
                continue
            pending[0] = ([], trio.Event())
            await trio.to_thread.run_sync(write_batch, len(items))
            finished.set()

    try:
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(committer)
            async with trio.open_nursery() as tasks:
                for _ in range(writers):
                    tasks.start_soon(writer)
            nursery.cancel_scope.cancel()
        return done / (time.perf_counter() - start)
    finally:
        os.close(fd)
        path.unlink()


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


CONCURRENCY = 16


async def tools_call_audit_on_off(workdir: Path, server: str, calls: int) -> tuple[dict[str, float], dict[str, float]]:
    """Round trips of ``tools/call`` through ``warden run`` with the audit log on, then off (same server, same
    approved pins, same sandbox)."""
    workdir.mkdir(mode=0o700, exist_ok=True)
    state = workdir / "state"
    state.mkdir(mode=0o700, exist_ok=True)
    config = workdir / "bench.toml"
    config.write_text('[defaults]\non_new = "tofu"\n')
    argv, tool, tool_args = SERVERS[server]
    name = "bench-" + "".join(c if c.isalnum() else "-" for c in server).strip("-")
    await approve_first(via_warden(argv, str(state), config, name), str(state), config, name)
    on = await measure(via_warden(argv, str(state), config, name), tool, tool_args, calls, CONCURRENCY)
    off = await measure(via_warden(argv, str(state), config, name, "--unsafe-no-audit"), tool, tool_args, calls,
                        CONCURRENCY)
    return on, off


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
    p.add_argument("--calls", type=int, default=1000, help="tools/call round trips per audit on/off run")
    p.add_argument("--writers-only", action="store_true",
                   help="only the fdatasync rates and the 1/8/64-writer rows (the group-commit targets)")
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
                ceiling = trio.run(event_loop_ceiling, base, record_size, writers, args.seconds)
                runs.append((rate, batch, p50, p99, limit, ceiling, rate / limit, ceiling / limit, rate / ceiling))
            rate, batch, p50, p99, limit, ceiling, ratio, ceiling_ratio, of_ceiling = (
                statistics.median(col) for col in zip(*runs, strict=True))
            rates[writers] = rate
            rows.append((f"audit log, {writers} concurrent writer{'s' * (writers > 1)}",
                         f"{rate:,.0f} appends/s",
                         f"mean batch {batch:.1f}, latency p50 {p50:.2f} ms, p99 {p99:.2f} ms"))
            rows.append((f"  minimal loop: {record_size}-byte records, batches of {max(1, round(batch))}, "
                         f"one fdatasync each", f"{limit:,.0f} records/s",
                         f"log reaches {ratio:.0%} of it (median of {args.rounds} paired runs)"))
            rows.append((f"  event-loop ceiling: {writers} trio task{'s' * (writers > 1)}, thread hop and "
                         "fdatasync per batch, no record work", f"{ceiling:,.0f} records/s",
                         f"{ceiling_ratio:.0%} of the minimal loop; the log reaches {of_ceiling:.0%} of it"))
        rows.append(("64 writers vs 1 writer", f"{rates[64] / rates[1]:.1f}x", "target >= 10x"))
        if args.writers_only:
            return _print(rows)
        mp = processes(base / "mp", 4, 16, args.seconds)
        rows.append(("4 processes x 16 writers, one shared log", f"{mp:,.0f} appends/s", "flock per batch"))
        for server in ("raw echo", "python sdk"):
            on, off = trio.run(tools_call_audit_on_off, base / "calls", server, args.calls)
            rows.append((f"tools/call through warden, {server} server: sequential median, audit on vs off",
                         f"{on['seq_median']:.2f} vs {off['seq_median']:.2f} ms",
                         f"+{on['seq_median'] - off['seq_median']:.2f} ms per call (p99 {on['seq_p99']:.2f} vs "
                         f"{off['seq_p99']:.2f} ms; {args.calls} calls, sandbox and pins on in both)"))
            rows.append((f"  {CONCURRENCY} concurrent callers, audit on vs off",
                         f"{on['conc_rate']:,.0f} vs {off['conc_rate']:,.0f} /s",
                         f"{on['conc_rate'] / off['conc_rate']:.2f}x (median {on['conc_median']:.2f} vs "
                         f"{off['conc_median']:.2f} ms)"))
        fast, per_cpu, deep, size = verify_speed(base / "verify", args.verify_records)
        rows.append((f"warden audit verify, {size:,}-record log", f"{fast:,.0f} records/s",
                     f"{per_cpu:,.0f} per CPU-second (one core, so load-independent); target >= 100,000/s"))
        rows.append(("warden audit verify --deep (canonical form, field syntax)", f"{deep:,.0f} records/s",
                     "on the first 10% of the same log"))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return _print(rows)


def _print(rows: list[tuple[str, str, str]]) -> int:
    width = max(len(r[0]) for r in rows)
    print(f"\n| {'measurement':<{width}} | {'result':>20} | notes |")
    print(f"|{'-' * (width + 2)}|{'-' * 22}|-------|")
    for name, value, note in rows:
        print(f"| {name:<{width}} | {value:>20} | {note} |")
    print(f"\n(cpus: {os.cpu_count()}, load average at end: {', '.join(f'{x:.2f}' for x in os.getloadavg())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
