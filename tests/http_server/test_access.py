"""Who may talk to the HTTP face: Host and Origin checks (DNS rebinding), the bearer compare, bind parsing.

Pure functions, so every hostile shape can be thrown at them; the same checks are exercised end to end, with a
recording upstream, in test_security.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warden.errors import ConfigError
from warden.gateway.http_access import AccessPolicy, bearer_matches, parse_bind, valid_token
from warden.loopback import is_loopback

TOKEN = "t" * 20 + "-._~+/" + "A1" * 10
POLICY = AccessPolicy.for_bind("127.0.0.1", 8765)


@pytest.mark.parametrize("host", [b"localhost:8765", b"127.0.0.1:8765", b"[::1]:8765", b"LOCALHOST:8765",
                                  b" localhost:8765 "])
def test_SEC01_loopback_names_with_the_bound_port_are_this_warden(host: bytes) -> None:
    assert POLICY.host_allowed(host)


@pytest.mark.parametrize("host", [
    None, b"", b"evil.example.com", b"evil.example.com:8765", b"localhost", b"localhost:8766", b"localhost:80",
    b"127.0.0.1:8765.evil.example", b"localhost.:8765", b"127.0.0.2:8765", b"localhost:8765:8765",
    b"localhost:99999999", b"user@localhost:8765", b"local\xffhost:8765", b"[::2]:8765", b"0.0.0.0:8765",
])
def test_SEC01_other_hosts_are_refused(host: bytes | None) -> None:
    """DNS rebinding: a page whose name now points at 127.0.0.1 sends its own name in Host; so does anything
    aimed at another port or a look-alike name."""
    assert not POLICY.host_allowed(host)


def test_SEC01_a_non_loopback_bind_admits_only_its_address_and_named_hosts() -> None:
    policy = AccessPolicy.for_bind("192.0.2.7", 9000, allow_hosts=["mcp.internal"])
    assert policy.host_allowed(b"192.0.2.7:9000")
    assert policy.host_allowed(b"mcp.internal:9000")
    assert not policy.host_allowed(b"localhost:9000")
    wildcard = AccessPolicy.for_bind("0.0.0.0", 9000)
    assert not wildcard.host_allowed(b"0.0.0.0:9000")
    assert wildcard.names == frozenset()


def test_SEC01_an_ipv6_loopback_bind() -> None:
    policy = AccessPolicy.for_bind("::1", 9000)
    assert policy.host_allowed(b"[::1]:9000")
    assert policy.host_allowed(b"localhost:9000")


@pytest.mark.parametrize("origin", [None, b"http://localhost:8765", b"http://127.0.0.1:8765", b"http://[::1]:8765",
                                    b"HTTP://LOCALHOST:8765/"])
def test_SEC02_no_origin_or_warden_own_origin_is_allowed(origin: bytes | None) -> None:
    assert POLICY.origin_allowed(origin)


@pytest.mark.parametrize("origin", [
    b"null", b"", b"http://evil.example.com", b"http://evil.example.com:8765", b"http://localhost:3000",
    b"https://localhost:8765", b"http://localhost", b"file://", b"http://localhost:8765/path", b"ftp://localhost:8765",
    b"http://localhost:8765@evil.example", b"http://\xff:8765",
])
def test_SEC02_foreign_origins_are_refused(origin: bytes) -> None:
    assert not POLICY.origin_allowed(origin)


def test_SEC02_an_allowed_origin_is_matched_exactly() -> None:
    policy = AccessPolicy.for_bind("127.0.0.1", 8765, allow_origins=["http://localhost:6274/"])
    assert policy.origin_allowed(b"http://localhost:6274")
    assert not policy.origin_allowed(b"http://localhost:6275")
    with pytest.raises(ConfigError, match="is not an origin"):
        AccessPolicy.for_bind("127.0.0.1", 8765, allow_origins=["localhost:6274"])


@given(st.binary(max_size=64))
@settings(max_examples=500)
def test_SEC01_SEC02_arbitrary_header_bytes_never_raise_and_foreign_ones_are_refused(value: bytes) -> None:
    host_ok = POLICY.host_allowed(value)
    origin_ok = POLICY.origin_allowed(value)
    if host_ok:
        assert value.strip().lower() in {b"localhost:8765", b"127.0.0.1:8765", b"[::1]:8765"}
    if origin_ok:
        assert value.strip().rstrip(b"/").lower() in {b"http://localhost:8765", b"http://127.0.0.1:8765",
                                                      b"http://[::1]:8765"}


def test_SEC04_the_bearer_token_must_match_exactly() -> None:
    assert bearer_matches([b"Bearer " + TOKEN.encode()], TOKEN)
    assert bearer_matches([b"bearer " + TOKEN.encode()], TOKEN)
    assert not bearer_matches([], TOKEN)
    assert not bearer_matches([b"Bearer " + TOKEN.encode()] * 2, TOKEN)
    assert not bearer_matches([b"Basic " + TOKEN.encode()], TOKEN)
    assert not bearer_matches([b"Bearer " + TOKEN[:-1].encode()], TOKEN)
    assert not bearer_matches([b"Bearer " + TOKEN.encode() + b"x"], TOKEN)
    assert not bearer_matches([b"Bearer"], TOKEN)
    assert not bearer_matches([TOKEN.encode()], TOKEN)


@given(st.binary(max_size=80))
def test_SEC04_no_other_credential_matches(value: bytes) -> None:
    if value.strip().lower().startswith(b"bearer ") and value.partition(b" ")[2].strip() == TOKEN.encode():
        return
    assert not bearer_matches([value], TOKEN)


def test_tokens_must_be_long_token68() -> None:
    assert valid_token(TOKEN)
    assert not valid_token("short")
    assert not valid_token("a" * 40 + " b")
    assert not valid_token("a" * 40 + "\n")
    assert not valid_token("é" * 40)


@pytest.mark.parametrize(("text", "expected"), [
    ("8765", ("127.0.0.1", 8765)), (":8765", ("127.0.0.1", 8765)), ("127.0.0.1:0", ("127.0.0.1", 0)),
    ("[::1]:9000", ("::1", 9000)), ("localhost:9000", ("localhost", 9000)), ("0.0.0.0:80", ("0.0.0.0", 80)),
])
def test_SEC03_bind_addresses_default_to_loopback(text: str, expected: tuple[str, int]) -> None:
    assert parse_bind(text) == expected


@pytest.mark.parametrize("text", ["", "host", "host:", "host:port", "1.2.3.4:70000", "::1:80", "[::1]"])
def test_malformed_bind_addresses_are_refused(text: str) -> None:
    with pytest.raises(ConfigError, match=r"HOST:PORT|out of range"):
        parse_bind(text)


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("localhost.", True), ("LOCALHOST", True),
    ("0.0.0.0", False), ("::", False), ("192.0.2.1", False), ("localhost.example", False), ("example.com", False),
])
def test_SEC03_loopback_detection(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
