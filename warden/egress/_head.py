"""The proxy's request parser: one HTTP/1.1 request head (request line and headers), as bytes, to a value.

Sans-IO and strict, because a lenient parser is how smuggling works: a proxy and the server behind it must never
read one byte stream as two different requests. So: CRLF line ends only; one space between the three parts of the
request line; ``CONNECT host:port`` (authority-form) or ``http://host[:port]/path`` (absolute-form, the only forms a
forward proxy receives); no userinfo, fragment or percent-encoding in the authority; no obsolete line folding; no
``Transfer-Encoding`` (request bodies are ``Content-Length`` only), and one ``Content-Length`` at most. Anything
else is a :class:`HeadError` with the status to answer and a one-line reason.

:func:`origin_request` renders what goes upstream: origin-form request line, ``Host`` replaced by the authority the
decision was made on (RFC 9112 3.2.2), hop-by-hop and ``Proxy-*`` headers dropped, ``Connection: close`` added.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import final

from warden.egress._allow import EntryError, parse_ip, parse_port

#: Request line cap (nginx's large_client_header_buffers default is 8 KiB per line; Go's net/http allows 1 MiB
#: for the whole head). A URL past this is refused with 414, a head past MAX_HEAD with 431.
MAX_REQUEST_LINE = 8192
MAX_HEAD = 32768
MAX_HEADERS = 100

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_FIELD_VALUE = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")
_PATH = re.compile(r"[!$&'()*+,;=:@/?%\-._~0-9A-Za-z]*")
_HOP_BY_HOP = {b"connection", b"keep-alive", b"proxy-connection", b"proxy-authorization", b"proxy-authenticate",
               b"te", b"trailer", b"transfer-encoding", b"upgrade", b"host"}


class HeadError(ValueError):
    """A request head warden will not forward. ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@final
@dataclass(frozen=True, slots=True)
class ProxyRequest:
    """One parsed request. ``host`` is as written (a name, or an IP literal without brackets), ``target`` the
    origin-form path and query for absolute-form requests (empty for CONNECT)."""

    method: str
    host: str
    port: int
    target: str
    version: str
    headers: tuple[tuple[bytes, bytes], ...]
    content_length: int

    @property
    def is_connect(self) -> bool:
        return self.method == "CONNECT"

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def find_head_end(buffer: bytes | bytearray, searched: int = 0) -> int:
    """The length of the head at the start of ``buffer`` (through its blank line), or -1 if it is not complete.
    ``searched``: how much of ``buffer`` an earlier call already saw without finding the end, so a head that
    arrives a byte at a time costs linear time, not quadratic.

    Raises:
        HeadError: the request line or the head is already longer than its cap (414 / 431).
    """
    end = buffer.find(b"\r\n\r\n", max(0, searched - 3))
    line_end = buffer.find(b"\r\n", 0, MAX_REQUEST_LINE + 2)
    if (line_end == -1 and len(buffer) > MAX_REQUEST_LINE) or line_end > MAX_REQUEST_LINE:
        raise HeadError(414, f"the request line is longer than {MAX_REQUEST_LINE} bytes")
    if (end == -1 and len(buffer) > MAX_HEAD) or end + 4 > MAX_HEAD:
        raise HeadError(431, f"the request head is longer than {MAX_HEAD} bytes")
    return -1 if end == -1 else end + 4


def _authority(text: str, default_port: int | None) -> tuple[str, int]:
    if not text or any(c in text for c in "@%\\/?#") or not text.isascii():
        raise HeadError(400, f"malformed authority {text!r} (no userinfo, percent-encoding or path)")
    if text.startswith("["):
        close = text.find("]")
        host, rest = text[1:close], text[close + 1:]
        if close == -1 or parse_ip(host) is None or ":" not in host:
            raise HeadError(400, f"malformed IPv6 authority {text!r}")
    else:
        host, colon, port_text = text.partition(":")
        rest = colon + port_text
        if not host:
            raise HeadError(400, f"malformed authority {text!r}")
    if rest:
        if not rest.startswith(":"):
            raise HeadError(400, f"malformed authority {text!r}")
        try:
            return host, parse_port(rest[1:])
        except EntryError as exc:
            raise HeadError(400, f"malformed port in {text!r}") from exc
    if default_port is None:
        raise HeadError(400, f"CONNECT needs host:port, got {text!r}")
    return host, default_port


