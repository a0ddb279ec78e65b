"""OAuth through warden's HTTP client: the session logic (:class:`~warden.upstream.connection.Upstream`) over
the real HTTP client to a legacy Streamable HTTP server that wants a token on every request. After the first 401
warden authorizes once, and every later request - the era probe's retry, ``initialize``, the notification, the
GET stream, the calls and the DELETE that ends the session - carries ``Authorization: Bearer``."""

from __future__ import annotations

from pathlib import Path

import trio

from tests.auth.fake_auth import ACCESS, FakeAuth, follow
from tests.http_client.mocks import LegacyMock, Recorder
from warden.auth import CredentialStore, OAuthClient, OAuthSettings
from warden.secrets import SecretStore
from warden.transport.http_client import HttpConnector
from warden.transport.http_config import http_config
from warden.upstream.connection import Upstream, UpstreamOptions


async def test_AU03_the_token_goes_on_every_request_probe_get_and_delete_included(tmp_path: Path) -> None:
    legacy = LegacyMock()
    fake = FakeAuth(mcp=legacy)
    async with trio.open_nursery() as outer:
        await outer.start(fake.server.serve)
        url = fake.origin + "/mcp"
        client = OAuthClient(url, "mock", OAuthSettings(timeout=20),
                             CredentialStore(SecretStore(tmp_path, keyring=None)), present=follow)
        connector = HttpConnector(http_config(url), "mock", auth=client)
        upstream = Upstream(name="mock", connector=connector, handler=Recorder(),
                            options=UpstreamOptions(probe_timeout=10, request_timeout=20))
        upstream.set_legacy_capabilities({})
        async with trio.open_nursery() as inner:
            await inner.start(upstream.run)
            with trio.fail_after(30):
                await upstream.wait_connected()
                reply = await upstream.request("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
            assert reply.ok, reply.error
            inner.cancel_scope.cancel()
        outer.cancel_scope.cancel()
    to_mcp = [s for s in fake.server.seen if s.path == "/mcp"]
    first_authorized = next(i for i, s in enumerate(to_mcp) if s.header("authorization"))
    assert [s.header("authorization") for s in to_mcp[:first_authorized]] == [None]  # the probe that got 401
    later = to_mcp[first_authorized:]
    assert {s.header("authorization") for s in later} == {f"{ACCESS}-1".join(("Bearer ", ""))}
    kinds = {s.method for s in later}
    assert kinds >= {"POST", "GET", "DELETE"}
    assert len(fake.seen("/authorize")) == 1
    assert all(ACCESS not in s.path for s in fake.server.seen)  # never in a URL (AU05)
