"""The egress proxy against real TCP: clients on 127.0.0.1, upstream hosts in a test network namespace. Every
refusal is an HTTP answer with a one-line reason naming the policy line that would allow it, and a recorded
decision; no client can hang the proxy."""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from tests.egress.conftest import HTTP_PORT, TLS_PORT, MemorySink, exchange, running_proxy, static_resolver
from tests.egress.netns import NetLab
from warden.audit import AuditLogFailed, open_audit_log
from warden.egress import (
    MAX_HEAD,
    MAX_REQUEST_LINE,
    Attachment,
    EgressDecision,
    EgressProxy,
    EgressRecorder,
    EgressRules,
    ProxyLimits,
)
from warden.egress._audit import REFUSAL_BURST


def rules_for(net: NetLab) -> EgressRules:
    subnet = net.server_ip.rsplit(".", 1)[0] + ".0/24"
    return EgressRules.parse([f"web.test:{HTTP_PORT}", f"lo.test:{HTTP_PORT}", f"tls.test:{TLS_PORT}",
                              f"other.test:{TLS_PORT}"], [subnet])


def names_for(net: NetLab) -> dict[str, str]:
    return {"web.test": net.server_ip, "tls.test": net.server_ip, "other.test": net.server_ip,
            "lo.test": "127.0.0.1", "away.test": net.server_ip}


