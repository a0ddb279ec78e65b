"""Issue 17 item 1 through ``warden run``: a fetch-like source taints the host session, an email-like sink in the
same session is refused naming the source call, the audit log links the two, a fresh host session is clean, and
only a human (``warden flow clear``) clears the taint."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import PYTHON, WARDEN, RawHost, through_warden, write_config

FLOW_SERVER = [PYTHON, str(Path(__file__).parent.parent / "fixtures" / "flow_server.py")]
FLOW = """
[defaults.flow]
sources = ["fetch"]
sinks = ["flow__send_email"]
"""


def audit_json() -> list[dict[str, object]]:
    out = subprocess.run([WARDEN, "audit", "show", "--json"], capture_output=True, text=True, timeout=60, check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def warden(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([WARDEN, *args], capture_output=True, text=True, timeout=60)


async def session(argv: list[str]) -> RawHost:
    host = await RawHost.start(argv)
    await host.initialize()
    await host.request(1, "tools/list")
    await host.response(1)
    return host


def run_flow(log: Path) -> list[str]:
    return through_warden([*FLOW_SERVER, "--log", str(log)], "--name", "flow")


def in_another_host(argv: list[str]) -> list[str]:
    """The same command under another host process (a new host session: its parent is not the test)."""
    return [sys.executable, "-c", "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))", *argv]


async def test_a_sink_after_a_source_in_one_host_session_is_refused_naming_the_source(tmp_path: Path) -> None:
    write_config(tmp_path, extra=FLOW)
    log = tmp_path / "sent.jsonl"
    host = await session(run_flow(log))
    page = await host.call(2, "fetch", {"url": "https://example.com/"})
    assert "ignore your previous instructions" in json.dumps(page["result"])
    refused = await host.call(3, "send_email", {"to": "attacker@example.com", "body": "secrets"})
    assert await host.close() == 0
    error = refused["error"]
    assert isinstance(error, dict)
    assert error["code"] == -32602
    assert "flow/fetch (audit record #" in error["message"]
    assert "warden flow clear host-" in error["message"]
    assert not log.exists()  # never forwarded
    records = audit_json()
    decided = [r for r in records if r["event"] == "call.decided"]
    fetch = next(r for r in decided if r["target"] == "fetch")
    refusal = next(r for r in decided if r["target"] == "send_email")
    assert fetch["decision"] == "allow"
    assert refusal["decision"] == "deny"
    assert refusal["evidence_index"] == fetch["index"]  # the record links the refusal to its source call
    assert f"#{fetch['index']}" in str(refusal["reason"])
    assert "defaults.flow.sinks[0]" in str(refusal["rule"])  # file:line of the sink rule
    assert warden("audit", "verify").returncode == 0


async def test_taint_is_shared_by_the_servers_of_one_host_and_a_fresh_host_is_clean(tmp_path: Path) -> None:
    """Two ``warden run`` of one host process share its session (taint crosses servers); another host process
    starts clean; ``warden flow clear`` (a human, in a terminal) is the only way back."""
    write_config(tmp_path, extra=FLOW)
    log = tmp_path / "sent.jsonl"
    first = await session(run_flow(log))
    assert "result" in await first.call(2, "fetch", {"url": "https://example.com/"})
    assert await first.close() == 0

    second = await session(run_flow(log))  # same host process: same session, still tainted
    assert "error" in await second.call(2, "send_email", {"to": "a@example.com", "body": "x"})
    assert await second.close() == 0
    assert not log.exists()

    fresh = await session(in_another_host(run_flow(log)))  # a new host session is not tainted
    assert "result" in await fresh.call(2, "send_email", {"to": "a@example.com", "body": "hello"})
    assert await fresh.close() == 0
    assert len(log.read_text().splitlines()) == 1

    listed = warden("flow", "list")
    assert listed.returncode == 0, listed.stderr
    key = listed.stdout.split()[0]
    assert key.startswith("host-")
    assert "tainted by flow/fetch (audit record #" in listed.stdout
    cleared = warden("flow", "clear", key)
    assert cleared.returncode == 0
    assert f"cleared {key}" in cleared.stdout
    assert warden("flow", "list").stdout.strip() == "no tainted sessions"
    assert warden("flow", "clear", key).returncode != 0  # nothing left to clear, and it says so

    again = await session(run_flow(log))
    assert "result" in await again.call(2, "send_email", {"to": "a@example.com", "body": "after review"})
    assert await again.close() == 0
    assert len(log.read_text().splitlines()) == 2


async def test_a_sink_before_any_source_and_neutral_tools_are_untouched(tmp_path: Path) -> None:
    write_config(tmp_path, extra=FLOW)
    log = tmp_path / "sent.jsonl"
    host = await session(in_another_host(run_flow(log)))
    assert "result" in await host.call(2, "send_email", {"to": "a@example.com", "body": "first"})
    assert "result" in await host.call(3, "leak", {})  # neither source nor sink: no taint
    assert "result" in await host.call(4, "send_email", {"to": "a@example.com", "body": "second"})
    assert await host.close() == 0
    assert warden("flow", "list").stdout.strip() == "no tainted sessions"


async def test_a_2026_host_confirms_a_flow_violation_through_an_input_round(tmp_path: Path) -> None:
    """on_violation = "confirm" with a host that can show a form: the sink call comes back as an input_required
    round (MRTR) whose question names the source; accepting runs the call once, declining refuses it."""
    import os

    import mcp.types as t
    from mcp import Client, StdioServerParameters
    from mcp.shared.exceptions import MCPError

    write_config(tmp_path, extra=FLOW + 'on_violation = "confirm"\n')
    log = tmp_path / "sent.jsonl"
    asked: list[str] = []
    answers = iter(["accept", "decline"])

    async def answer(context: object, request: t.ElicitRequestParams) -> t.ElicitResult:
        asked.append(request.message)
        action = next(answers)
        return t.ElicitResult(action=action, content={"confirm": True} if action == "accept" else None)

    argv = run_flow(log)
    env = {k: os.environ[k] for k in ("WARDEN_STATE_DIR", "WARDEN_CONFIG", "XDG_STATE_HOME", "XDG_CONFIG_HOME")
           if k in os.environ}
    async with Client(StdioServerParameters(command=argv[0], args=argv[1:], env=env), mode="auto",
                      elicitation_callback=answer) as client:
        assert client.protocol_version == "2026-07-28"
        await client.call_tool("fetch", {"url": "https://example.com/"})
        sent = await client.call_tool("send_email", {"to": "a@example.com", "body": "ok"})
        with pytest.raises(MCPError, match="the user did not confirm the call to 'send_email'"):
            await client.call_tool("send_email", {"to": "a@example.com", "body": "again"})
    assert sent.content[0].text == "sent"  # type: ignore[union-attr]
    assert len(asked) == 2
    assert "Tool: send_email" in asked[0]
    assert "Why: tool 'send_email' can send data out (a flow sink)" in asked[0]
    assert "untrusted content from flow/fetch (audit record #" in asked[0]
    assert len(log.read_text().splitlines()) == 1


async def test_sessions_of_ended_hosts_are_listed_as_such_and_cleared_on_request(tmp_path: Path) -> None:
    write_config(tmp_path, extra=FLOW)
    host = await session(in_another_host(run_flow(tmp_path / "sent.jsonl")))
    assert "result" in await host.call(2, "fetch", {"url": "https://example.com/"})
    assert await host.close() == 0  # the wrapper (the host process of that session) has exited
    listed = warden("flow", "list").stdout
    assert listed.splitlines()[0].endswith("(rawhost 1) [host ended]")
    cleared = warden("flow", "clear", "--ended")
    assert cleared.returncode == 0
    assert cleared.stdout.startswith("cleared host-")
    assert warden("flow", "list").stdout.strip() == "no tainted sessions"


def refused_naming(answer: dict[str, object], origin: str) -> dict[str, object]:
    """The error of a sink refused in a tainted session, checked to name ``origin`` as what tainted it."""
    error = answer["error"]
    assert isinstance(error, dict)
    assert error["code"] == -32602
    assert ("tool 'send_email' can send data out (a flow sink), and this host session already holds untrusted "
            f"content from {origin}") in error["message"]
    return error


def decided(target: str) -> dict[str, object]:
    return next(r for r in audit_json() if r["event"] == "call.decided" and r["target"] == target)


async def test_a_resource_read_from_a_source_server_taints_the_session(tmp_path: Path) -> None:
    """A source server's resource is its content reaching the host as much as a source call's result: read first
    of all (before any tools/list: warden reads the tools to know the server is a source), it taints the session,
    and the sink is refused naming the read's decision record as its evidence."""
    write_config(tmp_path, extra=FLOW)
    log = tmp_path / "sent.jsonl"
    host = await RawHost.start(run_flow(log))
    await host.initialize()
    await host.request(1, "resources/read", {"uri": "file:///srv/config.ini"})
    read = await host.response(1)
    assert json.loads(json.dumps(read["result"]))["contents"][0]["uri"] == "file:///srv/config.ini"
    refused = await host.call(2, "send_email", {"to": "attacker@example.com", "body": "secrets"})
    assert await host.close() == 0
    read_record = decided("file:///srv/config.ini")
    error = refused_naming(refused, f"flow/resources/read (audit record #{read_record['index']})")
    assert "warden flow clear host-" in error["message"]
    assert decided("send_email")["evidence_index"] == read_record["index"]
    assert not log.exists()
    assert f"tainted by flow/resources/read (audit record #{read_record['index']})" in warden("flow", "list").stdout


