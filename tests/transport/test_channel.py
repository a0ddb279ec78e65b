"""The message channel on real pipes. Writing: the inline fast path (``os.write`` while nothing is queued) and the
queued fallback when the pipe is full keep every message whole and in order, however the pipe cuts writes.
Reading: the direct ``os.read`` path returns every message whole and in order however the writer cuts them, ends
at the pipe's end, and never keeps other tasks from running while a peer floods it."""

from __future__ import annotations

import fcntl
import os

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from warden.protocol.messages import Notification
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


async def read_all(chunks: list[bytes]) -> list[bytes]:
    """What a channel reads from a pipe the chunks are written to, one write each, then closed."""
    read_fd, write_fd = pipe(1 << 16)
    channel = MessageChannel(trio.lowlevel.FdStream(read_fd), trio.testing.MemorySendStream(), name="test")
    writer = trio.lowlevel.FdStream(write_fd)
    got: list[bytes] = []
    async with trio.open_nursery() as nursery:

        async def write() -> None:
            for chunk in chunks:
                await writer.send_all(chunk)
                await trio.sleep(0)
            await writer.aclose()

        nursery.start_soon(write)
        while batch := await channel.receive_batch():
            got.extend(m.raw for m in batch if isinstance(m, Notification))
    return got


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 300_000), min_size=1, max_size=8), st.data())
def test_messages_read_from_a_pipe_stay_whole_and_in_order(sizes: list[int], data: st.DataObject) -> None:
    messages = [b'{"jsonrpc":"2.0","method":"m%d","params":{"x":"%b"}}' % (i, b"y" * size)
                for i, size in enumerate(sizes)]
    wire = b"".join(m + b"\n" for m in messages)
    cuts = sorted(data.draw(st.sets(st.integers(1, len(wire) - 1), max_size=6)))
    chunks = [wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True)]
    assert trio.run(read_all, chunks) == messages


async def test_a_flooding_peer_does_not_keep_other_tasks_from_running() -> None:
    """A pipe that always has data still lets the scheduler run other tasks between chunks."""
    read_fd, write_fd = pipe(1 << 20)
    channel = MessageChannel(trio.lowlevel.FdStream(read_fd), trio.testing.MemorySendStream(), name="test")
    line = b'{"jsonrpc":"2.0","method":"flood"}\n'
    os.write(write_fd, line * 20_000)  # far more than one chunk: every read finds data without waiting
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.sleep(0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(tick)
        read = batches = 0
        while read < 20_000:
            read += len(await channel.receive_batch())
            batches += 1
        assert batches > 1
        assert ticks >= batches - 1  # the ticker ran between every two chunks the reader took
        nursery.cancel_scope.cancel()
    os.close(write_fd)
