#!/usr/bin/env python3
"""Real OAuth peers for warden's tests, all on 127.0.0.1 in one process: the Python SDK's authorization server
(``mcp.server.auth`` routes: metadata, dynamic registration, authorize, token, revoke) over an in-memory provider
that consents at once, and three MCP servers protected by it (``MCPServer`` with ``AuthSettings``):

* ``a`` and ``b``: ordinary protected servers; each accepts only tokens issued for its own URL (RFC 8707) and
  logs the digest of every bearer token it is shown;
* ``stubborn``: refuses every token (for the test that warden does not authorize in a loop).

Prints one JSON line (the URLs), then serves until killed. The authorization server also answers
``GET /test/log`` (what happened: authorizations, token grants, tokens each server saw - digests only) and
``POST /test/revoke`` (revokes every access and refresh token, as an administrator would).

    python tests/auth/oauth_peers.py --token-lifetime 3600
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import secrets
import socket
import sys
import time
from typing import Any

import uvicorn
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.routes import create_auth_routes
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

SCOPES = ["mcp:tools"]
LOG: list[dict[str, Any]] = []


def digest(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


class Provider:
    """An in-memory authorization server that approves every request at once (the user always clicks Allow)."""

    def __init__(self, lifetime: int) -> None:
        self.lifetime = lifetime
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info
        LOG.append({"event": "register", "client_id": client_info.client_id,
                    "redirect_uris": [str(u) for u in client_info.redirect_uris or []]})

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code, scopes=params.scopes or [], expires_at=time.time() + 300, client_id=client.client_id or "",
            code_challenge=params.code_challenge, redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly, resource=params.resource)
        LOG.append({"event": "authorize", "client_id": client.client_id, "resource": params.resource,
                    "scopes": params.scopes})
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client: OAuthClientInformationFull,
                                      authorization_code: str) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None, grant: str) -> OAuthToken:
        access, refresh = "at-" + secrets.token_urlsafe(24), "rt-" + secrets.token_urlsafe(24)
        expires = int(time.time()) + self.lifetime
        self.access[access] = AccessToken(token=access, client_id=client_id, scopes=scopes, expires_at=expires,
                                          resource=resource)
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes, resource=resource)
        LOG.append({"event": "token", "grant": grant, "resource": resource, "access": digest(access),
                    "raw": [access, refresh]})  # test peer only: so tests can prove warden never writes them
        return OAuthToken(access_token=access, token_type="Bearer", expires_in=self.lifetime,
                          refresh_token=refresh, scope=" ".join(scopes))

    async def exchange_authorization_code(self, client: OAuthClientInformationFull,
                                          authorization_code: AuthorizationCode) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        return self._issue(client.client_id or "", authorization_code.scopes, authorization_code.resource,
                           "authorization_code")

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        found = self.refresh.get(refresh_token)
        if found is None:
            LOG.append({"event": "refresh-refused"})
        return found

    async def exchange_refresh_token(self, client: OAuthClientInformationFull, refresh_token: RefreshToken,
                                     scopes: list[str]) -> OAuthToken:
        self.refresh.pop(refresh_token.token, None)
        return self._issue(client.client_id or "", scopes or refresh_token.scopes, refresh_token.resource, "refresh")

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    def revoke_all(self) -> None:
        self.access.clear()
        self.refresh.clear()


class Verifier:
    """A resource server's token check: known to the authorization server, unexpired, issued for this server
    (the RFC 8707 resource is checked here, so ``validate_token_resource`` is off)."""

    def __init__(self, provider: Provider, name: str, url: str, *, refuse_all: bool = False) -> None:
        self.provider, self.name, self.url, self.refuse_all = provider, name, url, refuse_all

    async def verify_token(self, token: str) -> AccessToken | None:
        LOG.append({"event": "seen", "server": self.name, "token": digest(token)})
        found = await self.provider.load_access_token(token)
        if self.refuse_all or found is None or found.resource != self.url:
            return None
        return found


def bound_socket() -> socket.socket:
    """A socket bound to a free port and kept until uvicorn serves on it: a port picked, closed and bound again
    later could be taken meanwhile by another test running in parallel (seen: EADDRINUSE)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


def resource_server(name: str, provider: Provider, issuer: str, port: int, *, refuse_all: bool = False) -> Any:
    url = f"http://127.0.0.1:{port}/mcp"
    server = MCPServer(name, token_verifier=Verifier(provider, name, url, refuse_all=refuse_all),
                       auth=AuthSettings(issuer_url=AnyHttpUrl(issuer), resource_server_url=AnyHttpUrl(url),
                                         required_scopes=SCOPES, validate_token_resource=False))

    def whoami() -> str:
        return name

    # a tool name per server: warden flags one name on two servers (shadowing), which is not what these test
    server.tool(name=f"whoami_{name}", description=f"Says which server answered: {name}.")(whoami)

    return server.streamable_http_app(host="127.0.0.1")


def authorization_server(provider: Provider, issuer: str) -> Starlette:
    async def log(request: Request) -> JSONResponse:
        return JSONResponse(LOG)

    async def revoke(request: Request) -> JSONResponse:
        provider.revoke_all()
        LOG.append({"event": "revoke-all"})
        return JSONResponse({"revoked": True})

    routes = create_auth_routes(provider, issuer_url=AnyHttpUrl(issuer),
                                client_registration_options=ClientRegistrationOptions(enabled=True,
                                                                                      valid_scopes=SCOPES),
                                revocation_options=RevocationOptions(enabled=True))
    return Starlette(routes=[*routes, Route("/test/log", log), Route("/test/revoke", revoke, methods=["POST"])])


async def serve(lifetime: int) -> None:
    sockets = {name: bound_socket() for name in ("as", "a", "b", "stubborn")}
    ports = {name: int(sock.getsockname()[1]) for name, sock in sockets.items()}
    issuer = f"http://127.0.0.1:{ports['as']}"
    provider = Provider(lifetime)
    apps = {"as": authorization_server(provider, issuer),
            "a": resource_server("a", provider, issuer, ports["a"]),
            "b": resource_server("b", provider, issuer, ports["b"]),
            "stubborn": resource_server("stubborn", provider, issuer, ports["stubborn"], refuse_all=True)}
    servers = [uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=ports[name], log_level="warning"))
               for name, app in apps.items()]
    tasks = [asyncio.create_task(s.serve(sockets=[sockets[name]])) for s, name in zip(servers, apps, strict=True)]
    while not all(s.started for s in servers):
        await asyncio.sleep(0.05)
    print(json.dumps({"issuer": issuer, **{name: f"http://127.0.0.1:{ports[name]}/mcp"
                                           for name in ("a", "b", "stubborn")}}), flush=True)
    await asyncio.gather(*tasks)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--token-lifetime", type=int, default=3600)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.token_lifetime))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
