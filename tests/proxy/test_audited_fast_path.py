"""The engine-driven path with the audit log on (issue 13 item 4): a ``tools/call`` decided in the host's reader
leaves its decision record with the log's group commit and a continuation, and is forwarded by the gateway's one
forwarding task only once that record is durable (write-ahead) — while the host's reader goes on reading. Proved
in process against a real audit log on disk, with its ``fdatasync`` held or failed on the writer thread (the fault
injection of ``tests/audit/test_audit_writer_thread.py``), on trio's real clock (the log has a real thread)."""

from __future__ import annotations

import errno
import json
import os
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from tests.audit.test_audit_log import verify_dir
from tests.gateway_harness import TOOLS, MemoryConnector, ScriptedHost, gateway_in_process, legacy_server
from warden import audit
from warden.protocol.messages import INTERNAL_ERROR
from warden.transport.channel import MessageChannel

pytestmark = pytest.mark.trio

_real_fdatasync = os.fdatasync


class Gate:
    """``os.fdatasync`` on the audit log's writer thread, held while :attr:`shut` (so a commit is in progress and
    nothing it carries is durable), or failing with EIO while :attr:`eio`."""

    def __init__(self) -> None:
        self.shut = False
        self.eio = False
        self.entered = threading.Event()
        self._open = threading.Event()

    def __call__(self, fd: int) -> None:
        if threading.current_thread().name == "warden-audit-writer":
            if self.eio:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            if self.shut:
                self.entered.set()
                self._open.wait(30)
        _real_fdatasync(fd)

    def open(self) -> None:
        self.shut = False
        self._open.set()

    async def wait_entered(self) -> None:
        with trio.fail_after(10):
            while not self.entered.is_set():
                await trio.sleep(0.005)


@asynccontextmanager
async def audited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user_policy: str = "") -> AsyncIterator[
        tuple[ScriptedHost, MemoryConnector, Gate]]:
    """A listed gateway (calls of its tools take the engine-driven path) recording to a real audit log."""
    gate = Gate()
    monkeypatch.setattr(os, "fdatasync", gate)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    async with audit.open_audit_log(state) as log, gateway_in_process(tmp_path, legacy_server, log=log,
                                                                      user_policy=user_policy) as (host, connector):
        await host.initialize()
        await host.request("list", "tools/list", {})
        assert [t["name"] for t in (await host.response("list"))["result"]["tools"]] == [t["name"] for t in TOOLS]
        yield host, connector, gate
        gate.open()


def calls_seen(connector: MemoryConnector) -> list[dict[str, Any]]:
    return [m for m in connector.connections[-1].server.seen if m.get("method") == "tools/call"]


def inline(host: ScriptedHost) -> int:
    assert host.face is not None
    return host.face.statistics().inline


async def until(condition: Callable[[], bool]) -> None:
    with trio.fail_after(10):
        while not condition():
            await trio.sleep(0.005)


def records(tmp_path: Path) -> list[dict[str, Any]]:
    """The log's records, after the log verified as ``warden audit verify`` verifies it."""
    return verify_dir(tmp_path / "state")[1]


def outcome_of(all_records: list[dict[str, Any]], decided: dict[str, Any]) -> dict[str, Any]:
    [outcome] = [r for r in all_records if r["event"] == "call.outcome" and r["decision_index"] == decided["index"]]
    return outcome


async def test_write_ahead_an_audited_engine_driven_call_reaches_the_server_only_once_its_record_is_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """covers: write-ahead. The writer's ``fdatasync`` is held: the call is taken in the host's reader (no task),
    every task of warden goes idle, and the server has not seen it; the host's reader meanwhile answers a ping. The
    moment the commit completes, the call goes out and is answered."""
    async with audited(tmp_path, monkeypatch) as (host, connector, gate):
        before = inline(host)
        gate.shut = True
        await host.request(1, "tools/call", {"name": "echo", "arguments": {"text": "held"}})
        await gate.wait_entered()
        await until(lambda: inline(host) == before + 1)  # taken by the engine-driven path, not a task
        await host.request("ping", "ping", {})
        assert await host.response("ping")  # the host's reader was not held by the commit
        await trio.testing.wait_all_tasks_blocked()
        assert calls_seen(connector) == []
        gate.open()
        assert (await host.response(1))["result"]["content"][0]["text"] == "echo"
        assert [c["params"]["arguments"] for c in calls_seen(connector)] == [{"text": "held"}]
    decided = [r for r in records(tmp_path) if r["event"] == "call.decided" and r["target"] == "echo"]
    assert len(decided) == 1
    assert outcome_of(records(tmp_path), decided[0])["outcome"] == "ok"


