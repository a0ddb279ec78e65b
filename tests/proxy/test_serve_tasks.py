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
import sys
from pathlib import Path
from typing import Any, Final

import trio
from hypothesis import given
from hypothesis import strategies as st

from tests.http_server.test_principals import add_token, as_
from tests.http_server.warden_http import MODERN, warden_http
from tests.proxy.test_tasks import EXT, TASK_SERVER, WITH_TASKS, ModernHost, audit_json, legacy_host
from tests.support import FIXTURES, PYTHON, RAWSERVER, WARDEN, RawHost
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


async def test_no_server_can_take_serve_down_with_a_message_nested_deeper_than_it_can_read(trusting: Path) -> None:
    """Found in review: a server's log line or status notification nested just under what the framing reads
    (and holding the text ``task``) was read again, deeper down the stack, to show task ids, and the
    RecursionError ended ``warden serve`` with every other server. Every depth up to past the framing's limit,
    in a log line and a status notification: serve lives on and the other server answers."""
    with trusting.open("a") as config:
        for name, argv in (("evil", [PYTHON, str(FIXTURES / "hostile_server.py")]), ("b", RAWSERVER)):
            config.write(f"\n[servers.{name}]\ncommand = {json.dumps(argv[0])}\nargs = {json.dumps(argv[1:])}\n")
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 5000))  # this test's host reads what reaches it
    try:
        host, _ = await legacy_host(SERVE)

        def nested(depth: int) -> str:
            return "[" * depth + '"task"' + "]" * depth

        shapes = (("notifications/message", {"level": "info", "logger": "task", "data": "NEST"}),
                  ("notifications/tasks/status", {"taskId": "t", "status": "working", "x": "NEST"}))
        for start in range(800, 1040, 40):
            lines = [json.dumps({"jsonrpc": "2.0", "method": method, "params": params})
                     .replace('"NEST"', nested(depth))
                     for depth in range(start, start + 40) for method, params in shapes]
            await host.request(start, "tools/call", {"name": "evil__hz", "arguments": {"emit": lines}})
            assert "result" in await host.response(start, 60)
        await host.request(1, "tools/call", {"name": "b__echo", "arguments": {"text": "still here"}})
        assert (await host.response(1, 60))["result"]["content"][0]["text"] == "still here"
        assert await host.close() == 0
    finally:
        sys.setrecursionlimit(limit)


KEYS: Final = st.sampled_from(["taskId", "task", "tasks", "_meta", RELATED, "status", "x"]) | st.text(max_size=4)
JSON: Final = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4),
                           max_leaves=20)


def renamed_where_expected(params: dict[str, Any], shape: str, prefix: str) -> dict[str, Any]:
    """The test's own statement of where a task id is shown renamed (the oracle for the property below)."""
    out = copy.deepcopy(params)
    meta = out.get("_meta")
    spots = [meta.get(RELATED)] if isinstance(meta, dict) else []
    if shape == "task":
        spots.append(out)
    for spot in spots:
        if isinstance(spot, dict) and isinstance(spot.get("taskId"), str):
            spot["taskId"] = prefix + spot["taskId"]
    return out


@given(method=st.sampled_from(["notifications/tasks", "notifications/tasks/status", "notifications/message",
                               "notifications/progress", "elicitation/create", "sampling/createMessage"]),
       params=st.dictionaries(KEYS, JSON, max_size=5), escaped=st.booleans(), ascii_only=st.booleans())
def test_a_status_notification_and_a_question_show_their_task_ids_under_their_server(
        method: str, params: dict[str, Any], escaped: bool, ascii_only: bool) -> None:
    """Whatever a server's message holds, a status notification's task id and a question's ``related-task`` id
    reach the host as ``SERVER__ID``, however the server's text spells the key (``task\\u0049d``); everything
    else in them decodes as it was; and every other message (a log line, progress) is passed on byte for byte,
    unread."""
    text = json.dumps(params, ensure_ascii=ascii_only)
    if escaped:
        text = text.replace('"taskId"', '"task\\u0049d"')
    body = text.encode()
    question = not method.startswith("notifications/")
    message = encode_request(b'"w-1"', method, body) if question else encode_notification(method, body)
    shown = shown_task_ids(message, "srv__")
    if method not in TASK_NOTIFICATIONS and not question:
        assert shown == message
        return
    assert shown is not None
    expected = renamed_where_expected(params, "task" if method in TASK_NOTIFICATIONS else "related", "srv__")
    assert json.loads(shown)["params"] == expected
    if expected == params:
        assert shown == message


@given(st.binary(max_size=200).map(lambda b: encode_notification("notifications/tasks/status", b))
       | st.binary(max_size=200).map(lambda b: encode_request(b"1", "elicitation/create", b))
       | st.binary(max_size=200))
def test_any_bytes_are_shown_passed_on_or_dropped_never_an_error(data: bytes) -> None:
    shown = shown_task_ids(data, "srv__")
    assert shown is None or isinstance(shown, bytes)


def test_a_message_nested_too_deeply_to_read_here_is_dropped_or_passed_on_never_an_error() -> None:
    """Found in review: msgspec's nesting limit is the interpreter's recursion limit less the frames on the stack,
    so a message the framing read could not be read again deeper down, and the RecursionError took ``warden
    serve`` down with every server. Here every kind of message, nested past any limit, is handled."""
    deep = b'{"taskId":"t","x":' + b"[" * 5000 + b"]" * 5000 + b"}"
    assert shown_task_ids(encode_notification("notifications/tasks/status", deep), "srv__") is None
    question = encode_request(b"1", "elicitation/create", deep)
    assert shown_task_ids(question, "srv__") == question
    log_line = encode_notification("notifications/message", deep)
    assert shown_task_ids(log_line, "srv__") == log_line