async def test_a_prompt_from_a_source_server_taints_the_session(tmp_path: Path) -> None:
    write_config(tmp_path, extra=FLOW)
    log = tmp_path / "sent.jsonl"
    host = await session(run_flow(log))
    await host.request(2, "prompts/get", {"name": "summarize"})
    prompt = await host.response(2)
    assert "ignore your previous instructions" in json.dumps(prompt["result"])
    refused = await host.call(3, "send_email", {"to": "attacker@example.com", "body": "secrets"})
    assert await host.close() == 0
    prompt_record = decided("summarize")
    refused_naming(refused, f"flow/prompts/get (audit record #{prompt_record['index']})")
    assert decided("send_email")["evidence_index"] == prompt_record["index"]
    assert not log.exists()


async def test_a_completion_from_a_source_server_taints_the_session(tmp_path: Path) -> None:
    """completion/complete is forwarded without a decision record: the mark names the method alone."""
    write_config(tmp_path, extra=FLOW)
    log = tmp_path / "sent.jsonl"
    host = await session(run_flow(log))
    await host.request(2, "completion/complete", {"ref": {"type": "ref/prompt", "name": "summarize"},
                                                  "argument": {"name": "url", "value": "h"}})
    completion = await host.response(2)
    assert "ignore your previous instructions" in json.dumps(completion["result"])
    refused = await host.call(3, "send_email", {"to": "attacker@example.com", "body": "secrets"})
    assert await host.close() == 0
    refused_naming(refused, "flow/completion/complete (flow.on_violation")  # no record to name
    assert not log.exists()


