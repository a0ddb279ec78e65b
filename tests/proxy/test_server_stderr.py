"""A server's stderr as warden keeps it for the message a person reads when the server ends (ST03: its stderr is
never an error, but its last lines are what says why it ended)."""

from __future__ import annotations

import trio
import trio.testing

from warden.upstream.stderr import LAST_WORDS_WAIT, StderrTail


async def test_an_ended_servers_last_words_reach_its_crash_message(autojump_clock: trio.testing.MockClock) -> None:
    """The process's exit and its stderr's last bytes race: a crash message built on the exit alone lost the line
    saying why (seen in make test under load: "last stderr: starting" without the "fatal: ..." line after it)."""
    tail = StderrTail("srv")
    send, receive = trio.testing.memory_stream_one_way_pair()

    async def late_line() -> None:
        await trio.sleep(0.2)
        await send.send_all(b"fatal: cannot read config\n")
        await send.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(tail.drain, receive)
        await send.send_all(b"starting\n")
        nursery.start_soon(late_line)
        await tail.last_words()
        assert tail.tail() == ["starting", "fatal: cannot read config"]


async def test_a_pipe_held_open_delays_the_crash_message_only_so_long(autojump_clock: trio.testing.MockClock) -> None:
    """A process the server left behind may hold its stderr open for ever; the message then goes without it."""
    tail = StderrTail("srv")
    send, receive = trio.testing.memory_stream_one_way_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(tail.drain, receive)
        await send.send_all(b"starting\n")
        began = trio.current_time()
        await tail.last_words()
        assert trio.current_time() - began == LAST_WORDS_WAIT
        assert tail.tail() == ["starting"]
        nursery.cancel_scope.cancel()
