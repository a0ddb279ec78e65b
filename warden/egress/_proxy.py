"""The per-sandbox egress proxy: an HTTP forward proxy (CONNECT and absolute-form) that decides every connection.

One :class:`EgressProxy` serves one server's sandboxes. Its listening sockets live *inside* each sandbox's own
network namespace (``127.0.0.1:3128`` there, opened by :func:`open_sandbox_listener`), so the sandbox keeps an
empty network namespace with nothing but loopback, and the only thing it can reach is this proxy. For each
connection:

1. read one request head, within ``head_timeout`` and :data:`~warden.egress._head.MAX_HEAD` (a client that never
   sends is answered 408 and recorded; an oversized line 414);
2. check the name (or IP literal) and port against the allow-list (:class:`EgressRules`);
3. resolve the name here, on the host, and check each *resolved* address; connect to the address that passed,
   never to the name (no second lookup, so a DNS answer cannot change between check and connect);
4. write the decision to the audit log *before* connecting (write-ahead; an audit failure refuses);
5. CONNECT: answer 200, then require the TLS ClientHello's SNI to be the allowed name; absolute-form: send the
   request upstream in origin form with ``Host`` set to the decided authority, relay the response with
   ``Connection: close``. A second request on the same connection is refused and recorded;
6. record the bytes each way when the connection ends.

A refusal is an HTTP 403 (or 4xx/5xx) whose status line and one-line body say what was refused and which policy
line would allow it; that text is what the server's HTTP client puts in its error, so the host sees it. Each
connection is its own task with its own deadlines: no client can hang the proxy or another connection.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import ipaddress
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol, final

import trio

from warden.egress._allow import EgressRules, IPAddress, Verdict, parse_ip
from warden.egress._head import (
    MAX_HEAD,
    HeadError,
    ProxyRequest,
    close_response_head,
    find_head_end,
    origin_request,
    parse_request_head,
    parse_tunneled_head,
    status_response,
)
from warden.egress._tls import ClientHelloError, client_hello_size, server_name
from warden.errors import AuditError

log = logging.getLogger(__name__)

PROXY_PORT = 3128
_CHUNK = 256 * 1024

Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]


@final
@dataclass(frozen=True, slots=True)
class ProxyLimits:
    """Deadlines and bounds of one proxy. ``head_timeout`` bounds a request head (and a ClientHello),
    ``connect_timeout`` a DNS lookup plus TCP connect, ``max_connections`` what one server may hold open."""

    head_timeout: float = 10.0
    connect_timeout: float = 10.0
    response_head_timeout: float = 60.0
    max_connections: int = 64


@final
@dataclass(frozen=True, slots=True)
class EgressDecision:
    """One decision, as the audit record gets it. ``host`` is what the server asked for ("" when the request could
    not even be parsed), ``address`` what the proxy resolved and checked (None when it got no further)."""

    allowed: bool
    host: str
    port: int
    address: str | None
    reason: str
    rule: str
    method: str = "CONNECT"


@final
@dataclass(slots=True)
class EgressTally:
    """Bytes carried by one allowed connection: ``sent`` from the server out, ``received`` back in."""

    sent: int = 0
    received: int = 0
    error: str | None = None


class EgressSink(Protocol):
    """Where decisions go (the audit log, see :class:`warden.egress.EgressRecorder`)."""

    async def decided(self, decision: EgressDecision) -> int | None:
        """Record ``decision`` durably; returns its record index. Raising ``AuditError`` refuses the
        connection (with a 503 saying so)."""
        ...

    def closed(self, decision: EgressDecision, index: int | None, tally: EgressTally) -> None:
        """Record how an allowed connection ended (never blocks)."""
        ...


async def resolve_host(host: str, port: int) -> list[IPAddress]:
    """The addresses ``host`` resolves to on warden's side (IPv4 and IPv6, the resolver's order)."""
    infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    out: list[IPAddress] = []
    for family, _, _, _, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            address = ipaddress.ip_address(sockaddr[0])
            if address not in out:
                out.append(address)
    return out


class _Refused(Exception):
    """Internal: answer ``status`` with ``verdict`` (already recorded or to be recorded) and close."""

    def __init__(self, status: int, verdict: Verdict, request: ProxyRequest | None = None) -> None:
        super().__init__(verdict.reason)
        self.status = status
        self.verdict = verdict
        self.request = request


def refusal_text(verdict: Verdict) -> str:
    """The one line a refused client gets: what was refused, and the policy line that would allow it."""
    return f"refused: {verdict.reason}; to allow it: {verdict.rule}"


@final
class _Client:
    """The client side of one connection, with what was read past the current request."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = bytearray()

    async def read_head(self) -> bytes | None:
        """One request head (None: the client closed before sending any byte). Raises ``HeadError``."""
        searched = 0
        while True:
            end = find_head_end(self.buffer, searched)
            if end >= 0:
                head = bytes(self.buffer[:end])
                del self.buffer[:end]
                return head
            searched = len(self.buffer)
            chunk = await self.stream.receive_some(MAX_HEAD)
            if not chunk:
                if not self.buffer:
                    return None
                raise HeadError(400, "the client closed the connection in the middle of a request head")
            self.buffer += chunk


