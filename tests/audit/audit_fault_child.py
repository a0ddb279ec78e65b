"""One writer, single-threaded, for strace fault injection: batch A, a marker syscall, then batch B + checkpoint.

strace counts syscall invocations per tracee, so this child does all I/O on its main thread (the same Store
code the async log runs in its worker thread). It prints ``A <first> <n>`` once batch A is durable and
``B <first> <n>`` once batch B is, the acknowledgements the test holds recovery to. The marker is a stat of a
path that does not exist, easy to find in a trace; every syscall after it belongs to batch B, its checkpoint
publication or the close.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from warden.audit import AuditLogFailed, Decision, Event, Record, digest
from warden.audit._store import Store

MARKER = "/warden-audit-fault-marker-batch-b"


def batch(tag: str, n: int) -> list[Record]:
    return [Record(event=Event.CALL_DECIDED, method="tools/call", decision=Decision.ALLOW,
                   request_digest=digest(f"{tag}{i}".encode())) for i in range(n)]


def main() -> int:
    state_dir = Path(sys.argv[1])
    store = Store.open(state_dir, clock=lambda: 1_800_000_000.0, checkpoint_interval=3600)
    try:
        first = store.commit(batch("A", 5), publish=True)
        os.write(1, f"A {first} 5\n".encode())
        with contextlib.suppress(FileNotFoundError):
            os.stat(MARKER)
        first = store.commit(batch("B", 7), publish=True)
        os.write(1, f"B {first} 7\n".encode())
    except AuditLogFailed as exc:
        os.write(2, f"failed: {exc}\n".encode())
        return 3
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
