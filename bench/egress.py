"""What the egress proxy costs: a 10 MB download and a small request's time to first byte, direct vs through it.

A test host in its own network namespace (veth to the host namespace, ``tests/egress/netns.py``) serves ``/big``
(10 MB) and ``/small``. The client is curl, a separate process, so the proxy's event loop shares nothing with it.
Modes, interleaved run by run so drift hits them equally:

* ``direct``: curl to the host's address (the floor);
* ``bare relay``: curl through a trio TCP relay with no parsing, no decision and no record (what any relay in
  this process costs: the peer the proxy is held against);
* ``proxy``: curl through :class:`warden.egress.EgressProxy`, decisions kept in memory;
* ``proxy+audit``: the same with decisions written to a real audit log (write-ahead: an ``fdatasync`` before
  each connection), as ``warden run`` does.

Usage (root: it creates network namespaces): python bench/egress.py [--runs N] [--small-runs N]
Target (issue 12): the proxy keeps >= 80 % of direct throughput.
"""

from __future__ import annotations

import argparse
import ipaddress
import socket
import statistics
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.egress.netns import NetLab, net_lab
from warden import audit
from warden.egress import EgressDecision, EgressProxy, EgressRecorder, EgressRules, EgressTally

PORT = 8080


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


@asynccontextmanager
async def _proxies(net: NetLab, state_dir: Path) -> AsyncIterator[dict[str, int | None]]:
    subnet = net.server_ip.rsplit(".", 1)[0] + ".0/24"
    rules = EgressRules.parse([f"web.test:{PORT}"], [subnet])

    async def resolve(host: str, port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        await trio.lowlevel.checkpoint()
        return [ipaddress.ip_address(net.server_ip)]

    async with audit.open_audit_log(state_dir) as log, trio.open_nursery() as nursery:
        ports: dict[str, int | None] = {"direct": None}
        bare, ports["bare relay"] = _listener()
        nursery.start_soon(_bare_relay, bare, (net.server_ip, PORT))
        recorder = EgressRecorder(log, server_name="bench", server_id=None, policy_digest=None)
        for mode, sink in (("proxy", _MemorySink()), ("proxy+audit", recorder)):
            proxy = EgressProxy(rules, sink, resolver=resolve)
            await nursery.start(proxy.serve)
            listener, ports[mode] = _listener()
            proxy.attach(listener)
        yield ports
        nursery.cancel_scope.cancel()


async def _curl(net: NetLab, port: int | None, path: str) -> tuple[float, float, int]:
    """(time to first byte, total time, bytes) of one curl GET, as curl measures them."""
    host = "web.test" if port is not None else net.server_ip
    argv = ["curl", "-sS", "-o", "/dev/null", "-w", "%{time_starttransfer} %{time_total} %{size_download}",
            f"http://{host}:{PORT}{path}"]
    argv += ["-x", f"http://127.0.0.1:{port}"] if port is not None else ["--noproxy", "*"]
    done = await trio.run_process(argv, capture_stdout=True)
    first, total, size = done.stdout.decode().split()
    return float(first), float(total), int(size)


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


async def _main(runs: int, small_runs: int) -> None:
    with net_lab() as net, tempfile.TemporaryDirectory() as tmp:
        net.start_server(net.server_ip, str(PORT))
        state = Path(tmp) / "state"
        state.mkdir(mode=0o700)
        async with _proxies(net, state) as ports:
            for mode, port in ports.items():  # warm-up, and a check that every mode works
                assert (await _curl(net, port, "/big"))[2] == 10 * 1024 * 1024, mode
            big: dict[str, list[float]] = {m: [] for m in ports}
            flow: dict[str, list[float]] = {m: [] for m in ports}
            ttfb: dict[str, list[float]] = {m: [] for m in ports}
            for _ in range(runs):
                for mode, port in ports.items():
                    first, total, size = await _curl(net, port, "/big")
                    big[mode].append(size / total / 1e6)
                    flow[mode].append(size / max(total - first, 1e-6) / 1e6)
            for _ in range(small_runs):
                for mode, port in ports.items():
                    first, _, _ = await _curl(net, port, "/small")
                    ttfb[mode].append(first * 1000)
    direct_mbps = statistics.median(big["direct"])
    direct_flow = statistics.median(flow["direct"])
    direct_ttfb = statistics.median(ttfb["direct"])
    print(f"10 MB download ({runs} runs; MB/s over the whole request, and over the body after its first byte) and "
          f"/small time to first byte ({small_runs} runs); curl, test netns; modes interleaved")
    print("| mode | 10 MB MB/s median | vs direct | body MB/s median | vs direct | TTFB ms median | TTFB ms p99 | "
          "added TTFB ms |")
    print("|---|---|---|---|---|---|---|---|")
    for mode in ports:
        mbps = statistics.median(big[mode])
        body = statistics.median(flow[mode])
        first = statistics.median(ttfb[mode])
        print(f"| {mode} | {mbps:.0f} | {mbps / direct_mbps:.0%} | {body:.0f} | {body / direct_flow:.0%} | "
              f"{first:.2f} | {_p99(ttfb[mode]):.2f} | {first - direct_ttfb:+.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--small-runs", type=int, default=60)
    args = parser.parse_args()
    if subprocess.run(["id", "-u"], capture_output=True, text=True, check=True).stdout.strip() != "0":
        sys.exit("bench/egress.py creates network namespaces: run it as root")
    trio.run(_main, args.runs, args.small_runs)


if __name__ == "__main__":
    main()
