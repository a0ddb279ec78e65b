"""Report and export speed and memory on a 1,000,000-record audit log (issue 16).

Builds a log with a realistic mix (four servers; decisions allowed and denied with their outcomes, pin events
and a rug pull now and then; a checkpoint every 100,000 records), then runs, each as its own ``warden`` process
so its peak memory is its own, interleaved, ``--runs`` times:

* ``audit verify`` (the floor: every command below verifies or reads the whole log too);
* ``audit report`` with the default listing (the newest 20,000 records listed, all 1,000,000 verified), and
  with ``--max-records 100000`` (listing costs about 0.3 ms a record, most of it the inclusion proof, and about
  1.3 kB of HTML: listing all 1,000,000 would write a 1.3 GB file no browser opens, which is why the report
  lists the newest N and counts the rest);
* ``audit export --format jsonl|timesketch|ocsf`` to a file.

Per command: median wall time, records/s (log records over wall time), its ratio to verify, peak RSS (``ru_maxrss``,
which counts the pages of the mapped log it touched) and the peak of its anonymous memory (``RssAnon``, sampled
every 20 ms: what the process itself holds), and the output size. Usage: ``bench/audit_report.py [--records N]
[--runs N] [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from warden.audit import Arguments, Consent, Decision, Detail, Event, Outcome, Record, digest
from warden.audit._store import Store

WARDEN = str(Path(sys.executable).parent / "warden")
ROOT = Path(__file__).resolve().parent.parent


def mix(n: int) -> list[Record]:
    """One block of 100 records as a busy host produces them: 45 decisions and their outcomes, some denials, pin
    events and (once a block) a rug pull."""
    out: list[Record] = []
    for i in range(45):
        server = f"server-{i % 4}"
        deny = i % 9 == 0
        out.append(Record(event=Event.CALL_DECIDED, method="tools/call", server_name=server,
                          server_id=digest(server.encode()), client="claude-code 2.1.0", target=f"tool_{i % 7}",
                          target_digest=digest(b"def %d" % (i % 7)), policy_digest=digest(b"policy"),
                          rule="user ~/.config/warden/warden.toml:12 (tools.allow)",
                          decision=Decision.DENY if deny else Decision.ALLOW,
                          consent=None if deny else Consent.ELICITATION if i % 5 == 0 else Consent.POLICY,
                          reason="tool 'tool_0' changed since it was approved" if deny else None,
                          request_digest=digest(b"request %d %d" % (n, i)),
                          arguments=Arguments.capture({"path": f"/srv/data/{n}/{i}"}, Detail.HASH),
                          sandbox_digest=digest(b"profile")))
        out.append(Record(event=Event.CALL_OUTCOME, method="tools/call", server_name=server, decision_index=0,
                          outcome=Outcome.OK, result_digest=digest(b"r"), result_size=120))
    for i in range(9):
        out.append(Record(event=Event.PIN_APPROVED, server_name=f"server-{i % 4}", method="tool",
                          target=f"tool_{i}", target_digest=digest(b"def %d" % i), consent=Consent.TERMINAL))
    out.append(Record(event=Event.PIN_CHANGED, server_name="server-1", method="tool", target="tool_0",
                      target_digest=digest(b"def new"), previous_digest=digest(b"def 0"),
                      reason="description changed: hidden instructions"))
    return out


def build(state_dir: Path, records: int) -> None:
    store = Store.open(state_dir)
    block = [store.prepare(r) for r in mix(0)]
    written = 0
    while written < records:
        batch = [block[i % len(block)] for i in range(min(10_000, records - written))]
        store.commit_prepared(batch, publish=(written + len(batch)) % 100_000 == 0)
        written += len(batch)
    store.publish()
    store.close()


def anon_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def measure(argv: list[str]) -> tuple[float, int, int]:
    """Run one command; wall seconds, peak RSS KiB (ru_maxrss), peak anonymous RSS KiB (sampled)."""
    t = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], anon_kib(proc.pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    done.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0,):
        err = proc.stderr.read().decode() if proc.stderr else ""
        raise SystemExit(f"{argv} failed ({proc.returncode}): {err}")
    return wall, usage.ru_maxrss, peak[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="warden-bench-report-", dir=args.dir or ROOT))  # the repository's disk
    try:
        state = base / "state"
        state.mkdir(mode=0o700)
        t = time.perf_counter()
        build(state, args.records)
        print(f"built a {args.records:,}-record log in {time.perf_counter() - t:.1f} s "
              f"({(state / 'audit' / 'entries.log').stat().st_size / 1e6:.0f} MB entries.log)", file=sys.stderr)
        out = base / "out"
        commands = {
            "audit verify (floor)": ["audit", "verify"],
            "audit report (newest 20,000 listed)": ["audit", "report", "-o", str(out)],
            "audit report --max-records 100000": ["audit", "report", "--max-records", "100000", "-o", str(out)],
            "audit export --format jsonl": ["audit", "export", "--format", "jsonl", "-o", str(out)],
            "audit export --format timesketch": ["audit", "export", "--format", "timesketch", "-o", str(out)],
            "audit export --format ocsf": ["audit", "export", "--format", "ocsf", "-o", str(out)],
        }
        results: dict[str, list[tuple[float, int, int, int]]] = {name: [] for name in commands}
        for _ in range(args.runs):
            for name, cmd in commands.items():  # interleaved, so load changes hit every command alike
                wall, rss, anon = measure([WARDEN, "--state-dir", str(state), *cmd])
                size = out.stat().st_size if out.exists() else 0
                results[name].append((wall, rss, anon, size))
                out.unlink(missing_ok=True)
        floor = statistics.median(r[0] for r in results["audit verify (floor)"])
        print(f"\n{args.records:,} records, median of {args.runs} interleaved runs, load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
        print("| command | wall s (median) | records/s | x verify | peak RSS MiB | peak anon MiB | output MB |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for name, runs in results.items():
            wall = statistics.median(r[0] for r in runs)
            rss = max(r[1] for r in runs) / 1024
            anon = max(r[2] for r in runs) / 1024
            size = statistics.median(r[3] for r in runs) / 1e6
            print(f"| {name} | {wall:.2f} | {args.records / wall:,.0f} | {wall / floor:.2f} | {rss:.0f} | "
                  f"{anon:.0f} | {size:.1f} |")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