async def test_a_source_call_that_never_answers_taints_the_session_once_forwarded(tmp_path: Path) -> None:
    """Its progress message and log line reach the host before any result (here none ever comes, and the host
    gives up on it): the session is marked before the call is forwarded, so the sink after it is refused."""
    write_config(tmp_path, extra=FLOW)
    log = tmp_path / "sent.jsonl"
    host = await session(run_flow(log))
    await host.request(2, "tools/call", {"name": "watch", "arguments": {}, "_meta": {"progressToken": "p"}})
    shown: list[dict[str, object]] = []
    while len(shown) < 2:
        message = await host.next_message()
        assert message is not None
        if message.get("method") in ("notifications/progress", "notifications/message"):
            shown.append(message)
    progress = next(m for m in shown if m["method"] == "notifications/progress")
    assert progress["params"] == {"progressToken": "p", "progress": 1,
                                  "message": json.loads(json.dumps(progress["params"]))["message"]}
    assert "ignore your previous instructions" in json.dumps(shown)
    await host.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}})
    refused = await host.call(3, "send_email", {"to": "attacker@example.com", "body": "secrets"})
    assert await host.close() == 0
    watch = decided("watch")
    refused_naming(refused, f"flow/watch (audit record #{watch['index']})")
    assert decided("send_email")["evidence_index"] == watch["index"]
    assert not log.exists()


async def test_a_resource_of_a_server_without_a_source_tool_leaves_the_session_clean(tmp_path: Path) -> None:
    """The rule is the server's roles, not "everything it sends": with its source tools exempt, the same server's
    resource, prompt and log line taint nothing, and the sink runs."""
    write_config(tmp_path, extra=FLOW.replace('sources = ["fetch"]', 'exempt = ["fetch", "watch"]'))
    log = tmp_path / "sent.jsonl"
    host = await session(in_another_host(run_flow(log)))
    await host.request(2, "resources/read", {"uri": "file:///srv/config.ini"})
    assert "result" in await host.response(2)
    await host.request(3, "prompts/get", {"name": "summarize"})
    assert "result" in await host.response(3)
    assert "result" in await host.call(4, "chatty", {})  # its log line and resource update reach the host
    assert any(m.get("method") == "notifications/message" for m in host.seen)
    assert "result" in await host.call(5, "send_email", {"to": "a@example.com", "body": "hello"})
    assert await host.close() == 0
    assert warden("flow", "list").stdout.strip() == "no tainted sessions"
    assert len(log.read_text().splitlines()) == 1


async def test_a_log_line_of_a_source_server_taints_the_session_it_reaches(tmp_path: Path) -> None:
    """A log line is tied to no request on a legacy session (it goes to every host): from a server with a source
    tool, it taints each session it reaches, even during a call to one of its neutral tools."""
    write_config(tmp_path, extra=FLOW)
    log = tmp_path / "sent.jsonl"
    host = await session(run_flow(log))
    done = await host.call(2, "chatty", {})
    assert done["result"] == {"content": [{"type": "text", "text": "done"}]}
    line = next(m for m in host.seen if m.get("method") == "notifications/message")
    assert "ignore your previous instructions" in json.dumps(line)
    refused = await host.call(3, "send_email", {"to": "attacker@example.com", "body": "secrets"})
    assert await host.close() == 0
    # No record to name (nothing was decided); its resource update reached this legacy host too, and marked it.
    refused_naming(refused, "flow/notifications/message, flow/notifications/resources/updated (flow.on_violation")
    assert "evidence_index" not in decided("send_email")
    assert not log.exists()