@final
class EgressProxy:
    """The proxy for one server (see the module docstring). Start :meth:`serve` in a nursery first, then
    :meth:`attach` each sandbox's listening socket; :meth:`serve` owns every connection task."""

    def __init__(self, rules: EgressRules, sink: EgressSink, *, resolver: Resolver = resolve_host,
                 limits: ProxyLimits | None = None) -> None:
        self.rules = rules
        self._sink = sink
        self._resolve = resolver
        self.limits = limits or ProxyLimits()
        self._nursery: trio.Nursery | None = None
        self._slots = trio.CapacityLimiter(self.limits.max_connections)
        self.own_ports: set[int] = set()
        """Ports warden itself listens on (``warden run --http``): refused on loopback (see ``check_address``)."""

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled; every listener and connection task lives in here."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None

    def attach(self, listener: socket.socket) -> Attachment:
        """Accept connections on ``listener`` (a listening socket; the proxy takes it over) until the returned
        attachment is closed.

        Raises:
            RuntimeError: :meth:`serve` is not running (a caller bug: launches must not start without it).
        """
        if self._nursery is None:
            listener.close()
            raise RuntimeError("the egress proxy is not serving")
        attachment = Attachment(trio.socket.from_stdlib_socket(listener))
        self._nursery.start_soon(self._accept_loop, attachment)
        return attachment

    async def _accept_loop(self, attachment: Attachment) -> None:
        with attachment.scope:
            async with trio.open_nursery() as nursery:
                while True:
                    try:
                        sock, _ = await attachment.listener.accept()
                    except OSError as exc:
                        if exc.errno in (errno.EBADF, errno.EINVAL):
                            return  # the attachment was closed
                        if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                            await trio.sleep(0.1)  # out of descriptors: back off instead of spinning
                            continue
                        raise
                    nursery.start_soon(self._connection, sock)

    async def _connection(self, sock: trio.socket.SocketType) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a refusal or a response head goes out now
        stream = trio.SocketStream(sock)
        try:
            if self._slots.borrowed_tokens >= self._slots.total_tokens:
                await self._answer(stream, 503, Verdict(False, f"this server already has "
                                                               f"{self.limits.max_connections} connections open",
                                                        "fewer concurrent connections"), record=True)
                return
            async with self._slots:
                await self.handle(_Client(stream))
        except trio.BrokenResourceError:
            pass  # the client went away; its record (if any) was written by handle()
        except AuditError as exc:
            # Write-ahead: what cannot be recorded does not happen. The connection is refused; the proxy (and
            # every other connection) goes on, and refuses the same way until the log works again.
            log.error("egress refused: the audit log cannot record it: %s", exc)
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await self._answer(stream, 503, Verdict(False, "the audit log cannot record this connection",
                                                        "a working audit log (see warden audit verify)"),
                                   record=False)
        finally:
            await trio.aclose_forcefully(stream)

    async def _answer(self, stream: trio.SocketStream, status: int, verdict: Verdict, *, record: bool,
                      request: ProxyRequest | None = None) -> None:
        if record:
            await self._sink.decided(EgressDecision(
                False, request.host if request else "", request.port if request else 0, None, verdict.reason,
                verdict.rule, request.method if request else ""))
        text = refusal_text(verdict)
        with trio.move_on_after(self.limits.head_timeout):
            await stream.send_all(status_response(status, text))

    async def handle(self, client: _Client) -> None:
        """Serve one client connection: its request and, for absolute-form, its refused follow-ups."""
        first = True
        while True:
            request: ProxyRequest | None = None
            try:
                request = await self._next_request(client, first=first)
                if request is None:
                    return
                await self._forward(client, request)
            except HeadError as exc:
                await self._answer(client.stream, exc.status, Verdict(False, exc.reason, "a well-formed request"),
                                   record=True)
                return
            except _Refused as exc:
                await self._answer(client.stream, exc.status, exc.verdict, record=True, request=exc.request)
                return
            if request.is_connect:
                return
            first = False

    async def _next_request(self, client: _Client, *, first: bool) -> ProxyRequest | None:
        """The next request head on ``client`` (None: it closed, or went idle after its one request).

        Raises:
            HeadError: malformed or oversized.
            _Refused: none came in time, or it is a second request on this connection.
        """
        with trio.move_on_after(self.limits.head_timeout) as scope:
            head = await client.read_head()
        if scope.cancelled_caught:
            if first or client.buffer:
                raise _Refused(408, Verdict(False, f"no complete request within {self.limits.head_timeout:g} s",
                                            "send the request"))
            return None
        if head is None:
            return None
        request = parse_request_head(head)
        if not first:
            raise _Refused(403, Verdict(False, f"a second request ({request.authority}) on one proxy connection; "
                                               "warden's proxy carries one request per connection (it answered "
                                               "Connection: close)", "open a new connection for each request"),
                           request)
        return request

    async def _decide(self, request: ProxyRequest) -> tuple[IPAddress, Verdict]:
        verdict = self.rules.check_name(request.host, request.port)
        if not verdict.allowed:
            raise _Refused(403, verdict, request)
        literal = parse_ip(request.host)
        if literal is not None:
            candidates = [literal]
        else:
            with trio.move_on_after(self.limits.connect_timeout) as scope:
                try:
                    candidates = await self._resolve(request.host, request.port)
                except OSError as exc:
                    raise _Refused(502, Verdict(False, f"{request.host} does not resolve ({exc.strerror or exc})",
                                                "a name that resolves"), request) from exc
            if scope.cancelled_caught:
                raise _Refused(504, Verdict(False, f"{request.host} did not resolve within "
                                                   f"{self.limits.connect_timeout:g} s", "a name that resolves"),
                               request)
            if not candidates:
                raise _Refused(502, Verdict(False, f"{request.host} has no address", "a name that resolves"), request)
        refusals: list[Verdict] = []
        for address in candidates:
            checked = self.rules.check_address(request.host, address, request.port, self.own_ports)
            if checked.allowed:
                return address, Verdict(True, f"{verdict.reason} ({checked.reason})", verdict.rule)
            refusals.append(checked)
        raise _Refused(403, refusals[0], request)

    async def _forward(self, client: _Client, request: ProxyRequest) -> None:
        address, verdict = await self._decide(request)
        address_text = str(address)
        decision = EgressDecision(True, request.host, request.port, address_text, verdict.reason, verdict.rule,
                                  request.method)
        index = await self._sink.decided(decision)  # write-ahead: raises (and refuses) if it cannot be recorded
        tally = EgressTally()
        ended = False
        try:
            upstream = await self._connect(address, request.port)
            if upstream is None:
                tally.error = f"could not connect to {address_text} port {request.port}"
                await self._answer(client.stream, 502, Verdict(False, tally.error, "a reachable destination"),
                                   record=False)
                return
            async with upstream:
                if request.is_connect:
                    await self._tunnel(client, request, upstream, tally)
                else:
                    await self._exchange(client, request, upstream, tally)
            ended = True
        except _Refused as exc:  # the upstream failed after the decision: answer, and record it as the outcome
            tally.error = exc.verdict.reason
            await self._answer(client.stream, exc.status, exc.verdict, record=False)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            tally.error = tally.error or f"connection broken: {exc}"
        finally:
            if not ended and tally.error is None:  # cancelled: its sandbox was detached or the proxy stopped
                tally.error = "ended by warden before it finished (its sandbox or the proxy stopped)"
            self._sink.closed(decision, index, tally)

    async def _connect(self, address: IPAddress, port: int) -> trio.SocketStream | None:
        family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
        sock = trio.socket.socket(family, socket.SOCK_STREAM)
        with trio.move_on_after(self.limits.connect_timeout):
            try:
                await sock.connect((str(address), port))
            except OSError:
                sock.close()
                return None
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return trio.SocketStream(sock)
        sock.close()
        return None

    async def _tunnel(self, client: _Client, request: ProxyRequest, upstream: trio.SocketStream,
                      tally: EgressTally) -> None:
        await client.stream.send_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        want = None if parse_ip(request.host) is not None else request.host.lower().rstrip(".")
        with trio.move_on_after(self.limits.head_timeout):
            while not client.buffer:
                chunk = await client.stream.receive_some(_CHUNK)
                if not chunk:
                    return
                client.buffer += chunk
        if client.buffer and client.buffer[0] != 0x16:
            await self._tunneled_http(client, request, upstream, tally)
            return
        try:
            hello = await self._client_hello(client)
        except ClientHelloError as exc:
            await self._refuse_tunnel(request, str(exc), tally)
            return
        if hello is None:
            return
        try:
            name: str | None = server_name(hello)
        except ClientHelloError as exc:
            if want is not None or "names no server" not in str(exc):
                await self._refuse_tunnel(request, str(exc), tally)
                return
            name = None
        if name != want:
            await self._refuse_tunnel(request, f"the TLS ClientHello asks for {name!r}, not the allowed "
                                               f"{want or 'address (no server name)'!r} (no domain fronting)", tally)
            return
        await upstream.send_all(hello)
        tally.sent += len(hello)
        await self._relay_both(client.stream, upstream, tally)

    async def _tunneled_http(self, client: _Client, tunnel: ProxyRequest, upstream: trio.SocketStream,
                             tally: EgressTally) -> None:
        """Plain HTTP inside a CONNECT tunnel (Node's fetch tunnels ``http://`` URLs too): the request is checked
        as a proxy request would be, its ``Host`` must name the tunnel's destination, and it goes out in origin
        form with ``Connection: close``, one request per tunnel, like an absolute-form request."""
        try:
            with trio.move_on_after(self.limits.head_timeout) as scope:
                head = await client.read_head()
            if scope.cancelled_caught or head is None:
                reason = "no TLS ClientHello or HTTP request in the tunnel in time"
                await self._refuse_tunnel(tunnel, reason, tally)
                return
            inner = parse_tunneled_head(head, tunnel)
        except HeadError as exc:
            await self._refuse_tunnel(tunnel, f"inside the tunnel: {exc.reason}", tally)
            await self._answer(client.stream, exc.status, Verdict(False, exc.reason, "a well-formed request"),
                               record=False)
            return
        await self._exchange(client, inner, upstream, tally)

    async def _client_hello(self, client: _Client) -> bytes | None:
        """The first TLS record of the tunnel (None: the client closed first). Raises ``ClientHelloError``."""
        with trio.move_on_after(self.limits.head_timeout):
            while True:
                size = client_hello_size(bytes(client.buffer[:5]))
                if size is not None and len(client.buffer) >= size:
                    hello = bytes(client.buffer[:size])
                    del client.buffer[:size]
                    if client.buffer:
                        raise ClientHelloError("data after the ClientHello before the server answered")
                    return hello
                chunk = await client.stream.receive_some(_CHUNK)
                if not chunk:
                    return None
                client.buffer += chunk
        raise ClientHelloError(f"no TLS ClientHello within {self.limits.head_timeout:g} s")

    async def _refuse_tunnel(self, request: ProxyRequest, reason: str, tally: EgressTally) -> None:
        tally.error = reason
        await self._sink.decided(EgressDecision(False, request.host, request.port, None, reason,
                                                "TLS to the allowed name only", request.method))

    async def _relay_both(self, client: trio.SocketStream, upstream: trio.SocketStream, tally: EgressTally) -> None:
        """Relay a tunnel both ways. A direction that ends passes its end on and the other goes on; one that breaks
        ends both, and the tunnel's record says why (the error stays in here: a nursery would wrap it in an
        exception group, which nothing above expects, and the whole proxy would end with it)."""
        async with trio.open_nursery() as nursery:
            async def direction(source: trio.SocketStream, sink: trio.SocketStream, *, sent: bool) -> None:
                try:
                    await _pump(source, sink, _counter(tally, sent=sent))
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    tally.error = tally.error or f"connection broken: {exc}"
                    nursery.cancel_scope.cancel()

            nursery.start_soon(partial(direction, client, upstream, sent=True))
            nursery.start_soon(partial(direction, upstream, client, sent=False))

    async def _exchange(self, client: _Client, request: ProxyRequest, upstream: trio.SocketStream,
                        tally: EgressTally) -> None:
        head = origin_request(request)
        body = bytes(client.buffer[:request.content_length])
        del client.buffer[:request.content_length]
        await upstream.send_all(head + body)
        tally.sent += len(head) + len(body)
        remaining = request.content_length - len(body)
        while remaining > 0:
            chunk = await client.stream.receive_some(min(_CHUNK, remaining))
            if not chunk:
                raise trio.BrokenResourceError("the client closed before its request body was complete")
            await upstream.send_all(chunk)
            tally.sent += len(chunk)
            remaining -= len(chunk)
        with trio.move_on_after(self.limits.response_head_timeout) as scope:
            response = await _response_head(upstream.socket)
        if scope.cancelled_caught:
            raise _Refused(504, Verdict(False, "the upstream server sent no response in time", "a working upstream"))
        try:
            rewritten = close_response_head(response)
        except HeadError as exc:
            raise _Refused(502, Verdict(False, exc.reason, "a well-formed upstream")) from exc
        await client.stream.send_all(rewritten)
        tally.received += len(rewritten)
        await _pump(upstream, client.stream, _counter(tally, sent=False), half_close=False)


