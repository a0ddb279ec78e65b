"""A hostile server behind ``warden run``: whatever a server sends (lists, call results, its initialize result,
questions to the client, notifications, stray responses), warden keeps answering its host and never prints a
traceback. Regression tests for crashes a fuzzer found, and the seeded fuzzer itself (one long-lived warden per
run; after every hostile action warden must still answer a ping)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.support import FIXTURES, HUGE, PYTHON, RawHost, nested, shows_a_crash, through_warden
from warden.gateway.shaping import passed_complete
from warden.protocol.messages import MAX_NESTING

HOSTILE_SERVER = [PYTHON, str(FIXTURES / "hostile_server.py")]
CAPS = {"elicitation": {"form": {}, "url": {}}, "sampling": {"tools": {}, "context": {}},
        "roots": {"listChanged": True}}


def raw(value: Any) -> str:
    """``value`` as JSON text; :data:`HUGE` becomes ``1e400``, lone surrogates stay ``\\ud800`` escapes."""
    return json.dumps(value).replace(json.dumps(HUGE), "1e400")


def tracebacks(stderr: Path) -> str:
    """warden's own tracebacks (the server's stderr is relayed with a ``[hostile_server]`` style prefix)."""
    lines = stderr.read_text(errors="replace").splitlines()
    own = [line for line in lines if not line.startswith("[") or "Traceback" not in line]
    if not any(shows_a_crash(line) and "hostile" not in line for line in lines):
        return ""
    return "\n".join(line for line in own if "hostile_server" not in line)[-4000:]


async def start(tmp_path: Path, *server_args: str) -> tuple[RawHost, Path]:
    stderr = tmp_path / "warden.stderr"
    with stderr.open("wb") as sink:
        host = await RawHost.start(through_warden([*HOSTILE_SERVER, *server_args], "--request-timeout", "5"),
                                   stderr=sink)
    return host, stderr


async def answer(host: RawHost, id_: object, timeout: float = 15.0) -> dict[str, Any]:
    """Read until the response to ``id_``, answering any request warden relays from the server (with a decline /
    empty result), so a question never blocks the call that caused it."""
    with trio.fail_after(timeout):
        while True:
            message = await host.next_message(timeout)
            assert message is not None, f"warden closed its stdout before answering {id_!r}"
            if "method" in message and "id" in message:
                method = message["method"]
                result: dict[str, Any] = {}
                if method == "elicitation/create":
                    result = {"action": "decline"}
                elif method == "roots/list":
                    result = {"roots": []}
                elif method == "sampling/createMessage":
                    result = {"role": "assistant", "content": {"type": "text", "text": "no"}, "model": "m"}
                await host.send({"jsonrpc": "2.0", "id": message["id"], "result": result})
                continue
            if message.get("id") == id_ and "method" not in message:
                return message


async def still_serving(host: RawHost, id_: object, timeout: float = 15.0) -> str | None:
    try:
        await host.request(id_, "ping")
        reply = await answer(host, id_, timeout)
    except (trio.TooSlowError, AssertionError) as exc:
        return f"no answer to a ping within {timeout} s ({exc!r})"
    except trio.BrokenResourceError:
        return "warden's stdin is closed"
    return None if "result" in reply else f"ping failed: {reply}"


async def hz(host: RawHost, id_: object, timeout: float = 20.0, **arguments: Any) -> dict[str, Any] | str:
    """Call the hostile tool; its answer, or why there was none."""
    try:
        await host.request(id_, "tools/call", {"name": "hz", "arguments": arguments})
        return await answer(host, id_, timeout)
    except (trio.TooSlowError, AssertionError) as exc:
        return f"no answer to the hz call within {timeout} s ({exc!r})"
    except trio.BrokenResourceError:
        return "warden's stdin is closed"


async def survives(host: RawHost, stderr: Path, n: object, *, then: list[str] = (), **arguments: Any) -> None:
    """One hostile action, then warden must answer a ping (and any follow-up requests in ``then``) and print no
    traceback."""
    got = await hz(host, f"hz-{n}", **arguments)
    problem = got if isinstance(got, str) else None
    if isinstance(got, dict) and "current list" in str(got.get("error")):
        REFUSED.append(got)
    for i, method in enumerate(then):
        if problem is None:
            await host.request(f"then-{n}-{i}", method, {})
            try:
                await answer(host, f"then-{n}-{i}")
            except (trio.TooSlowError, AssertionError) as exc:
                problem = f"no answer to {method} ({exc!r})"
    problem = problem or await still_serving(host, f"alive-{n}")
    problem = problem or ("warden printed a traceback" if tracebacks(stderr) else None)
    assert problem is None, f"action {n}: {problem}\n{arguments!r}"[:3000] + f"\n{tracebacks(stderr)}"


REFUSED: list[dict[str, Any]] = []


def note(method: str, params: Any) -> str:
    return '{"jsonrpc":"2.0","method":' + raw(method) + ',"params":' + raw(params) + "}"


def ask(id_: Any, method: str, params: Any) -> str:
    return '{"jsonrpc":"2.0","id":' + raw(id_) + ',"method":' + raw(method) + ',"params":' + raw(params) + "}"


# -- regressions: one per crash the fuzzer found -------------------------------------------------------------------


@pytest.mark.parametrize("method", ["tools/list", "prompts/list"])
async def test_a_list_entry_nested_300_deep_gets_the_list_an_answer_and_warden_keeps_serving(
        tmp_path: Path, method: str) -> None:
    """Crashed warden (stdout closed): pins/_store.py:267 ``data.model_dump_json()`` in ``_update`` (from
    observe_list) raised PydanticSerializationError 'Maximum serialization depth exceeded'."""
    key = LIST_KEYS[method]
    entry = {"name": "t1", "inputSchema": {"type": "object", "properties": nested(300)}} if key == "tools" else \
        {"name": "t1", "description": nested(300)}
    host, stderr = await start(tmp_path)
    await host.initialize(CAPS)
    await survives(host, stderr, 1, then=[method], arm={method: raw({key: [entry]})})
    await host.close()


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_an_answer_nested_past_the_framings_limit_is_an_error_and_warden_keeps_serving(
        tmp_path: Path, era: str) -> None:
    """Found in review: a 2026 server's call result nested 947 levels deep was read where it was framed, then
    overflowed the stack where warden read its resultType (``shaping.result_kind``), and the RecursionError ended
    warden. Now every message nested deeper than ``MAX_NESTING`` is refused where it is framed: the call gets an
    error, a message at the limit passes whole, and warden keeps serving."""
    host, stderr = await start(tmp_path, "--era", era)
    await host.initialize(CAPS)
    def deep(levels: int) -> str:  # the envelope and the result add two levels, nested(levels) has levels + 1
        return '{"content":[],"x":' + '{"a":' * levels + "{}" + "}" * levels + "}"

    at_limit = await hz(host, "at-limit", reply=deep(MAX_NESTING - 3))
    assert isinstance(at_limit, dict), at_limit
    assert at_limit["result"]["x"] == nested(MAX_NESTING - 3)
    for depth in (MAX_NESTING - 2, 600, 947, 2000):
        got = await hz(host, f"deep-{depth}", reply=deep(depth))
        assert isinstance(got, dict), got
        assert got["error"]["message"] == (
            "the server sent an invalid response: message is nested deeper than 256 levels" if depth < 990 else
            # past msgspec's own limit even the id cannot be read: the call waits out its deadline, as before
            "tools/call got no answer from the server within its deadline"), got
        assert await still_serving(host, f"alive-{depth}") is None
    assert not tracebacks(stderr), tracebacks(stderr)
    await host.close()


LEAKY_INFO: dict[str, Any] = {
    "name": "hostile", "version": "1.0", "title": "Hostile", "description": "a server",
    "icons": [{"src": "https://collector.example/i.png?d=c2VjcmV0"}], "websiteUrl": "https://collector.example/?d=x",
    "extra": {"url": "https://collector.example/"}}


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_a_servers_info_reaches_the_host_without_a_url_it_would_fetch(tmp_path: Path, era: str) -> None:
    """Found in review: a server's ``serverInfo`` reached the host whole, unpinned and unreviewed. Its ``icons``
    and ``websiteUrl`` are fetched or opened by the host, outside any sandbox, so a server with no network could
    put what it read of the user's files in such a URL. Only names and words pass, from either era's handshake."""
    if era == "legacy":
        result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": LEAKY_INFO}
    else:
        result = {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}, "ttlMs": 0,
                  "cacheScope": "private", "_meta": {"io.modelcontextprotocol/serverInfo": LEAKY_INFO}}
    host, stderr = await start(tmp_path, "--era", era, "--init-result", json.dumps(result))
    answer_ = await host.initialize(CAPS)
    assert answer_["result"]["serverInfo"] == {  # type: ignore[index]
        "name": "hostile", "version": "1.0", "title": "Hostile", "description": "a server"}
    assert not tracebacks(stderr), tracebacks(stderr)
    await host.close()


def test_a_2026_results_server_info_is_cut_to_what_hosts_are_told() -> None:
    """The same for the ``serverInfo`` a 2026 server puts in every result's ``_meta``, passed to a 2026 host;
    a result without a URL field passes byte for byte."""
    info_key = "io.modelcontextprotocol/serverInfo"
    plain = json.dumps({"content": [], "_meta": {info_key: {"name": "s", "version": "1"}}}).encode()
    assert passed_complete(plain, stated=False, method="tools/call", principal=None) == \
        b'{"resultType":"complete",' + plain[1:]
    leaky = json.dumps({"resultType": "complete", "content": [], "_meta": {info_key: LEAKY_INFO, "k": 1}}).encode()
    shown = json.loads(passed_complete(leaky, stated=True, method="tools/call", principal=None))
    assert shown == {"resultType": "complete", "content": [], "_meta": {
        info_key: {"name": "hostile", "version": "1.0", "title": "Hostile", "description": "a server"}, "k": 1}}


async def test_a_list_answer_without_its_list_is_an_error_not_an_empty_list(tmp_path: Path) -> None:
    """A tools/list result with no ``tools`` is malformed. Read as "no tools" it would record every approved tool as
    removed and refuse calls to them until the next normal list; it is an error, and the pins stay as they were."""
    host, stderr = await start(tmp_path)
    await host.initialize(CAPS)
    assert "result" in await hz(host, "before")
    got = await hz(host, "arm", arm={"tools/list": raw({"type": 1})})  # the server's next tools/list answer
    assert isinstance(got, dict)
    assert "result" in got
    await host.request("bad", "tools/list", {})
    bad = await answer(host, "bad")
    assert "no 'tools' list" in bad["error"]["message"]
    assert "result" in await hz(host, "after")  # still approved and callable
    assert not tracebacks(stderr), tracebacks(stderr)
    await host.close()


# -- the fuzzer ------------------------------------------------------------------------------------------------------



HOSTILE: list[Any] = [
    None, True, False, 0, -1, 2**63, -(2**70), 1.5, 1e308, HUGE, "", "é", "\u2028", "\ud800", "\udfff x",
    "x" * 70_000, "\u0000", "../../etc/passwd", "file:///etc/passwd", [], [1, "a"], [["a", 1]], {},
    {"a": {"b": [None]}}, nested(60), *([] if os.environ.get("FUZZ_NO_DEEP") else [nested(600)]), "wdn1.",
    "wdn1.a.b", "echo", "hz", "debug",
    {"name": "é", "version": 1}, {"type": "text", "text": HUGE}, {"type": 1}, [{"type": "image"}],
]
IDS: list[Any] = [1, "s", -5, 2**70, 1.5, "é", "\ud800", "", None, [1], {"a": 1}, True, HUGE, "warden-1", "srv-1",
                  "hz-1", 0]
LIST_KEYS = {"tools/list": "tools", "prompts/list": "prompts", "resources/list": "resources",
             "resources/templates/list": "resourceTemplates"}
NOTES = ["notifications/tools/list_changed", "notifications/prompts/list_changed",
         "notifications/resources/list_changed", "notifications/resources/updated", "notifications/message",
         "notifications/progress", "notifications/cancelled", "notifications/subscriptions/acknowledged",
         "notifications/elicitation/complete", "x/unknown", "é"]
QUESTIONS = ["sampling/createMessage", "elicitation/create", "roots/list", "ping", "x/unknown", "tools/call"]


class Fuzz:
    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)

    def h(self) -> Any:
        return self.r.choice(HOSTILE)

    def entry(self, key: str) -> Any:
        r, h = self.r, self.h
        if r.random() < 0.15:
            return h()
        name = h()
        e: dict[str, Any] = {"name": r.choice([f"t{r.randrange(5)}", "t0" if name == "hz" else name])}
        if key == "tools":
            e["inputSchema"] = r.choice([{"type": "object"}, h(), {"type": "object", "properties": h()},
                                         {"type": h(), "required": h()}])
            if r.random() < 0.5:
                e["annotations"] = r.choice([h(), {"readOnlyHint": h(), "destructiveHint": h(), "title": h()},
                                             {"x-mcp-header": h()}, {"x-mcp-header": {"X-A": h()}}])
            if r.random() < 0.3:
                e["outputSchema"] = h()
            if r.random() < 0.3:
                e["x-mcp-header"] = h()
        elif key in ("resources", "resourceTemplates"):
            e["uri" if key == "resources" else "uriTemplate"] = r.choice(["file:///x", h()])
            e["mimeType"] = h()
        else:
            e["arguments"] = r.choice([h(), [h()], [{"name": h(), "required": h()}]])
        for k in r.sample(["description", "title", "_meta", "icons", "execution"], r.randrange(3)):
            e[k] = h()
        return e

    def list_result(self, method: str) -> str:
        r = self.r
        key = LIST_KEYS[method]
        kind = r.random()
        if kind < 0.15:
            return raw(self.h())
        if kind < 0.25:
            return raw({key: self.h()})
        body: dict[str, Any] = {key: [self.entry(key) for _ in range(r.randrange(4))]}
        if key == "tools":  # keep the control tool listed (and unchanged), so the fuzzing goes on
            body[key][:0] = [{"name": n, "description": f"{n} tool", "inputSchema": {"type": "object"}}
                             for n in ("hz", "echo")]
        if r.random() < 0.25:
            body["nextCursor"] = self.h()
        return raw(body)

    def call_result(self) -> str:
        r, h = self.r, self.h
        body: dict[str, Any] = {}
        body["content"] = r.choice([h(), [h()], [{"type": "text", "text": h()}], [{"type": h(), "data": h()}],
                                    [{"type": "resource", "resource": h()}]])
        if r.random() < 0.4:
            body["isError"] = h()
        if r.random() < 0.4:
            body["structuredContent"] = h()
        if r.random() < 0.2:
            body["_meta"] = h()
        if r.random() < 0.1:
            return raw(h())
        return raw(body)

    def line(self) -> str:
        r, h = self.r, self.h
        kind = r.random()
        if kind < 0.45:
            method = r.choice(NOTES)
            p = r.choice([h(), {"level": h(), "data": h(), "logger": h()}, {"progressToken": r.choice(IDS + HOSTILE),
                          "progress": h(), "total": h(), "message": h()}, {"uri": h()}, {"requestId": h()},
                          {"notifications": h()}, {"_meta": h()}])
            return note(method, p)
        if kind < 0.75:
            method = r.choice(QUESTIONS)
            p = r.choice([h(), {"messages": h(), "maxTokens": h()},
                          {"messages": [{"role": "user", "content": {"type": "text", "text": h()}}],
                           "maxTokens": 10, "includeContext": h(), "tools": h(), "systemPrompt": h()},
                          {"message": h(), "requestedSchema": h(), "mode": h(), "url": h()},
                          {"mode": "url", "message": "m", "url": h(), "elicitationId": h()},
                          {"_meta": h()}])
            return ask(r.choice(IDS + HOSTILE), method, p)
        if kind < 0.9:
            body = r.choice([{"result": h()}, {"result": {"content": []}}, {"error": h()},
                             {"error": {"code": h(), "message": h(), "data": h()}}])
            return '{"jsonrpc":"2.0","id":' + raw(r.choice(IDS + HOSTILE + ["warden-2", 2, "w-1"])) + "," + \
                raw(body)[1:]
        return r.choice(['{"jsonrpc":"2.0","id":{id},"result":{"content":[]}}', "[]", "[{}]", "{}", "null",
                         '{"jsonrpc":"2.0","method":null}', '{"jsonrpc":"1.0","method":"x"}',
                         '{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}'])

    def action(self) -> dict[str, Any]:
        r = self.r
        args: dict[str, Any] = {}
        kind = r.random()
        if kind < 0.35:
            method = r.choice(list(LIST_KEYS))
            args["arm"] = {method: self.list_result(method)}
            args["_then"] = [method, "tools/list"]  # the second, normal, tools/list puts hz back if it was lost
        elif kind < 0.55:
            if r.random() < 0.15:
                args["error"] = raw(r.choice([self.h(), {"code": self.h(), "message": self.h(), "data": self.h()}]))
            else:
                args["reply"] = self.call_result()
            if r.random() < 0.2:
                args["after"] = ['{"jsonrpc":"2.0","id":{id},"result":' + self.call_result() + "}"]
        else:
            args["emit"] = [self.line() for _ in range(r.randrange(1, 4))]
        return args


def initialize_results(seed: int) -> list[str]:
    """Hostile initialize results (each is one warden's life)."""
    r = random.Random(seed)
    out = []
    for _ in range(6):
        body: dict[str, Any] = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                                "serverInfo": {"name": "hostile", "version": "1"}}
        key = r.choice(["protocolVersion", "capabilities", "serverInfo", "instructions", "_meta", "tools"])
        body[key] = r.choice([*HOSTILE, {"tools": r.choice(HOSTILE)}, {"logging": r.choice(HOSTILE)},
                                {"name": r.choice(HOSTILE), "version": r.choice(HOSTILE)}])
        out.append(raw(body))
    return out


