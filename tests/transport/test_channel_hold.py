"""Held writes (``MessageChannel.send(..., hold=True)`` and ``flush_held``): a reader that forwards everything one
read brought writes it with one ``os.write`` per channel. Whatever mix of held and plain sends, flushes, a full pipe
(the queued fallback) and a closed peer: every message arrives whole, once, in the order it was sent, and nothing
held is left behind."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from warden.transport.channel import HOLD_BYTES, MessageChannel, flush_held

F_SETPIPE_SZ = 1031


def pipe(size: int = 4096) -> tuple[int, int]:
    read_fd, write_fd = os.pipe()
    fcntl.fcntl(write_fd, F_SETPIPE_SZ, size)
    return read_fd, write_fd


def pending_bytes(read_fd: int) -> bytes:
    """What the pipe holds now, without waiting."""
    os.set_blocking(read_fd, False)
    try:
        return os.read(read_fd, 1 << 20)
    except BlockingIOError:
        return b""


async def test_held_messages_wait_for_the_flush_and_go_out_in_one_write() -> None:
    read_fd, write_fd = pipe(1 << 16)
    channel = MessageChannel(trio.testing.MemoryReceiveStream(), trio.lowlevel.FdStream(write_fd), name="test")
    for n in range(5):
        await channel.send(b'{"n":%d}' % n, hold=True)
    assert pending_bytes(read_fd) == b""
    flush_held()
    assert pending_bytes(read_fd) == b"".join(b'{"n":%d}\n' % n for n in range(5))
    flush_held()  # nothing left: a second flush writes nothing
    assert pending_bytes(read_fd) == b""
    os.close(read_fd)


async def test_a_plain_send_writes_what_is_held_first() -> None:
    read_fd, write_fd = pipe(1 << 16)
    channel = MessageChannel(trio.testing.MemoryReceiveStream(), trio.lowlevel.FdStream(write_fd), name="test")
    await channel.send(b"1", hold=True)
    await channel.send(b"2")
    assert pending_bytes(read_fd) == b"1\n2\n"
    flush_held()
    assert pending_bytes(read_fd) == b""
    os.close(read_fd)


async def test_held_bytes_are_bounded() -> None:
    read_fd, write_fd = pipe(1 << 20)
    channel = MessageChannel(trio.testing.MemoryReceiveStream(), trio.lowlevel.FdStream(write_fd), name="test")
    message = b"x" * 4096
    sent = 0
    while sent < HOLD_BYTES + len(message):
        await channel.send(message, hold=True)
        sent += len(message) + 1
    assert len(pending_bytes(read_fd)) >= HOLD_BYTES  # written without waiting for a flush
    flush_held()
    os.close(read_fd)


async def test_a_flush_to_a_peer_that_left_closes_the_channel_without_raising() -> None:
    read_fd, write_fd = pipe()
    channel = MessageChannel(trio.testing.MemoryReceiveStream(), trio.lowlevel.FdStream(write_fd), name="test")
    await channel.send(b"1", hold=True)
    os.close(read_fd)
    flush_held()  # the reader's flush never fails the reader
    with pytest.raises(trio.ClosedResourceError):
        await channel.send(b"2")


async def test_an_after_runs_only_once_its_message_is_in_the_pipe() -> None:
    """``after`` (the gateway's outcome record) never delays its message: a held message's runs at the flush, once
    the bytes are in the pipe, in order with those held with it; a message written at once runs its own right after
    the write; a channel whose peer left still runs it (the record is not lost with the answer)."""
    read_fd, write_fd = pipe(1 << 16)
    channel = MessageChannel(trio.testing.MemoryReceiveStream(), trio.lowlevel.FdStream(write_fd), name="test")
    seen: list[tuple[str, bytes]] = []

    def after(name: str) -> Callable[[], None]:
        return lambda: seen.append((name, pending_bytes(read_fd)))

    await channel.send(b"1", hold=True, after=after("first"))
    await channel.send(b"2", hold=True, after=after("second"))
    assert seen == []
    flush_held()
    assert seen == [("first", b"1\n2\n"), ("second", b"")]
    await channel.send(b"3", hold=True, after=after("held"))
    await channel.send(b"4", after=after("plain"))  # writes what is held first, then runs both, in order
    assert seen[2:] == [("held", b"3\n4\n"), ("plain", b"")]
    gone: list[str] = []
    await channel.send(b"5", hold=True, after=lambda: gone.append("lost"))
    os.close(read_fd)
    flush_held()
    assert gone == ["lost"]


async def mixed(plan: list[tuple[int, bool, bool]], read_late: bool) -> tuple[bytes, bytes]:
    """Send each planned message (size, held, flush after it) on a small pipe, read everything; returns (expected,
    received)."""
    read_fd, write_fd = pipe()
    reader = trio.lowlevel.FdStream(read_fd)
    writer = trio.lowlevel.FdStream(write_fd)
    channel = MessageChannel(trio.testing.MemoryReceiveStream(), writer, name="test", outbox_bytes=32 * 1024)
    messages = [(b"%d:" % i) + b"x" * size for i, (size, _, _) in enumerate(plan)]
    expected = b"".join(m + b"\n" for m in messages)
    received: list[bytes] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(channel.serve_writer)

        async def read() -> None:
            if read_late:
                await trio.sleep(0.01)  # the pipe fills first: sends fall back to the queue
            data = b""
            while len(data) < len(expected):
                chunk = await reader.receive_some(1 << 16)
                assert chunk
                data += chunk
            received.append(data)

        nursery.start_soon(read)
        for message, (_, hold, flush) in zip(messages, plan, strict=True):
            await channel.send(message, hold=hold)
            if flush:
                flush_held()
        flush_held()  # the reader's end of batch
        while not received:
            await trio.sleep(0.001)
        channel.close_outbox()
    await reader.aclose()
    await writer.aclose()
    return expected, received[0]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 12_000), st.booleans(), st.booleans()), min_size=1, max_size=14),
       st.booleans())
def test_held_and_plain_sends_stay_whole_and_in_order(plan: list[tuple[int, bool, bool]], read_late: bool) -> None:
    expected, got = trio.run(mixed, plan, read_late)
    assert got == expected
