"""warden against a real authorization server: the Python SDK's (``mcp.server.auth``) with three MCP servers it
protects (``tests/auth/oauth_peers.py``), all on 127.0.0.1. The host is the SDK's ``Client`` over stdio to
``warden run -- <server URL>``, as a real host would be; the user's browser is ``oauth_browser.py`` (warden runs
with ``--oauth-browser always``, the user's consent given in advance).

What is proven, from the authorization server's own log, the resource servers' record of every token they were
shown, warden's audit log and its stderr:

* a token for resource A is never sent to resource B (B gets its own authorization, for its own URL);
* an expired token is refreshed, with the resource, and the refresh is audited;
* a revoked token (and refresh token) leads to one new authorization, not a loop; a server that refuses every
  token gets one authorization and then a clear error, however often it is called;
* no token ever appears in warden's stderr or its audit log, which holds only digests and scopes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from tests.support import PYTHON, WARDEN

HERE = Path(__file__).resolve().parent
BROWSER = HERE.parent / "conformance" / "oauth_browser.py"
LIFETIME = 6
CONFIG = """
[defaults]
on_new = "tofu"
on_changed = "ask"
"""


@dataclass(frozen=True)
class Peers:
    issuer: str
    urls: dict[str, str]

    def log(self) -> list[dict[str, Any]]:
        return list(httpx.get(self.issuer + "/test/log", timeout=10, trust_env=False).json())

    def revoke_all(self) -> None:
        httpx.post(self.issuer + "/test/revoke", timeout=10, trust_env=False).raise_for_status()


@pytest.fixture(scope="module")
def peers() -> Iterator[Peers]:
    process = subprocess.Popen([PYTHON, str(HERE / "oauth_peers.py"), "--token-lifetime", str(LIFETIME)],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            pytest.fail("tests/auth/oauth_peers.py did not start")
        data = json.loads(line)
        yield Peers(data.pop("issuer"), data)
    finally:
        process.kill()
        process.wait(timeout=10)


@dataclass
class Warden:
    """One state directory (its secrets store and audit log), and warden's stderr across runs."""

    root: Path

    @property
    def stderr(self) -> str:
        path = self.root / "stderr.txt"
        return path.read_text(errors="replace") if path.exists() else ""

    def audit_bytes(self) -> bytes:
        return b"".join(p.read_bytes() for p in (self.root / "state").rglob("*") if p.is_file()
                        and "audit" in str(p) and p.suffix in (".log", ""))

    def audit_records(self) -> list[dict[str, Any]]:
        done = subprocess.run([WARDEN, "--state-dir", str(self.root / "state"), "audit", "export", "--format",
                               "jsonl"], capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            return []
        return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]

    async def call(self, peers: Peers, server: str, times: int = 1, pause: float = 0.0,
                   via_config: bool = False) -> list[Any]:
        """Start ``warden run -- <server's URL>`` under a real host (or, ``via_config``, ``warden run --name``
        of a config entry with ``url`` and an ``auth`` block), call its tool ``times`` times; each outcome is the
        text or the MCPError."""
        url, tool = peers.urls[server], f"whoami_{server}"
        config = self.root / "warden.toml"
        err = self.root / "stderr.txt"
        args = ["-c", 'exec "$0" "$@" 2>>"$WARDEN_ERR"', WARDEN, "--state-dir", str(self.root / "state"),
                "--config", str(config), "run"]
        if via_config:
            config.write_text(CONFIG + f'\n[servers.remote]\nurl = "{url}"\n'
                              'auth = { type = "oauth", browser = "always", timeout = 30 }\n')
            args += ["--name", "remote"]
        else:
            config.write_text(CONFIG)
            args += ["--oauth-browser", "always", "--oauth-timeout", "30", "--", url]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.root), "WARDEN_ERR": str(err),
               "BROWSER": f"{sys.executable} {BROWSER} %s"}
        outcomes: list[Any] = []
        try:
            async with Client(StdioServerParameters(command="/bin/sh", args=args, env=env), mode="legacy",
                              read_timeout_seconds=60) as client:
                await client.list_tools()
                for i in range(times):
                    if i and pause:
                        await trio.sleep(pause)
                    result = await client.call_tool(tool, {})
                    outcomes.append(result.content[0].text if not result.is_error  # type: ignore[union-attr]
                                    else result)
        except* MCPError as group:  # the handshake or a call failed: the host's session is over
            outcomes.extend([group.exceptions[0]] * (times - len(outcomes)))
        return outcomes


