"""Crash battery driver: fork a real writer under load, SIGKILL it at a random point, then recover and verify.

Runs as its own process so that every fork happens from a single-threaded parent (it imports trio but never
runs it; the children do). For each iteration it:

1. forks a child that opens the log and appends from 8 concurrent tasks, writing ``ack <index> <token>`` to a
   pipe after each append returns (the point where a gateway forwards the call);
2. kills the child with SIGKILL after a random number of acks (0..100) plus a random delay (0..3 ms), or, in
   one iteration of eight, at a random time during open and recovery;
3. reopens the log (recovery must succeed), verifies it from scratch, and checks that every acknowledged record
   is present at its index with its token.

Logs rotate every ``--per-log`` iterations so each verification stays small. Prints one JSON summary line; exits
1 with the failing iteration's details on any violation. The seed makes a run reproducible.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import signal
import sys
import time
import traceback
from pathlib import Path

import trio

from warden.audit import Decision, Event, Record, digest, open_audit_log
from warden.audit._reader import LogReader
from warden.audit._store import Store
from warden.audit._verify import verify_log
from warden.errors import WardenError


def child(state_dir: Path, ack_fd: int, seed: int) -> None:
    async def run() -> None:
        async with open_audit_log(state_dir, checkpoint_interval=0.02) as log:

            async def task(t: int) -> None:
                for n in range(1_000_000):
                    tok = digest(f"{seed}/{t}/{n}".encode())
                    index = await log.append(Record(event=Event.CALL_DECIDED, method="tools/call",
                                                    decision=Decision.ALLOW, request_digest=tok))
                    os.write(ack_fd, f"ack {index} {tok}\n".encode())

            async with trio.open_nursery() as nursery:
                for t in range(8):
                    nursery.start_soon(task, t)

    trio.run(run)


def kill_child(pid: int, ack_r: int, rng: random.Random) -> tuple[list[tuple[int, str]], str]:
    """Let the child run to a random point, SIGKILL it, and return every ack it wrote before dying."""
    data = bytearray()
    during_open = rng.random() < 0.125
    want = 0 if during_open else rng.randint(0, 100)
    deadline = time.monotonic() + (rng.uniform(0, 0.03) if during_open else 30)
    while data.count(b"\n") < want and time.monotonic() < deadline:
        ready, _, _ = select.select([ack_r], [], [], 0.05)
        if ready:
            chunk = os.read(ack_r, 65536)
            if not chunk:
                break
            data += chunk
    if during_open:
        time.sleep(max(0.0, deadline - time.monotonic()))
    else:
        end = time.perf_counter() + rng.uniform(0, 0.003)
        while time.perf_counter() < end:  # busy-wait: sleep() is too coarse for sub-millisecond points
            pass
    os.kill(pid, signal.SIGKILL)
    while chunk := os.read(ack_r, 65536):
        data += chunk
    _, status = os.waitpid(pid, 0)
    if not os.WIFSIGNALED(status) or os.WTERMSIG(status) != signal.SIGKILL:
        raise AssertionError(f"child ended with status {status:#x} before the kill")
    acks = [(int(i), t) for _, i, t in (line.split() for line in data.decode().splitlines())]
    return acks, ("open" if during_open else f"after {want} acks")


def check(state_dir: Path, acked: dict[int, str]) -> tuple[int, str]:
    store = Store.open(state_dir)  # recovery must succeed
    recovered = store.recovery.reason.split(": ", 1)[-1] if store.recovery is not None else ""
    store.close()
    with LogReader(state_dir) as reader:
        result = verify_log(reader.committed, log_key=reader.local_verifier(), checkpoints=reader.checkpoint_notes(),
                            hashes=reader.hashes, require_checkpoint=False)
        by_index = {raw.index: raw.data for raw in reader.records()}
    for index, token in acked.items():
        data = by_index.get(index)
        if data is None or f'"request_digest":"{token}"'.encode() not in data:
            raise AssertionError(f"acknowledged record {index} ({token}) is missing or changed")
    return result.size, recovered


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("base", type=Path)
    p.add_argument("--iterations", type=int, default=200)
    p.add_argument("--per-log", type=int, default=20)
    p.add_argument("--seed", type=int, default=None)
    args = p.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    acked: dict[Path, dict[int, str]] = {}
    during_open = total_acked = size = 0
    found: dict[str, int] = {}
    for i in range(args.iterations):
        state_dir = args.base / f"log{i // args.per_log}"
        log_acks = acked.setdefault(state_dir, {})
        ack_r, ack_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os.close(ack_r)
            try:
                child(state_dir, ack_w, seed * 1000 + i)
            finally:
                os._exit(0)
        os.close(ack_w)
        try:
            new, where = kill_child(pid, ack_r, rng)
        finally:
            os.close(ack_r)
        for index, token in new:
            if index in log_acks:
                raise AssertionError(f"index {index} acknowledged twice")
            log_acks[index] = token
        try:
            size, recovered = check(state_dir, log_acks)
        except (AssertionError, WardenError) as exc:
            print(json.dumps({"seed": seed, "failed_iteration": i, "killed": where, "error": repr(exc),
                              "trace": traceback.format_exc()}))
            return 1
        during_open += where == "open"
        total_acked += len(new)
        for reason in recovered.split("; ") if recovered else ["clean (nothing to repair)"]:
            key = reason.split(" of ")[0] if reason.startswith("cut a torn tail") else reason
            found[key] = found.get(key, 0) + 1
    print(json.dumps({"seed": seed, "iterations": args.iterations, "kills_during_open": during_open,
                      "acked": total_acked, "records_in_last_log": size, "recovery_found": found}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
