"""OAuth through warden's HTTP client: the session logic (:class:`~warden.upstream.connection.Upstream`) over
the real HTTP client to a legacy Streamable HTTP server that wants a token on every request. After the first 401
warden authorizes once, and every later request - the era probe's retry, ``initialize``, the notification, the
GET stream, the calls and the DELETE that ends the session - carries ``Authorization: Bearer``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from tests.auth.fake_auth import ACCESS, FakeAuth, follow
from tests.http_client.httpserver import Exchange
from tests.http_client.mocks import LegacyMock, Recorder
from warden.auth import CredentialStore, OAuthClient, OAuthSettings
from warden.secrets import SecretStore
from warden.transport.http_client import HttpConnector
from warden.transport.http_config import http_config
from warden.upstream.connection import Upstream, UpstreamOptions


@asynccontextmanager
async def oauth_upstream(fake: FakeAuth, tmp_path: Path, present: Callable[[str], Awaitable[None]]
                         ) -> AsyncIterator[Upstream]:
    """An :class:`Upstream` running over the real HTTP client, with an OAuth client whose user is ``present``, to
    ``fake``'s MCP server (served meanwhile)."""
    async with trio.open_nursery() as outer:
        await outer.start(fake.server.serve)
        url = fake.origin + "/mcp"
        client = OAuthClient(url, "mock", OAuthSettings(timeout=20),
                             CredentialStore(SecretStore(tmp_path, keyring=None)), present=present)
        connector = HttpConnector(http_config(url), "mock", auth=client)
        upstream = Upstream(name="mock", connector=connector, handler=Recorder(),
                            options=UpstreamOptions(probe_timeout=10, request_timeout=20))
        upstream.set_legacy_capabilities({})
        async with trio.open_nursery() as inner:
            await inner.start(upstream.run)
            yield upstream
            inner.cancel_scope.cancel()
        outer.cancel_scope.cancel()


async def test_AU03_the_token_goes_on_every_request_probe_get_and_delete_included(tmp_path: Path) -> None:
    legacy = LegacyMock()
    fake = FakeAuth(mcp=legacy)
    async with oauth_upstream(fake, tmp_path, follow) as upstream:
        with trio.fail_after(30):
            await upstream.wait_connected()
            reply = await upstream.request("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        assert reply.ok, reply.error
    to_mcp = [s for s in fake.server.seen if s.path == "/mcp"]
    first_authorized = next(i for i, s in enumerate(to_mcp) if s.header("authorization"))
    assert [s.header("authorization") for s in to_mcp[:first_authorized]] == [None]  # the probe that got 401
    later = to_mcp[first_authorized:]
    assert {s.header("authorization") for s in later} == {f"{ACCESS}-1".join(("Bearer ", ""))}
    kinds = {s.method for s in later}
    assert kinds >= {"POST", "GET", "DELETE"}
    assert len(fake.seen("/authorize")) == 1
    assert all(ACCESS not in s.path for s in fake.server.seen)  # never in a URL (AU05)


async def test_a_server_demanding_a_new_scope_on_every_call_gets_the_user_asked_three_times(tmp_path: Path) -> None:
    """A hostile server answers every ``tools/call`` with 403 ``insufficient_scope`` naming a scope never named
    before. Before, each call started a new authorization (the user prompted again and again, two per call with
    the retries). Now the user is asked three times in all; later calls fail with the refusal, and calls that need
    no new scope still go through with the token."""
    shown: list[str] = []
    scopes = iter(range(1, 1000))

    async def user(url: str) -> None:
        shown.append(url)
        await follow(url)

    async def demand(ex: Exchange, body: dict[str, Any]) -> bool:
        if body["params"]["name"] != "echo":
            return False
        await ex.respond(403, b"", [("WWW-Authenticate", f'Bearer error="insufficient_scope", '
                                                         f'scope="mcp:s{next(scopes)}"')])
        return True

    legacy = LegacyMock(on_call=demand)
    fake = FakeAuth(mcp=legacy)
    replies = []
    async with oauth_upstream(fake, tmp_path, user) as upstream:
        with trio.fail_after(60):
            await upstream.wait_connected()
            for _ in range(4):
                replies.append(await upstream.request("tools/call", {"name": "echo", "arguments": {}}))
            other = await upstream.request("tools/call", {"name": "other", "arguments": {}})
    assert len(shown) == 3
    assert len(fake.seen("/authorize")) == 3
    assert replies[0].error == b'{"code":-32603,"message":"HTTP 403 (no content type)","data":{"httpStatus":403}}'
    for n, reply in enumerate(replies[1:], start=4):  # the first call used s1-s3 (two step-ups, then the 403)
        assert reply.error == (
            b'{"code":-32000,"message":"mock: the server wants another authorization (scope mcp:read offline_access '
            b'mcp:s1 mcp:s2 mcp:s%d), but the user was asked 3 times in the last 60 minutes; warden refused it, so '
            b'that a server cannot flood the user with authorization prompts"}' % n)
    assert other.ok, other.error
