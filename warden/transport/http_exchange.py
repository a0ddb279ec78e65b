"""One HTTP exchange with a remote MCP server, bounded: warden's httpx client of the server's origin and the
rules every exchange keeps, whichever transport (:mod:`warden.transport.http_client`) carries the messages.

* Redirects are followed only within the origin (307/308, method and body kept, at most :data:`MAX_REDIRECTS`);
  a 401/403 lets the OAuth client (if any) get a new token and the request go again, a bounded number of times.
* Every JSON body is read up to the server's ``max_message_size``; every event stream goes through a bounded
  :class:`~warden.protocol.sse.SSEParser`; compressed answers are refused (warden asks for ``identity``: a small
  gzip body could otherwise inflate past any bound).
* httpx's environment handling is off (``trust_env=False``): no proxy, ``.netrc`` or CA bundle is picked up from
  the environment behind the user's back; the configured static headers go on every request to the origin.
* What an answer turns out to be is an :data:`Outcome`; an answer that is not a JSON-RPC answer at all raises
  :class:`Unanswered`; httpx errors become warden errors here (:func:`map_http_error`), and nowhere else.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final, final
from urllib.parse import urlsplit

import httpx
import trio

from warden import __version__
from warden.auth import OAuthClient
from warden.errors import (
    ConfigError,
    LocalProtocolError,
    RemoteProtocolError,
    UpstreamClosed,
    UpstreamError,
    UpstreamTimeout,
    WardenError,
)
from warden.protocol.http_answers import (
    AnswerKind,
    classify,
    content_encoding_problem,
    http_failure,
    redirect_target,
    request_outcome,
    resolve_endpoint,
    resumable_event_id,
)
from warden.protocol.messages import ErrorResponse, Message, Response, parse_message
from warden.protocol.sse import SSEError, SSEParser
from warden.transport.http_config import HttpSettings

__all__ = [
    "ACCEPT_BOTH",
    "Accepted",
    "Answered",
    "Broken",
    "HttpExchange",
    "Outcome",
    "SessionLost",
    "Unanswered",
    "close_response",
    "encoding_problem",
    "map_http_error",
]

log = logging.getLogger(__name__)

ACCEPT_BOTH: Final = "application/json, text/event-stream"
MAX_REDIRECTS: Final = 3
MAX_AUTH_RETRIES: Final = 2
"""How often one request is sent again after a 401/403 got warden a new token (a refresh or authorization, then
at most one scope step-up)."""
ERROR_SNIPPET_BYTES: Final = 4096


# ------------------------------------------------------------------------------------------------ errors


def map_http_error(exc: httpx.HTTPError | httpx.InvalidURL | httpx.StreamError, url: str) -> WardenError:
    """The warden error for an httpx failure while talking to ``url`` (raise it ``from`` ``exc``).

    Timeouts become :class:`UpstreamTimeout`; transport failures (cannot connect, connection reset, a peer that
    breaks HTTP/1.1) :class:`UpstreamClosed`; a malformed URL (warden's configuration) :class:`ConfigError`;
    misuse of a stream (a warden bug) :class:`LocalProtocolError`; anything else :class:`UpstreamError`.
    """
    what = type(exc).__name__
    detail = str(exc) or what
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamTimeout(f"{url}: timed out ({what})")
    if isinstance(exc, httpx.ConnectError):
        return UpstreamClosed(f"cannot connect to {url}: {detail}")
    if isinstance(exc, httpx.TransportError):
        return UpstreamClosed(f"the connection to {url} failed: {detail} ({what})")
    if isinstance(exc, httpx.InvalidURL):
        return ConfigError(f"invalid URL {url!r}: {detail}")
    if isinstance(exc, httpx.StreamError):
        return LocalProtocolError(f"warden misused an HTTP stream for {url}: {detail}")
    return UpstreamError(f"HTTP request to {url} failed: {detail} ({what})")


class Unanswered(UpstreamError):
    """The server answered, but not with a JSON-RPC answer to the request (a wrong status or content type, an
    oversized or compressed body, a broken event stream, a refused redirect). Never worth re-issuing."""

    def __init__(self, reason: str, status: int | None = None, body: bytes = b"") -> None:
        super().__init__(reason)
        self.status = status
        self.body = body

    def failure(self, id_raw: bytes) -> ErrorResponse:
        """The error the request ``id_raw`` gets instead of an answer."""
        return http_failure(id_raw, self.status, self.message, self.body)


# ------------------------------------------------------------------------------------------------ outcomes


@final
@dataclass(frozen=True, slots=True)
class Answered:
    """The request's own response arrived (already re-bound to the id the request went out with)."""

    message: Response | ErrorResponse
    status: int
    headers: httpx.Headers


@final
@dataclass(frozen=True, slots=True)
class Broken:
    """The answer ended, or the connection broke, before the final response."""

    reason: str
    last_event_id: str = ""
    retry: int | None = None


@final
@dataclass(frozen=True, slots=True)
class Accepted:
    status: int
    headers: httpx.Headers


@final
@dataclass(frozen=True, slots=True)
class SessionLost:
    status: int


Outcome = Answered | Broken | Accepted | SessionLost
"""What an answer to a request turned out to be."""


async def close_response(response: httpx.Response) -> None:
    """Close ``response`` whatever is going on around (shielded, at most a second)."""
    with trio.CancelScope(shield=True), trio.move_on_after(1.0):
        await response.aclose()


def encoding_problem(response: httpx.Response) -> str | None:
    """Why ``response``'s body cannot be read (it is compressed, although warden asked for identity), or None."""
    return content_encoding_problem(response.headers.get("content-encoding"))


# ------------------------------------------------------------------------------------------------ exchanges


@final
class HttpExchange:
    """warden's HTTP client of one server (one per connection): every exchange the transports make goes through
    :meth:`open`, and every answer is read by :meth:`read_answer` or :meth:`read_stream`.

    Args:
        settings: the server's checked HTTP settings (URL, static headers, timeouts, message size).
        auth: the OAuth client answering the server's 401s (None: only the static headers, if any).
        deliver: where the notifications and server requests an answer carries go, as they come.
    """

    def __init__(self, settings: HttpSettings, *, auth: OAuthClient | None,
                 deliver: Callable[[Sequence[Message]], Awaitable[None]]) -> None:
        self._settings = settings
        self._auth = auth
        self._deliver = deliver
        self._url = settings.url
        base_headers = {"Accept": ACCEPT_BOTH, "Accept-Encoding": "identity",
                        "User-Agent": f"warden/{__version__}"}
        base_headers.update(dict(settings.headers))
        self._client = httpx.AsyncClient(
            headers=base_headers, follow_redirects=False, trust_env=False,
            timeout=httpx.Timeout(connect=settings.connect_timeout, read=None, write=settings.write_timeout,
                                  pool=settings.connect_timeout))
        self.ack_timeout = httpx.Timeout(settings.ack_timeout, connect=settings.connect_timeout)
        """For exchanges that only need an acknowledgement (a notification, an answer, a DELETE)."""

    @property
    def label(self) -> str:
        """The server's URL without its query or fragment (which may carry secrets), for messages."""
        return urlsplit(self._url)._replace(query="", fragment="").geturl()

    async def delete(self, headers: Sequence[tuple[str, str]]) -> int:
        """DELETE the server's URL (a legacy session's end, HL06); returns the status.

        Raises:
            httpx.HTTPError, WardenError: it failed (the caller only logs it: nothing depends on it).
        """
        sent = await self._auth.authorization(self._url) if self._auth is not None else None
        response = await self._client.delete(self._url, headers=[*headers, *([("Authorization", sent)] if sent
                                                                             else [])],
                                             timeout=self.ack_timeout)
        return response.status_code

    async def aclose(self) -> None:
        await self._client.aclose()

    @contextlib.asynccontextmanager
    async def open(self, method: str, url: str, headers: Sequence[tuple[str, str]], body: bytes | None = None,
                    *, timeout: httpx.Timeout | None = None) -> AsyncIterator[httpx.Response]:
        """One HTTP exchange, following 307/308 within the origin; the response is closed on exit.

        Raises:
            UpstreamError: the exchange failed (mapped from httpx), or a redirect leads to another origin.
        """
        extra = list(headers)
        if body is not None:
            extra.append(("Content-Type", "application/json"))
        redirects = auth_retries = 0
        while True:
            sent = await self._auth.authorization(url) if self._auth is not None else None
            request = self._client.build_request(method, url, headers=extra if sent is None else
                                                 [*extra, ("Authorization", sent)], content=body,
                                                 timeout=timeout or httpx.USE_CLIENT_DEFAULT)
            try:
                response = await self._client.send(request, stream=True)
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                raise map_http_error(exc, url) from exc
            if self._auth is not None and response.status_code in (401, 403):
                try:
                    again = auth_retries < MAX_AUTH_RETRIES and await self._auth.challenged(
                        response.status_code, response.headers.get_list("www-authenticate"), sent)
                except BaseException:
                    await close_response(response)
                    raise
                if again:
                    auth_retries += 1
                    await close_response(response)
                    continue
            elif self._auth is not None and sent is not None:
                self._auth.accepted(sent)
            if response.status_code in (307, 308):
                location = response.headers.get("location")
                await close_response(response)
                redirects += 1
                if redirects > MAX_REDIRECTS:
                    raise Unanswered(f"more than {MAX_REDIRECTS} redirects from {self.label}")
                try:
                    url = redirect_target(url, location)
                except RemoteProtocolError as exc:
                    raise Unanswered(exc.message, response.status_code) from exc
                continue
            try:
                yield response
            finally:
                await close_response(response)
            return

    async def read_body(self, response: httpx.Response, limit: int, *, truncate: bool = False) -> bytes:
        """The whole body, read up to ``limit`` bytes; with ``truncate``, its first ``limit`` bytes.

        Raises:
            Unanswered: (without ``truncate``) the body is larger than ``limit``; the rest is never read.
            UpstreamError: the connection failed while reading (mapped from httpx).
        """
        declared = response.headers.get("content-length")
        if not truncate and declared is not None and declared.isdigit() and int(declared) > limit:
            raise Unanswered(f"the server's answer ({declared} bytes) exceeds the {limit}-byte message limit",
                              response.status_code)
        buffer = bytearray()
        try:
            async for chunk in response.aiter_raw():
                buffer += chunk
                if len(buffer) > limit:
                    if truncate:
                        return bytes(buffer[:limit])
                    raise Unanswered(f"the server's answer exceeds the {limit}-byte message limit",
                                      response.status_code)
        except (httpx.HTTPError, httpx.StreamError) as exc:
            raise map_http_error(exc, self.label) from exc
        return bytes(buffer)

    async def post(self, url: str, headers: Sequence[tuple[str, str]], body: bytes, *, expect: bytes,
                        carried_session: bool, deliver: bool = True) -> Outcome:
        """POST one request and read its answer until the response to ``expect`` arrives.

        Notifications and server requests on a response stream are delivered as they come (unless ``deliver`` is
        off, for warden's own requests). Transport failures before the answer started raise; failures after it
        started are a :class:`Broken` outcome (the caller resumes or re-issues).

        Raises:
            UpstreamError: the exchange could not start (mapped from httpx), including a refused redirect.
            Unanswered: the answer is not a JSON-RPC answer (wrong type, too large, compressed, hostile stream).
        """
        async with self.open("POST", url, headers, body) as response:
            return await self.read_answer(response, expect=expect, carried_session=carried_session,
                                           deliver=deliver)

    async def read_answer(self, response: httpx.Response, *, expect: bytes, carried_session: bool,
                           deliver: bool) -> Outcome:
        status = response.status_code
        kind = classify(status, response.headers.get("content-type"), carried_session=carried_session)
        if kind is AnswerKind.SESSION_LOST:
            return SessionLost(status)
        if kind is AnswerKind.ACCEPTED:
            return Accepted(status, response.headers)
        problem = encoding_problem(response)
        if problem is not None:
            raise Unanswered(problem, status)
        if kind is AnswerKind.EVENT_STREAM:
            return await self.read_stream(response, expect=expect, deliver=deliver)
        json_body = kind is AnswerKind.JSON
        try:
            body = await self.read_body(response, self._settings.max_message_size if json_body
                                         else ERROR_SNIPPET_BYTES, truncate=not json_body)
        except Unanswered:
            raise
        except UpstreamError as exc:
            return Broken(f"the answer broke off: {exc.message}")
        if json_body:
            return Answered(request_outcome(expect, status, body), status, response.headers)
        raise Unanswered(f"HTTP {status} ({response.headers.get('content-type') or 'no content type'})", status,
                          body)

    async def read_stream(self, response: httpx.Response, *, expect: bytes | None, deliver: bool = True,
                           endpoint: list[str] | None = None,
                           task_status: trio.TaskStatus[str] | None = None) -> Outcome:
        """Read an event stream: deliver what it carries, return at the response to ``expect`` or at its end.

        A request's stream carries its own response only: a response to any other id on it is dropped (logged).
        Streams that answer no one request (``expect`` None: the GET and HTTP+SSE streams) deliver every response.

        ``endpoint``/``task_status`` serve the HTTP+SSE transport: its ``endpoint`` event is resolved and passed to
        ``task_status.started``. A stream that breaks a bound or the format ends the exchange with
        :class:`Unanswered` (it is never resynchronised or resumed).
        """
        parser = SSEParser(max_event_size=self._settings.max_message_size + 64 * 1024)
        status = response.status_code
        try:
            async for chunk in response.aiter_raw():
                batch: list[Message] = []
                for event in parser.feed(chunk):
                    if event.event == "endpoint" and task_status is not None and endpoint is not None:
                        if endpoint:
                            continue  # announced once; a second announcement is ignored
                        endpoint.append(resolve_endpoint(self._url, event.data))
                        task_status.started(endpoint[0])
                        continue
                    if event.event != "message" or not event.data.strip():
                        continue  # priming events (id and retry only) and unknown event types
                    message = parse_message(event.data.encode("utf-8"))
                    if expect is not None and isinstance(message, Response | ErrorResponse):
                        if message.id != expect:
                            # Delivered, it would settle that request past what its own stream's reader checks
                            # (HM11's screening of a tools/list, say).
                            log.warning("%s: dropped a response to id %s sent on the stream of another request",
                                        self.label, (message.id or b"null")[:64].decode("utf-8", "replace"))
                            continue
                        if deliver:
                            await self._deliver(batch)
                        return Answered(message, status, response.headers)
                    batch.append(message)
                if deliver:
                    await self._deliver(batch)
        except (SSEError, RemoteProtocolError) as exc:
            raise Unanswered(f"the server's event stream is unusable: {exc.message}", status) from exc
        except (httpx.HTTPError, httpx.StreamError) as exc:
            return Broken(f"the event stream broke: {map_http_error(exc, self.label).message}",
                           resumable_event_id(parser.last_event_id), parser.retry)
        parser.close()
        return Broken("the event stream ended before the response", resumable_event_id(parser.last_event_id),
                      parser.retry)

