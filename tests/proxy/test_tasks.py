"""Tasks through ``warden run`` (stdio) and ``warden run --http``, against the task fixture
(tests/fixtures/task_server.py) in its sandbox: both forms (the 2026-07-28 extension and the 2025-11-25
experimental capability), ownership per host, refusals of what a host does not own, and the outcome records.

The fixture, like any server without an authorization context, serves every task to whoever names it: each
refusal below is warden's (the fixture would have answered).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any, Final

import trio

from tests.http_server.warden_http import META, MODERN, WardenHttp, sse_messages, warden_http
from tests.support import FIXTURES, PYTHON, WARDEN, RawHost, through_warden, write_config

TASK_SERVER: Final = [PYTHON, str(FIXTURES / "task_server.py")]
EXT: Final = "io.modelcontextprotocol/tasks"
WITH_TASKS: Final = {"extensions": {EXT: {}}}


def meta(capabilities: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": capabilities if capabilities is not None else WITH_TASKS,
            "io.modelcontextprotocol/clientInfo": {"name": "task-host", "version": "1"}, **extra}


def audit_json() -> list[dict[str, Any]]:
    out = subprocess.run([WARDEN, "audit", "show", "--json"], capture_output=True, text=True, timeout=60, check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def task_outcomes() -> dict[str, dict[str, Any]]:
    """The outcome record of each task's end, by task id, checked to complete the ``call.decided`` of the call
    that created the task (whose first outcome is the creation)."""
    records = audit_json()
    by_index = {r["index"]: r for r in records}
    ended = {}
    for record in records:
        if record["event"] == "call.outcome" and str(record.get("target", "")).startswith("task "):
            decided = by_index[record["decision_index"]]
            assert (decided["event"], decided["method"]) == ("call.decided", "tools/call"), decided
            assert any(r["event"] == "call.outcome" and r.get("decision_index") == record["decision_index"]
                       and "target" not in r for r in records), "the creation's own outcome is missing"
            ended[record["target"].removeprefix("task ")] = record
    return ended


class ModernHost:
    """A 2026 host on ``warden run``'s stdio."""

    def __init__(self, raw: RawHost) -> None:
        self.raw = raw
        self._id = 0

    async def ask(self, method: str, params: dict[str, Any] | None = None,
                  capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
        self._id += 1
        await self.raw.request(self._id, method, {**(params or {}), "_meta": meta(capabilities)})
        return await self.raw.response(self._id)

    async def until_terminal(self, task_id: str) -> dict[str, Any]:
        with trio.fail_after(20):
            while True:
                answer = await self.ask("tasks/get", {"taskId": task_id})
                if answer["result"]["status"] in ("completed", "failed", "cancelled"):
                    return answer["result"]
                await trio.sleep(answer["result"].get("pollIntervalMs", 100) / 1000)


async def test_MS33_a_2026_task_is_created_polled_and_recorded_through_stdio(tmp_path: Path) -> None:
    """covers: MS33. A 2026 host that declares the tasks extension on a call gets the server's
    ``CreateTaskResult`` (warden declared the extension upstream on that request only, since both sides did); it
    polls with ``tasks/get`` until ``completed`` and gets the inlined result; a call that does not declare it gets
    the tool's result at once (the server was not offered a task). Cancelling a running task settles it to
    ``cancelled``. Each task's end is recorded against the call's decision."""
    write_config(tmp_path)
    host = ModernHost(await RawHost.start(through_warden(TASK_SERVER, "--name", "tasks")))
    discovered = await host.ask("server/discover")
    assert discovered["result"]["capabilities"]["extensions"] == {EXT: {}}
    created = (await host.ask("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.3, "label": "a"}}))
    task = created["result"]
    assert (task["resultType"], task["status"]) == ("task", "working"), task
    done = await host.until_terminal(task["taskId"])
    assert done["status"] == "completed"
    assert done["result"]["content"][0]["text"] == "computed a"

    plain = await host.ask("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "b"}},
                           capabilities={})
    assert plain["result"]["resultType"] == "complete"
    assert "taskId" not in plain["result"]

    running = (await host.ask("tools/call", {"name": "slow_compute", "arguments": {"seconds": 30}}))["result"]
    ack = await host.ask("tasks/cancel", {"taskId": running["taskId"]})
    assert ack["result"] == {"resultType": "complete"}
    assert (await host.until_terminal(running["taskId"]))["status"] == "cancelled"

    failed = (await host.ask("tools/call", {"name": "protocol_error_job", "arguments": {}}))["result"]
    assert (await host.until_terminal(failed["taskId"]))["error"]["code"] == -32603
    assert await host.raw.close() == 0
    ended = task_outcomes()
    assert ended[task["taskId"]]["outcome"] == "ok"
    assert ended[task["taskId"]]["result_digest"].startswith("sha256:")
    assert ended[running["taskId"]]["outcome"] == "cancelled"
    assert ended[failed["taskId"]]["outcome"] == "error"
    assert ended[failed["taskId"]]["error"] == "the job crashed"


async def test_LC17_task_requests_a_2026_host_may_not_make_are_refused_through_stdio(tmp_path: Path) -> None:
    """covers: LC17. A task id never created, an oversized or non-string one, a task request that does not
    declare the extension (-32021, as SEP-2663 gates them), ``tasks/result`` (not a 2026 method) — each refused
    by warden with a clear error. A server that answers with a task a call did not declare the extension for gets
    an invalid-result error, never a task handed to the host."""
    write_config(tmp_path)
    host = ModernHost(await RawHost.start(through_warden(TASK_SERVER, "--name", "tasks")))
    never = await host.ask("tasks/get", {"taskId": "786512e2-9e0d-44bd-8f29-789f320fe840"})
    assert never["error"]["code"] == -32602
    assert "unknown task" in never["error"]["message"]
    for bad in ("x" * 300, 12345, "tab\tid", None):
        answer = await host.ask("tasks/get", {"taskId": bad})
        assert answer["error"]["code"] == -32602, answer
        assert "taskId must be" in answer["error"]["message"]
    undeclared = await host.ask("tasks/get", {"taskId": "anything"}, capabilities={})
    assert undeclared["error"]["code"] == -32021
    assert undeclared["error"]["data"] == {"requiredCapabilities": {"extensions": {EXT: {}}}}
    assert (await host.ask("tasks/result", {"taskId": "anything"}))["error"]["code"] == -32601
    rogue = await host.ask("tools/call", {"name": "rogue_task", "arguments": {}}, capabilities={})
    assert rogue["error"]["code"] == -32603
    assert "unrecognised resultType 'task'" in rogue["error"]["message"]
    assert await host.raw.close() == 0


async def legacy_host(argv: list[str], version: str = "2025-11-25") -> tuple[RawHost, dict[str, Any]]:
    host = await RawHost.start(argv)
    await host.request(0, "initialize", {"protocolVersion": version, "capabilities": {},
                                         "clientInfo": {"name": "legacy-task-host", "version": "1"}})
    answer = await host.response(0)
    await host.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    return host, answer["result"]


async def test_a_2025_11_25_task_is_created_fetched_listed_and_cancelled_through_stdio(tmp_path: Path) -> None:
    """The experimental 2025-11-25 form end to end: the server's ``tasks`` capability is shown, a call with a
    ``task`` param gets ``{"task": ...}``, ``tasks/get`` polls, ``tasks/result`` returns the tool result,
    ``tasks/list`` lists the host's tasks, ``tasks/cancel`` cancels, ``notifications/tasks/status`` reaches the
    host; the completed and cancelled ends are recorded against their calls."""
    write_config(tmp_path)
    host, init = await legacy_host(through_warden([*TASK_SERVER, "--legacy"], "--name", "tasks"))
    assert init["capabilities"]["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    await host.request(1, "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.2, "label": "l"},
                                         "task": {"ttl": 60000}})
    task = (await host.response(1))["result"]["task"]
    await host.request(2, "tasks/result", {"taskId": task["taskId"]})
    result = (await host.response(2))["result"]
    assert result["content"][0]["text"] == "computed l"
    assert any(m.get("method") == "notifications/tasks/status" and m["params"]["taskId"] == task["taskId"]
               for m in host.seen)
    await host.request(3, "tasks/get", {"taskId": task["taskId"]})
    assert (await host.response(3))["result"]["status"] == "completed"
    await host.request(4, "tools/call", {"name": "slow_compute", "arguments": {"seconds": 30}, "task": {}})
    running = (await host.response(4))["result"]["task"]
    await host.request(5, "tasks/list", {})
    assert {t["taskId"] for t in (await host.response(5))["result"]["tasks"]} == {task["taskId"], running["taskId"]}
    await host.request(6, "tasks/cancel", {"taskId": running["taskId"]})
    assert (await host.response(6))["result"]["status"] == "cancelled"
    await host.request(7, "tasks/result", {"taskId": "never-created"})
    assert (await host.response(7))["error"]["code"] == -32602
    assert await host.close() == 0
    ended = task_outcomes()
    assert ended[task["taskId"]]["outcome"] == "ok"
    assert ended[running["taskId"]]["outcome"] == "cancelled"


async def test_tasks_are_not_carried_to_a_host_of_another_version(tmp_path: Path) -> None:
    """A 2025-06-18 host (no tasks in its version) is not shown the server's ``tasks`` capability, and a call
    with a ``task`` param is refused before anything is decided or forwarded."""
    write_config(tmp_path)
    host, init = await legacy_host(through_warden([*TASK_SERVER, "--legacy"], "--name", "tasks"), "2025-06-18")
    assert "tasks" not in init["capabilities"]
    await host.request(1, "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0}, "task": {}})
    refused = await host.response(1)
    assert refused["error"]["code"] == -32602
    assert "no task-augmented tools/call" in refused["error"]["message"]
    await host.request(2, "tasks/list", {})
    assert (await host.response(2))["error"]["code"] == -32601
    assert await host.close() == 0


async def session_ask(w: WardenHttp, session: str, id_: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    response = await w.post({"jsonrpc": "2.0", "id": id_, "method": method, "params": params},
                            w.headers(mcp_session_id=session, mcp_protocol_version="2025-11-25"))
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("application/json"):
        answer: dict[str, Any] = response.json()
        return answer
    return next(m for m in sse_messages(response.text) if m.get("id") == id_)


async def test_a_task_is_its_creators_alone_over_http(tmp_path: Path) -> None:
    """Two 2025-11-25 HTTP sessions on one server: session B naming A's task (``tasks/get``, ``tasks/result``,
    ``tasks/cancel``) is refused exactly like an id never created, and B's ``tasks/list`` omits A's task, while A
    gets all of it (the fixture itself would have served B)."""
    write_config(tmp_path)
    async with warden_http([*TASK_SERVER, "--legacy"], cwd=tmp_path) as w:
        a = await w.initialize()
        b = await w.initialize()
        created = await session_ask(w, a, 1, "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.2},
                                                            "task": {}})
        task_id = created["result"]["task"]["taskId"]
        for i, method in enumerate(("tasks/get", "tasks/result", "tasks/cancel"), start=2):
            refused = await session_ask(w, b, i, method, {"taskId": task_id})
            assert refused["error"]["code"] == -32602, refused
            assert "unknown task" in refused["error"]["message"]
        assert (await session_ask(w, b, 5, "tasks/list", {}))["result"]["tasks"] == []
        assert [t["taskId"] for t in (await session_ask(w, a, 6, "tasks/list", {}))["result"]["tasks"]] == [task_id]
        result = await session_ask(w, a, 7, "tasks/result", {"taskId": task_id})
        assert result["result"]["content"][0]["text"] == "computed "


async def test_a_2026_task_over_http(tmp_path: Path) -> None:
    """The 2026 side of ``warden run --http``: a task is created, polled to its result and its end recorded; an id
    never created is refused (``Mcp-Name`` carries the task id, HM05)."""
    write_config(tmp_path)
    async with warden_http(TASK_SERVER, cwd=tmp_path) as w:
        capabilities = {**META, "io.modelcontextprotocol/clientCapabilities": WITH_TASKS}

        async def ask(id_: int, method: str, params: dict[str, Any], name: str) -> dict[str, Any]:
            response = await w.post({"jsonrpc": "2.0", "id": id_, "method": method,
                                     "params": {**params, "_meta": capabilities}},
                                    w.headers(mcp_protocol_version=MODERN, mcp_method=method, mcp_name=name))
            answer: dict[str, Any] = response.json()
            return answer

        created = await ask(1, "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.2}}, "slow_compute")
        task_id = created["result"]["taskId"]
        with trio.fail_after(20):
            while (got := await ask(2, "tasks/get", {"taskId": task_id}, task_id))["result"]["status"] == "working":
                await trio.sleep(0.1)
        assert got["result"]["status"] == "completed"
        never = await ask(3, "tasks/get", {"taskId": "never-created"}, "never-created")
        assert never["error"]["code"] == -32602
    assert task_outcomes()[task_id]["outcome"] == "ok"


async def test_MS11_a_task_keeps_its_progress_token_until_it_ends(tmp_path: Path) -> None:
    """covers: MS11. A 2025-11-25 call with a ``progressToken`` becomes a task; the server keeps reporting
    progress on warden's token after the ``CreateTaskResult``, and warden keeps routing it to the host under the
    host's own token until the task is terminal."""
    write_config(tmp_path)
    host, _ = await legacy_host(through_warden([*TASK_SERVER, "--legacy"], "--name", "tasks"))
    await host.request(1, "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.6}, "task": {},
                                         "_meta": {"progressToken": "host-token"}})
    task = (await host.response(1))["result"]["task"]
    answered_at = len(host.seen)
    await host.request(2, "tasks/result", {"taskId": task["taskId"]})
    await host.response(2)
    after = [m for m in host.seen[answered_at:] if m.get("method") == "notifications/progress"]
    assert after, "no progress reached the host after the task was created"
    assert {m["params"]["progressToken"] for m in after} == {"host-token"}
    assert await host.close() == 0


async def test_EL14_a_waiting_tasks_question_is_decided_once_however_often_it_is_polled(tmp_path: Path) -> None:
    """A 2026 task waiting for input shows its question in every ``tasks/get``: warden decides, records and rates
    it once (with ``elicitation_rate = "1/min"`` the owner polls it five times and is shown it each time), so
    polling never exhausts the rate. A second task's question is a new one, and over the rate: its ``tasks/get``
    is refused -32602 naming the rate's setting, and the host is shown none of it."""
    write_config(tmp_path, extra='[servers.tasks.capabilities]\nelicitation_rate = "1/min"\n')
    host = ModernHost(await RawHost.start(through_warden(TASK_SERVER, "--name", "tasks")))
    asks = {**WITH_TASKS, "elicitation": {"form": {}}}
    first = (await host.ask("tools/call", {"name": "confirm_delete", "arguments": {}}, capabilities=asks))["result"]
    shown = []
    with trio.fail_after(20):
        while len(shown) < 5:
            polled = (await host.ask("tasks/get", {"taskId": first["taskId"]}, capabilities=asks))["result"]
            if polled["status"] == "input_required":
                shown.append(polled["inputRequests"])
            time.sleep(0.05)
    assert [list(s) for s in shown] == [["confirm"]] * 5
    assert shown[0]["confirm"]["params"]["message"] == "[tasks] Delete it?"  # EL06: which server asks
    undeclared = await host.ask("tasks/get", {"taskId": first["taskId"]})  # PX01: decided for who polls
    assert undeclared["error"]["code"] == -32602
    assert "Delete it?" not in json.dumps(undeclared)
    second = (await host.ask("tools/call", {"name": "confirm_delete", "arguments": {}}, capabilities=asks))["result"]
    with trio.fail_after(20):
        while True:
            refused = await host.ask("tasks/get", {"taskId": second["taskId"]}, capabilities=asks)
            if "error" in refused:
                break
            assert refused["result"]["status"] == "working", refused
            time.sleep(0.05)
    assert refused["error"]["code"] == -32602
    assert "(servers.tasks.capabilities.elicitation_rate)" in refused["error"]["message"]
    assert "Delete it?" not in json.dumps(refused)
    assert await host.raw.close() == 0
    questions = [r for r in audit_json() if r["event"] == "call.decided" and r.get("method") == "elicitation/create"]
    assert [r["decision"] for r in questions] == ["allow", "deny", "deny"], questions


async def test_PX01_a_task_shows_questions_only_while_waiting_and_notifications_carry_status_alone(
        tmp_path: Path) -> None:
    """A server that puts a question on a ``working`` task's ``tasks/get``, or inlines a question and a result
    in its ``notifications/tasks``, reaches the host with neither: questions pass the policy only on a task
    waiting for input, results only through ``tasks/get`` and its content rules; the status still arrives."""
    write_config(tmp_path)
    host = ModernHost(await RawHost.start(through_warden(TASK_SERVER, "--name", "tasks")))
    asks = {**WITH_TASKS, "elicitation": {"form": {}}}
    task = (await host.ask("tools/call", {"name": "stray_questions", "arguments": {}}, capabilities=asks))["result"]
    time.sleep(0.6)  # the server's notification comes 0.3 s after the task
    polled = (await host.ask("tasks/get", {"taskId": task["taskId"]}, capabilities=asks))["result"]
    assert polled["status"] == "working"
    assert "inputRequests" not in polled
    await host.ask("tasks/cancel", {"taskId": task["taskId"]}, capabilities=asks)
    assert await host.raw.close() == 0
    notified = [m for m in host.raw.seen if m.get("method") == "notifications/tasks"]
    assert "STRAY" not in json.dumps(host.raw.seen)
    assert [(m["params"]["taskId"], m["params"]["status"]) for m in notified] == [(task["taskId"], "working")]
