"""The server name a TLS ClientHello asks for (SNI, RFC 6066 section 3), read without terminating TLS.

A CONNECT is decided on a name; the ClientHello that follows must ask for that same name, or an allowed address
could front for another site (domain fronting through a shared CDN address). Sans-IO: :func:`client_hello_size`
says how many bytes the first handshake record needs, :func:`server_name` reads the name out of them. The
ClientHello must fit one TLS record (16 KiB; every mainstream client's does, post-quantum key shares included).
"""

from __future__ import annotations

from warden.egress._allow import EntryError, normalize_name

MAX_RECORD = 5 + 16384
#: Extensions that carry the real server name encrypted (ECH, and the draft ESNI before it): the SNI in clear is
#: then only the CDN's front name, and the CDN routes on the hidden one - domain fronting the SNI check cannot see.
_HIDDEN_NAME = frozenset({0xFE0D, 0xFFCE})


class ClientHelloError(ValueError):
    """The first bytes of the tunnel are not a TLS ClientHello warden can read, or name no host."""


def client_hello_size(data: bytes) -> int | None:
    """The size of the first TLS record in ``data`` (header included), or None until 5 bytes are there.

    Raises:
        ClientHelloError: the bytes are not a TLS handshake record.
    """
    if len(data) < 5:
        return None
    if data[0] != 0x16 or data[1] != 0x03:
        raise ClientHelloError("the tunnel did not start with a TLS handshake (only TLS goes through CONNECT)")
    length = int.from_bytes(data[3:5], "big")
    if length == 0 or length > 16384:
        raise ClientHelloError("malformed TLS record length")
    return 5 + length


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ClientHelloError("truncated ClientHello")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def number(self, n: int) -> int:
        return int.from_bytes(self.take(n), "big")

    def vector(self, length_bytes: int) -> bytes:
        return self.take(self.number(length_bytes))


def server_name(record: bytes) -> str:
    """The host name in the ``server_name`` extension of the ClientHello in ``record`` (one whole TLS record),
    normalized as policy names are.

    Raises:
        ClientHelloError: not a ClientHello, malformed, more than one extension or name, or no host name.
    """
    size = client_hello_size(record)
    if size is None or size != len(record):
        raise ClientHelloError("the ClientHello is not one whole TLS record")
    body = _Reader(record[5:])
    if body.number(1) != 1:
        raise ClientHelloError("the first handshake message is not a ClientHello")
    hello = _Reader(body.take(body.number(3)))
    if body.pos != len(body.data):
        raise ClientHelloError("more than one handshake message in the first record")
    hello.take(2 + 32)  # legacy_version, random
    hello.vector(1)  # legacy_session_id
    hello.vector(2)  # cipher_suites
    hello.vector(1)  # legacy_compression_methods
    if hello.pos == len(hello.data):
        raise ClientHelloError("the ClientHello names no server (no extensions)")
    extensions = _Reader(hello.vector(2))
    if hello.pos != len(hello.data):
        raise ClientHelloError("bytes after the ClientHello extensions")
    names: list[bytes] = []
    seen: set[int] = set()
    while extensions.pos < len(extensions.data):
        kind = extensions.number(2)
        data = extensions.vector(2)
        if kind in seen:
            raise ClientHelloError("a repeated ClientHello extension")
        seen.add(kind)
        if kind in _HIDDEN_NAME:
            raise ClientHelloError("the ClientHello carries an encrypted ClientHello (ECH): the server name it "
                                   "really asks for is hidden, so warden cannot hold it to the allowed name")
        if kind != 0:
            continue
        entries = _Reader(data)
        listed = _Reader(entries.vector(2))
        if entries.pos != len(entries.data):
            raise ClientHelloError("malformed server_name extension")
        while listed.pos < len(listed.data):
            name_type = listed.number(1)
            value = listed.vector(2)
            if name_type == 0:
                names.append(value)
    if len(names) != 1:
        raise ClientHelloError("the ClientHello names no server (SNI)" if not names else
                               "the ClientHello names more than one server")
    try:
        return normalize_name(names[0].decode("ascii"))
    except (UnicodeDecodeError, EntryError) as exc:
        raise ClientHelloError("the ClientHello's server name is not a host name") from exc
