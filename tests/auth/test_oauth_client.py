"""warden's OAuth client against a scripted server on 127.0.0.1 (real HTTP, h11 over trio): one origin plays the
MCP server and its authorization server, and each test makes it lie in one way. The client must refuse each lie
clearly, before it sends a code or credentials anywhere, and never log a token or a code.

The "browser" is a presenter that fetches the authorization URL and follows its redirect to warden's loopback
listener, as a user who clicks Allow would.
"""

from __future__ import annotations

import gzip
import json
import logging
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import trio

from tests.auth.fake_auth import ACCESS, CODE, REFRESH, Clock, FakeAuth, follow
from tests.http_client.httpserver import Exchange, HttpServer
from warden.auth import (
    CredentialStore,
    DiscoveryError,
    GrantEvent,
    OAuthClient,
    OAuthSettings,
    RedirectError,
    TokenError,
    token_digest,
)
from warden.errors import UpstreamError, UpstreamTimeout
from warden.secrets import SecretStore


@dataclass
class Harness:
    fake: FakeAuth
    client: OAuthClient
    events: list[GrantEvent]
    store: CredentialStore
    clock: Clock

    @property
    def url(self) -> str:
        return self.fake.origin + "/mcp"

    async def challenge(self, status: int = 401, header: str | None = None, sent: str | None = None) -> bool:
        value = header if header is not None else \
            f'Bearer resource_metadata="{self.fake.origin}/.well-known/oauth-protected-resource/mcp"'
        return await self.client.challenged(status, [value], sent)


@pytest.fixture
async def harness(nursery: trio.Nursery, tmp_path: Any) -> Harness:
    return await make_harness(nursery, tmp_path, FakeAuth())


async def make_harness(nursery: trio.Nursery, tmp_path: Any, fake: FakeAuth,
                       present: Callable[[str], Awaitable[None]] = follow,
                       settings: OAuthSettings | None = None) -> Harness:
    await nursery.start(fake.server.serve)
    clock = Clock()
    store = CredentialStore(SecretStore(tmp_path, keyring=None), clock=clock)
    events: list[GrantEvent] = []

    async def sink(event: GrantEvent) -> None:
        events.append(event)

    client = OAuthClient(fake.origin + "/mcp", "test", settings or OAuthSettings(timeout=20), store, present=present)
    client.bind_audit(sink)
    return Harness(fake, client, events, store, clock)


# ---------------------------------------------------------------------------------------------------- the flow