async def run_fuzz(tmp_path: Path, seed: int, steps: int, *server_args: str) -> None:
    host, stderr = await start(tmp_path, *server_args)
    await host.initialize(CAPS)
    fuzz = Fuzz(seed)
    REFUSED.clear()
    with trio.fail_after(55):
        for n in range(1, steps + 1):
            args = fuzz.action()
            then = args.pop("_then", [])
            await survives(host, stderr, f"{seed}-{n}", then=then, **args)
    assert len(REFUSED) < steps // 4, f"most hz calls were refused, the fuzzing is inert: {REFUSED[:3]}"
    await host.close()


@pytest.mark.parametrize("seed", [int(s) for s in os.environ.get("FUZZ_SEEDS", "1,2,3").split(",")])
@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_fuzzed_server_messages_never_crash_warden_or_stop_it_answering(tmp_path: Path, seed: int,
                                                                              era: str) -> None:
    """A legacy server, and a 2026 server (which warden translates for the legacy host)."""
    await run_fuzz(tmp_path, seed, 60, *(["--era", "modern"] if era == "modern" else []))


@pytest.mark.parametrize("seed", [1, 2])
async def test_fuzzed_initialize_results_never_crash_warden(tmp_path: Path, seed: int) -> None:
    for i, result in enumerate(initialize_results(seed)):
        stderr = tmp_path / f"warden-{i}.stderr"
        with stderr.open("wb") as sink:
            host = await RawHost.start(through_warden([*HOSTILE_SERVER, "--init-result", result],
                                                      "--request-timeout", "5"), stderr=sink)
        try:
            await host.request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": CAPS,
                                                 "clientInfo": {"name": "rawhost", "version": "1"}})
            reply = await answer(host, 0)
            await host.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            problem = None if ("result" in reply or "error" in reply) else f"odd initialize answer {reply}"
            for j, method in enumerate(["tools/list", "ping"]):
                await host.request(f"x{j}", method, {})
                await answer(host, f"x{j}")
        except (trio.TooSlowError, AssertionError) as exc:
            problem = repr(exc)
        problem = problem or ("warden printed a traceback" if tracebacks(stderr) else None)
        assert problem is None, f"init result {result[:500]}: {problem}\n{tracebacks(stderr)}"
        await host.close()