def parse_request_head(head: bytes) -> ProxyRequest:
    """Parse one complete request head (``head`` ends with the blank line, see :func:`find_head_end`).

    Raises:
        HeadError: the head is malformed, too large, or asks for something warden's proxy does not do.
    """
    if len(head) > MAX_HEAD or not head.endswith(b"\r\n\r\n"):
        raise HeadError(431 if len(head) > MAX_HEAD else 400, "incomplete or oversized request head")
    lines = head[:-4].split(b"\r\n")
    if len(lines[0]) > MAX_REQUEST_LINE:
        raise HeadError(414, f"the request line is longer than {MAX_REQUEST_LINE} bytes")
    if len(lines) - 1 > MAX_HEADERS:
        raise HeadError(431, f"more than {MAX_HEADERS} header fields")
    if b"\n" in head.replace(b"\r\n", b"") or b"\r" in head.replace(b"\r\n", b""):
        raise HeadError(400, "bare CR or LF in the request head")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0"):
        raise HeadError(400, "malformed request line (METHOD SP TARGET SP HTTP/1.1)")
    method, raw_target, version = parts[0].decode(), parts[1], parts[2].decode()
    try:
        target_text = raw_target.decode("ascii")
    except UnicodeDecodeError as exc:
        raise HeadError(400, "non-ASCII request target") from exc
    headers: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):
            raise HeadError(400, "malformed header field (or obsolete line folding)")
        value = value.strip(b" \t")
        if not _FIELD_VALUE.fullmatch(value):
            raise HeadError(400, f"control character in header {name.decode()!r}")
        headers.append((name, value))
    lowered = [(n.lower(), v) for n, v in headers]
    if any(n == b"transfer-encoding" for n, _ in lowered):
        raise HeadError(501, "Transfer-Encoding in a request is not forwarded (send a Content-Length body, or "
                             "use https through CONNECT)")
    lengths = [v for n, v in lowered if n == b"content-length"]
    if len(lengths) > 1 or (lengths and not re.fullmatch(rb"[0-9]{1,15}", lengths[0])):
        raise HeadError(400, "more than one, or a malformed, Content-Length")
    content_length = int(lengths[0]) if lengths else 0
    if method == "CONNECT":
        host, port = _authority(target_text, None)
        if content_length:
            raise HeadError(400, "CONNECT with a body")
        return ProxyRequest(method, host, port, "", version, tuple(headers), 0)
    lower = target_text.lower()
    if lower.startswith("https://"):
        raise HeadError(400, "https:// URLs go through CONNECT, not as a plain proxy request")
    if not lower.startswith("http://"):
        raise HeadError(400, "a proxy request needs an absolute http:// URL (or CONNECT host:port)")
    rest = target_text[len("http://"):]
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i != -1), default=len(rest))
    authority, path = rest[:cut], rest[cut:]
    if "#" in path or not _PATH.fullmatch(path):
        raise HeadError(400, "malformed path in the request URL")
    host, port = _authority(authority, 80)
    if not path.startswith("/"):
        path = "/" + path
    return ProxyRequest(method, host, port, path, version, tuple(headers), content_length)


def parse_tunneled_head(head: bytes, tunnel: ProxyRequest) -> ProxyRequest:
    """A plain-HTTP request sent inside the CONNECT ``tunnel``: origin form (``GET /path``), with a ``Host`` that
    names the tunnel's destination (so a shared address cannot front for another site). Returns it as the
    equivalent absolute-form request to that destination.

    Raises:
        HeadError: malformed, not origin form, or its ``Host`` names another destination.
    """
    probe = head.split(b" ", 2)
    if len(probe) < 3 or not probe[1].startswith(b"/") or probe[0] == b"CONNECT":
        raise HeadError(400, "a request inside a tunnel must be in origin form (GET /path)")
    authority = tunnel.authority.encode()
    request = parse_request_head(probe[0] + b" http://" + authority + probe[1] + b" " + probe[2])
    hosts = [v for n, v in request.headers if n.lower() == b"host"]
    if len(hosts) != 1:
        raise HeadError(400, "a request inside a tunnel needs exactly one Host header")
    try:
        host, port = _authority(hosts[0].decode("ascii"), tunnel.port)
    except UnicodeDecodeError as exc:
        raise HeadError(400, "non-ASCII Host header") from exc
    if host.lower().rstrip(".") != tunnel.host.lower().rstrip(".") or port != tunnel.port:
        raise HeadError(403, f"the request inside the tunnel is for {hosts[0].decode('ascii', 'replace')!r}, not the "
                             f"allowed {tunnel.authority} (no domain fronting)")
    return request


def origin_request(request: ProxyRequest) -> bytes:
    """The head to send upstream for an absolute-form ``request`` (see the module docstring)."""
    named = {n.strip().lower() for name, value in request.headers if name.lower() == b"connection"
             for n in value.split(b",")}
    host = request.authority if request.port != 80 else (f"[{request.host}]" if ":" in request.host
                                                            else request.host)
    out = [f"{request.method} {request.target} HTTP/1.1".encode(), b"Host: " + host.encode()]
    out += [name + b": " + value for name, value in request.headers
            if name.lower() not in _HOP_BY_HOP and name.lower() not in named]
    out.append(b"Connection: close")
    return b"\r\n".join(out) + b"\r\n\r\n"


def close_response_head(head: bytes) -> bytes:
    """An upstream response head with ``Connection: close`` (and no keep-alive headers): the proxy carries one
    request per connection, so the client must not send a second one on it.

    Raises:
        HeadError: the status line is malformed (502).
    """
    lines = head[:-4].split(b"\r\n") if head.endswith(b"\r\n\r\n") else []
    if not lines or not re.fullmatch(rb"HTTP/1\.[01] [0-9]{3}( [\t\x20-\x7e\x80-\xff]*)?", lines[0]):
        raise HeadError(502, "the upstream server sent a malformed response")
    kept = [line for line in lines[1:]
            if line.partition(b":")[0].strip().lower() not in (b"connection", b"keep-alive", b"proxy-connection")]
    return b"\r\n".join([lines[0], *kept, b"Connection: close"]) + b"\r\n\r\n"


def status_response(status: int, reason: str) -> bytes:
    """A complete response whose status line *and* one-line body carry ``reason``: HTTP clients put the status
    line of a refused CONNECT (httpx, undici) or the body (curl) into their error, so the host sees it.
    Non-printable and non-ASCII characters become ``?`` (a reason can quote what the client sent)."""
    line = "".join(c if " " <= c <= "~" else "?" for c in reason)[:1024]
    body = f"warden egress: {line}\n".encode()
    return (f"HTTP/1.1 {status} warden egress {line}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\nX-Warden-Egress: refused\r\n\r\n").encode() + body
