"""Tasks behind ``warden serve``: two task servers (tests/fixtures/task_server.py, each in its sandbox) that hand
out the *same* ids (``--counted-ids``: ``task-1``, ``task-2``, ...), behind one stdio endpoint and one HTTP one.

The hub shows each server's task ids as ``SERVER__ID``, as it shows tool names, so the two servers' ``task-1``
never meet: a ``tasks/*`` request reaches the server its id names, with that server's own id, and every id the
host is shown (results, lists, status notifications, ``related-task`` metadata) carries its server's name. Each
server's gateway still decides which host owns which task, as under ``warden run``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Final

import trio
from hypothesis import given
from hypothesis import strategies as st

from tests.http_server.test_principals import add_token, as_
from tests.http_server.warden_http import MODERN, warden_http
from tests.proxy.test_tasks import EXT, TASK_SERVER, WITH_TASKS, ModernHost, audit_json, legacy_host
from tests.support import WARDEN, RawHost
from warden.gateway.tasks import TASK_NOTIFICATIONS, shown_task_ids
from warden.protocol.messages import encode_notification, encode_request

RELATED: Final = "io.modelcontextprotocol/related-task"
SERVE: Final = [WARDEN, "serve", "--stdio"]


def two_task_servers(config: Path, *extra: str) -> None:
    """``a`` and ``b``: the task fixture twice, each counting its task ids from 1."""
    with config.open("a") as out:
        for name in ("a", "b"):
            argv = [*TASK_SERVER, "--counted-ids", *extra]
            out.write(f"\n[servers.{name}]\ncommand = {json.dumps(argv[0])}\nargs = {json.dumps(argv[1:])}\n")


async def test_2025_11_25_tasks_of_two_servers_with_the_same_ids_never_meet(trusting: Path) -> None:
    """A 2025-11-25 host is offered tasks; ``a`` and ``b`` each create their ``task-1``, shown ``a__task-1`` and
    ``b__task-1``; ``tasks/result``, ``tasks/get``, ``tasks/cancel`` and the status notifications each reach and
    name their own server's task, ``tasks/list`` lists both servers' tasks, and each task's end is recorded
    against the server's own id. An id without a server's name, one naming a server the host never used, one the
    server never created and a malformed one are each refused, and none reaches a server."""
    two_task_servers(trusting, "--legacy")
    host, init = await legacy_host(SERVE)
    assert init["capabilities"]["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    await host.request(1, "tools/call", {"name": "a__slow_compute", "arguments": {"seconds": 0.2, "label": "A"},
                                         "task": {}})
    await host.request(2, "tools/call", {"name": "b__slow_compute", "arguments": {"seconds": 30}, "task": {}})
    a_task = (await host.response(1))["result"]["task"]
    b_task = (await host.response(2))["result"]["task"]
    assert (a_task["taskId"], b_task["taskId"]) == ("a__task-1", "b__task-1")

    await host.request(3, "tasks/result", {"taskId": "a__task-1"})
    result = (await host.response(3))["result"]
    assert result["content"][0]["text"] == "computed A"
    assert result["_meta"][RELATED] == {"taskId": "a__task-1"}
    await host.request(4, "tasks/get", {"taskId": "b__task-1"})
    polled = (await host.response(4))["result"]
    assert (polled["taskId"], polled["status"]) == ("b__task-1", "working")
    await host.request(5, "tasks/list", {})
    assert sorted(t["taskId"] for t in (await host.response(5))["result"]["tasks"]) == ["a__task-1", "b__task-1"]
    await host.request(6, "tasks/cancel", {"taskId": "b__task-1"})
    cancelled = (await host.response(6))["result"]
    assert (cancelled["taskId"], cancelled["status"]) == ("b__task-1", "cancelled")

    for i, (task_id, message) in enumerate((("task-1", "unknown task"), ("c__task-1", "unknown task"),
                                            ("a__task-9", "unknown task"), (7, "taskId must be")), start=7):
        await host.request(i, "tasks/get", {"taskId": task_id})
        refused = await host.response(i)
        assert refused["error"]["code"] == -32602, refused
        assert message in refused["error"]["message"]
    statuses = {(m["params"]["taskId"], m["params"]["status"]) for m in host.seen
                if m.get("method") == "notifications/tasks/status"}
    assert {("a__task-1", "completed"), ("b__task-1", "cancelled")} <= statuses
    assert all(task_id.startswith(("a__", "b__")) for task_id, _ in statuses)
    assert await host.close() == 0
    outcomes = [r for r in audit_json() if r["event"] == "call.outcome" and r.get("target") == "task task-1"]
    assert sorted((r["server_name"], r["outcome"]) for r in outcomes) == [("a", "ok"), ("b", "cancelled")]


async def test_2026_tasks_of_two_servers_are_polled_to_their_own_results(trusting: Path) -> None:
    """A 2026 host is offered the tasks extension by the hub; a call to each server that declares it gets a
    ``CreateTaskResult`` whose id names the server, ``tasks/get`` polls each to its own result, ``tasks/cancel``
    reaches the right one, and the methods a 2026 host does not have (``tasks/result``, ``tasks/list``) are not
    found. A call that does not declare the extension gets the tool's result at once."""
    two_task_servers(trusting)
    host = ModernHost(await RawHost.start(SERVE))
    discovered = (await host.ask("server/discover"))["result"]
    assert discovered["capabilities"]["extensions"] == {EXT: {}}
    a_task = (await host.ask("tools/call", {"name": "a__slow_compute", "arguments": {"seconds": 0.2,
                                                                                     "label": "A"}}))["result"]
    b_task = (await host.ask("tools/call", {"name": "b__slow_compute", "arguments": {"seconds": 0.2,
                                                                                     "label": "B"}}))["result"]
    assert (a_task["resultType"], a_task["taskId"], b_task["taskId"]) == ("task", "a__task-1", "b__task-1")
    a_done, b_done = await host.until_terminal("a__task-1"), await host.until_terminal("b__task-1")
    assert (a_done["taskId"], a_done["result"]["content"][0]["text"]) == ("a__task-1", "computed A")
    assert (b_done["taskId"], b_done["result"]["content"][0]["text"]) == ("b__task-1", "computed B")

    running = (await host.ask("tools/call", {"name": "b__slow_compute", "arguments": {"seconds": 30}}))["result"]
    assert running["taskId"] == "b__task-2"
    assert (await host.ask("tasks/cancel", {"taskId": "b__task-2"}))["result"] == {"resultType": "complete"}
    assert (await host.until_terminal("b__task-2"))["status"] == "cancelled"
    assert "error" in await host.ask("tasks/get", {"taskId": "a__task-2"})  # a has no second task

    for method in ("tasks/result", "tasks/list"):
        assert (await host.ask(method, {"taskId": "a__task-1"}))["error"]["code"] == -32601
    plain = await host.ask("tools/call", {"name": "a__slow_compute", "arguments": {"seconds": 0, "label": "now"}},
                           capabilities={})
    assert (plain["result"]["resultType"], plain["result"]["content"][0]["text"]) == ("complete", "computed now")
    assert await host.raw.close() == 0