async def _response_head(sock: trio.socket.SocketType) -> bytes:
    """The upstream's response head, read through its blank line and not a byte further. Reads peek first and
    take only head bytes, so the body stays in the socket for :func:`_pump` to splice: none of it is copied
    through Python, and the client gets the head without waiting for a large first read of the body.

    Raises:
        _Refused: the upstream closed (or reset the connection) before the head was complete, or the head is
            longer than ``MAX_HEAD``.
    """
    try:
        return await _read_response_head(sock)
    except OSError as exc:  # the raw socket's errors (a SocketStream would have made them BrokenResourceError)
        raise _Refused(502, Verdict(False, f"the upstream connection failed before a response "
                                           f"({exc.strerror or exc})", "a working upstream")) from exc


async def _read_response_head(sock: trio.socket.SocketType) -> bytes:
    head = bytearray()
    while True:
        seen = await sock.recv(MAX_HEAD + 1 - len(head), socket.MSG_PEEK)
        if not seen:
            raise _Refused(502, Verdict(False, "the upstream server closed without a response", "a working upstream"))
        end = (head + seen).find(b"\r\n\r\n", max(0, len(head) - 3))
        size = len(head) + len(seen) if end == -1 else end + 4
        if size > MAX_HEAD:
            raise _Refused(502, Verdict(False, "the upstream response head is too large", "a well-formed upstream"))
        head += await sock.recv(size - len(head))  # the peeked bytes are queued: this takes them at once
        if end != -1 and len(head) == size:
            return bytes(head)


