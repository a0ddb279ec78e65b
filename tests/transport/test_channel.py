"""The message channel's write side on real pipes: the inline fast path (``os.write`` while nothing is queued) and
the queued fallback when the pipe is full keep every message whole and in order, however the pipe cuts writes."""

from __future__ import annotations

import fcntl
import os

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from warden.transport.channel import MessageChannel

F_SETPIPE_SZ = 1031


def pipe(size: int = 4096) -> tuple[int, int]:
    read_fd, write_fd = os.pipe()
    fcntl.fcntl(write_fd, F_SETPIPE_SZ, size)
    return read_fd, write_fd


async def drain(stream: trio.lowlevel.FdStream, until: int) -> bytes:
    data = b""
    while len(data) < until:
        chunk = await stream.receive_some(1 << 16)
        assert chunk
        data += chunk
    return data


async def exchange(messages: list[bytes], read_late: bool) -> bytes:
    read_fd, write_fd = pipe()
    reader = trio.lowlevel.FdStream(read_fd)
    writer = trio.lowlevel.FdStream(write_fd)
    dummy_in = trio.testing.MemoryReceiveStream()
    channel = MessageChannel(dummy_in, writer, name="test", outbox_bytes=64 * 1024)
    expected = b"".join(m + b"\n" for m in messages)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(channel.serve_writer)
        received: list[bytes] = []

        async def read() -> None:
            if read_late:
                await trio.sleep(0.01)  # the pipe fills first: sends fall back to the queue
            received.append(await drain(reader, len(expected)))

        nursery.start_soon(read)
        for message in messages:
            await channel.send(message)
        while not received:
            await trio.sleep(0.001)
        channel.close_outbox()
    await reader.aclose()
    await writer.aclose()
    return received[0]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 20_000), min_size=1, max_size=12), st.booleans())
def test_messages_stay_whole_and_in_order_across_partial_writes(sizes: list[int], read_late: bool) -> None:
    messages = [(b"%d:" % i) + b"x" * size for i, size in enumerate(sizes)]
    got = trio.run(exchange, messages, read_late)
    assert got == b"".join(m + b"\n" for m in messages)


async def test_a_closed_reader_closes_the_channel() -> None:
    read_fd, write_fd = pipe()
    os.close(read_fd)
    channel = MessageChannel(trio.testing.MemoryReceiveStream(), trio.lowlevel.FdStream(write_fd), name="test")
    try:
        await channel.send(b'{"jsonrpc":"2.0","method":"x"}')
    except trio.ClosedResourceError:
        pass
    else:
        raise AssertionError("a write to a pipe nobody reads must close the channel")
