"""What the sandbox costs: time to first response and per-call latency, bare vs bwrap vs podman.

For a Node server (server-everything) and a Python server (mcp-server-time), each launch is timed from
``launcher.launch()`` to the first ``initialize`` answer (spawn -> first answer); modes are interleaved run by
run so drift hits them equally. "bare" is warden's unsandboxed launcher with the same small environment the
sandbox gets (PATH, HOME, LANG, TMPDIR), so the comparison measures isolation, not environment size. Per-call
latency is measured on one warm server per mode: sequential ``tools/call`` round trips.

Usage: python bench/sandbox_start.py [--runs N] [--calls N] [--no-podman]
Target (issue 3): bwrap adds <= 10 % to time-to-first-response and nothing measurable per call.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from warden.launcher import Child, Launcher, LaunchSpec
from warden.sandbox import SandboxSettings, make_launcher

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
EVERYTHING = ROOT / "tests" / "peers" / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist"
SERVERS: dict[str, tuple[tuple[str, ...], str, dict[str, Any]]] = {
    "node: server-everything": (("node", str(EVERYTHING / "index.js"), "stdio"), "echo", {"message": "hi"}),
    "python: mcp-server-time": ((str(VENV_BIN / "mcp-server-time"),), "get_current_time", {"timezone": "UTC"}),
}
INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}


class Client:
    def __init__(self, child: Child) -> None:
        self.child = child
        self.buffer = b""
        self.next_id = 0

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        ident = self.next_id
        await self.child.stdin.send_all(json.dumps({"jsonrpc": "2.0", "id": ident, "method": method,
                                                    "params": params}).encode() + b"\n")
        while True:
            while b"\n" not in self.buffer:
                chunk = await self.child.stdout.receive_some(1 << 20)
                if not chunk:
                    raise EOFError("server exited")
                self.buffer += chunk
            line, self.buffer = self.buffer.split(b"\n", 1)
            message: dict[str, Any] = json.loads(line)
            if message.get("id") == ident:
                return message

    async def close(self) -> None:
        await self.child.stdin.aclose()
        with trio.move_on_after(10) as scope:
            await self.child.wait()
        if scope.cancelled_caught:
            self.child.kill()
            await self.child.wait()


async def _drain(child: Child) -> None:
    while await child.stderr.receive_some(65536):
        pass


async def start(launcher: Launcher, spec: LaunchSpec, nursery: trio.Nursery) -> tuple[Client, float]:
    began = time.perf_counter()
    child = await launcher.launch(spec)
    nursery.start_soon(_drain, child)
    client = Client(child)
    answer = await client.request("initialize", INIT)
    elapsed = time.perf_counter() - began
    assert "result" in answer, answer
    await child.stdin.send_all(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    return client, elapsed


def podman_wrapper(directory: Path) -> str | None:
    """The harness's cgroup workaround for this host (test-peers.md 6.4); None when podman is absent."""
    podman = shutil.which("podman")
    if podman is None or os.geteuid() != 0:
        return None
    wrapper = directory / "podman"
    wrapper.write_text("#!/bin/sh\nexec unshare -m --propagation private sh -c "
                       "'umount /sys/fs/cgroup/unified 2>/dev/null; exec \"$0\" \"$@\"' " f"{podman} \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper)


def _median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def _p99_ms(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))] * 1000


async def main(runs: int, calls: int, use_podman: bool) -> None:
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="warden-bench-"))
    state = work / "state"
    state.mkdir(mode=0o700)
    home = work / "home"
    home.mkdir()
    modes: dict[str, Callable[[], Launcher]] = {
        "bare": lambda: make_launcher(SandboxSettings(kind="none"), state_dir=state),
        "bwrap": lambda: make_launcher(SandboxSettings(), state_dir=state),
    }
    wrapper = podman_wrapper(work) if use_podman else None
    if wrapper is not None:
        modes["podman"] = lambda: make_launcher(SandboxSettings(kind="container", engine_path=wrapper),
                                                state_dir=state)
    bare_env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "TMPDIR": "/tmp"}
    rows = []
    try:
        for label, (argv, tool, arguments) in SERVERS.items():
            startup: dict[str, list[float]] = {mode: [] for mode in modes}
            per_call: dict[str, list[float]] = {}
            async with trio.open_nursery() as nursery:
                for run in range(runs + 1):  # run 0 warms caches and is not counted
                    for mode, factory in modes.items():
                        env = bare_env if mode == "bare" else {}
                        client, elapsed = await start(factory(), LaunchSpec(argv=argv, env=env), nursery)
                        if run > 0:
                            startup[mode].append(elapsed)
                        if run == runs and mode in ("bare", "bwrap"):
                            latencies = []
                            for _ in range(calls):
                                began = time.perf_counter()
                                answer = await client.request("tools/call", {"name": tool, "arguments": arguments})
                                latencies.append(time.perf_counter() - began)
                                assert "result" in answer, answer
                            per_call[mode] = latencies
                        await client.close()
            bare = _median_ms(startup["bare"])
            for mode in modes:
                median = _median_ms(startup[mode])
                calls_text = (f"{_median_ms(per_call[mode]):.3f} / {_p99_ms(per_call[mode]):.3f}"
                              if mode in per_call else "-")
                rows.append((label, mode, median, median - bare, (median / bare - 1) * 100, calls_text))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()
    print(f"time to first response (spawn -> initialize answer), median of {runs} runs; per call: median / p99 "
          f"of {calls} sequential tools/call round trips on a warm server; {os.cpu_count()} CPUs, load average "
          f"{load_before[0]:.2f} at start, {load[0]:.2f} at end")
    print()
    print("| server | mode | first response ms | vs bare ms | vs bare % | per call ms (median / p99) |")
    print("|---|---|---:|---:|---:|---:|")
    for label, mode, median, delta, percent, calls_text in rows:
        print(f"| {label} | {mode} | {median:.1f} | {delta:+.1f} | {percent:+.1f} % | {calls_text} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--no-podman", action="store_true")
    options = parser.parse_args()
    trio.run(main, options.runs, options.calls, not options.no_podman)
