"""Where warden's time goes on the forwarding path: a py-spy profile of ``warden run --unsafe-no-audit`` in front of
the raw echo server while one client makes N ``tools/call``s (sequential, or ``--concurrency`` at once). Prints the
functions with the most inclusive samples (own and callees) and the most own samples, as a share of all samples.

py-spy is a bench dependency, not warden's: ``make bench`` installs it (pinned in pyproject's ``bench`` extra).

    .venv/bin/python bench/profile_hot_path.py [--calls N] [--concurrency C] [--audit] [--keep FILE]
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proxy_overhead import SERVERS, approve_first, via_warden
from rawclient import RawClient


async def drive(command: list[str], calls: int, out: Path, rate: int, concurrency: int = 1) -> None:
    async with trio.open_nursery() as nursery:
        client = await RawClient.start(nursery, command, env=dict(os.environ))
        for _ in range(200):
            await client.call("echo", {"text": "hi"})
        spy = await trio.lowlevel.open_process(
            [shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy"), "record", "--format", "raw",
             "--rate", str(rate), "--nonblocking", "--gil", "-o", str(out), "--pid", str(client.process.pid)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await trio.sleep(1.0)

        async def caller() -> None:
            for _ in range(calls // concurrency):
                await client.call("echo", {"text": "hi"})

        async with trio.open_nursery() as callers:
            for _ in range(concurrency):
                callers.start_soon(caller)
        spy.send_signal(2)
        await spy.wait()
        await client.aclose()
        nursery.cancel_scope.cancel()


def summarize(path: Path, top: int) -> None:
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        count = int(count_text)
        frames = [f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0].split("/")[-1] + ")" if " (" in f else f
                  for f in stack.split(";")]
        total += count
        for frame in set(frames):
            inclusive[frame] += count
        own[frames[-1]] += count
    print(f"{total} samples")
    for title, counter in (("inclusive", inclusive), ("own", own)):
        print(f"\n{title}:")
        for frame, count in counter.most_common(top):
            print(f"  {100 * count / total:5.1f}%  {frame}")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--audit", action="store_true", help="profile with the audit log on")
    parser.add_argument("--concurrency", type=int, default=1, help="calls in flight at once")
    parser.add_argument("--keep", type=Path, help="also copy py-spy's raw profile here (for flame graphs)")
    args = parser.parse_args()
    argv = SERVERS["raw echo"][0]
    with tempfile.TemporaryDirectory() as tmp:
        state, config = Path(tmp) / "state", Path(tmp) / "bench.toml"
        state.mkdir(mode=0o700)
        config.write_text('[defaults]\non_new = "tofu"\n')
        extra = () if args.audit else ("--unsafe-no-audit",)
        command = via_warden(argv, str(state), config, "profile", *extra)
        await approve_first(command, str(state), config, "profile")
        out = Path(tmp) / "profile.txt"
        await drive(command, args.calls, out, args.rate, args.concurrency)
        summarize(out, args.top)
        if args.keep is not None:
            shutil.copyfile(out, args.keep)


if __name__ == "__main__":
    trio.run(main)