async def test_AU01_AU02_AU07_authorization_code_flow_with_pkce_resource_and_state(harness: Harness, tmp_path: Any,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    assert await harness.client.authorization(harness.url) is None
    assert await harness.challenge()
    assert await harness.client.authorization(harness.url) == f"Bearer {ACCESS}-1"
    authorize = parse_qs(urlsplit(harness.fake.seen("/authorize")[0].path).query)
    assert authorize["response_type"] == ["code"]
    assert authorize["code_challenge_method"] == ["S256"]
    assert len(authorize["code_challenge"][0]) == 43
    assert authorize["resource"] == [harness.url]
    assert authorize["scope"] == ["mcp:read offline_access"]
    assert urlsplit(authorize["redirect_uri"][0]).hostname == "127.0.0.1"
    assert len(authorize["state"][0]) >= 20
    token = parse_qs(harness.fake.seen("/token")[0].body.decode())
    assert token["grant_type"] == ["authorization_code"]
    assert token["resource"] == [harness.url]
    assert token["code"] == [CODE]
    assert len(token["code_verifier"][0]) >= 43
    registration = harness.fake.seen("/register")[0].json()
    assert registration["application_type"] == "native"
    assert registration["grant_types"] == ["authorization_code", "refresh_token"]
    assert harness.events == [GrantEvent(kind="authorized", resource=harness.url, issuer=harness.fake.origin,
                                         client_id="client-1", scopes=("mcp:read", "offline_access"),
                                         token_digest=token_digest(f"{ACCESS}-1"))]
    secrets_file = tmp_path / "secrets.json"
    assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600
    assert f"{ACCESS}-1" in secrets_file.read_text()
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for secret in (f"{ACCESS}-1", REFRESH, CODE):
        assert secret not in logged


async def test_AU06_token_never_goes_to_another_origin_or_outside_its_resource(harness: Harness) -> None:
    assert await harness.challenge()
    other_port = harness.fake.server.port + 1
    assert await harness.client.authorization(f"http://127.0.0.1:{other_port}/mcp") is None
    assert await harness.client.authorization(f"http://localhost:{harness.fake.server.port}/mcp") is None
    assert await harness.client.authorization(harness.fake.origin + "/other") is None
    assert await harness.client.authorization(harness.fake.origin + "/mcp/sub") is not None


async def test_tokens_are_kept_per_resource_and_reused_by_the_next_run(harness: Harness, tmp_path: Any,
                                                                       nursery: trio.Nursery) -> None:
    assert await harness.challenge()
    again = OAuthClient(harness.url, "test", OAuthSettings(timeout=20), harness.store, present=follow)
    assert await again.challenged(401, ['Bearer realm="x"'], None)
    assert await again.authorization(harness.url) == f"Bearer {ACCESS}-1"
    assert len(harness.fake.seen("/authorize")) == 1
    assert harness.store.tokens(harness.fake.origin + "/elsewhere", harness.fake.origin) is None


async def test_expired_token_is_refreshed_with_the_resource(harness: Harness) -> None:
    assert await harness.challenge()
    harness.clock.now += 3600
    assert await harness.client.authorization(harness.url) == f"Bearer {ACCESS}-2"
    refresh = parse_qs(harness.fake.seen("/token")[1].body.decode())
    assert refresh["grant_type"] == ["refresh_token"]
    assert refresh["refresh_token"] == [REFRESH]
    assert refresh["resource"] == [harness.url]
    assert [e.kind for e in harness.events] == ["authorized", "refreshed"]


async def test_step_up_asks_for_the_union_once_and_never_for_held_scopes(harness: Harness) -> None:
    assert await harness.challenge()
    sent = f"Bearer {ACCESS}-1"
    harness.client.accepted(sent)
    held = 'Bearer error="insufficient_scope", scope="mcp:read"'
    assert not await harness.challenge(403, held, sent)
    assert len(harness.fake.seen("/authorize")) == 1
    assert await harness.challenge(403, 'Bearer error="insufficient_scope", scope="mcp:write"', sent)
    second = parse_qs(urlsplit(harness.fake.seen("/authorize")[1].path).query)
    assert second["scope"] == ["mcp:read offline_access mcp:write"]
    assert not await harness.challenge(403, 'Bearer error="forbidden"', f"Bearer {ACCESS}-2")


async def test_a_fresh_token_refused_again_is_not_authorized_in_a_loop(harness: Harness) -> None:
    assert await harness.challenge()
    with pytest.raises(TokenError, match="does not authorize again in a loop"):
        await harness.challenge(sent=f"Bearer {ACCESS}-1")
    with pytest.raises(TokenError):
        await harness.challenge(sent=f"Bearer {ACCESS}-1")
    assert len(harness.fake.seen("/authorize")) == 1


async def test_revoked_token_and_refresh_token_lead_to_one_new_authorization(harness: Harness) -> None:
    assert await harness.challenge()
    harness.client.accepted(f"Bearer {ACCESS}-1")
    harness.fake.token = {"error": "invalid_grant"}  # the refresh token was revoked too
    with pytest.raises(TokenError, match="invalid_grant"):
        await harness.challenge(sent=f"Bearer {ACCESS}-1")
    # the refresh failed (logged), the new authorization's token request was refused: final for this run
    assert len(harness.fake.seen("/authorize")) == 2


# ---------------------------------------------------------------------------------------------------- bad input


async def refused(nursery: trio.Nursery, tmp_path: Any, fake: FakeAuth, error: type[Exception], match: str,
                  **kwargs: Any) -> Harness:
    harness = await make_harness(nursery, tmp_path, fake, **kwargs)
    with pytest.raises(error, match=match):
        await harness.challenge()
    with pytest.raises(error, match=match):  # final: the user is not asked again
        await harness.challenge()
    assert harness.events == []
    assert await harness.client.authorization(harness.url) is None
    return harness


async def test_metadata_pointing_at_another_origin_is_refused(nursery: trio.Nursery, tmp_path: Any) -> None:
    harness = await refused(nursery, tmp_path, FakeAuth(metadata={"token_endpoint": "http://127.0.0.2:9/token"}),
                            DiscoveryError, "points its token_endpoint at another origin")
    assert harness.fake.seen("/register") == []
    assert harness.fake.seen("/authorize") == []


async def test_issuer_mismatch_is_refused(nursery: trio.Nursery, tmp_path: Any) -> None:
    harness = await refused(nursery, tmp_path, FakeAuth(metadata={"issuer": "https://attacker.example.com"}),
                            DiscoveryError, "claims issuer 'https://attacker.example.com'")
    assert harness.fake.seen("/register") == []


async def test_resource_metadata_for_another_resource_is_refused(nursery: trio.Nursery, tmp_path: Any) -> None:
    harness = await refused(nursery, tmp_path, FakeAuth(prm={"resource": "https://evil.example.com/mcp"}),
                            DiscoveryError, "is for 'https://evil.example.com/mcp'")
    assert harness.fake.seen("/.well-known/oauth-authorization-server") == []


async def test_resource_metadata_url_on_another_origin_is_not_fetched(nursery: trio.Nursery,
                                                                      tmp_path: Any) -> None:
    other = HttpServer(FakeAuth().handle)
    await nursery.start(other.serve)
    harness = await make_harness(nursery, tmp_path, FakeAuth())
    header = f'Bearer resource_metadata="{other.origin}/.well-known/oauth-protected-resource/mcp"'
    with pytest.raises(DiscoveryError, match="on another origin"):
        await harness.challenge(header=header)
    assert other.seen == []


async def test_a_remote_server_cannot_point_warden_at_an_authorization_server_on_this_machine(
        nursery: trio.Nursery, tmp_path: Any) -> None:
    """http:// to loopback is allowed for a local test setup; a remote server naming "its" authorization server on
    127.0.0.1 made warden send discovery requests to whatever local service listens there (a blind SSRF, the path
    the server's to choose). ``127.1`` is this machine too, but warden counts only canonical loopback forms as
    loopback, so here it is the remote server while every packet stays on 127.0.0.1."""
    local = HttpServer(lambda ex: ex.respond(404, b"a local service"))
    await nursery.start(local.serve)
    fake = FakeAuth()
    await nursery.start(fake.server.serve)
    url = f"http://127.1:{fake.server.port}/mcp"
    fake.prm = {"resource": url, "authorization_servers": [local.origin]}
    client = OAuthClient(url, "test", OAuthSettings(timeout=20),
                         CredentialStore(SecretStore(tmp_path, keyring=None), clock=Clock()), present=follow)
    with pytest.raises(DiscoveryError) as refused:
        await client.challenged(401, ["Bearer"], None)
    assert refused.value.message == (
        f"the protected resource metadata at http://127.1:{fake.server.port}/.well-known/oauth-protected-resource/mcp"
        f" names an authorization server on this machine ('{local.origin}') for a server that is not on it; warden "
        "sends no OAuth request to a local service on a remote server's word")
    assert local.seen == []


async def test_plain_http_to_a_remote_host_and_no_pkce_are_refused(nursery: trio.Nursery, tmp_path: Any) -> None:
    await refused(nursery, tmp_path, FakeAuth(prm={"authorization_servers": ["http://auth.example.com"]}),
                  DiscoveryError, "plain http:// to a host that is not loopback")


async def test_server_without_s256_is_refused(nursery: trio.Nursery, tmp_path: Any) -> None:
    await refused(nursery, tmp_path, FakeAuth(metadata={"code_challenge_methods_supported": ["plain"]}),
                  DiscoveryError, "does not offer PKCE with S256")


async def test_registration_with_a_non_loopback_redirect_is_refused(nursery: trio.Nursery, tmp_path: Any) -> None:
    harness = await refused(nursery, tmp_path,
                            FakeAuth(registration={"redirect_uris": ["https://attacker.example.com/cb"]}),
                            TokenError, "is not a loopback redirect")
    assert harness.fake.seen("/authorize") == []


async def test_token_answer_without_token_type_is_refused(nursery: trio.Nursery, tmp_path: Any,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    harness = await refused(nursery, tmp_path, FakeAuth(token={"token_type": None}), TokenError,
                            "no token_type")
    assert harness.store.tokens(harness.url, harness.fake.origin) is None
    assert ACCESS not in "\n".join(r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("access", ["zq7-\u00e9", "zq7\r\nX-Injected: 1", "zq7\x00", "zq7 and more"])
async def test_an_access_token_no_header_can_carry_is_refused_and_never_shown(
        nursery: trio.Nursery, tmp_path: Any, caplog: pytest.LogCaptureFixture, access: str) -> None:
    """A non-ASCII access token once reached httpx, which raised UnicodeEncodeError out of the request's task (the
    server was stopped for good); one with CR LF made h11 refuse the header with an error quoting it, token and all,
    into the log and the host's error. Both are refused at the token answer, without showing the token."""
    caplog.set_level(logging.DEBUG)
    harness = await refused(nursery, tmp_path, FakeAuth(token={"access_token": access}), TokenError,
                            r"the token answer's access_token holds characters other than printable ASCII "
                            r"\(RFC 6749 A\.12\); no Authorization header can carry it$")
    assert harness.store.tokens(harness.url, harness.fake.origin) is None
    assert "zq7" not in "\n".join(r.getMessage() for r in caplog.records)


async def test_a_compressed_token_answer_is_refused_before_it_is_inflated(nursery: trio.Nursery,
                                                                        tmp_path: Any) -> None:
    """warden asks for identity and bounds the token answer at 64 KiB on the wire; httpx then undid any gzip the
    server applied anyway, so 32 KiB of gzip became a 32 MiB token in memory (and layered gzip, which httpx undoes
    up to five times, gigabytes). A compressed answer is now refused before a byte of it is read."""
    fake = FakeAuth()
    token = {"access_token": "a" * (32 * 1024 * 1024), "token_type": "Bearer"}
    bomb = gzip.compress(json.dumps(token).encode(), compresslevel=9)
    assert len(bomb) < 64 * 1024
    answer_all_else = fake.server.handler

    async def handler(ex: Exchange) -> None:
        if ex.request.path == "/token":
            await ex.respond(200, bomb, [("Content-Encoding", "gzip")], content_type="application/json")
        else:
            await answer_all_else(ex)

    fake.server.handler = handler
    await refused(nursery, tmp_path, fake, TokenError,
                  r"^the authorization server's answer is unusable: the server sent a 'gzip'-encoded answer "
                  r"although warden asked for identity$")


async def test_forged_redirects_neither_get_a_token_nor_end_the_authorization(nursery: trio.Nursery,
                                                                              tmp_path: Any) -> None:
    """Another page in the user's browser, or another local user, reaches warden's loopback redirect before the
    authorization server's does: a silent connection, then requests to the callback with a forged state, with none,
    with a forged ``error``. Each forged one is refused (400) and no token is requested for it; none of them ends
    the authorization (before: the first forged state ended it, finally for the run, so any web page could keep a
    server from ever being authorized); the genuine redirect that follows completes it."""
    answers: list[int] = []

    async def attacker_then_user(url: str) -> None:
        async with httpx.AsyncClient(trust_env=False, timeout=10) as http:
            location = (await http.get(url)).headers["location"]
            callback = urlsplit(location)
            silent = await trio.open_tcp_stream("127.0.0.1", callback.port)  # sends nothing, holds on
            base = f"http://127.0.0.1:{callback.port}{callback.path}"
            for query in (callback.query.replace("state=", "state=forged"), f"code={CODE}",
                          "error=access_denied&state=forged", callback.query + "&state=again"):
                answers.append((await http.get(f"{base}?{query}")).status_code)
            await http.get(location)
            await silent.aclose()

    harness = await make_harness(nursery, tmp_path, FakeAuth(), present=attacker_then_user)
    assert await harness.challenge()
    assert answers == [400, 400, 400, 400]
    assert len(harness.fake.seen("/token")) == 1
    assert parse_qs(harness.fake.seen("/token")[0].body.decode())["code"] == [CODE]
    assert await harness.client.authorization(harness.url) == f"Bearer {ACCESS}-1"


async def test_a_redirect_that_never_comes_times_out_and_may_be_tried_again(nursery: trio.Nursery,
                                                                            tmp_path: Any) -> None:
    """Only forged redirects arrive: no token is requested, the authorization times out, and - being no refusal
    of the server's - it is not final: the next challenge asks the user again."""
    attempts: list[str] = []

    async def forger_first(url: str) -> None:
        attempts.append(url)
        if len(attempts) > 1:
            await follow(url)
            return
        async with httpx.AsyncClient(trust_env=False, timeout=10) as http:
            location = (await http.get(url)).headers["location"]
            assert (await http.get(location.replace("state=", "state=forged"))).status_code == 400

    harness = await make_harness(nursery, tmp_path, FakeAuth(), present=forger_first,
                                 settings=OAuthSettings(timeout=2))
    with pytest.raises(UpstreamTimeout, match="not completed within"):
        await harness.challenge()
    assert harness.fake.seen("/token") == []
    assert await harness.challenge()
    assert len(attempts) == 2


async def test_iss_of_another_issuer_is_refused(nursery: trio.Nursery, tmp_path: Any) -> None:
    harness = await refused(nursery, tmp_path, FakeAuth(redirect={"iss": "https://evil.example.com"}),
                            RedirectError, "comes from issuer 'https://evil.example.com'")
    assert harness.fake.seen("/token") == []


async def test_missing_iss_when_promised_is_refused(nursery: trio.Nursery, tmp_path: Any) -> None:
    harness = await refused(nursery, tmp_path,
                            FakeAuth(metadata={"authorization_response_iss_parameter_supported": True}),
                            RedirectError, "this one has none")
    assert harness.fake.seen("/token") == []


async def test_error_redirect_is_refused_with_the_servers_words_escaped(nursery: trio.Nursery,
                                                                       tmp_path: Any) -> None:
    await refused(nursery, tmp_path,
                  FakeAuth(redirect={"code": None, "error": "access_denied", "error_description": "no\x1b[2J"}),
                  RedirectError, r"refused: access_denied \(no\\x1b\[2J\)")


async def test_pre_registered_client_uses_basic_authentication(nursery: trio.Nursery, tmp_path: Any) -> None:
    fake = FakeAuth(metadata={"token_endpoint_auth_methods_supported": ["client_secret_basic"],
                              "registration_endpoint": None})
    settings = OAuthSettings(client_id="pre-client", client_secret="pre-secret-123", timeout=20)
    harness = await make_harness(nursery, tmp_path, fake, settings=settings)
    assert await harness.challenge()
    token = harness.fake.seen("/token")[0]
    assert token.header("authorization") == "Basic " + __import__("base64").b64encode(
        b"pre-client:pre-secret-123").decode()
    assert harness.fake.seen("/register") == []


async def test_a_cancelled_request_does_not_abandon_the_authorization(nursery: trio.Nursery, tmp_path: Any) -> None:
    """The user is still in the browser when the request that met the 401 gives up (a timeout, the host left):
    the authorization goes on, and the next request gets its token without a second prompt."""
    shown: list[str] = []
    release = trio.Event()

    async def slow_user(url: str) -> None:
        shown.append(url)
        await release.wait()
        await follow(url)

    harness = await make_harness(nursery, tmp_path, FakeAuth(), present=slow_user)
    with trio.move_on_after(1) as scope:
        await harness.challenge()
    assert scope.cancelled_caught
    assert len(shown) == 1
    release.set()
    assert await harness.challenge()
    assert await harness.client.authorization(harness.url) == f"Bearer {ACCESS}-1"
    assert len(shown) == 1
    assert len(harness.fake.seen("/authorize")) == 1


# ---------------------------------------------------------------------------------------------------- deadlines

DEADLINE = 1.5
"""The exchange deadline these tests configure; the hostile server would take minutes (one byte every 0.5 s of a
1000-byte answer, or every well-known URL answered just before httpx's 15 s read timeout)."""


def stalling(fake: FakeAuth, paths: tuple[str, ...], mode: str) -> None:
    """Make ``paths`` answer as a hostile server that holds warden without ever tripping a read timeout:
    ``trickle`` sends a 200 one byte every 0.5 s, ``slow`` waits 1 s before each 404 (well inside httpx's read
    timeout)."""
    answer_all_else = fake.server.handler

    async def handler(ex: Exchange) -> None:
        if ex.request.path.split("?")[0] not in paths:
            await answer_all_else(ex)
        elif mode == "slow":
            await trio.sleep(1)
            await ex.respond(404, b"")
        else:
            await ex.start(200, [("Content-Type", "application/json"), ("Content-Length", "1000")])
            for _ in range(1000):
                await ex.write(b" ")
                await trio.sleep(0.5)

    fake.server.handler = handler


@pytest.mark.parametrize(("paths", "mode", "what"), [
    (("/.well-known/oauth-protected-resource/mcp",), "trickle",
     "OAuth discovery (the protected resource metadata of {origin}/mcp)"),
    (("/.well-known/oauth-authorization-server",), "trickle",
     "OAuth discovery (the metadata of authorization server {origin})"),
    (("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"), "slow",
     "OAuth discovery (the protected resource metadata of {origin}/mcp)"),
    (("/register",), "trickle", "client registration at {origin}"),
    (("/token",), "trickle", "the token request at {origin}"),
])
async def test_a_server_that_trickles_or_stalls_is_given_one_deadline_per_exchange(
        nursery: trio.Nursery, tmp_path: Any, paths: tuple[str, ...], mode: str, what: str) -> None:
    """Only httpx's 15 s per read bounded discovery, registration and the token request, so a server that sends a
    byte now and then (or answers each of the five well-known URLs just in time) held the request, and every
    request waiting for the same authorization, for minutes. Each exchange now has one deadline in all; running
    out is a timeout (the next challenge may try again), not a refusal."""
    fake = FakeAuth()
    stalling(fake, paths, mode)
    harness = await make_harness(nursery, tmp_path, fake,
                                 settings=OAuthSettings(timeout=20, exchange_timeout=DEADLINE))
    with trio.fail_after(15), pytest.raises(UpstreamTimeout) as timed_out:
        await harness.challenge(header="Bearer")
    assert timed_out.value.message == (f"test: {what.format(origin=fake.origin)} did not finish within 1.5 s; the "
                                       "server answers too slowly or not at all")
    assert timed_out.value.hint == "try again later"
    assert harness.events == []
    fake.server.handler = fake.handle
    with trio.fail_after(15):
        assert await harness.challenge(header="Bearer")  # not final: the server recovered


async def test_a_refresh_that_trickles_times_out_keeps_the_refresh_token_and_asks_no_one(nursery: trio.Nursery,
                                                                                        tmp_path: Any) -> None:
    shown: list[str] = []

    async def user(url: str) -> None:
        shown.append(url)
        await follow(url)

    harness = await make_harness(nursery, tmp_path, FakeAuth(), present=user,
                                 settings=OAuthSettings(timeout=20, exchange_timeout=DEADLINE))
    assert await harness.challenge()
    stalling(harness.fake, ("/token",), "trickle")
    harness.clock.now += 3600
    with trio.fail_after(15), pytest.raises(UpstreamTimeout) as timed_out:
        await harness.client.authorization(harness.url)
    assert timed_out.value.message == (f"test: refreshing the token at {harness.fake.origin} did not finish within "
                                       "1.5 s; the server answers too slowly or not at all")
    assert len(shown) == 1
    kept = harness.store.tokens(harness.url, harness.fake.origin)
    assert kept is not None
    assert kept.refresh_token == REFRESH
    harness.fake.server.handler = harness.fake.handle
    assert await harness.client.authorization(harness.url) == f"Bearer {ACCESS}-2"
    assert len(shown) == 1


# ---------------------------------------------------------------------------------------------------- prompts


def insufficient(scope: str) -> str:
    return f'Bearer error="insufficient_scope", scope="{scope}"'


async def test_a_server_naming_a_new_scope_on_every_request_gets_the_user_asked_three_times_an_hour(
        nursery: trio.Nursery, tmp_path: Any) -> None:
    """Every 403 ``insufficient_scope`` for a scope the token lacks started a new authorization, a browser prompt to
    the user, so a hostile server naming a new scope on each request had the user asked on each request. Now the
    user is asked at most three times an hour per server; a step-up past that fails the request, and nothing else:
    the token still goes on requests, and an hour after the first prompt the server may ask again."""
    shown: list[str] = []

    async def user(url: str) -> None:
        shown.append(url)
        await follow(url)

    harness = await make_harness(nursery, tmp_path, FakeAuth(), present=user)
    assert await harness.challenge()
    for n in (1, 2):
        sent = await harness.client.authorization(harness.url)
        assert await harness.challenge(403, insufficient(f"mcp:s{n}"), sent)
    assert len(shown) == 3
    for n in (3, 4, 5):
        with pytest.raises(UpstreamError) as refused:
            await harness.challenge(403, insufficient(f"mcp:s{n}\x1b[2J"), f"Bearer {ACCESS}-3")
        assert refused.value.message == (
            f"test: the server wants another authorization (scope mcp:read offline_access mcp:s1 mcp:s2 "
            f"mcp:s{n}\\x1b[2J), but the user was asked 3 times in the last 60 minutes; warden refused it, so that a "
            "server cannot flood the user with authorization prompts")
        assert refused.value.hint == ("warden asks again in 60 minutes at the earliest; if the server keeps asking "
                                      "for new scopes, check its configuration with its operator")
    assert len(shown) == 3
    assert len(harness.fake.seen("/authorize")) == 3
    assert await harness.client.authorization(harness.url) == f"Bearer {ACCESS}-3"
    harness.clock.now += 3600  # the token expired meanwhile: refreshing needs no one
    assert await harness.client.authorization(harness.url) == f"Bearer {ACCESS}-4"
    assert await harness.challenge(403, insufficient("mcp:s6"), f"Bearer {ACCESS}-4")
    assert len(shown) == 4
