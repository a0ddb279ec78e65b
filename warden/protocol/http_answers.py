"""Reading the HTTP answer to one MCP message: status, content type and body to a JSON-RPC outcome. Pure.

warden's HTTP upstream client (:mod:`warden.transport.http_client`) turns HTTP into the message stream the upstream
session reads, so every answer has to become *something* the session understands: a response, an error, or
nothing (a notification accepted). The rules live here, apart from the sockets, so they can be tested exhaustively:

* :func:`classify` - what to do with an answer from its status and content type alone, before reading its body;
* :func:`request_outcome` - the one JSON-RPC message a request's answer stands for. A JSON-RPC error in the body of
  a 4xx is the server's answer and is delivered as it is (a modern server says ``-32022`` with 400, an unknown
  method with 404 + ``-32601``); anything that is not a JSON-RPC answer to *this* request (a bare-text 400, an
  HTML error page, ``200 {}``, an answer to another id) becomes a warden error (``-32603``, with the HTTP status
  in ``data``), never a success and never one of the modern codes -32020..-32022;
* :func:`falls_back_to_sse` - the 2025-11-25 backward-compatibility rule (ER12): an ``initialize`` POST refused
  with 400, 404 or 405 means "try the 2024-11-05 HTTP+SSE transport";
* :func:`resolve_endpoint`, :func:`redirect_target`, :func:`same_origin` - where warden may send a message (and
  the credentials that go with it): only to the configured origin (AU06);
* :func:`valid_session_id`, :func:`resumable_event_id`, :func:`resume_delay` - small bounds on what a server may
  make warden do.

How the era probe reads these outcomes (ER09-ER11). warden's first POST is ``server/discover`` with every modern
header. A success delivered here is read by :class:`~warden.protocol.probe.StdioProbe` like any other answer: a
``DiscoverResult`` means modern. A 400/404/405 whose body is a JSON-RPC error is delivered as that error, so
``-32020``/``-32021``/``-32022`` mean modern (fix the request or pick a version, and retry). A 404 with ``-32601``
is delivered too, and the probe reads it as *legacy*: the seed lists "404 + -32601" among the modern answers
because that is how a modern server refuses a method it does not know, but the method here is ``server/discover``,
which every modern server MUST implement (2026-07-28 server/discover.mdx). Only a server that is not modern can
answer *it* with "method not found"; treating that as modern would make warden retry a request the server has
just said it will never serve, instead of falling back to ``initialize``. Everything else (a bare-text 400,
``200 {}``, HTML) arrives as a ``-32603`` warden error or a non-``DiscoverResult`` result: legacy, as ER11 says.
"""

from __future__ import annotations

import enum
import re
from typing import Final
from urllib.parse import urljoin, urlsplit

from warden.errors import RemoteProtocolError
from warden.protocol.messages import (
    INTERNAL_ERROR,
    ErrorResponse,
    Message,
    Response,
    encode_error,
    encode_error_object,
    parse_message,
)

__all__ = [
    "DEFAULT_RESUME_DELAY",
    "MAX_EVENT_ID_LENGTH",
    "MAX_RESUME_DELAY",
    "MAX_SESSION_ID_LENGTH",
    "MIN_RESUME_DELAY",
    "AnswerKind",
    "classify",
    "content_encoding_problem",
    "falls_back_to_sse",
    "http_failure",
    "media_type",
    "redirect_target",
    "request_outcome",
    "resolve_endpoint",
    "resumable_event_id",
    "resume_delay",
    "same_origin",
    "valid_session_id",
]

JSON_TYPE: Final = "application/json"
EVENT_STREAM_TYPE: Final = "text/event-stream"
DEFAULT_RESUME_DELAY: Final = 1.0
"""Seconds to wait before resuming a stream whose server never sent ``retry``."""
MAX_RESUME_DELAY: Final = 60.0
"""A server's ``retry`` is honoured up to this many seconds; a larger one cannot park a request for hours."""
MIN_RESUME_DELAY: Final = 0.1
"""...and from this many: a server that ends its stream at once with ``retry: 0`` (and a new event id, so that it
never counts as failing) cannot make warden reconnect in a busy loop."""
MAX_SESSION_ID_LENGTH: Final = 1024
_SESSION_ID: Final = re.compile(r"[\x21-\x7e]+")
MAX_EVENT_ID_LENGTH: Final = 1024
_EVENT_ID: Final = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?")
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_SNIPPET: Final = 200


