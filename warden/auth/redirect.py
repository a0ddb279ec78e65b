"""The loopback redirect of the authorization code flow (RFC 8252 §7.3): a one-shot HTTP listener on
``127.0.0.1`` that the user's browser is sent back to with the code.

Only the registered path answers; anything else is a 404 and is otherwise ignored (a page on the same machine
could probe the port). A request to the path whose ``state`` is not the one warden sent is refused (400) and
otherwise ignored too: it may have been injected, and the listener is reachable by every web page the user's
browser opens and every local user, who would otherwise end the user's authorization at will (the refusal is final
for the run) - without knowing the state, nobody but the authorization server's redirect can settle the flow. The
first request with the right state settles it: a code, or an ``error`` answer from the server, which is refused.
The page the browser shows says only what happened, never the code.
"""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass
from typing import Final, final
from urllib.parse import parse_qs, urlsplit

import h11
import trio

from warden.errors import ConfigError, UpstreamError
from warden.escape import for_terminal

__all__ = ["CALLBACK_PATH", "AuthorizationResponse", "RedirectError", "RedirectListener", "check_redirect_uri"]

log = logging.getLogger(__name__)

CALLBACK_PATH: Final = "/callback"
_MAX_REQUEST: Final = 16 * 1024
_READ_TIMEOUT: Final = 10.0
"""Seconds one connection to the listener has to send its request and take the answer."""
_MAX_CONNECTIONS: Final = 16
"""Connections served at once; more wait to be accepted."""
_PAGE: Final = ("<!doctype html><meta charset=utf-8><title>warden</title><p>{}</p>"
                "<p>You can close this tab.</p>")


class RedirectError(UpstreamError):
    """The authorization response was refused (wrong state, an error from the server, no code)."""


def check_redirect_uri(uri: str) -> str:
    """``uri`` if it is a loopback redirect warden can receive: ``http://127.0.0.1:PORT/path`` (or ``[::1]``,
    ``localhost``). Anything else would hand the code to another machine.

    Raises:
        ConfigError: naming the rule.
    """
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"redirect URI {for_terminal(uri)!r} is malformed: {exc}") from exc
    host = (parts.hostname or "").lower()
    if parts.scheme != "http" or host not in ("127.0.0.1", "::1", "localhost") or port is None or parts.fragment:
        raise ConfigError(f"redirect URI {for_terminal(uri)!r} is not a loopback redirect; warden only receives "
                          "authorization codes on http://127.0.0.1:PORT/... (RFC 8252 §7.3)",
                          hint="use a loopback redirect URI, e.g. http://127.0.0.1:33418/callback")
    return uri


@final
@dataclass(frozen=True, slots=True)
class AuthorizationResponse:
    code: str
    iss: str | None

    def __repr__(self) -> str:
        return f"AuthorizationResponse(code=<{len(self.code)} chars>, iss={self.iss!r})"


