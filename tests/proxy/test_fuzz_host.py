"""A hostile host over stdio: whatever a host sends, ``warden run`` answers requests (with an error where one is
due) and keeps serving. Regression tests for crashes a fuzzer found, and the seeded fuzzer itself (one long-lived
warden per run; after every message warden must still answer a liveness request, and never print a traceback)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.support import HUGE, RAWSERVER, RawHost, nested, shows_a_crash, through_warden

MODERN = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
          "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}, "sampling": {}, "roots": {}},
          "io.modelcontextprotocol/clientInfo": {"name": "fuzz-modern-host", "version": "1"}}


def wire(message: dict[str, Any]) -> bytes:
    """``message`` as one JSON line; :data:`HUGE` becomes ``1e400``, lone surrogates become ``\\ud800`` escapes."""
    return json.dumps(message).replace(json.dumps(HUGE), "1e400").encode() + b"\n"


async def start(tmp_path: Path, *server_args: str, legacy: bool) -> tuple[RawHost, Path]:
    """warden in front of the raw server, its stderr kept in a file (read by :func:`tracebacks`)."""
    stderr = tmp_path / "warden.stderr"
    with stderr.open("wb") as sink:
        host = await RawHost.start(through_warden([*RAWSERVER, *server_args], "--request-timeout", "5"),
                                   stderr=sink)
    if legacy:
        await host.initialize({"elicitation": {}, "sampling": {}, "roots": {}})
    return host, stderr


def tracebacks(stderr: Path) -> str:
    """warden's own tracebacks (the server's stderr is relayed with a ``[rawserver]`` prefix and does not count)."""
    lines = stderr.read_text(errors="replace").splitlines()
    if not any(shows_a_crash(line) and "[rawserver]" not in line for line in lines):
        return ""
    return "\n".join(line for line in lines if "[rawserver]" not in line)[-4000:]


async def still_serving(host: RawHost, id_: object, *, modern: bool, timeout: float = 10.0) -> str | None:
    """None if warden answers a liveness request (legacy: ping; 2026 has no ping: an echo call), else why not."""
    if modern:
        await host.request(id_, "tools/call", {"_meta": MODERN, "name": "echo", "arguments": {"text": "alive"}})
    else:
        await host.request(id_, "ping")
    try:
        answer = await host.response(id_, timeout)
    except trio.TooSlowError:
        return f"no answer to a liveness request within {timeout} s"
    except AssertionError as exc:
        return str(exc)
    except trio.BrokenResourceError:
        return "warden's stdin is closed"
    return None if "result" in answer else f"liveness request failed: {answer}"


async def answered_with_an_error_then_serving(host: RawHost, stderr: Path, message: dict[str, Any],
                                              *, modern: bool) -> dict[str, object]:
    """Send ``message`` (a request with id 1), expect a JSON-RPC error for it, then a live warden."""
    try:
        await host.send_raw(wire(message))
        answer = await host.response(message["id"], 15)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{tracebacks(stderr)}") from None
    assert "error" in answer, answer
    assert (problem := await still_serving(host, "alive", modern=modern)) is None, problem
    assert not tracebacks(stderr), tracebacks(stderr)
    return answer


# -- regressions: one per crash the fuzzer found -------------------------------------------------------------------


@pytest.mark.parametrize("meta", [True, "ab", [1]], ids=["bool", "string", "list"])
async def test_a_legacy_host_sending_a_non_object_meta_gets_an_error_and_warden_keeps_serving(
        tmp_path: Path, meta: object) -> None:
    """Crashed warden: upstream/connection.py ``dict(body.get("_meta") or {})`` raised TypeError/ValueError."""
    host, stderr = await start(tmp_path, legacy=True)
    await answered_with_an_error_then_serving(
        host, stderr, {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}}, modern=False)
    await answered_with_an_error_then_serving(
        host, stderr, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                       "params": {"name": "echo", "arguments": {}, "_meta": meta}}, modern=False)
    await host.close()


@pytest.mark.parametrize("era", ["legacy", "2026"])
async def test_a_host_sending_a_number_beyond_double_range_in_params_gets_an_error_and_warden_keeps_serving(
        tmp_path: Path, era: str) -> None:
    """Crashed warden: core.py decode_object(request.params) raised msgspec.ValidationError (Number out of range)."""
    modern = era == "2026"
    host, stderr = await start(tmp_path, legacy=not modern)
    params: dict[str, Any] = {"name": "echo", "arguments": {"text": HUGE}}
    if modern:
        params["_meta"] = MODERN
    await answered_with_an_error_then_serving(
        host, stderr, {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}, modern=modern)
    await host.close()


async def test_a_host_sending_a_request_id_beyond_double_range_gets_an_error_and_warden_keeps_serving(
        tmp_path: Path) -> None:
    """Crashed warden: stdio.py ``id_key(decode_json(request.id))`` raised msgspec.ValidationError."""
    host, stderr = await start(tmp_path, legacy=True)
    await host.send_raw(b'{"jsonrpc":"2.0","id":1e400,"method":"ping"}\n')
    problem = await still_serving(host, "alive", modern=False)
    assert problem is None, f"{problem}\n{tracebacks(stderr)}"
    assert any("error" in m and (m.get("id") is None or m.get("id") == math.inf) for m in host.seen), host.seen
    assert not tracebacks(stderr), tracebacks(stderr)
    await host.close()


async def test_a_host_cancelling_a_request_id_beyond_double_range_is_ignored_and_warden_keeps_serving(
        tmp_path: Path) -> None:
    """Crashed warden: stdio.py _on_notification's decode_object(note.params) raised msgspec.ValidationError."""
    host, stderr = await start(tmp_path, legacy=True)
    await host.send_raw(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1e400}}\n')
    problem = await still_serving(host, "alive", modern=False)
    assert problem is None, f"{problem}\n{tracebacks(stderr)}"
    assert not tracebacks(stderr), tracebacks(stderr)
    await host.close()


