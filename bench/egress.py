"""What the egress proxy costs: a 10 MB download and a small request's time to first byte, direct vs through it.

A test host in its own network namespace (veth to the host namespace, ``tests/egress/netns.py``) serves ``/big``
(10 MB) and ``/small``. The client is curl, a separate process, so the proxy's event loop shares nothing with it.
Modes, interleaved run by run so drift hits them equally:

* ``direct``: curl to the host's address (the ceiling);
* ``C splice relay``: curl through ``bench/splice_relay.c`` (built here with ``cc``), blocking ``splice(2)``, one
  thread per direction, no interpreter, no parsing: the least any relay does. What it loses against ``direct`` is
  the relay hop itself (one more TCP connection, one more process on the CPUs), which no proxy can avoid;
* ``socat``: curl through ``socat`` (read/write copies in C), a common relay, when socat is installed;
* ``bare relay``: curl through a trio TCP relay with no parsing, no decision and no record (what any relay in
  this process costs: the peer the proxy is held against);
* ``proxy``: curl through :class:`warden.egress.EgressProxy`, decisions kept in memory;
* ``proxy+audit``: the same with decisions written to a real audit log (write-ahead: an ``fdatasync`` before
  each connection), as ``warden run`` does;
* ``proxy CONNECT``: the ``proxy`` mode's proxy, curl tunnelling (``--proxytunnel``: a CONNECT, then the request
  inside the tunnel, as Node's fetch sends ``http://`` URLs and as every ``https://`` request starts).

"vs direct" is the median of the per-round ratios (each round runs every mode once, back to back), so a burst of
load from elsewhere on the machine hits a ratio's two sides together; "vs C relay" is the same against the C
splice relay: how much of what a relay can get on this machine a mode gets. On 2 CPUs a relay is a third busy
process beside the server and curl, so every relay's "vs direct" falls when other work takes a CPU. "relay CPU" is
what the relay process spent (user + system, its threads and children included) per 10 MB download; for the
in-process modes, less what the bench's own loop spends around a direct download. It depends far less on other
load than the MB/s columns do.

Usage (root: it creates network namespaces): python bench/egress.py [--runs N] [--small-runs N] [--modes A,B]
Target (issue 12): the proxy keeps >= 80 % of direct throughput.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.egress.netns import NetLab, net_lab
from warden import audit
from warden.egress import EgressDecision, EgressProxy, EgressRecorder, EgressRules, EgressTally

PORT = 8080
TUNNEL = "proxy CONNECT"
MODES = ("direct", "C splice relay", "socat", "bare relay", "proxy", "proxy+audit", TUNNEL)
SPLICE_RELAY = Path(__file__).resolve().parent / "splice_relay.c"


class _MemorySink:
    async def decided(self, decision: EgressDecision) -> int | None:
        await trio.lowlevel.checkpoint()
        return 0

    def closed(self, decision: EgressDecision, index: int | None, tally: EgressTally) -> None:
        pass


def _listener() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock, sock.getsockname()[1]


async def _bare_relay(listener: socket.socket, target: tuple[str, int]) -> None:
    """Accept, connect to ``target``, pump both ways: no parsing (curl's request line is absolute-form, which a
    plain HTTP server accepts too)."""
    async def pump(a: trio.SocketStream, b: trio.SocketStream) -> None:
        while chunk := await a.receive_some(256 * 1024):
            await b.send_all(chunk)
        await b.send_eof()

    async def one(client: trio.SocketStream) -> None:
        async with client, await trio.open_tcp_stream(*target) as upstream, trio.open_nursery() as nursery:
            nursery.start_soon(pump, client, upstream)
            nursery.start_soon(pump, upstream, client)

    listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(listener))]
    await trio.serve_listeners(one, listeners)


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _process_cpu(pid: int) -> float:
    """CPU seconds of process ``pid``, its threads and its reaped children (socat forks one per connection)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _build_splice_relay(directory: Path) -> Path | None:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    binary = directory / "splice_relay"
    subprocess.run([compiler, "-O2", "-pthread", "-o", str(binary), str(SPLICE_RELAY)], check=True)
    return binary