class AnswerKind(enum.Enum):
    """What to do with an HTTP answer, decided from its status and content type."""

    JSON = "json"
    """Read the (bounded) body as one JSON-RPC message: a 2xx, or an error status whose body says JSON."""
    EVENT_STREAM = "event-stream"
    """Read the body as Server-Sent Events: a 2xx ``text/event-stream``."""
    ACCEPTED = "accepted"
    """202 Accepted or 204 No Content: what a notification or a response POST should get."""
    SESSION_LOST = "session-lost"
    """404 to a request that carried ``Mcp-Session-Id``: the server forgot the session (HL05)."""
    REDIRECT = "redirect"
    """307 or 308: the same request again at another URL, followed only within the origin."""
    FAILURE = "failure"
    """Anything else: a status or content type no MCP answer has. Read a short snippet for the message."""


def media_type(content_type: str | None) -> str:
    """The media type of a ``Content-Type`` value, lower-cased, without parameters (``""`` when absent)."""
    if not content_type:
        return ""
    return content_type.split(";", 1)[0].strip().lower()


def classify(status: int, content_type: str | None, *, carried_session: bool) -> AnswerKind:
    """What an answer is, before its body is read.

    A 2xx must say JSON or an event stream unless it is 202/204; a 4xx/5xx is worth reading only when it says
    JSON (it may carry the JSON-RPC error that explains it). 301, 302 and 303 are failures, not redirects: an
    HTTP client turns them into a GET, which cannot carry a JSON-RPC message.
    """
    kind = media_type(content_type)
    if status == 404 and carried_session:
        return AnswerKind.SESSION_LOST
    if status in (307, 308):
        return AnswerKind.REDIRECT
    if status in (202, 204):
        return AnswerKind.ACCEPTED
    if 200 <= status < 300:
        if kind == JSON_TYPE:
            return AnswerKind.JSON
        if kind == EVENT_STREAM_TYPE:
            return AnswerKind.EVENT_STREAM
        return AnswerKind.FAILURE
    if status >= 400 and kind == JSON_TYPE:
        return AnswerKind.JSON
    return AnswerKind.FAILURE


def content_encoding_problem(content_encoding: str | None) -> str | None:
    """Why an answer with this ``Content-Encoding`` is not read, or None (identity).

    warden always asks for ``identity``: its bounds count the bytes on the wire, and a few kilobytes of gzip (five
    layers of it, for an HTTP library that undoes each) inflate to gigabytes past any of them.
    """
    encoding = (content_encoding or "identity").strip().lower()
    if encoding in ("", "identity"):
        return None
    return f"the server sent a {encoding[:_SNIPPET]!r}-encoded answer although warden asked for identity"


def _snippet(body: bytes) -> str:
    text = body[:_SNIPPET].decode("utf-8", "replace")
    text = "".join(ch if ch.isprintable() else " " for ch in text).strip()
    return text + ("…" if len(body) > _SNIPPET else "")


def http_failure(request_id: bytes, status: int | None, reason: str, body: bytes = b"") -> ErrorResponse:
    """The warden error a request gets when its answer is not a JSON-RPC answer to it.

    The code is ``-32603`` (never a modern code, so the era probe reads it as "not modern"); ``data`` carries the
    HTTP status (when there was one) so a host can tell an HTTP failure from an error the server itself sent.
    """
    message = reason + (f": {_snippet(body)}" if body.strip() else "")
    data = {"httpStatus": status} if status is not None else None
    parsed = parse_message(encode_error(request_id, INTERNAL_ERROR, message, data))
    assert isinstance(parsed, ErrorResponse)
    return parsed


