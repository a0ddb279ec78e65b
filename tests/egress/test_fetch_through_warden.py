"""Issue 12's acceptance: the real mcp-server-fetch (PyPI, taken in through warden's package intake), run with
``warden run -- uvx mcp-server-fetch`` and an allow-list. The allowed test host is fetched; a host not on the list,
an IP literal, a wrong port and an allowed name that resolves to 127.0.0.1 are refused with the proxy's reason in
the tool result; each attempt has an audit record.

warden itself runs in a client network namespace linked only to the test host's (``ip netns exec``, whose
``/etc/netns/NAME/hosts`` is the resolver override), so neither the proxy nor the server can reach anything else.
The package is taken in first, from the host namespace (PyPI), into the test's state directory.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.egress.conftest import HTTP_PORT, TLS_PORT
from tests.egress.netns import NetLab, have_netns, net_lab
from tests.support import WARDEN, RawHost, write_config

TOOL = ["uvx", "mcp-server-fetch", "--ignore-robots-txt", "--allow-private-ips"]


@pytest.fixture
def lab() -> Iterator[NetLab]:
    reason = have_netns()
    if reason is not None:
        pytest.skip(reason)
    with net_lab(client_netns=True) as made:
        made.start_server(made.server_ip, str(HTTP_PORT))
        made.start_server(made.server_ip, str(TLS_PORT), "tls")
        made.write_hosts({"web.test": made.server_ip, "away.test": made.server_ip, "lo.test": "127.0.0.1"})
        yield made


def _text(answer: dict[str, Any]) -> str:
    result = answer["result"]
    return "\n".join(item.get("text", "") for item in result.get("content", []))


def audit_records() -> list[dict[str, Any]]:
    out = subprocess.run([WARDEN, "audit", "show", "--json"], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


async def test_fetch_with_an_allow_list(lab: NetLab, tmp_path: Path) -> None:
    subnet = lab.server_ip.rsplit(".", 1)[0] + ".0/24"
    write_config(tmp_path, extra=f"""
[servers.mcp-server-fetch.network]
allow = ["web.test:{HTTP_PORT}", "lo.test:{TLS_PORT}", "web.test:{TLS_PORT}"]
allow_addresses = ["{subnet}"]
""")
    intake = subprocess.run([WARDEN, "intake", "--", *TOOL], capture_output=True, text=True, timeout=600,
                            check=False)
    assert intake.returncode == 0, intake.stderr
    host = await RawHost.start(lab.in_client([WARDEN, "run", "--", *TOOL]), stderr=subprocess.PIPE, env=os.environ)
    await host.initialize()
    await host.request("list", "tools/list")
    await host.response("list", timeout=120)
    urls = {
        "allowed": f"http://web.test:{HTTP_PORT}/small",
        "not listed": f"https://away.test:{TLS_PORT}/",
        "ip literal": f"https://{lab.server_ip}:{TLS_PORT}/",
        "wrong port": f"https://web.test:{TLS_PORT + 1}/",
        "loopback": f"https://lo.test:{TLS_PORT}/",
    }
    answers = {case: await host.call(case, "fetch", {"url": url, "raw": True}, timeout=120)
               for case, url in urls.items()}
    assert await host.close() == 0
    assert "hello from the egress test host" in _text(answers["allowed"])
    refusals = {
        "not listed": f"away.test:{TLS_PORT} is not on the egress allow-list; to allow it: network.allow "
                      f'= ["away.test:{TLS_PORT}"]',
        "ip literal": f"{lab.server_ip}:{TLS_PORT} is not on the egress allow-list (an IP address is "
                      f'allowed only by an IP entry); to allow it: network.allow = ["{lab.server_ip}:{TLS_PORT}"]',
        "wrong port": f"web.test:{TLS_PORT + 1} is not on the egress allow-list (it is allowed on port "
                      f'{HTTP_PORT}, {TLS_PORT} only); to allow it: network.allow = ["web.test:{TLS_PORT + 1}"]',
        "loopback": "lo.test resolved to 127.0.0.1, a loopback address, which is refused unless explicitly allowed; "
                    'to allow it: network.allow_addresses = ["127.0.0.1/32"]',
    }
    for case, reason in refusals.items():
        assert answers[case]["result"]["isError"] is True, case
        assert f"warden egress refused: {reason}" in _text(answers[case]), (case, _text(answers[case]))
    records = [r for r in audit_records() if r["event"].startswith("egress.")]
    decided = [(r["decision"], r["egress"]["host"], r["egress"]["port"]) for r in records
               if r["event"] == "egress.decided"]
    assert decided == [("allow", "web.test", HTTP_PORT), ("deny", "away.test", TLS_PORT),
                       ("deny", lab.server_ip, TLS_PORT), ("deny", "web.test", TLS_PORT + 1),
                       ("deny", "lo.test", TLS_PORT)]
    allowed = next(r for r in records if r["event"] == "egress.decided" and r["decision"] == "allow")
    assert allowed["egress"]["address"] == lab.server_ip
    [closed] = [r for r in records if r["event"] == "egress.closed"]
    assert closed["decision_index"] == allowed["index"]
    assert closed["egress"]["sent"] > 0
    assert closed["egress"]["received"] > 0
