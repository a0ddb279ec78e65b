"""What the secrets registry costs per message at an output channel (issue 11 item 1).

Every message warden writes to a host goes through ``Redactor.wire`` (and every audit record through one search of
its encoded bytes), so a miss — the common case, no secret in the message — must cost next to nothing. Measured in
the same run, per message size (a 200-byte result, 64 KiB, 1 MiB) and number of registered values (1, 10, 100,
each with its JSON spellings):

* floor: the channel with no registry (nothing at all: the cost of the call);
* peer: one Python ``re`` alternation over the same spellings (the registry before ahocorasick-rs);
* warden: ``Redactor.wire`` (one Aho-Corasick pass, ``ahocorasick-rs``);
* warden, hit: the same message with one value in it (decode, redact, re-encode).

Prints median and p99 per call (µs) and the peer/warden ratio. Usage: ``bench/redact.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import statistics
import time
from collections.abc import Callable

from warden.secrets import Redactor

SIZES = {"200 B": 200, "64 KiB": 64 << 10, "1 MiB": 1 << 20}


def message(size: int, planted: str | None = None) -> bytes:
    text = ("the quick brown fox jumps over the lazy dog é " * (size // 46 + 1))[: max(0, size - 80)]
    if planted:
        text = text[: len(text) // 2] + planted + text[len(text) // 2:]
    return json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": text}]}},
                      ensure_ascii=False).encode()


def timed(fn: Callable[[], object], runs: int) -> tuple[float, float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - start) / 1000)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.99))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    print(f"{'values':>6} {'size':>7} | {'floor':>14} | {'peer: re':>18} | {'warden':>18} | {'warden, hit':>18} | "
          f"{'re/warden':>9}")
    print("-" * 104)
    for count in (1, 10, 100):
        values = [secrets.token_urlsafe(18) for _ in range(count)]  # no shared prefix for re to lean on
        redactor = Redactor(values)
        forms = sorted({f for v in values for f in (v.encode(), json.dumps(v)[1:-1].encode())}, key=len,
                       reverse=True)
        peer = re.compile(b"|".join(map(re.escape, forms)))
        for label, size in SIZES.items():
            raw, hit = message(size), message(size, values[-1])
            runs = args.runs if size < (1 << 20) else max(5, args.runs // 20)
            floor = timed(lambda raw=raw: raw, runs)
            peer_t = timed(lambda p=peer, raw=raw: p.search(raw), runs)
            ours = timed(lambda r=redactor, raw=raw: r.wire(raw), runs)
            ours_hit = timed(lambda r=redactor, hit=hit: r.wire(hit), runs)
            print(f"{count:>6} {label:>7} | {floor[0]:>6.2f} {floor[1]:>7.2f} | {peer_t[0]:>9.1f} {peer_t[1]:>8.1f} "
                  f"| {ours[0]:>9.1f} {ours[1]:>8.1f} | {ours_hit[0]:>9.1f} {ours_hit[1]:>8.1f} | "
                  f"{peer_t[0] / ours[0]:>8.1f}x")
    print("median and p99 per call in µs; floor = the channel with no registry")


if __name__ == "__main__":
    main()
