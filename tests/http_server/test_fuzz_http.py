"""A hostile, token-holding HTTP client: whatever it sends to ``warden run --http``, warden answers (an error where
one is due) and keeps serving. Regression tests for crashes a fuzzer found, and the seeded fuzzer itself (one
long-lived warden per run; after every request warden must still answer a liveness request in both eras, and never
print a traceback)."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests.http_server.warden_http import ACCEPT, META, MODERN, WardenHttp, warden_http
from tests.support import HUGE, RAWSERVER, nested, shows_a_crash

LEGACY = "2025-11-25"

Headers = list[tuple[bytes, bytes]]


def wire(message: Any) -> bytes:
    """``message`` as JSON; :data:`HUGE` becomes ``1e400``, lone surrogates become ``\\ud800`` escapes."""
    return json.dumps(message).replace(json.dumps(HUGE), "1e400").encode()


@asynccontextmanager
async def served(tmp_path: Path, *server_args: str) -> AsyncIterator[WardenHttp]:
    async with warden_http([*RAWSERVER, *server_args], "--request-timeout", "5", "--keepalive", "2",
                           cwd=tmp_path) as w:
        yield w


def tracebacks(w: WardenHttp) -> str:
    """warden's own tracebacks (the server's stderr is relayed with a ``[rawserver]`` prefix and does not count)."""
    lines = [line for line in w.stderr if "[rawserver]" not in line]
    if not any(shows_a_crash(line) for line in lines):
        return ""
    return "\n".join(lines)[-4000:]


def base(w: WardenHttp) -> Headers:
    assert w.token is not None
    return [(b"content-type", b"application/json"), (b"accept", ACCEPT.encode()),
            (b"authorization", b"Bearer " + w.token.encode())]


def modern_headers(w: WardenHttp, method: str, name: str | None = None) -> Headers:
    headers = [*base(w), (b"mcp-protocol-version", MODERN.encode()), (b"mcp-method", method.encode())]
    if name is not None:
        headers.append((b"mcp-name", name.encode()))
    return headers


def modern_call(id_: object, name: str, arguments: Any, **extra: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call",
            "params": {"_meta": META, "name": name, "arguments": arguments, **extra}}


async def still_serving(w: WardenHttp, session: str | None = None, timeout: float = 15.0) -> str | None:
    """None if warden still answers a 2026 echo call (and a legacy ping in ``session``), else why not."""
    if w.process.returncode is not None:
        return f"warden exited with {w.process.returncode}"
    try:
        with trio.fail_after(timeout):
            response = await w.client.post(w.url, content=wire(modern_call("alive", "echo", {"text": "alive"})),
                                           headers=modern_headers(w, "tools/call", "echo"))
            if response.status_code != 200 or "result" not in response.text:
                return f"liveness call failed: {response.status_code} {response.text[:300]}"
            if session is not None:
                response = await w.client.post(w.url, content=b'{"jsonrpc":"2.0","id":"alive","method":"ping"}',
                                               headers=[*base(w), (b"mcp-session-id", session.encode()),
                                                        (b"mcp-protocol-version", LEGACY.encode())])
                if response.status_code != 200 or "result" not in response.text:
                    return f"legacy ping failed: {response.status_code} {response.text[:300]}"
    except trio.TooSlowError:
        return f"no answer to a liveness request within {timeout} s"
    except httpx.HTTPError as exc:
        return f"liveness request failed: {exc!r}"
    return None


async def send(w: WardenHttp, method: str, headers: Headers, body: bytes | None = None,
               timeout: float = 15.0, stream_for: float = 1.0) -> httpx.Response | str | None:
    """One request; an event stream is read for ``stream_for`` seconds at most, then dropped (a disconnect)."""
    try:
        with trio.fail_after(timeout):
            request = w.client.build_request(method, w.url, content=body, headers=headers)
            response = await w.client.send(request, stream=True)
            try:
                if response.headers.get("content-type", "").startswith("text/event-stream"):
                    chunks = []
                    with trio.move_on_after(stream_for):
                        async for chunk in response.aiter_bytes():
                            chunks.append(chunk)
                    response._content = b"".join(chunks)
                else:
                    await response.aread()
            finally:
                await response.aclose()
            return response
    except trio.TooSlowError:
        return f"no answer within {timeout} s"
    except httpx.LocalProtocolError:
        return None  # the client refused to send it (h11 checks header values): nothing reached warden
    except httpx.HTTPError as exc:
        return f"{exc!r}"


async def answered_then_serving(w: WardenHttp, method: str, headers: Headers, body: bytes | None = None,
                                session: str | None = None) -> httpx.Response:
    """Send one request; expect an HTTP answer below 500, then a live warden without a traceback."""
    response = await send(w, method, headers, body)
    assert response is not None
    assert not isinstance(response, str), f"{response}\n{tracebacks(w)}"
    assert response.status_code < 500, f"{response.status_code} {response.text[:500]}\n{tracebacks(w)}"
    assert (problem := await still_serving(w, session)) is None, f"{problem}\n{tracebacks(w)}"
    assert not tracebacks(w), tracebacks(w)
    return response


# -- regressions: one per crash the fuzzer found -------------------------------------------------------------------


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize("where", ["params", "top-level", "session"])
async def test_a_body_nested_a_thousand_levels_deep_gets_a_4xx_and_no_traceback(tmp_path: Path, where: str) -> None:
    """A 2 KB body: msgspec raises RecursionError (not a DecodeError) beyond ~1000 levels. Got HTTP 500 and a
    traceback: http.py _post -> messages.py parse_message ``_decode_envelope(data)`` raised RecursionError."""
    async with served(tmp_path) as w:
        session = await w.initialize()
        deep = _nested(1000)
        request = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"},'
        if where == "params":
            headers, body = modern_headers(w, "tools/call", "echo"), request + b'"_meta":' + json.dumps(
                META).encode() + b',"x":' + deep + b"}}"
        elif where == "top-level":
            headers, body = modern_headers(w, "ping"), b'{"x":' + deep + b"}"
        else:
            headers = [*base(w), (b"mcp-session-id", session.encode()), (b"mcp-protocol-version", LEGACY.encode())]
            body = request + b'"x":' + deep + b"}}"
        response = await answered_then_serving(w, "POST", headers, body, session=session)
        assert response.status_code == 400, response.text
        assert "error" in response.json()


# -- the fuzzer ------------------------------------------------------------------------------------------------------



HOSTILE: list[Any] = [
    None, True, False, 0, -1, 2**63, -(2**70), 1.5, 1e308, HUGE, "", "é", "\u2028", "\ud800", "\udfff x",
    "x" * 20_000, "\u0000", "../../etc/passwd", [], [1, "a"], {}, {"a": {"b": [None]}}, nested(60), "wdn1.",
    "wdn1.a.b", "wdn1.é.é", "2026-07-28", "2025-11-25", "echo", "mrtr_ask", {"name": "é", "version": 1},
]
METHODS = ["tools/call", "tools/list", "prompts/get", "prompts/list", "resources/read", "resources/list",
           "resources/templates/list", "resources/subscribe", "logging/setLevel", "subscriptions/listen",
           "server/discover", "ping", "completion/complete", "initialize", "tasks/get", "x/unknown", "é"]
NOTIFICATIONS = ["notifications/cancelled", "notifications/initialized", "notifications/progress",
                 "notifications/roots/list_changed", "x/y"]
IDS: list[Any] = [1, "s", -5, 2**70, 1.5, "é", "\ud800", "", None, [1], {"a": 1}, True, HUGE, "warden-1"]
HEADER_VALUES: list[bytes] = [b"", b"\xff\xfe", "é".encode(), b"x" * 8000, b"=?base64?", b"=?base64?!!!!",
                              b"=?base64?" + b"\xff", b"=?base64?w6k=", b"2026-07-28", b"2025-11-25", b"echo",
                              b"tools/call", b"\x80", b"1e400", b"-0", b"a,b"]
LAST_EVENT_IDS: list[bytes] = [b"", b"1-0", b"1-1", b"0-0", b"999999999999-1", b"1-999999999999", b"1-", b"-1",
                               b"9" * 200, b"1-\xff", "١-١".encode(), b"1-01", b"2-0", b"1 - 0", b"x"]


class Fuzz:
    """Seeded hostile HTTP requests: 2026 POSTs, legacy session traffic, GETs and DELETEs, raw bodies."""

    def __init__(self, seed: int, w: WardenHttp, session: str) -> None:
        self.r = random.Random(seed)
        self.w = w
        self.session = session
        self.sessions: list[str] = [session]
        self.states: list[Any] = []

    def h(self) -> Any:
        return self.r.choice(HOSTILE)

    def meta(self) -> Any:
        r = self.r
        if r.random() < 0.1:
            return self.h()
        meta: dict[str, Any] = dict(META)
        if r.random() < 0.4:
            meta[r.choice([*META, "io.modelcontextprotocol/logLevel", "progressToken"])] = self.h()
        return meta

    def params(self, method: str, modern: bool) -> dict[str, Any]:
        r, h = self.r, self.h
        p: dict[str, Any] = {}
        if method in ("tools/call", "prompts/get"):
            p["name"] = r.choice(["echo", "mrtr_ask", "slow", h()])
            p["arguments"] = r.choice([{"text": h()}, h(), {"seconds": r.choice([0.1, h()])}])
        elif method.startswith("resources/") and not method.endswith("/list"):
            p["uri"] = h()
        elif method == "logging/setLevel":
            p["level"] = h()
        elif method == "completion/complete":
            p["ref"] = r.choice([h(), {"type": h(), "name": h()}])
            p["argument"] = r.choice([h(), {"name": h(), "value": h()}])
        elif method.endswith("/list"):
            p["cursor"] = h()
        elif method == "initialize":
            p.update(protocolVersion=r.choice([LEGACY, h()]), capabilities=r.choice([{}, h(), {"elicitation": h()}]),
                     clientInfo=h())
        else:
            p[r.choice(["x", "é", "", "name", "uri", "taskId"])] = h()
        if method in ("tools/call", "prompts/get", "resources/read") and r.random() < 0.4:
            p["requestState"] = r.choice([h(), *self.states[-3:]]) if self.states else h()
            p["inputResponses"] = r.choice([h(), {"who": h()}, {"who": {"action": h(), "content": h()}},
                                            {"who": {"action": "accept", "content": {"name": h()}}}])
        if modern and r.random() < 0.95:
            p["_meta"] = self.meta()
        elif r.random() < 0.2:
            p["_meta"] = self.meta() if r.random() < 0.5 else {"progressToken": h()}
        return p

    def header_noise(self, headers: Headers) -> Headers:
        """Drop, duplicate or replace a header, or add an Mcp-Param-* one."""
        r = self.r
        headers = list(headers)
        for _ in range(r.choice([0, 0, 1, 2])):
            op = r.random()
            names = [b"mcp-protocol-version", b"mcp-method", b"mcp-name", b"mcp-session-id", b"accept",
                     b"content-type", b"last-event-id", b"mcp-param-text", b"mcp-param-x_y",
                     b"mcp-param-", b"origin", b"host"]
            name = r.choice(names)
            if op < 0.3:
                headers = [(k, v) for k, v in headers if k != name]
            elif op < 0.6:
                headers.append((name, r.choice(HEADER_VALUES)))
            else:
                headers = [(k, v) for k, v in headers if k != name] + [(name, r.choice(HEADER_VALUES))]
        return headers

    def message(self, n: int, modern: bool) -> Any:
        r = self.r
        kind = r.random()
        if kind < 0.7:
            method = r.choice(METHODS)
            msg: dict[str, Any] = {"jsonrpc": "2.0", "id": r.choice(IDS) if r.random() < 0.2 else n, "method": method}
            if r.random() < 0.95:
                msg["params"] = self.params(method, modern)
            return msg
        if kind < 0.85:
            p: dict[str, Any] = {"requestId": r.choice(IDS + HOSTILE), "reason": self.h()}
            if r.random() < 0.5:
                p["_meta"] = self.meta()
            return {"jsonrpc": "2.0", "method": r.choice(NOTIFICATIONS), "params": p}
        body = r.choice([{"result": self.h()}, {"result": {"x": self.h()}}, {"error": self.h()},
                         {"error": {"code": self.h(), "message": self.h(), "data": self.h()}}])
        return {"jsonrpc": "2.0", "id": r.choice(IDS + HOSTILE), **body}

    def raw_body(self) -> bytes:
        r = self.r
        return r.choice([b"", b"null", b"[]", b"{", b"\xff", b'{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}',
                             b'{"jsonrpc":"2.0","id":"\\ud800","method":"tools/call","params":{"name":"\\udfff"}}'])
        return r.choice([b"", b"null", b"[]", b"[{}]", b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', b"{", b"\xff",
                         b'{"jsonrpc":"2.0","id":1,"method":"ping"} trailing', b"[" * 5000 + b"]" * 5000,
                         b'{"a":' * 3000 + b"1" + b"}" * 3000, b'{"jsonrpc":"2.0","id":1e400,"method":"ping"}',
                         b'{"jsonrpc":"2.0","id":"\\ud800","method":"tools/call","params":{"name":"\\udfff"}}',
                         b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"a":1e400}}}',
                         b'{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}', b"x" * 70_000,
                         b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":' + b'{"a":' * 200 + b"1"
                         + b"}" * 200 + b"}"])

    def request(self, n: int) -> tuple[str, Headers, bytes | None, str]:
        """(HTTP method, headers, body, what) for request ``n``."""
        r, w = self.r, self.w
        kind = r.random()
        if kind < 0.35:  # 2026 POST
            message = self.message(n, modern=True)
            method = message.get("method", "") if isinstance(message.get("method"), str) else ""
            params = message.get("params") or {}
            name = params.get("name", params.get("uri")) if isinstance(params, dict) else None
            sendable = isinstance(name, str) and name.isascii() and name.isprintable() and name == name.strip()
            headers = modern_headers(w, method or "x", name if sendable else None)
            return "POST", self.header_noise(headers), wire(message), "modern"
        if kind < 0.65:  # legacy POST in a session
            session = r.choice(self.sessions)
            headers = [*base(w), (b"mcp-session-id", session.encode()), (b"mcp-protocol-version", LEGACY.encode())]
            return "POST", self.header_noise(headers), wire(self.message(n, modern=False)), "legacy"
        if kind < 0.72:  # initialize (a new session)
            msg = {"jsonrpc": "2.0", "id": n, "method": "initialize", "params": self.params("initialize", False)}
            return "POST", self.header_noise(base(w)), wire(msg), "initialize"
        if kind < 0.8:  # GET, resuming or not
            session = r.choice(self.sessions).encode()
            headers = [(b"accept", b"text/event-stream"), base(w)[2], (b"mcp-session-id", session)]
            if r.random() < 0.7:
                headers.append((b"last-event-id", r.choice(LAST_EVENT_IDS)))
            return "GET", self.header_noise(headers), None, "get"
        if kind < 0.83:  # DELETE
            headers = [base(w)[2], (b"mcp-session-id", r.choice([*self.sessions[1:], "x", "é"]).encode())]
            return "DELETE", self.header_noise(headers), None, "delete"
        if kind < 0.93:  # raw body
            headers = r.choice([base(w), modern_headers(w, "ping"),
                                [*base(w), (b"mcp-session-id", self.session.encode())]])
            return "POST", self.header_noise(headers), self.raw_body(), "raw"
        # hostile content-type / accept
        headers = [base(w)[2], (b"content-type", r.choice([b"application/json; charset=\xff", b"application/json;;",
                                                            b";", b"", b"APPLICATION/JSON", b"text/plain"])),
                   (b"accept", r.choice([b"*/*", b"*/*;q=0", b"application/json;q=abc, text/event-stream", b",,,",
                                         b"\xff", b""]))]
        return "POST", headers, wire(modern_call(n, "echo", {"text": "x"})), "content-type"

    async def mrtr_state(self) -> None:
        """A 2026 call warden answers with input_required: keep its requestState for later retries."""
        response = await send(self.w, "POST", modern_headers(self.w, "tools/call", "mrtr_ask"),
                              wire(modern_call("mrtr", "mrtr_ask", {})))
        if isinstance(response, httpx.Response) and response.status_code == 200:
            result = response.json().get("result", {})
            if "requestState" in result:
                self.states.append(result["requestState"])
                state = result["requestState"]
                if isinstance(state, str) and state:
                    self.states.append(state[:-1] + ("A" if state[-1] != "A" else "B"))
                    self.states.append(state + "é")


async def fuzz_run(tmp_path: Path, seed: int, steps: int, budget: float) -> None:
    async with served(tmp_path, "--era", "dual") as w:
        session = await w.initialize({"elicitation": {}, "sampling": {}, "roots": {}})
        fuzz = Fuzz(seed, w, session)
        await fuzz.mrtr_state()
        with trio.move_on_after(budget):
            for n in range(1, steps + 1):
                method, headers, body, what = fuzz.request(n)
                response = await send(w, method, headers, body)
                if response is None:
                    continue
                if (isinstance(response, httpx.Response) and what == "initialize"
                        and "mcp-session-id" in response.headers):
                    fuzz.sessions.append(response.headers["mcp-session-id"])
                problem = response if isinstance(response, str) else (
                    f"HTTP {response.status_code}: {response.text[:300]}" if response.status_code >= 500 else None)
                problem = problem or await still_serving(w, session)
                problem = problem or ("warden printed a traceback" if tracebacks(w) else None)
                assert problem is None, (f"seed {seed}, request {n} ({what}): {problem}\n{method} {headers!r}\n"
                                         f"{(body or b'')[:1500]!r}\n{tracebacks(w)}")
                if n % 25 == 0:
                    await fuzz.mrtr_state()


@pytest.mark.parametrize("seed", [1, 2])
async def test_fuzzed_http_requests_never_crash_warden_or_stop_it_answering(tmp_path: Path, seed: int) -> None:
    await fuzz_run(tmp_path, seed, steps=300, budget=25)



async def test_dropped_connections_and_concurrent_requests_in_both_eras_leave_warden_serving(tmp_path: Path) -> None:
    """Bodies cut short, streams dropped mid-way, cancels and MRTR retries racing, a session deleted mid-request."""
    async with served(tmp_path, "--era", "dual") as w:
        session = await w.initialize({"elicitation": {}, "sampling": {}, "roots": {}})
        port = int(w.url.split(":")[2].split("/")[0])
        auth = f"Bearer {w.token}"

        async def raw(data: bytes, wait: float) -> None:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.send_all(data)
            with trio.move_on_after(wait):
                await stream.receive_some(100)
            await stream.aclose()

        def head(method: str, length: int, extra: str = "") -> bytes:
            return (f"{method} /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nauthorization: {auth}\r\n"
                    f"content-type: application/json\r\naccept: {ACCEPT}\r\ncontent-length: {length}\r\n{extra}"
                    "\r\n").encode()

        slow = wire(modern_call(1, "slow", {"seconds": 2, "progress": True}))
        slow_legacy = wire({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                            "params": {"name": "slow", "arguments": {"seconds": 2}, "_meta": {"progressToken": 1}}})
        mv = f"mcp-protocol-version: {MODERN}\r\nmcp-method: tools/call\r\nmcp-name: slow\r\n"
        sid = f"mcp-session-id: {session}\r\nmcp-protocol-version: {LEGACY}\r\n"
        async with trio.open_nursery() as nursery:
            for i in range(30):
                nursery.start_soon(raw, head("POST", len(slow) + 50, mv) + slow[:20], 0.05 * (i % 5))
                nursery.start_soon(raw, head("POST", len(slow), mv) + slow, 0.1 * (i % 7))
                nursery.start_soon(raw, head("POST", len(slow_legacy), sid) + slow_legacy, 0.1 * (i % 7))
                nursery.start_soon(raw, head("GET", 0, sid), 0.1 * (i % 4))
                nursery.start_soon(raw, head("GET", 0, sid + "last-event-id: 1-0\r\n"), 0.1 * (i % 4))
                nursery.start_soon(send, w, "POST", modern_headers(w, "tools/call", "echo"),
                                   wire(modern_call(i, "echo", {"text": "x"})))
                nursery.start_soon(send, w, "POST", modern_headers(w, "tools/call", "mrtr_ask"),
                                   wire(modern_call(i, "mrtr_ask", {}, inputResponses={"who": {"action": "accept",
                                        "content": {"name": "x"}}}, requestState="x")))
                nursery.start_soon(send, w, "POST", [*base(w), (b"mcp-session-id", session.encode())],
                                   wire({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                         "params": {"requestId": 7}}))
        await trio.sleep(3)
        assert (problem := await still_serving(w, session)) is None, f"{problem}\n{tracebacks(w)}"
        assert not tracebacks(w), tracebacks(w)
        # delete the session while a request runs in it, then use it
        await send(w, "POST", [*base(w), (b"mcp-session-id", session.encode())], slow_legacy, timeout=0.3)
        await send(w, "DELETE", [base(w)[2], (b"mcp-session-id", session.encode())])
        await trio.sleep(3)
        assert (problem := await still_serving(w)) is None, f"{problem}\n{tracebacks(w)}"
        assert not tracebacks(w), tracebacks(w)
