"""ST — the stdio transport to an upstream (ST01 and ST04 are named in tests/proxy)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from tests.gateway_harness import ScriptedServer, gateway_in_process, legacy_server
from tests.obligations.scripts import requests_of, until
from tests.support import PYTHON, RawHost, sandbox_readable, through_warden, write_config


async def silent(server: ScriptedServer) -> None:
    """Take the call and never answer it."""


def is_jsonrpc_message(message: Any) -> bool:
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return False
    if isinstance(message.get("method"), str):
        return "id" not in message or isinstance(message["id"], (int, str))
    return "id" in message and (("result" in message) ^ ("error" in message))


async def test_ST02_only_valid_jsonrpc_messages_reach_the_servers_stdin(tmp_path: Path) -> None:
    """The host sends junk (not JSON, invalid UTF-8, a batch, a bare value, a wrong ``jsonrpc``, a response to an id
    nobody asked, a request without a method) between real requests: every line on the server's stdin is one valid
    JSON-RPC 2.0 message (the scripted server fails on a line that is not JSON at all), and none of the junk."""
    junk = [b"not json\n", b"\xff\xfe{\"jsonrpc\"\n", b'[{"jsonrpc":"2.0","id":"j9","method":"ping"}]\n', b"42\n",
            b'{"jsonrpc":"1.0","id":"j10","method":"tools/list"}\n', b'{"jsonrpc":"2.0","id":"j0","result":{}}\n',
            b'{"jsonrpc":"2.0","id":"j11"}\n', b'{"jsonrpc":"2.0","method":"tools/call","params":"x"}\n']
    async with gateway_in_process(tmp_path, legacy_server) as (host, connector):
        await host.initialize()
        for n, line in enumerate(junk):
            await host.send_raw(line)
            await host.request(100 + n, "tools/call", {"name": "echo", "arguments": {"n": n}})
            assert "result" in await host.response(100 + n)
        server = connector.connections[-1].server
        assert server.seen
        assert all(is_jsonrpc_message(m) for m in server.seen), [m for m in server.seen if not is_jsonrpc_message(m)]
        assert not [m for m in server.seen if str(m.get("id")).startswith("j")]
        assert len(requests_of(server.seen, "tools/call")) == len(junk)


async def test_ST05_a_cancelled_request_is_cancelled_on_stdin_with_its_own_id(tmp_path: Path) -> None:
    """The host cancels its call: the server gets ``notifications/cancelled`` whose ``requestId`` is the id of the
    request warden sent it (not the host's id) and a string ``reason``, and nothing else in ``params``."""
    async with gateway_in_process(tmp_path, lambda s: legacy_server(s, on_call=silent)) as (host, connector):
        await host.initialize()
        await host.request("host-7", "tools/call", {"name": "hang", "arguments": {}})
        server = connector.connections[-1].server
        await until(lambda: requests_of(server.seen, "tools/call"))
        forwarded = requests_of(server.seen, "tools/call")[0]
        await host.notify("notifications/cancelled", {"requestId": "host-7", "reason": "the user pressed stop"})
        await until(lambda: requests_of(server.seen, "notifications/cancelled"))
        cancel = requests_of(server.seen, "notifications/cancelled")[0]
        assert "id" not in cancel
        assert set(cancel["params"]) == {"requestId", "reason"}
        assert cancel["params"]["requestId"] == forwarded["id"]
        assert isinstance(cancel["params"]["reason"], str)


NOISY_SERVER = textwrap.dedent('''
    import json, sys
    calls = 0
    def say(obj):
        sys.stdout.write(json.dumps(obj) + "\\n"); sys.stdout.flush()
    for line in sys.stdin:
        m = json.loads(line)
        sys.stderr.write("ERROR: Traceback (most recent call last): something scary\\n")
        sys.stderr.write(json.dumps({"jsonrpc": "2.0", "id": m.get("id"), "error": {"code": -1, "message": "x"}}))
        sys.stderr.write("\\n"); sys.stderr.flush()
        if "id" not in m:
            continue
        if m["method"] == "initialize":
            say({"jsonrpc": "2.0", "id": m["id"], "result": {"protocolVersion": "2025-11-25",
                 "capabilities": {"tools": {}}, "serverInfo": {"name": "noisy", "version": "1"}}})
        elif m["method"] == "tools/list":
            say({"jsonrpc": "2.0", "id": m["id"], "result": {"tools": [
                 {"name": "count", "inputSchema": {"type": "object"}}]}})
        elif m["method"] == "tools/call":
            calls += 1
            say({"jsonrpc": "2.0", "id": m["id"], "result": {"content": [{"type": "text", "text": f"call {calls}"}]}})
        else:
            say({"jsonrpc": "2.0", "id": m["id"], "error": {"code": -32601, "message": "Method not found"}})
''')


async def test_ST03_output_on_stderr_is_not_an_error(tmp_path: Path) -> None:
    """A real sandboxed server writes alarming text (an "ERROR: Traceback" line, a JSON-RPC error object) to
    stderr before every answer: its answers are results, and the second call is served by the same process (its
    call counter says 2) — warden neither fails the request nor restarts the server over stderr."""
    code = tmp_path.parent / f"{tmp_path.name}-code"  # outside what the sandbox may write
    code.mkdir()
    script = code / "noisy.py"
    script.write_text(NOISY_SERVER)
    write_config(tmp_path, read_dirs=(str(sandbox_readable(code)),))
    host = await RawHost.start(through_warden([PYTHON, str(script)]))
    try:
        await host.initialize()
        first = await host.call(1, "count")
        second = await host.call(2, "count")
    finally:
        await host.close()
    assert json.dumps(first["result"]["content"]) == json.dumps([{"type": "text", "text": "call 1"}]), first
    assert second["result"]["content"] == [{"type": "text", "text": "call 2"}], second
