"""Test networks: network namespaces joined by veth pairs (iproute2), made by a test and removed after it.

Nothing here reaches a public or an unrelated private address: every address is in 10.77.0.0/16, on links that
exist only between namespaces this module created, and no namespace it makes has a default route. ``ip netns
exec NAME`` also bind-mounts ``/etc/netns/NAME/hosts`` over ``/etc/hosts`` for what it runs: the resolver override
the end-to-end tests use (for that one process tree only).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SERVER = HERE / "netns_server.py"
_COUNTER = itertools.count()


def ip(*args: str, netns: str | None = None) -> None:
    argv = ["ip", *(("-n", netns) if netns else ()), *args]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr}"


def have_netns() -> str | None:
    """Why these tests cannot run here (None: they can): they need root and iproute2."""
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    if shutil.which("ip") is None:
        return "iproute2 (ip) is missing: apt-get install iproute2 (tests/system-packages.txt)"
    return None


@dataclass
class NetLab:
    """A server namespace ``server`` with address ``server_ip``, linked to ``client`` (a namespace, or the host's
    own when None) at ``client_ip``."""

    server: str
    server_ip: str
    client: str | None
    client_ip: str
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start_server(self, *args: str) -> subprocess.Popen[bytes]:
        """Run ``netns_server.py ARGS`` in the server namespace; returns once it listens."""
        process = subprocess.Popen(["ip", "netns", "exec", self.server, sys.executable, str(SERVER), *args],
                                   stdout=subprocess.PIPE)
        assert process.stdout is not None
        assert process.stdout.readline().strip() == b"ready"
        self.processes.append(process)
        return process

    def write_hosts(self, names: dict[str, str]) -> None:
        """The ``/etc/hosts`` that processes run with ``ip netns exec CLIENT`` see (the resolver override)."""
        assert self.client is not None
        directory = Path("/etc/netns") / self.client
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "hosts").write_text("127.0.0.1 localhost\n" +
                                         "".join(f"{address} {name}\n" for name, address in names.items()))

    def in_client(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the client namespace (with its hosts file), or as-is on the host."""
        return ["ip", "netns", "exec", self.client, *argv] if self.client else list(argv)


@contextlib.contextmanager
def net_lab(*, client_netns: bool = False) -> Iterator[NetLab]:
    """A fresh server namespace (and client namespace) with one veth link between them; all removed after."""
    n = next(_COUNTER)
    subnet = (os.getpid() * 7 + n * 13) % 250 + 1
    tag = f"{os.getpid() % 100000}x{n}"
    server, client = f"wdes{tag}", (f"wdec{tag}" if client_netns else None)
    near, far = f"we{tag}a", f"we{tag}b"
    net = NetLab(server, f"10.77.{subnet}.2", client, f"10.77.{subnet}.1")
    created: list[str] = []
    try:
        for name in (server, client):
            if name:
                ip("netns", "add", name)
                created.append(name)
                ip("link", "set", "lo", "up", netns=name)
        ip("link", "add", near, "type", "veth", "peer", "name", far)
        ip("link", "set", far, "netns", server)
        ip("addr", "add", f"{net.server_ip}/24", "dev", far, netns=server)
        ip("link", "set", far, "up", netns=server)
        if client:
            ip("link", "set", near, "netns", client)
        ip("addr", "add", f"{net.client_ip}/24", "dev", near, netns=client)
        ip("link", "set", near, "up", netns=client)
        yield net
    finally:
        for process in net.processes:
            process.kill()
            process.wait()
        with contextlib.suppress(AssertionError):
            ip("link", "del", near)
        for name in created:
            with contextlib.suppress(AssertionError):
                ip("netns", "del", name)
        if client:
            shutil.rmtree(Path("/etc/netns") / client, ignore_errors=True)