@pytest.fixture
def warden(tmp_path: Path) -> Warden:
    return Warden(tmp_path)


def raw_tokens(log: list[dict[str, Any]]) -> list[str]:
    return [raw for entry in log if entry["event"] == "token" for raw in entry["raw"]]


async def test_AU06_token_for_resource_a_is_never_sent_to_b(peers: Peers, warden: Warden) -> None:
    start = len(peers.log())
    assert await warden.call(peers, "a") == ["a"]
    assert await warden.call(peers, "b") == ["b"]
    log = peers.log()[start:]
    grants = [e for e in log if e["event"] == "token"]
    assert [(g["grant"], g["resource"]) for g in grants] == [("authorization_code", peers.urls["a"]),
                                                             ("authorization_code", peers.urls["b"])]
    token_a, token_b = grants[0]["access"], grants[1]["access"]
    seen_by = {(e["server"], e["token"]) for e in log if e["event"] == "seen"}
    assert ("a", token_a) in seen_by
    assert ("b", token_b) in seen_by
    assert not any(server == "b" and token == token_a for server, token in seen_by)
    assert not any(server == "a" and token == token_b for server, token in seen_by)
    records = [r for r in warden.audit_records() if r.get("event") == "auth.authorized"]
    assert [(r["grant"]["resource"], r["grant"]["token_digest"]) for r in records] == [
        (peers.urls["a"], token_a), (peers.urls["b"], token_b)]
    assert all(r["grant"]["scopes"] == ["mcp:tools"] for r in records)
    for raw in raw_tokens(log):
        assert raw not in warden.stderr
        assert raw.encode() not in warden.audit_bytes()


async def test_AU01_expired_token_is_refreshed_and_audited(peers: Peers, warden: Warden) -> None:
    start = len(peers.log())
    assert await warden.call(peers, "a", times=2, pause=LIFETIME + 0.5) == ["a", "a"]
    log = peers.log()[start:]
    assert [(e["grant"], e["resource"]) for e in log if e["event"] == "token"] == [
        ("authorization_code", peers.urls["a"]), ("refresh", peers.urls["a"])]
    assert [e["event"] for e in log].count("authorize") == 1
    events = [r["event"] for r in warden.audit_records() if r.get("event", "").startswith("auth.")]
    assert events == ["auth.authorized", "auth.refreshed"]
    for raw in raw_tokens(log):
        assert raw not in warden.stderr


async def test_revoked_token_leads_to_one_new_authorization(peers: Peers, warden: Warden) -> None:
    start = len(peers.log())
    assert await warden.call(peers, "a") == ["a"]
    peers.revoke_all()
    assert await warden.call(peers, "a", times=2) == ["a", "a"]
    log = peers.log()[start:]
    events = [e["event"] for e in log]
    assert events.count("authorize") == 2
    assert events.count("refresh-refused") == 1
    assert [e["grant"] for e in log if e["event"] == "token"] == ["authorization_code", "authorization_code"]


async def test_a_server_refusing_every_token_is_not_authorized_in_a_loop(peers: Peers, warden: Warden) -> None:
    start = len(peers.log())
    outcomes = await warden.call(peers, "stubborn", times=3)
    assert all(not isinstance(o, str) for o in outcomes)
    assert [e["event"] for e in peers.log()[start:]].count("authorize") == 1
    assert "does not authorize again in a loop" in warden.stderr


async def test_AU09_a_configured_url_with_an_oauth_block(peers: Peers, warden: Warden) -> None:
    start = len(peers.log())
    assert await warden.call(peers, "b", via_config=True) == ["b"]
    assert [e["resource"] for e in peers.log()[start:] if e["event"] == "authorize"] == [peers.urls["b"]]
    records = [r for r in warden.audit_records() if r.get("event") == "auth.authorized"]
    assert [r["server_name"] for r in records] == ["remote"]
