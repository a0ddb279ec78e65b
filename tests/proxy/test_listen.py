"""``subscriptions/listen`` through warden: acknowledged with what warden can deliver (MS28), change notifications
tagged with the listen's id (MS29), for a legacy server behind a 2026 host; a resource subscribed to only where its
principal may read it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from tests.audit.test_audit_log import verify_dir
from tests.gateway_harness import MemoryConnector, ScriptedServer, legacy_handshake, start_gateway
from tests.obligations.scripts import modern_meta
from tests.support import FIXTURES, PYTHON, RawHost, through_warden
from warden import audit
from warden.gateway.link import NO_SINK, HostLink
from warden.protocol.messages import Request, encode_json, encode_request
from warden.upstream.connection import UpstreamOptions

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


NOTE = "note://plan"


async def legacy_notes(server: ScriptedServer) -> None:
    """A 2025-11-25 server that lists one resource (:data:`NOTE`) and takes a subscription to any URI."""
    while (message := await server.receive()) is not None:
        if message.get("id") is None or await legacy_handshake(server, message,
                                                                capabilities={"resources": {"subscribe": True}}):
            continue
        if message.get("method") == "resources/list":
            await server.answer(message, {"resources": [{"uri": NOTE, "name": "plan"}]})
        elif message.get("method") == "resources/templates/list":
            await server.answer(message, {"resourceTemplates": []})
        else:
            await server.answer(message, {})


@pytest.mark.trio
async def test_MS28_a_listen_subscribes_only_to_the_resources_its_principal_may_read(tmp_path: Path) -> None:
    """Found in review: a 2026 host's ``subscriptions/listen`` subscribed a legacy server to every URI it named,
    with no decision, so bob could hear of changes to a resource approved for alice only (or to one no one may
    read). Now each URI is decided like a read of it for the listen's principal and recorded as a
    ``resources/subscribe`` decision; a refused one is left out of the acknowledgement (MS28: it reflects what is
    honored) and never reaches the server. The server's update of the one subscribed to reaches the listen that
    subscribed to it (MS29), though two principals are connected."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    connector = MemoryConnector(legacy_notes)
    async with audit.open_audit_log(state) as log, trio.open_nursery() as nursery:
        gateway = await start_gateway(tmp_path, connector, nursery, options=UpstreamOptions(), on_new="ask", log=log)
        alice, bob = HostLink("alice", principal="alice"), HostLink("bob", principal="bob")
        for link in (alice, bob):
            gateway.attach(link)
        body = encode_json({"_meta": modern_meta()})
        await gateway.handle(Request(b"1", "resources/list", body, encode_request(b"1", "resources/list", body)),
                             alice, NO_SINK)  # observed: waits for approval
        store = gateway.guard.store
        note = next(e.digest for e in store.entries("scripted") if e.key == NOTE)
        store.approve_exact("scripted", [("resource", NOTE, note)], by="test", principals=["alice"])
        store.approve("scripted")  # the rest (identity) for everyone
        acknowledged, streams = {}, {}
        for link in (alice, bob):
            body = encode_json({"_meta": modern_meta(),
                                "notifications": {"resourceSubscriptions": [NOTE, "note://unlisted"]}})
            listen = Request(b'"listen"', "subscriptions/listen", body,
                             encode_request(b'"listen"', "subscriptions/listen", body))
            sink, stream = trio.open_memory_channel[bytes](8)
            nursery.start_soon(gateway.handle, listen, link, sink)
            with trio.fail_after(10):
                acknowledged[link.name] = json.loads(await stream.receive())["params"]["notifications"]
            streams[link.name] = stream
        assert acknowledged == {"alice": {"resourceSubscriptions": [NOTE]}, "bob": {}}
        seen = connector.connections[-1].server.seen
        assert [m["params"]["uri"] for m in seen if m.get("method") == "resources/subscribe"] == [NOTE]
        await connector.connections[-1].server.send({"method": "notifications/resources/updated",
                                                     "params": {"uri": NOTE}})
        with trio.fail_after(10):  # alice's listen hears it (before: with two principals connected, no listen did)
            updated = json.loads(await streams["alice"].receive())
        assert updated["params"] == {"uri": NOTE, "_meta": {"io.modelcontextprotocol/subscriptionId": "listen"}}
        nursery.cancel_scope.cancel()
    decided = [(r["target"], r["decision"], r["principal"]) for r in verify_dir(state)[1]
               if r["event"] == "call.decided" and r["method"] == "resources/subscribe"]
    assert decided == [(NOTE, "allow", "alice"), ("note://unlisted", "deny", "alice"), (NOTE, "deny", "bob"),
                       ("note://unlisted", "deny", "bob")]
