"""Configuring an HTTP upstream: URL and header checks, secrets from the environment, OAuth refused, and the map
from every httpx exception to a warden error."""

from __future__ import annotations

import inspect

import httpx
import pytest

from warden.errors import ConfigError, LocalProtocolError, UpstreamClosed, UpstreamError, UpstreamTimeout, WardenError
from warden.transport.http_config import (
    auth_headers_from_config,
    headers_from_env,
    http_config,
    http_server_name,
    is_http_url,
)
from warden.transport.http_exchange import map_http_error


def test_is_http_url() -> None:
    assert is_http_url("https://example.com/mcp")
    assert is_http_url("HTTP://127.0.0.1:8000/mcp")
    assert not is_http_url("npx")
    assert not is_http_url("/usr/bin/server")


def test_http_server_name() -> None:
    assert http_server_name("https://example.com/mcp") == "example.com"
    assert http_server_name("http://127.0.0.1:8000/mcp") == "127.0.0.1-8000"
    assert http_server_name("http://[::1]:9/mcp") == "1-9"


@pytest.mark.parametrize(("url", "match"), [
    ("ftp://example.com/x", "not an absolute http"),
    ("/mcp", "not an absolute http"),
    ("https:///mcp", "not an absolute http"),
    ("https://user:pw@example.com/mcp", "carries credentials"),
    ("https://token@example.com/mcp", "carries credentials"),
    ("https://example.com/mcp#frag", "fragment"),
    ("https://example.com:99999/mcp", "malformed"),
    ("https://example.com/" + "a" * 9000, "longer than"),
])
def test_AU05_bad_urls_are_refused(url: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        http_config(url)


@pytest.mark.parametrize(("name", "value", "match"), [
    ("Bad Name", "v", "not a valid HTTP header name"),
    ("Mcp-Session-Id", "v", "sets the Mcp-Session-Id header itself"),
    ("mcp-param-x", "v", "itself"),
    ("Host", "evil", "itself"),
    ("X-Token", "a\r\nInjected: 1", "control characters"),
    ("X-Token", "é", "non-ASCII"),
    ("X-Token", " padded", "whitespace"),
])
def test_bad_headers_are_refused(name: str, value: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        http_config("https://example.com/mcp", headers=[(name, value)])


def test_AU06_credentials_never_travel_in_clear_to_a_remote_host() -> None:
    with pytest.raises(ConfigError, match="over plain http://"):
        http_config("http://example.com/mcp", headers=[("Authorization", "Bearer x")])
    for local in ("http://127.0.0.1:1/mcp", "http://localhost/mcp", "http://[::1]:8/mcp"):
        assert http_config(local, headers=[("Authorization", "Bearer x")]).headers
    assert http_config("http://example.com/mcp").headers == ()  # no credentials: plain http is the user's choice


def test_secrets_are_not_in_the_repr() -> None:
    settings = http_config("https://example.com/mcp", headers=[("Authorization", "Bearer s3cret")])
    assert "s3cret" not in repr(settings)
    assert "Authorization" in repr(settings)


def test_headers_come_from_the_environment() -> None:
    env = {"TOKEN": "abc", "FULL": "Basic dXNlcg==", "KEY": "k"}
    assert headers_from_env(["Authorization=TOKEN", "X-Api-Key=KEY"], env) == [
        ("Authorization", "Bearer abc"), ("X-Api-Key", "k")]
    assert headers_from_env(["Authorization=FULL"], env) == [("Authorization", "Basic dXNlcg==")]
    with pytest.raises(ConfigError, match="MISSING is not set"):
        headers_from_env(["Authorization=MISSING"], env)
    with pytest.raises(ConfigError, match="not NAME=ENVVAR"):
        headers_from_env(["Authorization"], env)


def test_AU09_oauth_block_sends_no_static_header() -> None:
    assert auth_headers_from_config({"type": "oauth", "client_id": "x"}, {}) == []  # warden.auth gets the token


def test_auth_blocks() -> None:
    env = {"T": "tok", "K": "key"}
    assert auth_headers_from_config({"type": "bearer", "token_env": "T"}, env) == [("Authorization", "Bearer tok")]
    assert auth_headers_from_config({"type": "headers", "headers": {"X-Key": "K"}}, env) == [("X-Key", "key")]
    with pytest.raises(ConfigError, match="unknown auth type 'query'"):
        auth_headers_from_config({"type": "query", "param": "token"}, env)  # AU05: no credential in a URL, ever
    with pytest.raises(ConfigError, match="token_env"):
        auth_headers_from_config({"type": "bearer"}, env)
    with pytest.raises(ConfigError, match="needs headers"):
        auth_headers_from_config({"type": "headers", "headers": {"X": 1}}, env)


def _httpx_exceptions() -> list[type[Exception]]:
    return sorted({obj for _, obj in inspect.getmembers(httpx, inspect.isclass)
                   if issubclass(obj, Exception) and obj.__module__.startswith("httpx")}, key=lambda c: c.__name__)


@pytest.mark.parametrize("cls", _httpx_exceptions(), ids=lambda c: c.__name__)
def test_every_httpx_exception_maps_to_a_warden_error(cls: type[Exception]) -> None:
    """Like httpx's own test_httpcore_all_exceptions_mapped: no httpx error crosses warden's boundary raw."""
    request = httpx.Request("GET", "http://127.0.0.1/")
    forms: list[tuple[tuple[object, ...], dict[str, object]]] = [
        (("boom",), {"request": request}), (("boom",), {}), ((), {}),
        (("boom",), {"request": request, "response": httpx.Response(500, request=request)})]
    for args, kwargs in forms:
        try:
            exc = cls(*args, **kwargs)
            break
        except TypeError:
            continue
    else:
        pytest.fail(f"cannot construct {cls.__name__}")
    mapped = map_http_error(exc, "http://127.0.0.1/")  # type: ignore[arg-type]
    assert isinstance(mapped, WardenError)
    assert mapped.message


def test_the_map_keeps_meaning() -> None:
    request = httpx.Request("GET", "http://127.0.0.1/")
    assert isinstance(map_http_error(httpx.ReadTimeout("t", request=request), "u"), UpstreamTimeout)
    assert isinstance(map_http_error(httpx.ConnectError("refused", request=request), "u"), UpstreamClosed)
    assert isinstance(map_http_error(httpx.RemoteProtocolError("bad", request=request), "u"), UpstreamClosed)
    assert isinstance(map_http_error(httpx.InvalidURL("bad"), "u"), ConfigError)
    assert isinstance(map_http_error(httpx.StreamConsumed(), "u"), LocalProtocolError)
    other = map_http_error(httpx.HTTPStatusError("x", request=request, response=httpx.Response(500)), "u")
    assert type(other) is UpstreamError
