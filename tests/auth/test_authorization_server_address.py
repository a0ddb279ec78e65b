"""Where a remote MCP server may send warden for authorization: not to this machine, and not into the user's
network. The resource metadata names the authorization server, so a hostile server chooses it; before, only the
canonical loopback forms were refused, so ``https://2130706433:port`` (127.0.0.1), ``https://[::ffff:127.0.0.1]``,
``https://10.0.0.1`` or ``https://169.254.169.254`` made warden send discovery requests there.

The real-traffic tests stay on 127.0.0.1: the MCP server is reached as ``127.1`` (this machine, but not a form
warden counts as loopback for the server, so it plays a remote one), and a listener on 127.0.0.1 counts every
connection an authorization server named in a numeric form would have got. Addresses off this machine are never
connected to: the refusal comes first, and an audit hook records every ``socket.connect`` warden attempts.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.auth.fake_auth import Clock, FakeAuth, follow
from warden.auth import CredentialStore, DiscoveryError, OAuthClient, OAuthSettings
from warden.auth.discovery import check_authorization_server_address
from warden.secrets import SecretStore

_connects: list[tuple[Any, ...]] | None = None


def _record_connect(event: str, args: tuple[Any, ...]) -> None:
    if event == "socket.connect" and _connects is not None:
        _connects.append(args[1])


sys.addaudithook(_record_connect)

REMOTE_SERVERS = ("https://mcp.example.com/mcp", "https://93.184.216.34/mcp", "https://[2606:4700::1111]/mcp",
                  "http://127.1:8080/mcp")
META = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
ON_MACHINE = f"the protected resource metadata at {META} names an authorization server on this machine"
ON_NETWORK = (f"the protected resource metadata at {META} names an authorization server on a private or local "
              "network address")

LOCAL_V4 = [ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16",
                                                "100.64.0.0/10", "127.0.0.0/8", "0.0.0.0/8")]
LOCAL_V6 = [ipaddress.IPv6Network(n) for n in ("fc00::/7", "fe80::/10", "::1/128", "::/128")]


def v4_forms(address: ipaddress.IPv4Address) -> list[str]:
    """Every way a URL's host can spell ``address`` that a resolver reads without DNS (inet_aton's forms and
    IPv4 inside IPv6)."""
    n = int(address)
    a, b, c, d = address.packed
    return [str(address), f"{address}.", str(n), hex(n), f"{a}.{n & 0xFFFFFF}", f"{a}.{b}.{n & 0xFFFF}",
            ".".join(hex(x) for x in (a, b, c, d)), f"[::ffff:{address}]", f"[::ffff:{n >> 16:x}:{n & 0xFFFF:x}]",
            f"[64:ff9b::{address}]", f"[2002:{n >> 16:x}:{n & 0xFFFF:x}::1]"]


def v4_in(networks: list[ipaddress.IPv4Network]) -> st.SearchStrategy[ipaddress.IPv4Address]:
    return st.sampled_from(networks).flatmap(
        lambda net: st.integers(0, net.num_addresses - 1).map(lambda i: net.network_address + i))


def v6_in(networks: list[ipaddress.IPv6Network]) -> st.SearchStrategy[ipaddress.IPv6Address]:
    return st.sampled_from(networks).flatmap(
        lambda net: st.integers(0, net.num_addresses - 1).map(lambda i: net.network_address + i))


def refusal(server: str, host: str) -> str | None:
    try:
        check_authorization_server_address(server, f"https://{host}:8443", META)
    except DiscoveryError as exc:
        return exc.message
    return None


def verdict(server: str, host: str) -> str | None:
    """Which refusal (machine or network), without the host as it was spelled."""
    message = refusal(server, host)
    return None if message is None else "machine" if message.startswith(ON_MACHINE) else "network"


@given(v4_in(LOCAL_V4), st.sampled_from(REMOTE_SERVERS), st.data())
@settings(max_examples=400)
def test_no_spelling_of_a_local_ipv4_address_is_allowed_for_a_remote_server(
        address: ipaddress.IPv4Address, server: str, data: st.DataObject) -> None:
    host = data.draw(st.sampled_from(v4_forms(address)))
    message = refusal(server, host)
    assert message is not None, host
    on_machine = (address.is_loopback or int(address) == 0) and not host.startswith(("[64:ff9b:", "[2002:"))
    assert message.startswith(ON_MACHINE if on_machine else ON_NETWORK), host  # a translator leads to a network


@given(v6_in(LOCAL_V6), st.sampled_from(REMOTE_SERVERS), st.booleans())
@settings(max_examples=200)
def test_no_local_ipv6_address_is_allowed_for_a_remote_server(address: ipaddress.IPv6Address, server: str,
                                                               zoned: bool) -> None:
    host = f"[{address}%25eth0]" if zoned else f"[{address}]"
    message = refusal(server, host)
    assert message is not None
    expected = ON_MACHINE if address.is_loopback or address.is_unspecified else ON_NETWORK
    assert message.startswith(expected), host


@given(st.ip_addresses(v=4), st.data())
@settings(max_examples=400)
def test_every_spelling_of_an_ipv4_address_gets_the_verdict_of_its_dotted_quad(address: ipaddress.IPv4Address,
                                                                               data: st.DataObject) -> None:
    host = data.draw(st.sampled_from(v4_forms(address)[:7]))  # the inet_aton forms and the trailing dot
    assert verdict(REMOTE_SERVERS[0], host) == verdict(REMOTE_SERVERS[0], str(address))
    local = not address.is_global or address.is_multicast or address.is_unspecified
    assert (verdict(REMOTE_SERVERS[0], str(address)) is not None) == local


@pytest.mark.parametrize("host", ["auth.example.com", "8.8.8.8", "[2606:4700::1111]", "[::ffff:8.8.8.8]",
                                  "10.0.0.1.example.com"])
def test_a_public_authorization_server_is_allowed_for_a_remote_server(host: str) -> None:
    for server in REMOTE_SERVERS:
        assert refusal(server, host) is None


@pytest.mark.parametrize(("server", "host", "refused"), [
    ("https://10.1.2.3/mcp", "10.9.9.9", None),
    ("https://192.168.1.5/mcp", "[fd00::5]", None),
    ("https://10.1.2.3/mcp", "127.0.0.1", ON_MACHINE),
    ("https://10.1.2.3/mcp", "0.0.0.0", ON_MACHINE),
    ("https://10.1.2.3/mcp", "auth.localhost", ON_MACHINE),
    ("https://mcp.example.com/mcp", "auth.localhost.", ON_MACHINE),
    ("http://127.0.0.1:8080/mcp", "127.0.0.1", None),
    ("http://localhost:8080/mcp", "10.0.0.1", None),
    ("http://[::1]:8080/mcp", "[::]", None),
])
def test_an_mcp_server_on_a_local_address_may_name_one_on_a_local_network_and_only_loopback_may_name_loopback(
        server: str, host: str, refused: str | None) -> None:
    message = refusal(server, host)
    if refused is None:
        assert message is None
    else:
        assert message is not None
        assert message.startswith(refused)


def test_the_refusal_names_the_metadata_and_the_server_escaped() -> None:
    with pytest.raises(DiscoveryError) as refused:
        check_authorization_server_address("https://mcp.example.com/mcp", "https://10.0.0.1:8443/\x1b[2J", META)
    assert refused.value.message == (
        f"the protected resource metadata at {META} names an authorization server on a private or local network "
        "address ('https://10.0.0.1:8443/\\\\x1b[2J') for a server that is not on one; warden sends no OAuth request "
        "into a local network on a remote server's word")


async def _refused_by(nursery: trio.Nursery, tmp_path: Any, issuer: str) -> tuple[FakeAuth, DiscoveryError]:
    fake = FakeAuth()
    await nursery.start(fake.server.serve)
    url = f"http://127.1:{fake.server.port}/mcp"
    fake.prm = {"resource": url, "authorization_servers": [issuer]}
    client = OAuthClient(url, "test", OAuthSettings(timeout=20),
                         CredentialStore(SecretStore(tmp_path, keyring=None), clock=Clock()), present=follow)
    with pytest.raises(DiscoveryError) as refused:
        await client.challenged(401, ["Bearer"], None)
    return fake, refused.value


@pytest.mark.parametrize("form", ["0x7f000001", "2130706433", "127.0.0.1.", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]",
                                  "0x7f.0.0.1"])
async def test_an_authorization_server_on_this_machine_in_any_numeric_form_is_never_connected_to(
        nursery: trio.Nursery, tmp_path: Any, form: str) -> None:
    listener = socket.socket()  # the kernel completes any connection to it, accepted or not
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    fake, error = await _refused_by(nursery, tmp_path, f"https://{form}:{port}")
    assert error.message == (
        f"the protected resource metadata at http://127.1:{fake.server.port}/.well-known/oauth-protected-resource/mcp"
        f" names an authorization server on this machine ('https://{form}:{port}') for a server that is not on it; "
        "warden sends no OAuth request to a local service on a remote server's word")
    with pytest.raises(BlockingIOError):
        listener.accept()  # nothing ever connected
    listener.close()
    assert [s.path for s in fake.server.seen] == ["/.well-known/oauth-protected-resource/mcp"]


@pytest.mark.parametrize("issuer", ["https://10.0.0.1", "https://169.254.169.254", "https://[fd00::1]:8443",
                                    "https://100.64.0.1", "https://[::ffff:192.168.1.1]"])
async def test_an_authorization_server_on_a_local_network_is_refused_before_any_connection(
        nursery: trio.Nursery, tmp_path: Any, issuer: str) -> None:
    global _connects
    _connects = []
    try:
        fake, error = await _refused_by(nursery, tmp_path, issuer)
        connected = _connects
    finally:
        _connects = None
    assert error.message == (
        f"the protected resource metadata at http://127.1:{fake.server.port}/.well-known/oauth-protected-resource/mcp"
        f" names an authorization server on a private or local network address ({issuer!r}) for a server that is "
        "not on one; warden sends no OAuth request into a local network on a remote server's word")
    assert connected == [("127.0.0.1", fake.server.port)]  # the resource metadata only
    assert [s.path for s in fake.server.seen] == ["/.well-known/oauth-protected-resource/mcp"]
