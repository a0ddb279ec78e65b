"""Crash child for the group-commit battery: 64 tasks append ``call.decided`` through a template and queue each
call's ``call.outcome`` with ``append_later`` (the gateway's shape), printing ``ack <index> <token>`` after each
append returns. The test SIGKILLs it mid-batch and holds recovery to the acks."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import trio

from warden.audit import (
    Arguments,
    Decision,
    Detail,
    Event,
    Outcome,
    Record,
    RecordTemplate,
    digest,
    open_audit_log,
)


async def main(state_dir: Path, seed: int) -> None:
    decided = RecordTemplate(Record(event=Event.CALL_DECIDED, method="tools/call", decision=Decision.ALLOW,
                                    server_name="fs", target="read_file"), ("arguments", "request_digest"))
    outcome = RecordTemplate(Record(event=Event.CALL_OUTCOME, method="tools/call", outcome=Outcome.OK,
                                    server_name="fs"), ("decision_index", "result_digest", "result_size"))
    async with open_audit_log(state_dir, checkpoint_interval=0.02) as log:

        async def task(t: int) -> None:
            for n in range(1_000_000):
                token = digest(f"{seed}/{t}/{n}".encode())
                index = await log.append(decided.fill(request_digest=token, arguments=Arguments.capture(
                    {"path": f"/tmp/{t}/{n}"}, Detail.FULL)))
                os.write(1, f"ack {index} {token}\n".encode())
                await trio.sleep(0)  # the answer goes out; then the outcome is queued, as the recorder does
                log.append_later(outcome.fill(decision_index=index, result_digest=token, result_size=n))

        async with trio.open_nursery() as nursery:
            for t in range(64):
                nursery.start_soon(task, t)


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1]), int(sys.argv[2]))