def attached(proxy: EgressProxy) -> int:
    """Attach a listener on 127.0.0.1 to ``proxy``, as a sandbox's door is; its port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    proxy.attach(listener)
    port: int = listener.getsockname()[1]
    return port


def status_line(answer: bytes) -> str:
    return answer.split(b"\r\n", 1)[0].decode()


async def test_an_allowed_request_reaches_the_host_and_is_recorded(net: NetLab) -> None:
    async with running_proxy(rules_for(net), names_for(net)) as (port, sink):
        answer = await exchange(port, f"GET http://web.test:{HTTP_PORT}/small HTTP/1.1\r\nHost: web.test\r\n\r\n"
                                .encode())
    assert status_line(answer) == "HTTP/1.1 200 OK"
    assert answer.endswith(b"<p>hello from the egress test host</p></body></html>")
    assert b"\r\nConnection: close\r\n" in answer
    assert b"keep-alive" not in answer
    [decision] = sink.decisions
    assert (decision.allowed, decision.host, decision.port, decision.address) == (True, "web.test", HTTP_PORT,
                                                                                 net.server_ip)
    [(_, index, tally)] = sink.ends
    assert index == 0
    assert tally.error is None
    assert tally.received == len(answer)
    assert tally.sent == len(f"GET /small HTTP/1.1\r\nHost: web.test:{HTTP_PORT}\r\nConnection: close\r\n\r\n")


@pytest.mark.parametrize(("request_line", "status", "reason", "rule"), [
    (f"GET http://away.test:{HTTP_PORT}/ HTTP/1.1", 403,
     f"away.test:{HTTP_PORT} is not on the egress allow-list", f'network.allow = ["away.test:{HTTP_PORT}"]'),
    ("GET http://{ip}:8080/ HTTP/1.1", 403, "{ip}:8080 is not on the egress allow-list (an IP address is "
     "allowed only by an IP entry)", 'network.allow = ["{ip}:8080"]'),
    ("GET http://web.test:8081/ HTTP/1.1", 403, "web.test:8081 is not on the egress allow-list (it is "
     "allowed on port 8080 only)", 'network.allow = ["web.test:8081"]'),
    (f"GET http://lo.test:{HTTP_PORT}/ HTTP/1.1", 403, "lo.test resolved to 127.0.0.1, a loopback address, which is "
     "refused unless explicitly allowed", 'network.allow_addresses = ["127.0.0.1/32"]'),
    ("CONNECT 127.0.0.1:3128 HTTP/1.1", 403, "127.0.0.1:3128 is not on the egress allow-list (an IP "
     "address is allowed only by an IP entry)", 'network.allow = ["127.0.0.1:3128"]'),
    ("CONNECT 169.254.169.254:80 HTTP/1.1", 403, "169.254.169.254:80 is not on the egress allow-list (an "
     "IP address is allowed only by an IP entry)", 'network.allow = ["169.254.169.254:80"]'),
    (f"CONNECT away.test:{TLS_PORT} HTTP/1.1", 403, f"away.test:{TLS_PORT} is not on the egress allow-list",
     f'network.allow = ["away.test:{TLS_PORT}"]'),
])
async def test_refusals_name_the_policy_line_and_are_recorded(net: NetLab, request_line: str, status: int,
                                                              reason: str, rule: str) -> None:
    request_line, reason, rule = (t.replace("{ip}", net.server_ip) for t in (request_line, reason, rule))
    async with running_proxy(rules_for(net), names_for(net)) as (port, sink):
        answer = await exchange(port, f"{request_line}\r\nHost: x\r\n\r\n".encode())
    text = f"refused: {reason}; to allow it: {rule}"
    assert status_line(answer) == f"HTTP/1.1 {status} warden egress {text}"
    assert answer.endswith(f"\r\n\r\nwarden egress: {text}\n".encode())
    [decision] = sink.decisions
    assert (decision.allowed, decision.reason, decision.rule, decision.address) == (False, reason, rule, None)
    assert sink.ends == []


async def test_a_name_that_does_not_resolve(net: NetLab) -> None:
    rules = EgressRules.parse(["nowhere.test:443"])
    async with running_proxy(rules, names_for(net)) as (port, sink):
        answer = await exchange(port, b"CONNECT nowhere.test:443 HTTP/1.1\r\n\r\n")
    assert status_line(answer).startswith("HTTP/1.1 502 warden egress refused: nowhere.test does not resolve")
    assert not sink.decisions[0].allowed


async def test_absolute_form_cannot_smuggle_another_host(net: NetLab) -> None:
    async with running_proxy(rules_for(net), names_for(net)) as (port, sink):
        echoed = await exchange(port, f"GET http://web.test:{HTTP_PORT}/echo HTTP/1.1\r\nHost: away.test\r\n"
                                      "Proxy-Connection: keep-alive\r\nX-Forwarded-Host: kept\r\n\r\n".encode())
        userinfo = await exchange(port, f"GET http://web.test:{HTTP_PORT}@away.test/ HTTP/1.1\r\n\r\n".encode())
        both = await exchange(port, f"POST http://web.test:{HTTP_PORT}/ HTTP/1.1\r\nContent-Length: 5\r\n"
                                    "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n".encode())
    assert status_line(echoed) == "HTTP/1.1 200 OK"
    forwarded = echoed.split(b"ECHO\n", 1)[1]
    assert forwarded == (f"GET /echo HTTP/1.1\r\nHost: web.test:{HTTP_PORT}\r\nX-Forwarded-Host: kept\r\n"
                         "Connection: close\n").encode()
    assert status_line(userinfo).startswith("HTTP/1.1 400 warden egress refused: malformed authority")
    assert status_line(both).startswith("HTTP/1.1 501 warden egress refused: Transfer-Encoding in a request")
    assert [d.allowed for d in sink.decisions] == [True, False, False]


async def test_plain_http_inside_a_tunnel_is_checked_like_a_proxy_request(net: NetLab) -> None:
    """Node's fetch tunnels http:// URLs through CONNECT: the request inside must name the tunnel's host."""
    connect = f"CONNECT web.test:{HTTP_PORT} HTTP/1.1\r\n\r\n".encode()
    async with running_proxy(rules_for(net), names_for(net)) as (port, sink):
        answer = await exchange(port, connect + f"GET /echo HTTP/1.1\r\nHost: web.test:{HTTP_PORT}\r\n"
                                               "Connection: keep-alive\r\n\r\n".encode())
    established = b"HTTP/1.1 200 Connection established\r\n\r\n"
    assert answer.startswith(established + b"HTTP/1.1 200 OK\r\n")
    assert answer.endswith(f"ECHO\nGET /echo HTTP/1.1\r\nHost: web.test:{HTTP_PORT}\r\nConnection: close\n"
                           .encode())
    assert [d.allowed for d in sink.decisions] == [True]


async def test_a_second_request_on_a_kept_alive_connection_is_refused(net: NetLab) -> None:
    first = f"GET http://web.test:{HTTP_PORT}/small HTTP/1.1\r\nConnection: keep-alive\r\n\r\n"
    second = f"GET http://away.test:{HTTP_PORT}/ HTTP/1.1\r\n\r\n"
    async with running_proxy(rules_for(net), names_for(net)) as (port, sink):
        answer = await exchange(port, (first + second).encode())
    one, two = answer.split(b"</html>", 1)
    assert status_line(one) == "HTTP/1.1 200 OK"
    assert status_line(two).startswith(f"HTTP/1.1 403 warden egress refused: a second request (away.test:{HTTP_PORT})"
                                       " on one proxy connection")
    assert [(d.allowed, d.host) for d in sink.decisions] == [(True, "web.test"), (False, "away.test")]


async def test_an_oversized_request_line_is_refused(net: NetLab) -> None:
    async with running_proxy(rules_for(net), names_for(net)) as (port, sink):
        answer = await exchange(port, b"GET http://web.test:8080/" + b"a" * MAX_REQUEST_LINE + b" HTTP/1.1\r\n\r\n")
    assert status_line(answer) == (f"HTTP/1.1 414 warden egress refused: the request line is longer than "
                                   f"{MAX_REQUEST_LINE} bytes; to allow it: a well-formed request")
    assert not sink.decisions[0].allowed


async def test_a_silent_client_is_answered_408_and_hangs_nothing(net: NetLab) -> None:
    async with running_proxy(rules_for(net), names_for(net), ProxyLimits(head_timeout=1.0)) as (port, sink):
        with trio.fail_after(60):
            silent = await trio.open_tcp_stream("127.0.0.1", port)
            half = await trio.open_tcp_stream("127.0.0.1", port)
            await half.send_all(b"GET http://web.test:8080/ HTTP/1.1\r\n")
            served = await exchange(port, f"GET http://web.test:{HTTP_PORT}/small HTTP/1.1\r\n\r\n".encode())
            answers = []
            for stream in (silent, half):
                out = b""
                while chunk := await stream.receive_some(65536):
                    out += chunk
                answers.append(out)
                await stream.aclose()
    assert status_line(served) == "HTTP/1.1 200 OK"
    for out in answers:
        assert status_line(out) == ("HTTP/1.1 408 warden egress refused: no complete request within 1 s; to allow "
                                    "it: send the request")
    assert sorted(d.allowed for d in sink.decisions) == [False, False, True]


def client_hello(sni: str | None) -> bytes:
    context = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=sni)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


async def test_connect_requires_the_sni_to_be_the_allowed_name(net: NetLab) -> None:
    connect = f"CONNECT tls.test:{TLS_PORT} HTTP/1.1\r\nHost: tls.test:{TLS_PORT}\r\n\r\n".encode()
    hello = client_hello("tls.test")
    async with running_proxy(rules_for(net), names_for(net)) as (port, sink):
        good = await exchange(port, connect + hello)
        fronted = await exchange(port, connect + client_hello("other.test"))
        bare = await exchange(port, connect + client_hello(None))
        plain = await exchange(port, connect + b"GET / HTTP/1.1\r\nHost: away.test\r\n\r\n")
        ssh = await exchange(port, connect + b"SSH-2.0-OpenSSH_9.2\r\n\r\n")
    established = b"HTTP/1.1 200 Connection established\r\n\r\n"
    assert good == established + b"GOT %d\n" % len(hello)  # the host got exactly the ClientHello
    assert fronted == established
    assert bare == established
    assert status_line(plain[len(established):]).startswith(
        "HTTP/1.1 403 warden egress refused: the request inside the tunnel is for 'away.test', not the allowed "
        f"tls.test:{TLS_PORT} (no domain fronting)")
    assert status_line(ssh[len(established):]).startswith(
        "HTTP/1.1 400 warden egress refused: a request inside a tunnel must be in origin form (GET /path)")
    refusals = [d.reason for d in sink.decisions if not d.allowed]
    assert refusals == [
        "the TLS ClientHello asks for 'other.test', not the allowed 'tls.test' (no domain fronting)",
        "the ClientHello names no server (SNI)",
        "inside the tunnel: the request inside the tunnel is for 'away.test', not the allowed "
        f"tls.test:{TLS_PORT} (no domain fronting)",
        "inside the tunnel: a request inside a tunnel must be in origin form (GET /path)",
    ]
    assert next((t.sent, t.received) for _, _, t in sink.ends) == (len(hello), len(f"GOT {len(hello)}\n"))


class _BrokenLog(MemorySink):
    async def decided(self, decision: EgressDecision) -> int | None:
        await trio.lowlevel.checkpoint()
        raise AuditLogFailed("fdatasync failed: EIO")


async def test_what_cannot_be_recorded_is_refused_and_the_proxy_goes_on(net: NetLab) -> None:
    proxy = EgressProxy(rules_for(net), _BrokenLog(), resolver=static_resolver(names_for(net)))
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        port = attached(proxy)
        answers = [await exchange(port, f"GET http://web.test:{HTTP_PORT}/small HTTP/1.1\r\n\r\n".encode())
                   for _ in range(2)]
        nursery.cancel_scope.cancel()
    for answer in answers:  # nothing reached the host, and the second connection was still served
        assert status_line(answer) == ("HTTP/1.1 503 warden egress refused: the audit log cannot record this "
                                       "connection; to allow it: a working audit log (see warden audit verify)")


async def test_warden_s_own_port_is_refused_even_inside_allow_addresses() -> None:
    own = socket.socket()  # stands for warden's HTTP face on loopback
    own.bind(("127.0.0.1", 0))
    own.listen(4)
    taken = own.getsockname()[1]
    sink = MemorySink()
    proxy = EgressProxy(EgressRules.parse([f"lo.test:{taken}"], ["127.0.0.0/8"]), sink,
                        resolver=static_resolver({"lo.test": "127.0.0.1"}))
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.serve)
            port = attached(proxy)
            connect = f"CONNECT lo.test:{taken} HTTP/1.1\r\n\r\n".encode()
            before = await exchange(port, connect, close_after=True)
            proxy.own_ports.add(taken)
            after = await exchange(port, connect)
            nursery.cancel_scope.cancel()
    finally:
        own.close()
    assert before == b"HTTP/1.1 200 Connection established\r\n\r\n"  # allow_addresses made loopback reachable
    assert status_line(after) == (f"HTTP/1.1 403 warden egress refused: lo.test resolved to 127.0.0.1, and port "
                                  f"{taken} there is warden's own; to allow it: network.allow = "
                                  f'["127.0.0.1:{taken}"]')
    assert [d.allowed for d in sink.decisions] == [True, False]


async def test_a_refusal_is_a_warning_in_the_log_the_host_keeps(tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """A server's HTTP client often hides the proxy's answer behind its own words (mcp-server-fetch: "Failed to
    fetch robots.txt ... due to a connection issue"), so the refusal, with the policy line that would allow it, is
    also a warning on warden's stderr, named by server; an allowed connection adds no line."""
    own = socket.socket()
    own.bind(("127.0.0.1", 0))
    own.listen(4)
    allowed = own.getsockname()[1]
    try:
        async with open_audit_log(tmp_path) as log:
            recorder = EgressRecorder(log, server_name="fetch", server_id=None, policy_digest=None)
            proxy = EgressProxy(EgressRules.parse([f"lo.test:{allowed}"], ["127.0.0.1/32"]), recorder,
                                resolver=static_resolver({"lo.test": "127.0.0.1"}))
            async with trio.open_nursery() as nursery:
                await nursery.start(proxy.serve)
                port = attached(proxy)
                ok = await exchange(port, f"CONNECT lo.test:{allowed} HTTP/1.1\r\n\r\n".encode(), close_after=True)
                refused = await exchange(port, b"CONNECT pypi.org:443 HTTP/1.1\r\n\r\n")
                nursery.cancel_scope.cancel()
    finally:
        own.close()
    assert ok == b"HTTP/1.1 200 Connection established\r\n\r\n"
    assert status_line(refused) == ("HTTP/1.1 403 warden egress refused: pypi.org:443 is not on the egress "
                                    'allow-list; to allow it: network.allow = ["pypi.org:443"]')
    assert [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "warden.egress._audit"] == [
        ("WARNING", 'fetch: egress refused: pypi.org:443 is not on the egress allow-list; to allow it: '
                    'network.allow = ["pypi.org:443"]')]


async def test_a_server_retrying_a_refused_host_in_a_loop_gets_a_few_warnings_not_one_each(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """warden's log queue drops what it cannot hold: a warning per refusal would let a server retrying in a loop
    crowd warden's own warnings out of it. The first :data:`REFUSAL_BURST` are said, then two a second, and the
    next one said counts those held back (the audit log has each)."""
    now = [1000.0]
    monkeypatch.setattr("warden.egress._audit.time.monotonic", lambda: now[0])
    recorder = EgressRecorder(None, server_name="loop", server_id=None, policy_digest=None)
    refused = EgressDecision(False, "pypi.org", 443, None, "pypi.org:443 is not on the egress allow-list",
                             'network.allow = ["pypi.org:443"]')
    for _ in range(100):
        await recorder.decided(refused)
    now[0] += 0.5  # one more may be said
    await recorder.decided(refused)
    said = [r.getMessage() for r in caplog.records if r.name == "warden.egress._audit"]
    assert len(said) == REFUSAL_BURST + 2
    assert said[-2] == "loop: (80 more egress refusals not shown; the audit log has each)"
    assert said[-1] == said[0]


async def test_a_large_body_arrives_whole_and_is_counted(net: NetLab) -> None:
    """The body after the response head is spliced, never read into Python: it must still arrive byte for byte,
    and the tally must count the rewritten head plus every body byte."""
    async with running_proxy(rules_for(net), names_for(net)) as (port, sink):
        with trio.fail_after(60):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await stream.send_all(f"GET http://web.test:{HTTP_PORT}/big HTTP/1.1\r\n\r\n".encode())
                await stream.send_eof()
                answer = bytearray()
                while chunk := await stream.receive_some(1 << 20):
                    answer += chunk
    head, body = bytes(answer).split(b"\r\n\r\n", 1)
    assert head == (b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 10485760\r\n"
                    b"Connection: close")
    assert body == b"x" * 10485760
    [(_, _, tally)] = sink.ends
    assert (tally.received, tally.error) == (len(answer), None)


async def answer_once(listener: trio.SocketListener, answer: bytes) -> None:
    """A local upstream: read one request head, send ``answer``, close."""
    async with await listener.accept() as stream:
        seen = b""
        while b"\r\n\r\n" not in seen:
            seen += await stream.receive_some(65536)
        await stream.send_all(answer)


async def test_a_response_head_longer_than_max_head_is_refused() -> None:
    """Even when it arrives in one piece together with its end (the proxy reads no further than MAX_HEAD + 1)."""
    [upstream] = await trio.open_tcp_listeners(0, host="127.0.0.1")
    taken = upstream.socket.getsockname()[1]
    sink = MemorySink()
    proxy = EgressProxy(EgressRules.parse([f"lo.test:{taken}"], ["127.0.0.0/8"]), sink,
                        resolver=static_resolver({"lo.test": "127.0.0.1"}))
    async with upstream, trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        nursery.start_soon(answer_once, upstream, b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * MAX_HEAD + b"\r\n\r\nbody")
        answer = await exchange(attached(proxy), f"GET http://lo.test:{taken}/ HTTP/1.1\r\n\r\n".encode(),
                                close_after=True)
        nursery.cancel_scope.cancel()
    assert status_line(answer) == ("HTTP/1.1 502 warden egress refused: the upstream response head is too large; to "
                                   "allow it: a well-formed upstream")
    [(_, _, tally)] = sink.ends
    assert (tally.received, tally.error) == (0, "the upstream response head is too large")


@asynccontextmanager
async def loopback_upstream(serve: Callable[[trio.SocketStream], Awaitable[None]]) -> AsyncIterator[
        tuple[EgressProxy, Attachment, int, int, MemorySink]]:
    """A local upstream that runs ``serve`` on its one connection, and a proxy allowed to reach it as
    ``lo.test``; yields (proxy, its attachment, the proxy's port, the upstream's port, the sink)."""
    [upstream] = await trio.open_tcp_listeners(0, host="127.0.0.1")
    taken = upstream.socket.getsockname()[1]
    sink = MemorySink()
    proxy = EgressProxy(EgressRules.parse([f"lo.test:{taken}"], ["127.0.0.0/8"]), sink,
                        resolver=static_resolver({"lo.test": "127.0.0.1"}))

    async def serve_once() -> None:
        async with await upstream.accept() as stream:
            await serve(stream)

    async with upstream, trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        nursery.start_soon(serve_once)
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        port = listener.getsockname()[1]
        attachment = proxy.attach(listener)
        yield proxy, attachment, port, taken, sink
        nursery.cancel_scope.cancel()


async def endless(stream: trio.SocketStream) -> None:
    """An upstream that sends until its connection breaks."""
    with contextlib.suppress(trio.BrokenResourceError):
        while True:
            await stream.send_all(b"y" * 65536)


async def read_at_least(stream: trio.SocketStream, size: int) -> int:
    got = 0
    while got < size:
        chunk = await stream.receive_some(1 << 20)
        assert chunk
        got += len(chunk)
    return got


def reset(stream: trio.SocketStream) -> None:
    """Close with a TCP RST (linger 0), as a client that crashes does."""
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    stream.socket.close()


async def test_a_tunnel_reset_half_way_is_counted_and_the_proxy_goes_on() -> None:
    """A tunnel whose client resets mid-stream ends that tunnel alone (its error is no exception group that would
    end the proxy), and its record counts every byte the relay delivered before the break."""
    with trio.fail_after(60):
        async with loopback_upstream(endless) as (_, _, port, taken, sink):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            connect = f"CONNECT lo.test:{taken} HTTP/1.1\r\n\r\n".encode()
            hello = client_hello("lo.test")
            await stream.send_all(connect + hello)
            established = b"HTTP/1.1 200 Connection established\r\n\r\n"
            got = await read_at_least(stream, len(established) + (1 << 20)) - len(established)
            reset(stream)
            while not sink.ends:
                await trio.sleep(0.01)
            after = await exchange(port, b"CONNECT lo.test:1 HTTP/1.1\r\n\r\n")  # the proxy still answers
    [(_, _, tally)] = sink.ends
    assert tally.sent == len(hello)
    assert tally.received >= got
    assert tally.error is not None
    assert tally.error.startswith("connection broken: ")
    assert status_line(after).startswith("HTTP/1.1 403 ")


async def test_an_upstream_that_resets_before_its_response_is_a_502_and_the_proxy_goes_on() -> None:
    async def reset_after_request(stream: trio.SocketStream) -> None:
        seen = b""
        while b"\r\n\r\n" not in seen:
            seen += await stream.receive_some(65536)
        reset(stream)

    with trio.fail_after(60):
        async with loopback_upstream(reset_after_request) as (_, _, port, taken, sink):
            answer = await exchange(port, f"GET http://lo.test:{taken}/ HTTP/1.1\r\n\r\n".encode())
            after = await exchange(port, b"CONNECT lo.test:1 HTTP/1.1\r\n\r\n")
    assert status_line(answer) == ("HTTP/1.1 502 warden egress refused: the upstream connection failed before a "
                                   "response (Connection reset by peer); to allow it: a working upstream")
    [(_, _, tally)] = sink.ends
    assert (tally.received, tally.error) == (0, "the upstream connection failed before a response (Connection "
                                                "reset by peer)")
    assert status_line(after).startswith("HTTP/1.1 403 ")


async def test_closing_a_sandbox_s_attachment_mid_download_ends_it_and_counts_what_was_relayed() -> None:
    async def head_then_endless(stream: trio.SocketStream) -> None:
        seen = b""
        while b"\r\n\r\n" not in seen:
            seen += await stream.receive_some(65536)
        with contextlib.suppress(trio.BrokenResourceError):
            await stream.send_all(b"HTTP/1.1 200 OK\r\n\r\n")
            await endless(stream)

    with trio.fail_after(60):
        async with loopback_upstream(head_then_endless) as (_, attachment, port, taken, sink):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await stream.send_all(f"GET http://lo.test:{taken}/ HTTP/1.1\r\n\r\n".encode())
                got = await read_at_least(stream, 1 << 20)
                attachment.close()
                with contextlib.suppress(trio.BrokenResourceError):  # the proxy ends the connection
                    while chunk := await stream.receive_some(1 << 20):
                        got += len(chunk)
            while not sink.ends:
                await trio.sleep(0.01)
    [(_, _, tally)] = sink.ends
    assert tally.received == got  # the client got exactly what the record says was relayed
    assert tally.error == "ended by warden before it finished (its sandbox or the proxy stopped)"
