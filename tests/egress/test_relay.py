"""The proxy's byte paths below the request logic: the upstream response head is read through its blank line and
not a byte further (the body stays in the socket for the splice relay), in any chunking, within ``MAX_HEAD``.
These run over socket pairs in this process: no network namespace needed."""

from __future__ import annotations

import socket

import pytest
import trio
import trio.testing

from warden.egress import MAX_HEAD
from warden.egress._proxy import _Refused, _response_head

HEAD = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: keep-alive\r\n\r\n"
BODY = b"\r\n\r\nbody!"  # starts like a head's end, so a reader that took one byte too many would show it


async def read_head_fed(pieces: list[bytes]) -> tuple[bytes | _Refused, bytes]:
    """Feed ``pieces`` one by one to :func:`_response_head`, letting it read (and block) after each, then end the
    stream; returns what it returned (or raised), and every byte left in the socket after it."""
    reader, writer = trio.socket.socketpair()
    outcome: list[bytes | _Refused] = []

    async def read() -> None:
        try:
            outcome.append(await _response_head(reader))
        except _Refused as exc:
            outcome.append(exc)

    with reader, writer, trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            for piece in pieces:
                await trio.testing.wait_all_tasks_blocked()
                while piece:
                    piece = piece[await writer.send(piece):]
            writer.shutdown(socket.SHUT_WR)
        left = bytearray()
        while chunk := await reader.recv(1 << 16):
            left += chunk
    return outcome[0], bytes(left)


@pytest.mark.parametrize("chunking", ["whole", "one byte at a time", "split inside the blank line"])
async def test_the_head_is_read_to_its_blank_line_and_not_a_byte_further(chunking: str) -> None:
    data = HEAD + BODY
    if chunking == "whole":
        pieces = [data]
    elif chunking == "one byte at a time":
        pieces = [data[i:i + 1] for i in range(len(data))]
    else:
        pieces = [HEAD[:-3], HEAD[-3:-1], HEAD[-1:] + BODY]
    head, left = await read_head_fed(pieces)
    assert head == HEAD
    assert left == BODY


async def test_a_head_of_exactly_max_head_is_read() -> None:
    head = b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * (MAX_HEAD - 28) + b"\r\n\r\n"
    assert len(head) == MAX_HEAD
    got, left = await read_head_fed([head[:1000], head[1000:] + BODY])
    assert got == head
    assert left == BODY


@pytest.mark.parametrize("pieces", [
    [b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * MAX_HEAD + b"\r\n\r\n" + BODY],  # ends past the cap, in one write
    [b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * (MAX_HEAD - 27) + b"\r\n\r\n"],  # one byte past the cap
    [b"HTTP/1.1 200 OK\r\n", b"X-Pad: " + b"a" * 1000 + b"\r\n"] * 40,  # never ends
])
async def test_a_head_longer_than_max_head_is_refused(pieces: list[bytes]) -> None:
    refused, _ = await read_head_fed(pieces)
    assert isinstance(refused, _Refused)
    assert (refused.status, refused.verdict.reason) == (502, "the upstream response head is too large")


@pytest.mark.parametrize("pieces", [[], [HEAD[:-1]], [b"HTTP/1.1 200 OK\r\n", b"\r"]])
async def test_an_upstream_that_closes_before_the_head_ends_is_refused(pieces: list[bytes]) -> None:
    refused, left = await read_head_fed(pieces)
    assert isinstance(refused, _Refused)
    assert (refused.status, refused.verdict.reason) == (502, "the upstream server closed without a response")
    assert left == b""
