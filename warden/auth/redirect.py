"""The loopback redirect of the authorization code flow (RFC 8252 §7.3): a one-shot HTTP listener on
``127.0.0.1`` that the user's browser is sent back to with the code.

Only the registered path answers; anything else is a 404 and is otherwise ignored (a page on the same machine
could probe the port). The first request to the path settles the flow: a ``state`` that is not the one warden
sent is refused - the response may have been injected - and so is an ``error`` answer from the server. The page
the browser shows says only what happened, never the code.
"""

from __future__ import annotations

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
        """Serve until a request reaches the callback path, and judge it.

        Raises:
            RedirectError: the state does not match, the server sent an error, or no code came.
        """
        while True:
            stream = await self._listener.accept()
            async with stream:
                try:
                    with trio.fail_after(10):
                        target = await self._read_target(stream)
                except (trio.TooSlowError, h11.RemoteProtocolError, trio.BrokenResourceError, OSError):
                    continue
                if target is None:
                    continue
                parts = urlsplit(target)
                if parts.path != CALLBACK_PATH:
                    await self._answer(stream, 404, "Not found.")
                    continue
                try:
                    response = self._judge(parse_qs(parts.query, keep_blank_values=True), state)
                except RedirectError as exc:
                    await self._answer(stream, 400, "warden refused this authorization response.")
                    raise exc from None
                await self._answer(stream, 200, "warden received the authorization.")
                return response

    @staticmethod
    def _judge(query: dict[str, list[str]], state: str) -> AuthorizationResponse:
        def one(name: str) -> str | None:
            values = query.get(name)
            return values[0] if values else None

        if one("state") != state:
            raise RedirectError("the authorization response's state does not match the one warden sent: it may "
                                "have been forged by another page, so warden refused it (no token was requested)",
                                hint="start the authorization again")
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