def request_outcome(request_id: bytes, status: int, body: bytes) -> Response | ErrorResponse:
    """The JSON-RPC answer to request ``request_id`` that a JSON body (read under :attr:`AnswerKind.JSON`) holds.

    A success counts only with a 2xx status and the request's own id; an error counts with any status, and one
    with ``id: null`` (a server that could not read the id) is taken as the answer to this request, since one POST
    carries one request. Anything else becomes :func:`http_failure`.
    """
    message: Message = parse_message(body)
    if isinstance(message, Response) and 200 <= status < 300:
        if message.id == request_id:
            return message
        return http_failure(request_id, status, f"the server answered id {message.id[:40]!r} instead")
    if isinstance(message, ErrorResponse):
        if message.id is None:
            rebound = parse_message(encode_error_object(message.error, request_id))
            assert isinstance(rebound, ErrorResponse)
            return rebound
        if message.id == request_id:
            return message
        return http_failure(request_id, status, f"the server answered id {message.id[:40]!r} instead")
    return http_failure(request_id, status, f"HTTP {status} without a JSON-RPC answer", body)


def falls_back_to_sse(status: int) -> bool:
    """ER12: an ``initialize`` POST refused with 400, 404 or 405 means the server may speak HTTP+SSE (2024-11-05)."""
    return status in (400, 404, 405)


def _origin(url: str) -> tuple[str, str, int] | None:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port if port is not None else _DEFAULT_PORTS[scheme]


def same_origin(a: str, b: str) -> bool:
    """Whether two http(s) URLs share scheme, host and port (RFC 6454), the default port spelled or not."""
    first, second = _origin(a), _origin(b)
    return first is not None and first == second


def _follow(base: str, reference: str, what: str) -> str:
    reference = reference.strip()
    if not reference or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in reference):
        raise RemoteProtocolError(f"the server's {what} is empty or holds control characters")
    try:
        target = urljoin(base, reference)
    except ValueError as exc:  # an unbalanced "[" (IPv6 literal) in the authority
        raise RemoteProtocolError(f"the server's {what} is not a valid URL ({exc})") from exc
    if not same_origin(base, target):
        shown = target if len(target) <= 120 else target[:120] + "…"
        raise RemoteProtocolError(
            f"the server's {what} points to another origin ({shown}); warden sends messages and credentials only "
            "to the configured origin")
    parts = urlsplit(target)
    if parts.username is not None or parts.password is not None:
        raise RemoteProtocolError(f"the server's {what} carries credentials in the URL; warden does not send them")
    return parts._replace(fragment="").geturl()


def resolve_endpoint(sse_url: str, data: str) -> str:
    """The POST URL an HTTP+SSE server announced in its ``endpoint`` event, resolved against the SSE URL (SS02).

    Raises:
        RemoteProtocolError: the endpoint is empty, holds control characters, is not a URL, carries credentials,
            or lies on another origin (warden would otherwise post the session, and any configured token, elsewhere).
    """
    return _follow(sse_url, data, "endpoint event")


def redirect_target(url: str, location: str | None) -> str:
    """Where a 307/308 sends a request, if warden may follow it: within the origin only (AU06).

    Raises:
        RemoteProtocolError: no ``Location``, one that is not a URL, or one on another origin (never followed: the
            request carries the configured credentials) or with credentials in it.
    """
    if location is None:
        raise RemoteProtocolError("the server answered a redirect without a Location")
    return _follow(url, location, "redirect")


def valid_session_id(value: str) -> bool:
    """An ``Mcp-Session-Id`` is visible ASCII (0x21-0x7E) only; warden also bounds its length."""
    return len(value) <= MAX_SESSION_ID_LENGTH and _SESSION_ID.fullmatch(value) is not None


def resumable_event_id(value: str) -> str:
    """The ``Last-Event-ID`` that resumes a stream whose last event id was ``value``, or ``""`` (not resumable).

    An SSE id may be any text without NUL, a header value may not: non-ASCII would not even encode (httpx raises
    a bare UnicodeEncodeError), a control character breaks the request. So the id goes back only when it is
    printable ASCII without surrounding spaces and at most :data:`MAX_EVENT_ID_LENGTH` characters; any other id
    counts as none, and the stream is not resumed.
    """
    return value if len(value) <= MAX_EVENT_ID_LENGTH and _EVENT_ID.fullmatch(value) else ""


def resume_delay(retry_ms: int | None, *, default: float = DEFAULT_RESUME_DELAY) -> float:
    """Seconds to wait before resuming a broken event stream: the server's ``retry`` (HL11, SEP-1699), bounded."""
    if retry_ms is None:
        return default
    return min(max(retry_ms / 1000.0, MIN_RESUME_DELAY), MAX_RESUME_DELAY)