async def test_a_host_initializing_with_a_number_beyond_double_range_gets_an_error_and_warden_keeps_serving(
        tmp_path: Path) -> None:
    """Crashed warden: stdio.py _start's decode_object(request.params) for initialize raised ValidationError."""
    host, stderr = await start(tmp_path, legacy=False)
    await host.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
                        b'"capabilities":{},"clientInfo":{"name":"h","version":"1"},"x":1e400}}\n')
    try:
        answer = await host.response(1, 15)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{tracebacks(stderr)}") from None
    assert "error" in answer, answer
    await host.initialize()
    assert (problem := await still_serving(host, "alive", modern=False)) is None, problem
    assert not tracebacks(stderr), tracebacks(stderr)
    await host.close()


async def test_a_legacy_hosts_answer_with_a_number_beyond_double_range_gets_the_call_an_error_and_warden_keeps_serving(
        tmp_path: Path) -> None:
    """A 2026 server's input request relayed to a legacy host (PX08), answered with ``1e400`` in the result.
    Crashed warden: core.py _relay_input_required's answer.result_dict() raised msgspec.ValidationError."""
    host, stderr = await start(tmp_path, "--era", "modern", legacy=True)
    await host.request(1, "tools/call", {"name": "mrtr_ask", "arguments": {}})
    question = await host.next_message(15)
    assert question is not None
    assert question.get("method") == "elicitation/create", question
    await host.send_raw(b'{"jsonrpc":"2.0","id":' + json.dumps(question["id"]).encode()
                        + b',"result":{"action":"accept","content":{"name":1e400}}}\n')
    try:
        answer = await host.response(1, 15)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{tracebacks(stderr)}") from None
    assert "error" in answer, answer
    assert (problem := await still_serving(host, "alive", modern=False)) is None, problem
    assert not tracebacks(stderr), tracebacks(stderr)
    await host.close()


async def test_a_host_sending_a_message_nested_thousands_deep_is_refused_and_warden_keeps_serving(
        tmp_path: Path) -> None:
    """msgspec raises RecursionError (not a DecodeError) past about a thousand levels: the line must be an invalid
    message like any other, not an exception in warden's reader."""
    host, stderr = await start(tmp_path, legacy=True)
    deep = b"[" * 5000 + b"]" * 5000
    await host.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"x":' + deep + b"}}\n")
    assert (problem := await still_serving(host, "alive", modern=False)) is None, f"{problem}\n{tracebacks(stderr)}"
    assert not tracebacks(stderr), tracebacks(stderr)
    await host.close()


# -- the fuzzer ------------------------------------------------------------------------------------------------------



HOSTILE: list[Any] = [
    None, True, False, 0, -1, 2**63, -(2**70), 1.5, 1e308, HUGE, "", "é", "\u2028", "\ud800", "\udfff x",
    "x" * 70_000, "\u0000", "../../etc/passwd", "file:///etc/passwd", [], [1, "a"], [["a", 1]], {},
    {"a": {"b": [None]}}, nested(60), "wdn1.", "wdn1.a.b", "wdn1.é.é", "wdn1.\ud800.x", "2026-07-28", "debug", "echo",
    {"name": "é", "version": 1},
]
METHODS = ["tools/call", "tools/list", "prompts/get", "prompts/list", "resources/read", "resources/list",
           "resources/templates/list", "resources/subscribe", "resources/unsubscribe", "logging/setLevel",
           "subscriptions/listen", "server/discover", "ping", "completion/complete", "initialize", "tasks/get",
           "sampling/createMessage", "x/unknown", "é"]