async def test_a_task_behind_serve_http_is_its_principals_alone(trusting: Path, tmp_path: Path) -> None:
    """Over HTTP, alice's task (shown ``a__task-1``) is refused to bob exactly like an id never created, for
    every task request, while alice polls it to its result; ``Mcp-Name`` carries the shown id (HM05)."""
    two_task_servers(trusting)
    alice, bob = add_token("alice"), add_token("bob")
    async with warden_http([], cwd=tmp_path) as w:
        async def ask(token: str, id_: int, method: str, params: dict[str, Any], name: str) -> dict[str, Any]:
            meta = {"io.modelcontextprotocol/protocolVersion": MODERN,
                    "io.modelcontextprotocol/clientCapabilities": WITH_TASKS}
            response = await w.post({"jsonrpc": "2.0", "id": id_, "method": method,
                                     "params": {**params, "_meta": meta}},
                                    as_(w, token, mcp_protocol_version=MODERN, mcp_method=method, mcp_name=name))
            answer: dict[str, Any] = response.json()
            assert response.status_code == (400 if "error" in answer else 200), response.text
            return answer

        created = await ask(alice, 1, "tools/call", {"name": "a__slow_compute", "arguments": {"seconds": 0.3}},
                            "a__slow_compute")
        task_id = created["result"]["taskId"]
        assert task_id == "a__task-1"
        for i, method in enumerate(("tasks/get", "tasks/update", "tasks/cancel"), start=2):
            refused = await ask(bob, i, method, {"taskId": task_id, "inputResponses": {}}, task_id)
            assert refused["error"]["code"] == -32602, refused
            assert "unknown task" in refused["error"]["message"]
        with trio.fail_after(20):
            while (got := await ask(alice, 9, "tasks/get", {"taskId": task_id}, task_id))["result"]["status"] \
                    == "working":
                await trio.sleep(0.1)
        assert (got["result"]["taskId"], got["result"]["status"]) == (task_id, "completed")


KEYS: Final = st.sampled_from(["taskId", "task", "tasks", "_meta", RELATED, "status", "x"]) | st.text(max_size=4)
JSON: Final = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4),
                           max_leaves=20)


def renamed_where_expected(params: dict[str, Any], whole: bool, prefix: str) -> dict[str, Any]:
    """The test's own statement of where a task id is shown renamed (the oracle for the property below)."""
    out = copy.deepcopy(params)
    meta = out.get("_meta")
    spots = [meta.get(RELATED)] if isinstance(meta, dict) else []
    if whole:
        listed = out.get("tasks")
        spots += [out, out.get("task"), *(listed if isinstance(listed, list) else [])]
    for spot in spots:
        if isinstance(spot, dict) and isinstance(spot.get("taskId"), str):
            spot["taskId"] = prefix + spot["taskId"]
    return out


@given(method=st.sampled_from(["notifications/tasks", "notifications/tasks/status", "notifications/message",
                               "elicitation/create"]),
       params=st.dictionaries(KEYS, JSON, max_size=5), escaped=st.booleans(), ascii_only=st.booleans())
def test_every_task_id_a_message_can_carry_is_shown_under_its_server_and_nothing_else_changes(
        method: str, params: dict[str, Any], escaped: bool, ascii_only: bool) -> None:
    """Whatever a server's message holds, each task id the hub shows the host is ``SERVER__ID`` (a status
    notification's own and its task's, a list's, any ``related-task``), however its text spells the key
    (``task\\u0049d``); everything else decodes as it was, and a message with no task id is passed on byte for
    byte."""
    text = json.dumps(params, ensure_ascii=ascii_only)
    if escaped:
        text = text.replace('"taskId"', '"task\\u0049d"')
    body = text.encode()
    message = encode_notification(method, body) if method.startswith("notifications/") \
        else encode_request(b'"w-1"', method, body)
    shown = shown_task_ids(message, "srv__")
    expected = renamed_where_expected(params, method in TASK_NOTIFICATIONS, "srv__")
    assert json.loads(shown)["params"] == expected
    if expected == params:
        assert shown == message


@given(st.binary(max_size=200) | st.binary(max_size=200).map(lambda b: b'{"params":{"taskId":' + b))
def test_any_bytes_are_shown_or_passed_on_never_an_error(data: bytes) -> None:
    assert isinstance(shown_task_ids(data, "srv__"), bytes)