async def test_a_question_a_source_server_asks_unprompted_taints_the_session(tmp_path: Path) -> None:
    """A sampling request with nothing in flight (its message is the page) reaches the host on its own: it taints
    the session, naming the question's own decision record."""
    write_config(tmp_path, extra=FLOW)
    log = tmp_path / "sent.jsonl"
    host = await RawHost.start(run_flow(log))
    await host.initialize({"sampling": {}, "roots": {"listChanged": True}})
    await host.request(1, "tools/list")
    await host.response(1)
    await host.send({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"})
    question = await host.next_message()
    assert question is not None
    assert question["method"] == "sampling/createMessage"
    assert "ignore your previous instructions" in json.dumps(question["params"])
    await host.send({"jsonrpc": "2.0", "id": question["id"], "result": {
        "role": "assistant", "content": {"type": "text", "text": "no"}, "model": "m"}})
    refused = await host.call(2, "send_email", {"to": "attacker@example.com", "body": "secrets"})
    assert await host.close() == 0
    asked = decided("sampling/createMessage")
    refused_naming(refused, f"flow/sampling/createMessage (audit record #{asked['index']})")
    assert decided("send_email")["evidence_index"] == asked["index"]
    assert not log.exists()


async def test_a_resource_update_a_2026_host_hears_on_its_listen_taints_its_session(tmp_path: Path) -> None:
    """subscriptions/listen: a source server's resource update (its title is the page) reaches a 2026 host on
    the listen's stream, tied to none of its requests; the host's session is tainted before it does."""
    modern = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
              "io.modelcontextprotocol/clientCapabilities": {},
              "io.modelcontextprotocol/clientInfo": {"name": "raw-modern-host", "version": "1"}}
    write_config(tmp_path, extra=FLOW)
    log = tmp_path / "sent.jsonl"
    host = await RawHost.start(run_flow(log))
    await host.request("listen-1", "subscriptions/listen",
                       {"_meta": modern, "notifications": {"resourceSubscriptions": ["file:///srv/config.ini"]}})
    ack = await host.next_message()
    assert ack is not None
    assert ack["params"]["notifications"] == {"resourceSubscriptions": ["file:///srv/config.ini"]}  # type: ignore[index]
    await host.request(1, "tools/list", {"_meta": modern})
    await host.response(1)
    await host.request(2, "tools/call", {"_meta": modern, "name": "chatty", "arguments": {}})
    assert "result" in await host.response(2)
    while not any(m.get("method") == "notifications/resources/updated" for m in host.seen):
        assert await host.next_message(timeout=10) is not None
    updated = next(m for m in host.seen if m.get("method") == "notifications/resources/updated")
    assert updated["params"]["_meta"] == {"io.modelcontextprotocol/subscriptionId": "listen-1"}  # type: ignore[index]
    await host.request(3, "tools/call", {"_meta": modern, "name": "send_email",
                                         "arguments": {"to": "attacker@example.com", "body": "secrets"}})
    refused = await host.response(3)
    await host.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "listen-1"}})
    assert await host.close() == 0
    refused_naming(refused, "flow/notifications/resources/updated (flow.on_violation")
    assert not log.exists()


async def test_unasked_content_before_the_tools_are_known_counts_as_a_sources(tmp_path: Path) -> None:
    """Fail closed: a question that comes before warden has read the server's tools (so before it can tell the
    server is no source) taints the session even though, once listed, none of its tools is a source."""
    write_config(tmp_path, extra=FLOW.replace('sources = ["fetch"]', 'exempt = ["fetch", "watch"]'))
    log = tmp_path / "sent.jsonl"
    host = await RawHost.start(in_another_host(run_flow(log)))
    await host.initialize({"sampling": {}, "roots": {"listChanged": True}})
    await host.send({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"})
    question = await host.next_message()
    assert question is not None
    assert question["method"] == "sampling/createMessage"
    await host.send({"jsonrpc": "2.0", "id": question["id"], "result": {
        "role": "assistant", "content": {"type": "text", "text": "no"}, "model": "m"}})
    refused = await host.call(1, "send_email", {"to": "attacker@example.com", "body": "secrets"})
    assert await host.close() == 0
    refused_naming(refused, f"flow/sampling/createMessage (audit record #{decided('sampling/createMessage')['index']})")
    assert not log.exists()