async def test_write_ahead_eio_at_the_commit_answers_the_error_and_the_server_never_sees_the_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """covers: write-ahead. EIO from the decision record's ``fdatasync``: the host gets the error the task path
    gives (the log failed: -32603, its message and hint), and so does every later call; none reaches the
    server."""
    async with audited(tmp_path, monkeypatch) as (host, connector, gate):
        before = inline(host)
        gate.eio = True
        await host.request(1, "tools/call", {"name": "echo", "arguments": {}})
        first = (await host.response(1))["error"]
        assert inline(host) == before + 1
        assert first["code"] == INTERNAL_ERROR
        assert "Input/output error" in first["message"]
        assert first["data"]["hint"]
        await host.request(2, "tools/call", {"name": "echo", "arguments": {}})
        assert (await host.response(2))["error"] == first  # refused at once: the log stays failed
        await trio.testing.wait_all_tasks_blocked()
        assert calls_seen(connector) == []
        gate.eio = False


async def test_PX19_a_call_cancelled_while_its_record_is_committed_is_recorded_cancelled_and_never_sent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """covers: PX19, write-ahead. The host cancels an audited call while its decision record is being committed:
    once the record is durable, its outcome is CANCELLED (tied to it), the server never sees it, and the host gets
    no answer for it."""
    async with audited(tmp_path, monkeypatch) as (host, connector, gate):
        gate.shut = True
        await host.request("gone", "tools/call", {"name": "echo", "arguments": {"text": "cancelled"}})
        await gate.wait_entered()
        await host.notify("notifications/cancelled", {"requestId": "gone", "reason": "changed my mind"})
        await host.request("ping", "ping", {})
        assert await host.response("ping")  # the cancellation was read before the commit completed
        gate.open()
        await host.request("next", "tools/call", {"name": "echo", "arguments": {"text": "after"}})
        assert "result" in await host.response("next")
        assert [c["params"]["arguments"] for c in calls_seen(connector)] == [{"text": "after"}]
        assert not any(m.get("id") == "gone" for m in host.seen)
    log = records(tmp_path)
    decided = [r for r in log if r["event"] == "call.decided" and r["target"] == "echo"]
    assert len(decided) == 2
    cancelled = outcome_of(log, decided[0])
    assert cancelled["outcome"] == "cancelled"
    assert cancelled["index"] > decided[0]["index"]
    assert outcome_of(log, decided[1])["outcome"] == "ok"


