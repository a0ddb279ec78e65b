"""What the flow check and the content rules add to one ``tools/call`` (µs), measured in-process on the exact
functions the gateway runs, with a floor and a peer engine in the same run.

Rows (each: median and p99 of N timed calls, after a warm-up):

* decide(): a tools/call decision without flow facts, a sink in a clean session, a sink in a tainted session
  (the refusal), and the taint ledger's read (one ``stat`` while the file is unchanged);
* result rules on a clean result of 1 KiB and 64 KiB (the cheap path: one RE2 pass over the wire bytes), the same
  result holding a token and a PEM block (decode, scan, redact, encode), and one with ``\\u`` escapes (decoded);
* argument rules on a small arguments object;
* floor: ``bytes.find`` of one literal over the 64 KiB result (the least any scan can cost); peer: Python's ``re``
  (a backtracking engine) running the same detector patterns over the same bytes.

    .venv/bin/python bench/policy_checks.py [--calls N]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from warden.policy import (  # noqa: E402
    BUILTIN_DETECTORS,
    ContentScanner,
    EffectivePolicy,
    PinState,
    Source,
    TaintLedger,
    TaintMark,
    ToolCallFacts,
    classify,
    decide,
    load_policy_file,
    screen_arguments,
    screen_result,
)

CONFIG = """
[defaults.flow]
sources = ["fetch"]
sinks = ["send_email"]
"""
PEM = "-----BEGIN PRIVATE KEY-----\n" + "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" * 20 + "\n-----END PRIVATE KEY-----"


def timed(fn: Callable[[], object], calls: int) -> tuple[float, float]:
    for _ in range(min(200, calls)):
        fn()
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


def text_result(size: int, extra: str = "") -> bytes:
    words = ("The quick brown fox jumps over the lazy dog. " * (size // 45 + 1))[:size]
    return msgspec.json.encode({"content": [{"type": "text", "text": words + extra}], "isError": False})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=5000)
    args = parser.parse_args()
    n = args.calls
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.toml"
        path.write_text(CONFIG)
        sp = EffectivePolicy(None, load_policy_file(path, "user")).server("mail", ("srv",))
        builtin = Source("builtin", None, None, "bench")
        sink = classify(sp.flow, "mail", "send_email", None, reaches_network=False, builtin=lambda k: builtin)
        state = Path(tmp) / "state"
        state.mkdir(mode=0o700)
        ledger = TaintLedger(state, "host-bench")
        ledger.mark(TaintMark("web", "fetch", 3))
        arguments = {"to": "a@example.com", "subject": "hello", "body": "see you at 10"}
        plain = ToolCallFacts(sp, "send_email", PinState.APPROVED, PinState.APPROVED, arguments)
        clean = ToolCallFacts(sp, "send_email", PinState.APPROVED, PinState.APPROVED, arguments, flow_role=sink,
                              session="host-bench")
        tainted = ToolCallFacts(sp, "send_email", PinState.APPROVED, PinState.APPROVED, arguments, flow_role=sink,
                                taint=ledger.marks(), session="host-bench")
        results = ContentScanner(sp.content, "results", "t", ("a-registered-secret-value",), builtin=builtin)
        argument_scanner = ContentScanner(sp.content, "arguments", "t", ("a-registered-secret-value",),
                                          builtin=builtin)
        limit = sp.content.max_scan_bytes.value
        small, big = text_result(1024), text_result(64 * 1024)
        leaky = text_result(1024, f" AKIAIOSFODNN7EXAMPLE {PEM}")
        escaped = msgspec.json.encode({"content": [{"type": "text", "text": "caf\\u00e9 " * 100}]})
        peer = re.compile("|".join(f"(?:{p})" for p in BUILTIN_DETECTORS.values()).encode())
        rows: list[tuple[str, Callable[[], object]]] = [
            ("decide(): tools/call, no flow facts", lambda: decide(plain)),
            ("decide(): sink, clean session", lambda: decide(clean)),
            ("decide(): sink, tainted session (refusal)", lambda: decide(tainted)),
            ("taint ledger read (stat, unchanged)", ledger.marks),
            ("result rules: clean 1 KiB", lambda: screen_result(results, small, max_scan_bytes=limit,
                                                               output_schema=None)),
            ("result rules: clean 64 KiB", lambda: screen_result(results, big, max_scan_bytes=limit,
                                                                output_schema=None)),
            ("result rules: 1 KiB + token + PEM (redacted)", lambda: screen_result(results, leaky,
                                                                                   max_scan_bytes=limit,
                                                                                   output_schema=None)),
            ("result rules: 1 KiB with \\u escapes (decoded)", lambda: screen_result(results, escaped,
                                                                                   max_scan_bytes=limit,
                                                                                   output_schema=None)),
            ("argument rules: 3 short strings", lambda: screen_arguments(argument_scanner, arguments)),
            ("floor: bytes.find over 64 KiB", lambda: big.find(b"AKIA")),
            ("peer: Python re, same detectors, 64 KiB", lambda: peer.search(big)),
        ]
        table = Table(title=f"per-call cost of the flow check and content rules ({n} calls each)")
        for column in ("what", "median µs", "p99 µs"):
            table.add_column(column, justify="left" if column == "what" else "right")
        for label, fn in rows:
            median, p99 = timed(fn, n)
            table.add_row(label, f"{median:.2f}", f"{p99:.2f}")
        Console().print(table)


if __name__ == "__main__":
    main()
