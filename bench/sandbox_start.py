"""What the sandbox costs: package intake, time to the first tool list, and per-call latency, bare vs bwrap vs podman.

First the eight reference packages (npm: filesystem, memory, sequential-thinking, everything, github; PyPI: time,
git, fetch) are taken into a fresh warden store from the real registries, each timed (``warden.intake.take_in``:
resolve, fetch, verify, byte-compile; nothing of the packages runs). Then, for a Node server (server-everything)
and a Python server (mcp-server-time) after intake, each launch is timed from ``launcher.launch()`` to the answer
of the first ``tools/list`` (spawn, ``initialize``, ``notifications/initialized``, ``tools/list``); modes are
interleaved run by run so drift hits them equally. "bare" runs the store entry's program directly with warden's
unsandboxed launcher and the same small environment the sandbox gets (PATH, HOME, LANG, TMPDIR): that is what
``npx``/``uvx`` run once their cache is warm, so the comparison measures isolation, not environment size.
"bwrap" runs the host configuration's own command (``npx -y PKG``, ``uvx PKG``) the way ``warden run`` does.
"warden run" is the whole thing a host starts: a ``warden run --name N -- <the host's command>`` process, timed
from its spawn (so warden's own start — Python, its imports, policy, audit log — is in the figure) to the first
non-empty tool list, after the server's definitions were approved once. "trio relay (floor)" is what any Python
process in the middle costs at least: ``servers/trio_relay.py`` (the floor of ``proxy_overhead.py``: start, import
trio, copy bytes) in front of the bare program, with no sandbox, policy or audit; warden run's cost over the floor
is warden's own, and the floor's cost over bare is the interpreter's.
Per-call latency is measured on one warm server per mode: sequential ``tools/call`` round trips.

Usage: python bench/sandbox_start.py [--runs N] [--calls N] [--no-podman] [--no-intake-table]
Targets (issues 3 and 10): bwrap adds <= 10 % to the time to the first tool list and nothing measurable per call.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from warden.intake import parse_runner, resolve_launch, take_in
from warden.launcher import Child, Launcher, LaunchSpec
from warden.sandbox import SandboxSettings, make_launcher

REFERENCE = [
    ("npx", "-y", "@modelcontextprotocol/server-filesystem", "/tmp"),
    ("npx", "-y", "@modelcontextprotocol/server-memory"),
    ("npx", "-y", "@modelcontextprotocol/server-sequential-thinking"),
    ("npx", "-y", "@modelcontextprotocol/server-everything", "stdio"),
    ("npx", "-y", "@modelcontextprotocol/server-github"),
    ("uvx", "mcp-server-time"),
    ("uvx", "mcp-server-git"),
    ("uvx", "mcp-server-fetch"),
]
SERVERS: dict[str, tuple[tuple[str, ...], str, dict[str, Any]]] = {
    "node: server-everything": (REFERENCE[3], "echo", {"message": "hi"}),
    "python: mcp-server-time": (REFERENCE[5], "get_current_time", {"timezone": "UTC"}),
}
WARDEN = str(Path(sys.executable).parent / "warden")
FLOOR = [sys.executable, str(Path(__file__).parent / "servers" / "trio_relay.py")]
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


async def start(launcher: Launcher | None, spec: LaunchSpec,
                nursery: trio.Nursery) -> tuple[Client, float | None]:
    """Launch ``spec`` (with ``launcher``; None: ``spec.argv`` is a whole process, warden run or the floor relay,
    with ``spec.env``, or the bench's own environment when that is empty) and read its
    first tool list; the seconds it took, or None when the list was empty (warden's, before approval)."""
    began = time.perf_counter()
    child: Any = await (launcher.launch(spec) if launcher is not None else
                        trio.lowlevel.open_process(spec.argv, stdin=-1, stdout=-1, stderr=-1,
                                                                   env=spec.env or None))
    nursery.start_soon(_drain, child)
    client = Client(child)
    answer = await client.request("initialize", INIT)
    assert "result" in answer, answer
    await child.stdin.send_all(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    tools = await client.request("tools/list", {})
    elapsed = time.perf_counter() - began
    assert launcher is None or tools.get("result", {}).get("tools"), tools
    return client, elapsed if tools.get("result", {}).get("tools") else None


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


def intake_table(state: Path) -> list[tuple[str, str, float, int]]:
    """Take the eight reference packages into ``state``'s store; (package, version, seconds, packages) each."""
    rows = []
    for argv in REFERENCE:
        request = parse_runner(argv)
        assert request is not None
        began = time.perf_counter()
        record = take_in(request, state_dir=state, env=os.environ).record
        rows.append((f"{record.ecosystem}: {record.name}", record.version, time.perf_counter() - began,
                     len(record.dependencies) + 1))
    return rows


async def main(runs: int, calls: int, use_podman: bool, show_intake: bool) -> None:
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="warden-bench-"))
    state = work / "state"
    state.mkdir(mode=0o700)
    home = work / "home"
    home.mkdir()
    intake_rows = await trio.to_thread.run_sync(intake_table, state) if show_intake else []
    if not show_intake:
        for argv, _, _ in SERVERS.values():
            request = parse_runner(argv)
            assert request is not None
            await trio.to_thread.run_sync(lambda r=request: take_in(r, state_dir=state, env=os.environ))
    node = shutil.which("node") or "node"
    modes: dict[str, Callable[[], Launcher | None]] = {
        "bare": lambda: make_launcher(SandboxSettings(kind="none"), state_dir=state),
        "bwrap": lambda: make_launcher(SandboxSettings(), state_dir=state),
        "trio relay (floor)": lambda: None,
        "warden run": lambda: None,
    }
    wrapper = podman_wrapper(work) if use_podman else None
    if wrapper is not None:
        modes["podman"] = lambda: make_launcher(SandboxSettings(kind="container", engine_path=wrapper),
                                                state_dir=state)
    bare_env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "TMPDIR": "/tmp"}
    rows = []
    try:
        for label, (argv, tool, arguments) in SERVERS.items():
            name = "bench-" + label.split(":")[0]
            startup: dict[str, list[float]] = {mode: [] for mode in modes}
            per_call: dict[str, list[float]] = {}
            async with trio.open_nursery() as nursery:
                for run in range(runs + 1):  # run 0 warms caches and is not counted
                    for mode, factory in modes.items():
                        direct = mode in ("bare", "trio relay (floor)")  # the store entry's program itself
                        env = bare_env if direct else {}
                        resolved = resolve_launch(argv, state_dir=state, node=node)
                        assert resolved is not None
                        command = list(resolved.argv if direct else argv)
                        if mode == "trio relay (floor)":
                            command = [*FLOOR, *command]
                        if mode == "warden run":
                            command = [WARDEN, "--state-dir", str(state), "run", "--name", name, "--quiet-server",
                                       "--", *command]
                        client, elapsed = await start(factory(), LaunchSpec(argv=command, env=env, cwd="/"),
                                                      nursery)
                        if run > 0:
                            assert elapsed is not None, f"{label} / {mode}: an empty tool list"
                            startup[mode].append(elapsed)
                        if run == runs and mode != "podman":
                            latencies = []
                            for _ in range(calls):
                                began = time.perf_counter()
                                answer = await client.request("tools/call", {"name": tool, "arguments": arguments})
                                latencies.append(time.perf_counter() - began)
                                assert "result" in answer, answer
                            per_call[mode] = latencies
                        await client.close()
                        if mode == "warden run" and run == 0:  # a user approves once, with `warden pins review`
                            subprocess.run([WARDEN, "--state-dir", str(state), "pins", "approve", name, "--yes",
                                            "--accept-findings"], check=True, capture_output=True)
            bare = _median_ms(startup["bare"])
            for mode in modes:
                median = _median_ms(startup[mode])
                calls_text = (f"{_median_ms(per_call[mode]):.3f} / {_p99_ms(per_call[mode]):.3f}"
                              if mode in per_call else "-")
                rows.append((label, mode, median, median - bare, (median / bare - 1) * 100, calls_text))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()
    if intake_rows:
        print("package intake into a fresh store from the real registries (resolve, fetch, verify hashes, "
              "byte-compile; no package code runs), one run each")
        print()
        print("| package | version | intake s | packages |")
        print("|---|---|---:|---:|")
        for label, version, seconds, count in intake_rows:
            print(f"| {label} | {version} | {seconds:.1f} | {count} |")
        print()
    print(f"time to first tool list (spawn -> initialize -> tools/list answer), median of {runs} runs; per call: "
          f"median / p99 of {calls} sequential tools/call round trips on a warm server; {os.cpu_count()} CPUs, "
          f"load average {load_before[0]:.2f} at start, {load[0]:.2f} at end")
    print()
    print("| server | mode | first tool list ms | vs bare ms | vs bare % | per call ms (median / p99) |")
    print("|---|---|---:|---:|---:|---:|")
    for label, mode, median, delta, percent, calls_text in rows:
        print(f"| {label} | {mode} | {median:.1f} | {delta:+.1f} | {percent:+.1f} % | {calls_text} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--no-podman", action="store_true")
    parser.add_argument("--no-intake-table", action="store_true",
                        help="take in only the two measured servers, untimed")
    options = parser.parse_args()
    trio.run(main, options.runs, options.calls, not options.no_podman, not options.no_intake_table)
