"""A scripted MCP server and authorization server on one origin (real HTTP on 127.0.0.1, h11 over trio), each
answer overridable so a test can make it lie in one way; a browser that follows the authorization redirect; a
clock tests move."""

from __future__ import annotations

import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import trio

from tests.http_client.httpserver import Exchange, HttpServer, Seen

ACCESS = "access-token-0123456789"
REFRESH = "refresh-token-0123456789"
CODE = "the-code-0123456789"


@dataclass
class FakeAuth:
    """An MCP server and its authorization server on one origin, each answer overridable."""

    prm: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    registration: dict[str, Any] = field(default_factory=dict)
    redirect: dict[str, Any] = field(default_factory=dict)
    token: dict[str, Any] = field(default_factory=dict)
    issued: int = 0
    mcp: Callable[[Exchange], Awaitable[None]] | None = None
    """Serves ``/mcp`` to requests bearing the last token issued; the others get a 401 challenge."""
    server: HttpServer = field(init=False)

    def __post_init__(self) -> None:
        self.server = HttpServer(self.handle)

    @property
    def origin(self) -> str:
        return self.server.origin

    def seen(self, path: str) -> list[Seen]:
        return [s for s in self.server.seen if s.path.split("?")[0] == path]

    async def handle(self, exchange: Exchange) -> None:
        request = exchange.request
        path = request.path.split("?")[0]
        origin = self.origin
        if path == "/.well-known/oauth-protected-resource/mcp":
            await exchange.json(200, {"resource": origin + "/mcp", "authorization_servers": [origin],
                                      "scopes_supported": ["mcp:read"], **self.prm})
        elif path == "/.well-known/oauth-authorization-server":
            await exchange.json(200, {
                "issuer": origin, "authorization_endpoint": origin + "/authorize",
                "token_endpoint": origin + "/token", "registration_endpoint": origin + "/register",
                "code_challenge_methods_supported": ["S256"], "token_endpoint_auth_methods_supported": ["none"],
                "scopes_supported": ["mcp:read", "mcp:write", "offline_access"], **self.metadata})
        elif path == "/register":
            await exchange.json(201, {"client_id": "client-1", "redirect_uris": request.json()["redirect_uris"],
                                      **self.registration})
        elif path == "/authorize":
            query = {k: v[0] for k, v in parse_qs(urlsplit(request.path).query).items()}
            params = {"code": CODE, "state": query.get("state", ""), **self.redirect}
            location = query["redirect_uri"] + "?" + urlencode({k: v for k, v in params.items() if v is not None})
            await exchange.respond(302, b"", [("Location", location)])
        elif path == "/token":
            self.issued += 1
            await exchange.json(200, {"access_token": f"{ACCESS}-{self.issued}", "token_type": "Bearer",
                                      "expires_in": 3600, "refresh_token": REFRESH, **self.token})
        elif path == "/mcp" and self.mcp is not None:
            if self.issued and request.header("authorization") == f"Bearer {ACCESS}-{self.issued}":
                await self.mcp(exchange)
            else:
                metadata = f"{origin}/.well-known/oauth-protected-resource/mcp"
                await exchange.respond(401, b"", [("WWW-Authenticate", f'Bearer resource_metadata="{metadata}"')])
        else:
            await exchange.respond(404, b"not found")


def _open(url: str) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as response:
        response.read()


async def follow(url: str) -> None:
    """The user's browser: open the URL, follow the redirect back to warden (urllib, which logs nothing: the logs
    the tests read are warden's own)."""
    await trio.to_thread.run_sync(_open, url)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now