@final
class RedirectListener:
    """A bound loopback socket, waiting for the browser to come back. Use :meth:`open`, then :meth:`wait`."""

    def __init__(self, listener: trio.SocketListener, port: int) -> None:
        self._listener = listener
        self.port = port

    @property
    def redirect_uri(self) -> str:
        return f"http://127.0.0.1:{self.port}{CALLBACK_PATH}"

    @classmethod
    async def open(cls, port: int = 0) -> RedirectListener:
        """Listen on ``127.0.0.1:port`` (0: any free port).

        Raises:
            OSError: the port is taken (the caller may try another and register it).
        """
        listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
        listener = listeners[0]
        sockname = listener.socket.getsockname()
        return cls(listener, int(sockname[1]))

    async def aclose(self) -> None:
        await self._listener.aclose()

    async def wait(self, state: str) -> AuthorizationResponse:
        """Serve until a request with warden's ``state`` reaches the callback path, and judge it.

        Each connection is served in a task of its own, for at most :data:`_READ_TIMEOUT` seconds, at most
        :data:`_MAX_CONNECTIONS` at a time: connections that send nothing cannot hold the browser's back.

        Raises:
            RedirectError: the server sent an error, or no code came.
        """
        outcome: list[AuthorizationResponse | RedirectError] = []
        slots = trio.Semaphore(_MAX_CONNECTIONS)

        async def serve(stream: trio.SocketStream, nursery: trio.Nursery) -> None:
            settled: AuthorizationResponse | RedirectError | None = None
            async with stream:
                try:
                    with trio.move_on_after(_READ_TIMEOUT):  # reading the request and answering it
                        settled = await self._serve_one(stream, state)
                finally:
                    slots.release()
            if settled is not None and not outcome:
                outcome.append(settled)
                nursery.cancel_scope.cancel()

        async with trio.open_nursery() as nursery:
            while True:
                await slots.acquire()
                try:
                    stream = await self._listener.accept()
                except BaseException:
                    slots.release()
                    raise
                nursery.start_soon(serve, stream, nursery)
        if isinstance(outcome[0], RedirectError):
            raise outcome[0]
        return outcome[0]

    async def _serve_one(self, stream: trio.SocketStream, state: str
                         ) -> AuthorizationResponse | RedirectError | None:
        """Answer one connection; what it settles, or None when it settles nothing (another path, a forged or
        missing state, a request that never came)."""
        try:
            target = await self._read_target(stream)
        except (h11.RemoteProtocolError, trio.BrokenResourceError, OSError):
            return None
        if target is None:
            return None
        parts = urlsplit(target)
        if parts.path != CALLBACK_PATH:
            await self._answer(stream, 404, "Not found.")
            return None
        query = parse_qs(parts.query, keep_blank_values=True)
        if not self._state_matches(query, state):
            log.warning("refused a request to the OAuth redirect whose state is not the one warden sent (forged by "
                        "another page or user?); still waiting for the authorization server's")
            await self._answer(stream, 400, "warden refused this authorization response.")
            return None
        try:
            response = self._judge(query, state)
        except RedirectError as exc:
            await self._answer(stream, 400, "warden refused this authorization response.")
            return exc
        await self._answer(stream, 200, "warden received the authorization.")
        return response

    @staticmethod
    def _state_matches(query: dict[str, list[str]], state: str) -> bool:
        """Whether the request carries exactly one ``state``, the one warden sent (compared in constant time)."""
        values = query.get("state")
        return values is not None and len(values) == 1 and hmac.compare_digest(values[0].encode(), state.encode())

    @staticmethod
    def _judge(query: dict[str, list[str]], state: str) -> AuthorizationResponse:
        """The response of a request whose state matched (:meth:`_state_matches`)."""
        def one(name: str) -> str | None:
            values = query.get(name)
            return values[0] if values else None

        if one("state") != state:  # checked by the caller; kept so this never judges a forged response
            raise RedirectError("the authorization response's state does not match the one warden sent")
        error = one("error")
        if error is not None:
            description = one("error_description") or ""
            raise RedirectError(f"the authorization server refused: {for_terminal(error[:100])}"
                                + (f" ({for_terminal(description[:300])})" if description else ""))
        code = one("code")
        if not code:
            raise RedirectError("the authorization response carries no code")
        return AuthorizationResponse(code=code, iss=one("iss"))

    @staticmethod
    async def _read_target(stream: trio.SocketStream) -> str | None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_REQUEST)
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(4096)
                if not data:
                    return None
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Request):
                if event.method != b"GET":
                    return None
                return event.target.decode("ascii", "replace")
            return None

    @staticmethod
    async def _answer(stream: trio.SocketStream, status: int, text: str) -> None:
        body = _PAGE.format(text).encode()
        head = (f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\nContent-Type: text/html; charset=utf-8"
                f"\r\nContent-Length: {len(body)}\r\nCache-Control: no-store\r\nConnection: close\r\n"
                "Referrer-Policy: no-referrer\r\n\r\n").encode()
        try:
            await stream.send_all(head + body)
        except (trio.BrokenResourceError, OSError):
            log.debug("the browser left before the redirect page was sent")
