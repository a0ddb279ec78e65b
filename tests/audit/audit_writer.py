"""A real warden audit writer for the multi-process, crash and fault tests (run as a script or forked).

Appends ``call.decided`` records from several concurrent trio tasks; after each ``append`` returns (the record is
durable, so a gateway would now forward the call) it writes ``ack <index> <token>`` to the ack fd. The token is
carried in the record's ``request_digest``, so the test can check that every acknowledged record is in the log,
at that index, intact.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import sys
from pathlib import Path

import trio

from warden.audit import Decision, Event, Record, digest, open_audit_log
from warden.errors import AuditError


def token(tag: str, task: int, n: int) -> str:
    return digest(f"{tag}/{task}/{n}".encode())


async def write(state_dir: Path, tag: str, tasks: int, records: int, ack_fd: int, interval: float,
                limit_after: int | None) -> int:
    upstream_calls = 0
    refused = 0
    done = 0

    async with open_audit_log(state_dir, checkpoint_interval=interval) as log:

        async def task(t: int) -> None:
            nonlocal upstream_calls, refused, done
            for n in range(records):
                tok = token(tag, t, n)
                try:
                    index = await log.append(Record(event=Event.CALL_DECIDED, method="tools/call", target=tag,
                                                    decision=Decision.ALLOW, request_digest=tok))
                except AuditError:
                    refused += 1  # write-ahead: the call is refused, never forwarded
                    continue
                upstream_calls += 1  # the "forward": only after the record is durable
                os.write(ack_fd, f"ack {index} {tok}\n".encode())
                done += 1
                if limit_after is not None and done == limit_after:
                    # Make the log unwritable from now on: any write past the current end of a file fails
                    # with EFBIG (works as root, unlike chmod).
                    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                    size = os.stat(state_dir / "audit" / "entries.log").st_size
                    resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))

        try:
            async with trio.open_nursery() as nursery:
                for t in range(tasks):
                    nursery.start_soon(task, t)
        finally:
            os.write(ack_fd, f"forwarded {upstream_calls} refused {refused} failed {int(log.failed)}\n".encode())
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("state_dir", type=Path)
    p.add_argument("--tag", default="w")
    p.add_argument("--tasks", type=int, default=4)
    p.add_argument("--records", type=int, default=50)
    p.add_argument("--interval", type=float, default=0.05)
    p.add_argument("--limit-after", type=int, default=None, help="make files unwritable after N acks")
    args = p.parse_args(argv)
    try:
        return trio.run(write, args.state_dir, args.tag, args.tasks, args.records, sys.stdout.fileno(),
                        args.interval, args.limit_after)
    except AuditError as exc:
        print(f"audit error: {exc}", file=sys.stderr)
        return 6


if __name__ == "__main__":
    sys.exit(main())