NOTIFICATIONS = ["notifications/cancelled", "notifications/initialized", "notifications/progress",
                 "notifications/roots/list_changed", "notifications/message", "x/y"]
META_KEYS = [*MODERN, "io.modelcontextprotocol/logLevel", "io.modelcontextprotocol/subscriptionId", "progressToken"]
IDS: list[Any] = [1, "s", -5, 2**70, 1.5, "é", "\ud800", "", None, [1], {"a": 1}, True, HUGE, "warden-1", "srv-1"]


class Fuzz:
    """Seeded JSON-RPC messages with hostile field values, for a legacy host or a 2026 host."""

    def __init__(self, seed: int, *, modern: bool) -> None:
        self.r = random.Random(seed)
        self.modern = modern

    def hostile(self) -> Any:
        return self.r.choice(HOSTILE)

    def meta(self) -> Any:
        r = self.r
        if r.random() < 0.1:
            return self.hostile()
        meta: dict[str, Any] = dict(MODERN) if self.modern else {}
        if r.random() < 0.4:
            meta[r.choice(META_KEYS)] = self.hostile()
        return meta

    def params(self, method: str) -> dict[str, Any]:
        r, h = self.r, self.hostile
        p: dict[str, Any] = {}
        if method in ("tools/call", "prompts/get"):
            p["name"] = r.choice(["echo", "ask", h()])
            p["arguments"] = r.choice([{"text": h()}, h()])
        elif method.startswith("resources/") and not method.endswith("/list"):
            p["uri"] = h()
        elif method == "logging/setLevel":
            p["level"] = h()
        elif method == "completion/complete":
            p["ref"] = r.choice([h(), {"type": h(), "name": h()}, {"type": "ref/resource", "uri": h()}])
            p["argument"] = r.choice([h(), {"name": h(), "value": h()}])
        elif method.endswith("/list"):
            p["cursor"] = h()
        elif method == "initialize":
            p.update(protocolVersion=h(), capabilities=h(), clientInfo=h())
        else:
            p[r.choice(["x", "é", "", "name", "uri"])] = h()
        if method in ("tools/call", "prompts/get", "resources/read") and r.random() < 0.5:
            p["requestState"] = h()
            p["inputResponses"] = r.choice([h(), {"k": h()}, {"warden-q1": {"action": h(), "content": h()}}])
        if r.random() < 0.9:
            p["_meta"] = self.meta()
        return p

    def message(self, n: int) -> dict[str, Any]:
        r = self.r
        kind = r.random()
        if kind < 0.65:
            method = r.choice(METHODS)
            msg: dict[str, Any] = {"jsonrpc": "2.0", "id": r.choice(IDS) if r.random() < 0.2 else n,
                                   "method": method}
            if r.random() < 0.95:
                msg["params"] = self.params(method)
            return msg
        if kind < 0.85:
            p = {"requestId": r.choice(IDS + HOSTILE), "reason": self.hostile(), "progressToken": self.hostile(),
                 "progress": self.hostile()}
            if r.random() < 0.5:
                p["_meta"] = self.meta()
            return {"jsonrpc": "2.0", "method": r.choice(NOTIFICATIONS), "params": p}
        body = r.choice([{"result": self.hostile()}, {"result": {"x": self.hostile()}}, {"error": self.hostile()},
                         {"error": {"code": self.hostile(), "message": self.hostile(), "data": self.hostile()}}])
        return {"jsonrpc": "2.0", "id": r.choice(IDS + HOSTILE), **body}


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("era", ["legacy", "2026"])
async def test_fuzzed_host_messages_never_crash_warden_or_stop_it_answering(tmp_path: Path, era: str,
                                                                            seed: int) -> None:
    modern = era == "2026"
    host, stderr = await start(tmp_path, legacy=not modern)
    fuzz = Fuzz(seed, modern=modern)
    with trio.fail_after(60):
        for n in range(1, 121):
            message = fuzz.message(n)
            try:
                await host.send_raw(wire(message))
            except trio.BrokenResourceError:
                problem: str | None = "warden's stdin is closed"
            else:
                problem = await still_serving(host, f"alive-{n}", modern=modern)
            problem = problem or ("warden printed a traceback" if tracebacks(stderr) else None)
            assert problem is None, (f"seed {seed}, message {n}: {problem}\n{wire(message)[:1500]!r}\n"
                                     f"{tracebacks(stderr)}")
    assert await host.close() == 0