async def test_write_ahead_many_audited_calls_in_one_read_are_all_answered_each_outcome_after_its_decision(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """covers: write-ahead. 48 calls arrive in one read: all take the engine-driven path, share few commits, are
    all answered; the log verifies, and every outcome record follows the decision record it is tied to."""
    async with audited(tmp_path, monkeypatch) as (host, connector, _gate):
        before = inline(host)
        lines = [json.dumps({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                             "params": {"name": "echo", "arguments": {"n": n}}}).encode() + b"\n" for n in range(48)]
        await host.send_raw(b"".join(lines))
        answers = [await host.response(n) for n in range(48)]
        assert all(a["result"]["content"][0]["text"] == "echo" for a in answers)
        assert inline(host) == before + 48
        assert sorted(c["params"]["arguments"]["n"] for c in calls_seen(connector)) == list(range(48))
    log = records(tmp_path)
    decided = [r for r in log if r["event"] == "call.decided" and r["target"] == "echo"]
    assert len(decided) == 48
    for record in decided:
        outcome = outcome_of(log, record)
        assert outcome["outcome"] == "ok"
        assert outcome["index"] > record["index"]


async def test_what_content_rules_redact_is_cut_from_an_audited_call_forwarded_after_its_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A call is forwarded once its record is durable, after the host's reader has decided the calls read with it:
    what a ``redact`` rule cuts out of its arguments is still cut out of what the server gets (and recorded by
    digest), the call next to it passes whole."""
    rule = '[[defaults.content.rules]]\nname = "ticket"\npattern = "TICKET-[0-9]+"\non = "arguments"\n' \
           'action = "redact"\n'
    async with audited(tmp_path, monkeypatch, user_policy=rule) as (host, connector, _gate):
        before = inline(host)
        await host.send_raw(b"".join(json.dumps({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
            "name": "echo", "arguments": {"body": body}}}).encode() + b"\n"
            for n, body in enumerate(["fix TICKET-12 now", "plain"])))
        assert ["result" in await host.response(n) for n in range(2)] == [True, True]
        assert inline(host) == before + 2
        assert [c["params"]["arguments"]["body"] for c in calls_seen(connector)] == [
            "fix [REDACTED:ticket] now", "plain"]
    decided = [r for r in records(tmp_path) if r["event"] == "call.decided" and r["target"] == "echo"]
    assert [r["redactions"][0]["rule"] for r in decided if r.get("redactions")] == ["ticket"]


async def test_an_outcome_record_is_built_only_after_its_answer_went_to_the_host(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's answer never waits for its outcome record: on both paths — a call the face runs in a task (the
    first, before any list: its list is read first) and one it takes on the engine-driven path (the second) — the
    record is queued only once the response was handed to the host's channel."""
    order: list[tuple[str, object]] = []
    real_send = MessageChannel.send
    real_later = audit.AuditLog.append_later

    async def send(self: MessageChannel, message: bytes, **kwargs: Any) -> None:
        if self.name == "host" and b'"result"' in message:
            order.append(("answer", json.loads(message)["id"]))
        await real_send(self, message, **kwargs)

    def append_later(self: audit.AuditLog, record: audit.Record | audit.FilledRecord) -> None:
        whole = record.record() if isinstance(record, audit.FilledRecord) else record
        if whole.event is audit.Event.CALL_OUTCOME:
            order.append(("outcome", whole.decision_index))
        real_later(self, record)

    monkeypatch.setattr(MessageChannel, "send", send)
    monkeypatch.setattr(audit.AuditLog, "append_later", append_later)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    async with audit.open_audit_log(state) as log, gateway_in_process(tmp_path, legacy_server, log=log) as (
            host, _):
        assert host.face is not None
        await host.initialize()
        await host.request("tasked", "tools/call", {"name": "echo", "arguments": {}})
        assert "result" in await host.response("tasked")
        await host.request("inline", "tools/call", {"name": "echo", "arguments": {}})
        assert "result" in await host.response("inline")
        assert (host.face.statistics().tasks, host.face.statistics().inline) == (2, 1)  # initialize, "tasked"
        await until(lambda: sum(kind == "outcome" for kind, _ in order) == 2)
    decided = [r["index"] for r in records(tmp_path) if r["event"] == "call.decided" and r["target"] == "echo"]
    assert len(decided) == 2
    for id_, index in zip(("tasked", "inline"), decided, strict=True):
        assert order.index(("answer", id_)) < order.index(("outcome", index))


async def test_PX19_a_call_whose_host_left_while_its_record_was_committed_is_recorded_cancelled_and_never_sent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """covers: PX19, write-ahead. The host leaves, and the gateway stops with it, while an audited call's decision
    record is being committed: once the record is durable, the call gets its CANCELLED outcome (before: it was
    queued for a forwarding task that was gone, and the decision was left without an outcome), and the server
    never sees it."""
    gate = Gate()
    monkeypatch.setattr(os, "fdatasync", gate)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    servers: list[MemoryConnector] = []
    async with audit.open_audit_log(state) as log:
        leaving = trio.Event()

        async def call_then_leave() -> None:
            async with gateway_in_process(tmp_path, legacy_server, log=log) as (host, connector):
                servers.append(connector)
                await host.initialize()
                await host.request("list", "tools/list", {})
                await host.response("list")
                gate.shut = True
                await host.request(1, "tools/call", {"name": "echo", "arguments": {"text": "left"}})
                await gate.wait_entered()
                leaving.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call_then_leave)
            await leaving.wait()
            await trio.testing.wait_all_tasks_blocked(cushion=0.05)  # the gateway stopped; its end waits on the log
            gate.open()
        await log.checkpoint()  # runs on the writer after the commit that was held
        await trio.testing.wait_all_tasks_blocked()
    assert calls_seen(servers[0]) == []
    log_records = records(tmp_path)
    [decided] = [r for r in log_records if r["event"] == "call.decided" and r["target"] == "echo"]
    outcome = outcome_of(log_records, decided)
    assert (outcome["outcome"], outcome["error"]) == ("cancelled", "cancelled by the host")
