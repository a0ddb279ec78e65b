"""Where one ``tools/call`` spends its time inside ``warden run``, stage by stage: the median of each stage over N
sequential calls to the raw echo server, with the audit log on and off.

A profile says which functions are hot; this says what the host waits for. ``warden run`` is started through this
script (``--child``), which wraps the methods that begin and end each stage to note a ``perf_counter_ns`` stamp
(a list append: about 1 µs per stamp here), then runs warden as the ``warden`` command does. The stamps of every
call are split at the moment the gateway takes it; the stages of the most common order are printed, so a call
that went another way (a checkpoint published in its batch) does not blur them. "Other processes" is the time
between warden's write and its next read: the server's or the client's own work and both wakeups. A record is
prepared twice per audited call: the decision's before it is committed, the outcome's after the answer is written.

The stage boundaries are warden's own methods: if one is renamed the script stops and says which, rather than
print a table with a stage missing.

    .venv/bin/python bench/call_timeline.py [--calls N]
"""

from __future__ import annotations

import argparse
import atexit
import collections
import functools
import importlib
import inspect
import itertools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proxy_overhead import BIN, SERVERS, WARDEN, approve_first, fdatasync_median
from rawclient import RawClient

#: (module, class, method, stamp on entry, stamp on return): the stage boundaries. A stage is named by the stamp
#: that ends it.
HOOKS: tuple[tuple[str, str, str, str | None, str | None], ...] = (
    ("warden.transport.channel", "MessageChannel", "_read_pipe", None, "bytes read"),
    ("warden.transport.channel", "MessageChannel", "_write_now", "write to a pipe begins", "bytes written"),
    ("warden.gateway.core", "Gateway", "start", "parsed, dispatched to the gateway", None),
    ("warden.gateway.core", "Gateway", "_taken", None, "decided (policy, pins, argument screen)"),
    ("warden.gateway.recorder", "Recorder", "_decision", None, "decision record built"),
    ("warden.audit._log", "AuditLog", "_prepare", None, "record prepared (time, redaction)"),
    ("warden.audit._log", "AuditLog", "_commit", "writer thread woke with the batch", None),
    ("warden.audit._store", "Store", "_sync", None, "writer: flock taken, other writers checked"),
    ("warden.audit._store", "Store", "_write_head", None, "writer: head written"),
    ("warden.audit._log", "AuditLog", "_committed", "trio thread woken by the writer", None),
    ("warden.gateway.core", "_Forwarding", "forward", "forwarding task runs", "forwarded (held for the flush)"),
    ("warden.gateway.core", "_Forwarding", "settled", "server's answer parsed", "answer shaped and screened"),
)
_FSYNC = ("writer: framed, hashed, written; fdatasync begins", "writer: fdatasync done")
_START = "parsed, dispatched to the gateway"
_WAITED = "other processes: the server or the client, and both wakeups"


def _child(argv: list[str]) -> int:
    """Run warden with the stage stamps installed; write them to $WARDEN_TIMELINE at exit."""
    stamps: list[tuple[str, int]] = []
    note = stamps.append
    clock = time.perf_counter_ns

    def wrapped(fn: Callable[..., Any], enter: str | None, leave: str | None) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def stamped_async(*args: Any, **kwargs: Any) -> Any:
                if enter:
                    note((enter, clock()))
                result = await fn(*args, **kwargs)
                if leave:
                    note((leave, clock()))
                return result
            return stamped_async

        @functools.wraps(fn)
        def stamped(*args: Any, **kwargs: Any) -> Any:
            if enter:
                note((enter, clock()))
            result = fn(*args, **kwargs)
            if leave:
                note((leave, clock()))
            return result
        return stamped

    for module_name, owner, method, enter, leave in HOOKS:
        holder = getattr(importlib.import_module(module_name), owner, None)
        if holder is None or not callable(getattr(holder, method, None)):
            sys.exit(f"call_timeline: {module_name}.{owner}.{method} is gone; update HOOKS to warden's new names")
        setattr(holder, method, wrapped(getattr(holder, method), enter, leave))
    fdatasync = os.fdatasync

    def stamped_fdatasync(fd: int) -> None:
        note((_FSYNC[0], clock()))
        fdatasync(fd)
        note((_FSYNC[1], clock()))
    os.fdatasync = stamped_fdatasync  # the log's, and any other (a call whose order differs is left out)

    def dump() -> None:
        with open(os.environ["WARDEN_TIMELINE"], "w") as out:
            out.writelines(f"{label}\t{stamp}\n" for label, stamp in stamps)
    atexit.register(dump)
    from warden.cli import main
    return main(argv)


def stages(path: Path, skip: int) -> tuple[list[tuple[str, float]], float, int, int]:
    """The median µs of each stage of the most common order, the median period between calls, and how many calls
    took that order (of how many)."""
    calls: list[list[tuple[str, int]]] = []
    for line in path.read_text().splitlines():
        label, stamp = line.split("\t")
        if label == _START:
            calls.append([])
        if calls:
            calls[-1].append((label, int(stamp)))
    calls = calls[skip:-1]
    orders = collections.Counter(tuple(label for label, _ in call) for call in calls)
    order, count = orders.most_common(1)[0]
    typical = [call for call in calls if tuple(label for label, _ in call) == order]
    rows = [(order[i + 1], statistics.median((c[i + 1][1] - c[i][1]) / 1e3 for c in typical))
            for i in range(len(order) - 1)]
    starts = [call[0][1] for call in calls]
    period = statistics.median((b - a) / 1e3 for a, b in itertools.pairwise(starts))
    return rows, period, count, len(calls)


async def run(calls: int) -> None:
    argv = SERVERS["raw echo"][0]
    with tempfile.TemporaryDirectory(dir=Path(__file__).resolve().parent.parent) as tmp:
        state, config = Path(tmp) / "state", Path(tmp) / "bench.toml"
        state.mkdir(mode=0o700)
        config.write_text('[defaults]\non_new = "tofu"\n')
        plain = [WARDEN, "--state-dir", str(state), "--config", str(config), "run", "--name", "timeline",
                 "--quiet-server"]
        await approve_first([*plain, "--", *argv], str(state), config, "timeline")
        print(f"fdatasync median in the state dir: {fdatasync_median(state):.0f} µs; {calls} sequential calls each\n")
        for title, extra in (("audit on", ()), ("audit off (--unsafe-no-audit)", ("--unsafe-no-audit",))):
            out = Path(tmp) / "stamps"
            command = [str(BIN / "python"), __file__, "--child", *plain[1:], *extra, "--", *argv]
            async with trio.open_nursery() as nursery:
                client = await RawClient.start(nursery, command, env={**os.environ, "WARDEN_TIMELINE": str(out)})
                for _ in range(calls):
                    await client.call("echo", {"text": "hi"})
                await client.aclose()
                await client.process.wait()
                nursery.cancel_scope.cancel()
            rows, period, typical, total = stages(out, skip=min(200, calls // 5))
            print(f"{title}: median period between calls {period:.0f} µs; {typical} of {total} calls in this order")
            print("| stage ends when | median µs |\n|---|---|")
            previous = _START
            for label, micros in rows:
                shown = _WAITED if (previous, label) == ("bytes written", "bytes read") else label
                print(f"| {shown} | {micros:.1f} |")
                previous = label
            print()


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        sys.exit(_child(sys.argv[2:]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000)
    trio.run(run, parser.parse_args().calls)


if __name__ == "__main__":
    main()
