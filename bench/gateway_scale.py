"""``warden serve`` at scale: 1, 10 and 50 sandboxed upstreams behind one warden, and one upstream that hangs and
one that floods beside a third.

Every upstream is ``tests/fixtures/rawserver.py`` (stdlib Python, quick to start) in its own bwrap sandbox,
configured as ``[servers.sK]`` in a fresh state directory with trust on first use. For each size the figures are:
warden's own RSS (the ``warden serve`` process, not its sandboxes) after the first list and after the calls; the
time from spawning ``warden serve`` to the answer of the first ``tools/list`` (every upstream started lazily, in
parallel, by that list); and ``tools/call`` throughput with 16 calls in flight spread round-robin over every
upstream, with median and p99 latency. Two rows in the same run frame them: one rawserver spoken to directly (no
warden), and one behind ``warden run``.

Isolation: four upstreams; calls to ``third`` alone, then again while ``hung`` holds 16 calls that never end and
``flood`` sends 100,000 log notifications (which warden relays to the host), then again while ``victim``'s process
is killed (``kill -9``) and restarted. Each row gives the slowest call and counts failed ones (issue 14: none
fails, and none waits longer than twice the p99 of calls to ``third`` alone).

Usage: python bench/gateway_scale.py [--sizes 1,10,50] [--calls N]
Targets (issue 14): warden's RSS <= 80 MB at 50 upstreams; calls/s at 10 upstreams >= 90 % of one.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from rawclient import RawClient

from tests.support import server_pids

ROOT = Path(__file__).resolve().parent.parent
RAWSERVER = str(ROOT / "tests" / "fixtures" / "rawserver.py")
WARDEN = str(Path(sys.executable).parent / "warden")
IN_FLIGHT = 16


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def environment(home: Path, servers: dict[str, list[str]]) -> dict[str, str]:
    """A fresh state dir and a config serving ``servers`` (name -> argv), trusting on first use."""
    state = home / "state"
    state.mkdir(mode=0o700)
    config = home / "warden.toml"
    tables = "".join(f"\n[servers.{name}]\ncommand = {json.dumps(argv[0])}\nargs = {json.dumps(argv[1:])}\n"
                     for name, argv in servers.items())
    config.write_text(f'[defaults]\non_new = "tofu"\n'
                      f"[defaults.sandbox]\nread_dirs = [{json.dumps(str(ROOT / 'tests' / 'fixtures'))}]\n{tables}")
    return {**os.environ, "WARDEN_STATE_DIR": str(state), "WARDEN_CONFIG": str(config)}


async def throughput(client: RawClient, tools: list[str], calls: int,
                     failed: list[dict[str, object]] | None = None) -> tuple[float, list[float]]:
    """``calls`` echo calls, :data:`IN_FLIGHT` at a time, round-robin over ``tools``: calls/s and latencies (and the
    answers that were errors, into ``failed``)."""
    latencies: list[float] = []
    counter = iter(range(calls))

    async def worker() -> None:
        for n in counter:
            latencies.append(await client.call(tools[n % len(tools)], {"text": "x"}, failed=failed))

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(IN_FLIGHT):
            nursery.start_soon(worker)
    return calls / (time.perf_counter() - started), latencies


def p99(values: list[float]) -> float:
    return sorted(values)[max(0, int(len(values) * 0.99) - 1)]


async def row(label: str, argv: list[str], env: dict[str, str], tools: Callable[[list[str]], list[str]],
              calls: int) -> dict[str, object]:
    async with trio.open_nursery() as nursery:
        spawned = time.perf_counter()
        client = await RawClient.start(nursery, argv, env=env)
        listed = await client.request("tools/list", {})
        first_list = time.perf_counter() - spawned
        names = [t["name"] for t in listed["result"]["tools"]]
        rss_listed = rss_mb(client.process.pid)
        await throughput(client, tools(names), min(calls, 200))  # warm-up
        rate, latencies = await throughput(client, tools(names), calls)
        rss_after = rss_mb(client.process.pid)
        await client.aclose()
        nursery.cancel_scope.cancel()
    return {"label": label, "tools": len(names), "first_list_s": first_list, "rss_listed": rss_listed,
            "rss_after": rss_after, "calls_s": rate, "median_ms": statistics.median(latencies) * 1e3,
            "p99_ms": p99(latencies) * 1e3}


def echo_tools(names: list[str]) -> list[str]:
    return [n for n in names if n == "echo" or n.endswith("__echo")]


Isolated = tuple[str, float, float, float, float, int]


def isolated(label: str, rate: float, latencies: list[float], failed: int) -> Isolated:
    return label, rate, statistics.median(latencies) * 1e3, p99(latencies) * 1e3, max(latencies) * 1e3, failed


async def isolation(home: Path, calls: int) -> list[Isolated]:
    server = [sys.executable, RAWSERVER]
    victim = [*server, "--log", "/dev/null"]  # its own command line, to find its process by
    env = environment(home, {"hung": server, "flood": server, "third": server, "victim": victim})
    rows = []
    async with trio.open_nursery() as nursery:
        client = await RawClient.start(nursery, [WARDEN, "serve", "--list-wait", "120"], env=env)
        await client.request("tools/list", {})
        await throughput(client, ["third__echo"], 200)
        rate, latencies = await throughput(client, ["third__echo"], calls)
        rows.append(isolated("third alone", rate, latencies, 0))

        async def hang() -> None:
            await client.request("tools/call", {"name": "hung__slow", "arguments": {"seconds": 3600}})

        async def flood() -> None:
            await client.request("tools/call", {"name": "flood__flood", "arguments": {"count": 100_000}})

        async with trio.open_nursery() as noise:
            for _ in range(IN_FLIGHT):
                noise.start_soon(hang)
            noise.start_soon(flood)
            await trio.sleep(0.2)
            failed: list[dict[str, object]] = []
            rate, latencies = await throughput(client, ["third__echo"], calls, failed)
            rows.append(isolated("third, beside 16 hung calls and a 100k-notification flood", rate, latencies,
                                 len(failed)))
            noise.cancel_scope.cancel()
        pids = server_pids(client.process.pid, "/dev/null")
        assert pids, "victim's process was not found"

        async def kill_victim() -> None:
            await trio.sleep(0.2)
            for pid in pids:
                os.kill(pid, signal.SIGKILL)

        failed = []
        async with trio.open_nursery() as killing:
            killing.start_soon(kill_victim)
            rate, latencies = await throughput(client, ["third__echo"], calls, failed)
        rows.append(isolated("third, while victim is killed (kill -9)", rate, latencies, len(failed)))
        with trio.fail_after(60):  # and it comes back
            while True:
                back: list[dict[str, object]] = []
                await client.call("victim__echo", {"text": "x"}, back)
                if not back:
                    break
                await trio.sleep(0.5)
        client.process.kill()
        nursery.cancel_scope.cancel()
    return rows


async def main(sizes: list[int], calls: int) -> None:
    server = [sys.executable, RAWSERVER]
    results = []
    with tempfile.TemporaryDirectory(prefix="warden-bench-") as tmp:
        base = Path(tmp)
        (base / "direct").mkdir()
        results.append(await row("direct (one rawserver, no warden)", server, dict(os.environ), echo_tools, calls))
        (base / "run").mkdir()
        env = environment(base / "run", {"s0": server})
        results.append(await row("warden run, 1 server", [WARDEN, "run", "--name", "s0"], env, echo_tools, calls))
        for size in sizes:
            home = base / f"serve{size}"
            home.mkdir()
            env = environment(home, {f"s{k}": server for k in range(size)})
            results.append(await row(f"warden serve, {size} upstream{'s' if size > 1 else ''}",
                                     [WARDEN, "serve", "--list-wait", "300"], env, echo_tools, calls))
        (base / "iso").mkdir()
        alone = await isolation(base / "iso", calls)
    one = next((r["calls_s"] for r in results if r["label"] == "warden serve, 1 upstream"), None)
    print(f"tools/call, {calls} calls, {IN_FLIGHT} in flight; RSS is warden's own process (MB)\n")
    print("| path | tools | first list (s) | RSS after list | RSS after calls | calls/s | vs 1 upstream "
          "| median ms | p99 ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        ratio = f"{r['calls_s'] / one:.2f}x" if one and str(r["label"]).startswith("warden serve") else "-"
        rss = ("-", "-") if str(r["label"]).startswith("direct") else (f"{r['rss_listed']:.1f}",
                                                                       f"{r['rss_after']:.1f}")
        print(f"| {r['label']} | {r['tools']} | {r['first_list_s']:.2f} | {rss[0]} | {rss[1]} | "
              f"{r['calls_s']:.0f} | {ratio} | {r['median_ms']:.2f} | {r['p99_ms']:.2f} |")
    print("\n| isolation | calls/s | median ms | p99 ms | slowest ms | failed |\n|---|---|---|---|---|---|")
    for label, rate, median, tail, slowest, failures in alone:
        print(f"| {label} | {rate:.0f} | {median:.2f} | {tail:.2f} | {slowest:.2f} | {failures} |")
    print(f"\ntarget: no call to third fails, and none waits longer than 2 x its p99 alone "
          f"({2 * alone[0][3]:.2f} ms)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,10,50")
    parser.add_argument("--calls", type=int, default=2000)
    options = parser.parse_args()
    trio.run(main, [int(s) for s in options.sizes.split(",")], options.calls)