async def _wait_listening(port: int) -> None:
    with trio.fail_after(10):
        while True:
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", port)
            except OSError:
                await trio.sleep(0.01)
                continue
            await stream.aclose()
            return


@asynccontextmanager
async def _relays(net: NetLab, state_dir: Path) -> AsyncIterator[tuple[dict[str, int | None],
                                                                       dict[str, Callable[[], float]], list[str]]]:
    """Every mode's proxy port (None: direct), how to read each relay's CPU seconds, and what was left out."""
    subnet = net.server_ip.rsplit(".", 1)[0] + ".0/24"
    rules = EgressRules.parse([f"web.test:{PORT}"], [subnet])

    async def resolve(host: str, port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        await trio.lowlevel.checkpoint()
        return [ipaddress.ip_address(net.server_ip)]

    ports: dict[str, int | None] = {"direct": None}
    cpu: dict[str, Callable[[], float]] = {"direct": _self_cpu}
    missing: list[str] = []
    async with audit.open_audit_log(state_dir) as log, trio.open_nursery() as nursery:
        relay = _build_splice_relay(state_dir)
        if relay is None:
            missing.append("C splice relay (no cc to build bench/splice_relay.c)")
        else:
            listener, ports["C splice relay"] = _listener()
            process = await nursery.start(partial(trio.run_process, [str(relay), net.server_ip, str(PORT)],
                                                  stdin=listener.fileno()))
            listener.close()
            cpu["C splice relay"] = partial(_process_cpu, process.pid)
        if shutil.which("socat") is None:
            missing.append("socat (not installed: apt-get install socat)")
        else:
            probe, port = _listener()
            probe.close()
            process = await nursery.start(partial(trio.run_process, [
                "socat", f"TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork", f"TCP:{net.server_ip}:{PORT}"]))
            await _wait_listening(port)
            ports["socat"] = port
            cpu["socat"] = partial(_process_cpu, process.pid)
        bare, ports["bare relay"] = _listener()
        cpu["bare relay"] = _self_cpu
        nursery.start_soon(_bare_relay, bare, (net.server_ip, PORT))
        recorder = EgressRecorder(log, server_name="bench", server_id=None, policy_digest=None)
        for mode, sink in (("proxy", _MemorySink()), ("proxy+audit", recorder)):
            proxy = EgressProxy(rules, sink, resolver=resolve)
            await nursery.start(proxy.serve)
            listener, ports[mode] = _listener()
            cpu[mode] = _self_cpu
            proxy.attach(listener)
        ports[TUNNEL], cpu[TUNNEL] = ports["proxy"], _self_cpu
        yield ports, cpu, missing
        nursery.cancel_scope.cancel()


async def _curl(net: NetLab, port: int | None, path: str, *, tunnel: bool = False) -> tuple[float, float, int]:
    """(time to first byte, total time, bytes) of one curl GET, as curl measures them."""
    host = "web.test" if port is not None else net.server_ip
    argv = ["curl", "-sS", "-o", "/dev/null", "-w", "%{time_starttransfer} %{time_total} %{size_download}",
            f"http://{host}:{PORT}{path}"]
    argv += ["-x", f"http://127.0.0.1:{port}"] if port is not None else ["--noproxy", "*"]
    argv += ["--proxytunnel"] if tunnel else []
    done = await trio.run_process(argv, capture_stdout=True)
    first, total, size = done.stdout.decode().split()
    return float(first), float(total), int(size)


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def _load() -> str:
    return " ".join(f"{load:.2f}" for load in os.getloadavg())


async def _main(runs: int, small_runs: int, only: set[str] | None) -> None:
    load_before = _load()
    with net_lab() as net, tempfile.TemporaryDirectory() as tmp:
        net.start_server(net.server_ip, str(PORT))
        state = Path(tmp) / "state"
        state.mkdir(mode=0o700)
        async with _relays(net, state) as (ports, cpu, missing):
            if only is not None:
                ports = {m: p for m, p in ports.items() if m == "direct" or m in only}
            for mode, port in ports.items():  # warm-up, and a check that every mode works
                assert (await _curl(net, port, "/big", tunnel=mode == TUNNEL))[2] == 10 * 1024 * 1024, mode
            big: dict[str, list[float]] = {m: [] for m in ports}
            flow: dict[str, list[float]] = {m: [] for m in ports}
            spent: dict[str, float] = dict.fromkeys(ports, 0.0)
            ttfb: dict[str, list[float]] = {m: [] for m in ports}
            for _ in range(runs):
                for mode, port in ports.items():
                    before = cpu[mode]()
                    first, total, size = await _curl(net, port, "/big", tunnel=mode == TUNNEL)
                    spent[mode] += cpu[mode]() - before
                    big[mode].append(size / total / 1e6)
                    flow[mode].append(size / max(total - first, 1e-6) / 1e6)
            for _ in range(small_runs):
                for mode, port in ports.items():
                    first, _, _ = await _curl(net, port, "/small", tunnel=mode == TUNNEL)
                    ttfb[mode].append(first * 1000)
    loop_cpu = spent["direct"] / runs  # what the bench's own loop spends around one curl

    def paired(values: dict[str, list[float]], mode: str, against: str = "direct") -> float:
        return statistics.median(v / d for v, d in zip(values[mode], values[against], strict=True))

    floor = "C splice relay" if "C splice relay" in big else None

    direct_ttfb = statistics.median(ttfb["direct"])
    print(f"10 MB download ({runs} runs; MB/s over the whole request, and over the body after its first byte) and "
          f"/small time to first byte ({small_runs} runs); curl, test netns; modes interleaved")
    print(f"load average before: {load_before}; after: {_load()}; {os.cpu_count()} CPUs")
    print("| mode | 10 MB MB/s median | vs direct | vs C relay | body MB/s median | vs direct | "
          "relay CPU ms per 10 MB | TTFB ms median | TTFB ms p99 | added TTFB ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for mode in ports:
        own = spent[mode] / runs - (loop_cpu if cpu[mode] is _self_cpu else 0.0)
        relay_cpu = "" if mode == "direct" else f"{own * 1000:.1f}"
        first = statistics.median(ttfb[mode])
        vs_floor = "" if floor is None or mode == "direct" else f"{paired(big, mode, floor):.0%}"
        print(f"| {mode} | {statistics.median(big[mode]):.0f} | {paired(big, mode):.0%} | {vs_floor} | "
              f"{statistics.median(flow[mode]):.0f} | {paired(flow, mode):.0%} | {relay_cpu} | "
              f"{first:.2f} | {_p99(ttfb[mode]):.2f} | {first - direct_ttfb:+.2f} |")
    verdicts = [f"{mode} {paired(big, mode):.0%} ({'met' if paired(big, mode) >= 0.8 else 'not met'})"
                for mode in ("proxy", "proxy+audit", TUNNEL) if mode in big]
    if floor is not None:
        verdicts.append(f"for comparison, the C splice relay {paired(big, floor):.0%}")
    if verdicts:
        print(f"target, a 10 MB download >= 80 % of direct: {'; '.join(verdicts)}")
    for what in missing:
        print(f"left out: {what}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--small-runs", type=int, default=60)
    parser.add_argument("--modes", help="comma-separated modes to run besides direct (default: all)")
    args = parser.parse_args()
    if subprocess.run(["id", "-u"], capture_output=True, text=True, check=True).stdout.strip() != "0":
        sys.exit("bench/egress.py creates network namespaces: run it as root")
    only = None if args.modes is None else {m.strip() for m in args.modes.split(",")}
    if only is not None and not only <= set(MODES):
        parser.error(f"unknown modes {sorted(only - set(MODES))}; the modes are: {', '.join(MODES)}")
    trio.run(_main, args.runs, args.small_runs, only)


if __name__ == "__main__":
    main()