_SPLICE = 1 << 20


def _counter(tally: EgressTally, *, sent: bool) -> Callable[[int], None]:
    """What :func:`_pump` calls with each count of bytes it delivered: ``tally.sent`` or ``tally.received``."""
    def count(moved: int) -> None:
        if sent:
            tally.sent += moved
        else:
            tally.received += moved
    return count


async def _pump(source: trio.SocketStream, sink: trio.SocketStream, count: Callable[[int], None], *,
                half_close: bool = True) -> None:
    """Move bytes from ``source`` to ``sink`` until ``source`` ends. The bytes go through a pipe with ``splice(2)``,
    so they never enter Python (the relay keeps up with the link instead of the interpreter). ``count`` gets each
    batch as it is delivered, so a relay that breaks or is cancelled half-way still has every byte it moved on
    record. ``half_close``: pass the end on (``shutdown(SHUT_WR)``), so each direction of a tunnel ends on its own."""
    src, dst = source.socket, sink.socket
    try:
        pipe_r, pipe_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:  # out of descriptors: this connection ends, the proxy goes on
        raise trio.BrokenResourceError(f"no pipe for the relay: {exc.strerror}") from exc
    with contextlib.suppress(OSError):  # a 1 MiB pipe (fs.pipe-max-size's default): 16x fewer splices than 64 KiB
        fcntl.fcntl(pipe_w, fcntl.F_SETPIPE_SZ, _SPLICE)
    try:
        while True:
            try:
                moved = os.splice(src.fileno(), pipe_w, _SPLICE, flags=os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(src)
                continue
            except OSError as exc:
                raise trio.BrokenResourceError(f"read failed: {exc.strerror}") from exc
            if moved == 0:
                break
            while moved:
                try:
                    sent = os.splice(pipe_r, dst.fileno(), moved, flags=os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK)
                except BlockingIOError:
                    await trio.lowlevel.wait_writable(dst)
                    continue
                except OSError as exc:
                    raise trio.BrokenResourceError(f"write failed: {exc.strerror}") from exc
                moved -= sent
                count(sent)
            await trio.lowlevel.checkpoint_if_cancelled()
    finally:
        os.close(pipe_r)
        os.close(pipe_w)
    if half_close:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


@final
@dataclass(eq=False)
class Attachment:
    """One sandbox's listener on the proxy. :meth:`close` stops accepting and ends that sandbox's connections."""

    listener: trio.socket.SocketType
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)

    def close(self) -> None:
        self.scope.cancel()
        self.listener.close()

