"""Real peers over HTTP on 127.0.0.1 with warden as their client: ``warden run -- http://...`` driven over stdio by
the Python SDK ``Client`` in ``mode="legacy"`` and ``mode="auto"``.

Upstreams: the Python SDK server over Streamable HTTP (dual-era: warden speaks 2026-07-28 to it whatever the host
speaks), server-everything's ``streamableHttp`` mode (legacy Streamable HTTP, sessions) and its ``sse`` mode (the
2024-11-05 HTTP+SSE transport, reached through the fallback). The host gets the same tools and results as it gets
from the same server directly. warden's own log (``-v``) says which era and transport it settled on.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client, StdioServerParameters

from tests.http_client.httpserver import Exchange, HttpServer
from tests.http_client.mocks import ModernMock
from tests.support import NODE, PEERS, PYTHON, ROOT, WARDEN, everything_server, start_listening
from warden.policy import PinStore
from warden.transport.http_config import http_server_name

ISOLATION = ("WARDEN_STATE_DIR", "WARDEN_CONFIG", "XDG_STATE_HOME", "XDG_CONFIG_HOME")
FIXTURE = str(ROOT / "tests" / "fixtures" / "conformance_server.py")
EVERYTHING = str(PEERS / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js")


@pytest.fixture(scope="module")
def http_peers() -> Iterator[dict[str, str]]:
    """The three HTTP servers, started once for the module; name -> URL."""
    env = dict(os.environ)
    commands: dict[str, Callable[[int], subprocess.Popen[bytes]]] = {
        "python-sdk": lambda port: quiet([PYTHON, FIXTURE, "--http", str(port)], env),
        "everything-streamable": lambda port: quiet([NODE, EVERYTHING, "streamableHttp"], env | {"PORT": str(port)}),
        "everything-sse": lambda port: quiet([NODE, EVERYTHING, "sse"], env | {"PORT": str(port)}),
    }
    started: dict[str, tuple[int, subprocess.Popen[bytes]]] = {}
    try:
        for name, start in commands.items():
            started[name] = start_listening(start)
        ports = {name: port for name, (port, _) in started.items()}
        yield {"python-sdk": f"http://127.0.0.1:{ports['python-sdk']}/mcp",
               "everything-streamable": f"http://127.0.0.1:{ports['everything-streamable']}/mcp",
               "everything-sse": f"http://127.0.0.1:{ports['everything-sse']}/sse"}
    finally:
        for _, process in started.values():
            process.kill()
            process.wait()


def quiet(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def warden_params(url: str, log: Path, *warden_args: str, env: dict[str, str] | None = None) -> StdioServerParameters:
    """``warden -v run ... -- URL`` with its stderr appended to ``log`` (the SDK client swallows it otherwise)."""
    base = {k: os.environ[k] for k in ISOLATION if k in os.environ} | {"PATH": os.environ["PATH"]} | (env or {})
    command = " ".join([WARDEN, "-v", "run", *warden_args, "--", url])
    return StdioServerParameters(command="sh", args=["-c", f"exec {command} 2>>{log}"], env=base)


def comparable(result: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    dumped.pop("_meta", None)
    return dumped


async def session_view(server: Any, mode: str, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    async with Client(server, mode=mode) as client:
        tools = await client.list_tools()
        results = [comparable(await client.call_tool(name, args)) for name, args in calls]
        return {"version": client.protocol_version,
                "tools": sorted((comparable(t) for t in tools.tools), key=lambda t: t["name"]),
                "results": results, "instructions": client.instructions}


def approve_instructions(url: str, instructions: str | None) -> None:
    """server-everything's instructions trip warden's scanner ("before calling"), so trust on first use does not
    cover them; these tests are about transport, so the test approves them as a user would."""
    if instructions is None:
        return
    store = PinStore(Path(os.environ["WARDEN_STATE_DIR"]))
    server = http_server_name(url)
    store.observe_instructions(server, instructions, on_new="ask")
    store.approve(server, "instructions", "", by="test")


CASES: dict[str, tuple[list[tuple[str, dict[str, Any]]], str]] = {
    "python-sdk": ([("test_simple_text", {}), ("test_x_mcp_header", {"region": "Région ü"}),
                    ("test_tool_with_progress", {}), ("test_error_handling", {})],
                   "modern server (2026-07-28)"),
    "everything-streamable": ([("echo", {"message": "hi"}), ("get-sum", {"a": 2, "b": 3})],
                              "legacy server, negotiated 2025-11-25"),
    "everything-sse": ([("echo", {"message": "hi"}), ("get-sum", {"a": 2, "b": 3})],
                       "HTTP+SSE transport, posting to"),
}


@pytest.mark.parametrize("mode", ["legacy", "auto"])
@pytest.mark.parametrize("peer", list(CASES))
async def test_real_http_peers_give_the_same_answers_through_warden(
        peer: str, mode: str, http_peers: dict[str, str], trusting_config: Path, tmp_path: Path) -> None:
    """covers: ER09, ER11, ER12, HL01, HL02, HL04, HL07, HM01-HM06, SS01-SS03 against real servers."""
    calls, settled = CASES[peer]
    url = http_peers[peer]
    direct_server: Any = url if peer == "python-sdk" else StdioServerParameters(
        command=everything_server()[0], args=everything_server()[1:])
    direct = await session_view(direct_server, mode, calls)
    approve_instructions(url, direct["instructions"])
    log = tmp_path / "warden.log"
    with trio.fail_after(60):
        proxied = await session_view(warden_params(url, log), mode, calls)
    assert proxied["tools"] == direct["tools"]
    assert proxied["results"] == direct["results"]
    assert proxied["version"] == ("2025-11-25" if mode == "legacy" else "2026-07-28")
    text = log.read_text()
    assert settled in text, text[-2000:]
    if peer == "python-sdk":
        # a legacy host does not make warden speak legacy upstream: the era is the server's (ER01)
        assert "initialize" not in text
    if peer == "python-sdk" and mode == "legacy":
        assert proxied["results"][1]["content"][0]["text"] == "region=Région ü"


async def test_AU03_AU04_header_from_the_environment_reaches_only_the_server(trusting_config: Path,
                                                                             tmp_path: Path) -> None:
    """``--header Authorization=VAR``: the token travels in the header on every request, never in argv."""
    secret = "tok-" + os.urandom(8).hex()
    mock = ModernMock()

    async def handler(ex: Exchange) -> None:
        if ex.request.header("authorization") != f"Bearer {secret}":
            await ex.respond(401, b"unauthorized", content_type="text/plain")
            return
        await mock(ex)

    server = HttpServer(handler)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        params = warden_params(server.url(), tmp_path / "w.log", "--header", "Authorization=UPSTREAM_TOKEN",
                               env={"UPSTREAM_TOKEN": secret})
        assert secret not in " ".join(params.args)
        with trio.fail_after(60):
            async with Client(params, mode="auto") as client:
                tools = await client.list_tools()
                assert "echo" in [t.name for t in tools.tools]
                result = await client.call_tool("echo", {"text": "x"})
                assert not result.is_error
        nursery.cancel_scope.cancel()
    assert server.seen
    assert all(s.header("authorization") == f"Bearer {secret}" for s in server.seen)
    assert secret not in (tmp_path / "w.log").read_text()


@pytest.mark.parametrize(("args", "message"), [
    (["--header", "Authorization=NOPE_UNSET", "--", "http://127.0.0.1:9/mcp"], "NOPE_UNSET is not set"),
    (["--", "https://user:pw@example.com/mcp"], "carries credentials"),
    (["--header", "Authorization=X", "--", "node", "server.js"], "--header only goes with an http"),
])
def test_cli_refuses_bad_http_configuration(args: list[str], message: str, trusting_config: Path) -> None:
    env = {k: os.environ[k] for k in ISOLATION if k in os.environ} | {"PATH": os.environ["PATH"], "X": "v"}
    done = subprocess.run([WARDEN, "run", *args], capture_output=True, text=True, env=env, timeout=30,
                          stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 2
    assert message in done.stderr
