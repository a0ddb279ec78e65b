"""``subscriptions/listen`` through warden: acknowledged with what warden can deliver (MS28), change notifications
tagged with the listen's id (MS29), for a legacy server behind a 2026 host."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import FIXTURES, PYTHON, RawHost, through_warden

MODERN = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
          "io.modelcontextprotocol/clientCapabilities": {},
          "io.modelcontextprotocol/clientInfo": {"name": "raw-modern-host", "version": "1"}}
TOOL = {"name": "add", "description": "Adds.", "inputSchema": {"type": "object"}}


async def test_MS28_MS29_listen_is_acknowledged_and_changes_are_tagged(tmp_path: Path) -> None:
    control = tmp_path / "control.json"  # tmp_path is the sandbox's writable (so readable) dir here
    control.write_text(json.dumps({"tools": [TOOL]}))
    control.chmod(0o644)
    server = [PYTHON, str(FIXTURES / "rugpull_server.py"), str(control), "--notify"]
    host = await RawHost.start(through_warden(server))
    await host.request("listen-1", "subscriptions/listen",
                       {"_meta": MODERN, "notifications": {"toolsListChanged": True, "promptsListChanged": True}})
    ack = await host.next_message()
    assert ack is not None
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-1"  # type: ignore[index]
    # The fixture declares tools.listChanged but not prompts.listChanged: only what warden can deliver is honored.
    assert ack["params"]["notifications"] == {"toolsListChanged": True}  # type: ignore[index]
    await host.request(1, "tools/list", {"_meta": MODERN})
    assert (await host.response(1))["result"]["tools"]  # type: ignore[index]
    control.write_text(json.dumps({"tools": [TOOL, {**TOOL, "name": "mul"}]}))
    await host.request(2, "tools/list", {"_meta": MODERN})  # the fixture notices the change on its next request
    await host.response(2)
    while not any(m.get("method") == "notifications/tools/list_changed" for m in host.seen):
        message = await host.next_message(timeout=10)
        assert message is not None
    changed = next(m for m in host.seen if m.get("method") == "notifications/tools/list_changed")
    assert changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-1"  # type: ignore[index]
    await host.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "listen-1"}})
    await host.close()
    assert not any(m.get("id") == "listen-1" for m in host.seen)  # cancelled: no response


async def test_MS29_a_servers_non_object_meta_on_a_change_does_not_stop_the_tagged_notification(tmp_path: Path) -> None:
    """A server's ``_meta`` that is not an object cannot be merged with the listen's id: it is dropped, the host
    still hears of the change, and warden keeps serving (a string ``_meta`` used to raise in the forwarding)."""
    control = tmp_path / "control.json"
    control.write_text(json.dumps({"tools": [TOOL]}))
    control.chmod(0o644)
    server = [PYTHON, str(FIXTURES / "rugpull_server.py"), str(control), "--notify"]
    host = await RawHost.start(through_warden(server))
    await host.request("listen-1", "subscriptions/listen",
                       {"_meta": MODERN, "notifications": {"toolsListChanged": True}})
    assert (await host.next_message()) is not None  # the acknowledgement
    await host.request(1, "tools/list", {"_meta": MODERN})
    await host.response(1)
    control.write_text(json.dumps({"tools": [TOOL, {**TOOL, "name": "mul"}],
                                   "notify_params": {"_meta": "not-an-object"}}))
    await host.request(2, "tools/list", {"_meta": MODERN})
    await host.response(2)
    while not any(m.get("method") == "notifications/tools/list_changed" for m in host.seen):
        message = await host.next_message(timeout=10)
        assert message is not None, "warden stopped before telling the host of the change"
    changed = next(m for m in host.seen if m.get("method") == "notifications/tools/list_changed")
    assert changed["params"]["_meta"] == {"io.modelcontextprotocol/subscriptionId": "listen-1"}  # type: ignore[index]
    await host.request(3, "tools/list", {"_meta": MODERN})
    assert "result" in await host.response(3)
    await host.close()
