"""Hostile input is the normal case: whatever method, headers and body a client sends, the HTTP face answers with
a 2xx or a 4xx (never a 5xx, never a hang), every JSON answer is a JSON-RPC message, and warden stays up.

One real ``warden run --http`` serves every example (hypothesis drives a synchronous client against it).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import FIXTURES, PYTHON, WARDEN, shows_a_crash, write_config
from warden.cli._http import SERVING_PREFIX
from warden.gateway.http import _accepts

ALLOWED = {200, 202, 400, 401, 403, 404, 405, 406, 409, 413, 415}
MODERN = "2026-07-28"


class Served:
    def __init__(self, process: subprocess.Popen[bytes], url: str, token: str, lines: list[str]) -> None:
        self.process, self.url, self.token, self.lines = process, url, token, lines
        self.client = httpx.Client(timeout=20)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("hostile-http")  # the sandbox may write here
    home = tmp_path_factory.mktemp("hostile-http-warden")  # warden's own state: never inside a sandbox's reach
    home.chmod(0o700)
    env = {k: v for k, v in os.environ.items() if k != "WARDEN_ORG_POLICY"}
    env.update(WARDEN_STATE_DIR=str(home / "state"), WARDEN_CONFIG=str(home / "config" / "warden.toml"),
               XDG_STATE_HOME=str(home / "xdg-state"), XDG_CONFIG_HOME=str(home / "xdg-config"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WARDEN_CONFIG", env["WARDEN_CONFIG"])
        write_config(root)
    log = root / "upstream.log"
    process = subprocess.Popen(
        [WARDEN, "run", "--http", "127.0.0.1:0", "--max-message-size", "65536", "--",
         PYTHON, str(FIXTURES / "recording_server.py"), "--log", str(log)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=root, env=env)
    assert process.stderr is not None
    lines: list[str] = []
    ready = threading.Event()

    def drain() -> None:
        assert process.stderr is not None
        for raw in process.stderr:
            lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
            if lines[-1].startswith("warden: bearer token in "):
                ready.set()
        ready.set()

    threading.Thread(target=drain, daemon=True).start()
    assert ready.wait(60), "\n".join(lines)
    assert any(line.startswith(SERVING_PREFIX) for line in lines), "\n".join(lines)
    url = next(line for line in lines if line.startswith(SERVING_PREFIX)).removeprefix(SERVING_PREFIX)
    token_path = next(line for line in lines if line.startswith("warden: bearer token in "))
    token = Path(token_path.removeprefix("warden: bearer token in ").split(" (hosts send")[0]).read_text().strip()
    face = Served(process, url, token, lines)
    try:
        yield face
    finally:
        face.client.close()
        process.terminate()
        process.wait(timeout=30)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12)
methods = st.sampled_from(["tools/call", "tools/list", "initialize", "ping", "server/discover", "prompts/get",
                           "resources/read", "subscriptions/listen", "notifications/cancelled", "no/such", ""])
meta = st.fixed_dictionaries({}, optional={
    "io.modelcontextprotocol/protocolVersion": st.sampled_from([MODERN, "2025-11-25", "1999-01-01"]) | json_values,
    "io.modelcontextprotocol/clientCapabilities": st.just({}) | json_values,
    "progressToken": st.just("p") | json_values,
})
params = st.fixed_dictionaries({}, optional={
    "_meta": meta | json_values,
    "name": st.sampled_from(["echo", "regional", "nope"]) | json_values,
    "arguments": st.fixed_dictionaries({}, optional={"text": json_values, "region": json_values}) | json_values,
    "uri": json_values,
    "protocolVersion": st.sampled_from(["2025-11-25", MODERN]) | json_values,
})
messages = st.fixed_dictionaries({"jsonrpc": st.just("2.0") | json_values}, optional={
    "id": st.integers() | st.text(max_size=8) | json_values,
    "method": methods | json_values,
    "params": params | json_values,
    "result": json_values,
    "error": json_values,
})
bodies = (messages.map(lambda m: json.dumps(m).encode()) | json_values.map(lambda v: json.dumps(v).encode())
          | st.binary(max_size=200))
header_values = st.sampled_from([MODERN, "2025-11-25", "tools/call", "echo", "=?base64?ZWNobw==?=", "=?base64?!?=",
                                 "application/json", "text/event-stream", "*/*", "1-0", "http://evil.example", ""]) \
    | st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30).map(str.strip)
headers = st.dictionaries(
    st.sampled_from(["mcp-protocol-version", "mcp-method", "mcp-name", "mcp-session-id", "mcp-param-region",
                     "last-event-id", "accept", "content-type", "origin", "authorization"]),
    header_values, max_size=6)


@given(method=st.sampled_from(["POST", "POST", "POST", "GET", "DELETE", "PUT", "OPTIONS"]), body=bodies,
       extra=headers, authenticated=st.booleans())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
def test_any_request_gets_a_4xx_or_an_answer_never_a_crash(served: Served, method: str, body: bytes,
                                                           extra: dict[str, str], authenticated: bool) -> None:
    sent: dict[str, str] = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    if authenticated:
        sent["authorization"] = f"Bearer {served.token}"
    sent.update(extra)
    response = served.client.request(method, served.url, content=body if method == "POST" else None, headers=sent)
    assert response.status_code in ALLOWED, (response.status_code, response.text)
    kind = response.headers.get("content-type", "")
    if kind == "application/json":
        answer: Any = response.json()
        assert answer["jsonrpc"] == "2.0"
        assert ("result" in answer) != ("error" in answer)
    assert served.process.poll() is None


def test_still_serving_after_the_hostile_examples(served: Served) -> None:
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
               "authorization": f"Bearer {served.token}", "mcp-protocol-version": MODERN, "mcp-method": "tools/call",
               "mcp-name": "echo"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}},
        "name": "echo", "arguments": {"text": "still here"}}}
    response = served.client.post(served.url, content=json.dumps(body), headers=headers)
    assert response.status_code == 200
    assert "still here" in response.text
    assert not any(shows_a_crash(line) or "Error in ASGI" in line for line in served.lines), served.lines[-20:]


@given(st.lists(st.sampled_from(["application/json", "text/event-stream", "*/*", "text/*", "application/*",
                                 "text/html", "application/json;q=0", "text/event-stream; q=0.0", " ", ",,",
                                 "application/json; charset=utf-8"]), max_size=4).map(",".join)
       | st.text(max_size=40))
def test_accept_parsing(value: str) -> None:
    json_ok, sse_ok = _accepts([value.encode("utf-8", "replace")])
    parts = [p.split(";")[0].strip().lower() for p in value.split(",") if "q=0" not in p.replace(" ", "")]
    assert json_ok == any(p in ("*/*", "application/*", "application/json") for p in parts)
    assert sse_ok == any(p in ("*/*", "text/*", "text/event-stream") for p in parts)
