"""EventLog: one response stream's events, read live or resumed, with bounded memory.

The properties: a reader sees every event after its position in order, or is told (StreamGap) that some were
dropped; memory stays within the bound whatever producers do; a finished log ends its readers.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from warden.gateway.http_streams import EventLog, StreamGap
from warden.protocol.sse import SSEParser


async def test_events_are_numbered_and_encoded_with_the_stream_id() -> None:
    log = EventLog("7", max_bytes=1 << 20)
    await log.send(b'{"jsonrpc":"2.0","method":"notifications/progress"}')
    log.finish(b'{"jsonrpc":"2.0","id":1,"result":{}}')
    events = log.events_after(0)
    assert [seq for seq, _ in events] == [1, 2]
    wire = b"".join(log.encode(seq, message) for seq, message in events)
    parsed = SSEParser().feed(wire)
    assert [(e.id, e.data) for e in parsed] == [
        ("7-1", '{"jsonrpc":"2.0","method":"notifications/progress"}'),
        ("7-2", '{"jsonrpc":"2.0","id":1,"result":{}}'),
    ]
    assert log.only_response() is None  # a message came first: this answer cannot go as plain JSON
    assert log.events_after(1) == events[1:]
    assert log.events_after(2) == []


async def test_a_lone_answer_can_go_as_json_and_a_modern_stream_has_no_ids() -> None:
    log = EventLog(None, max_bytes=1 << 20)
    log.finish(b'{"jsonrpc":"2.0","id":1,"result":{}}')
    assert log.only_response() == b'{"jsonrpc":"2.0","id":1,"result":{}}'
    assert log.encode(1, b"{}") == b"data: {}\n\n"
    with pytest.raises(trio.ClosedResourceError):
        await log.send(b"{}")


async def test_a_cancelled_request_ends_its_stream_without_an_answer() -> None:
    log = EventLog("1", max_bytes=100)
    log.finish(None)
    assert log.done
    assert log.response is None
    assert log.only_response() is None
    await log.wait_beyond(0)  # returns at once: nothing more will come


async def test_readers_wake_for_new_events_and_for_the_end() -> None:
    log = EventLog("1", max_bytes=1 << 20)
    seen: list[int] = []

    async def reader() -> None:
        position = 0
        while True:
            await log.wait_beyond(position)
            for seq, _ in log.events_after(position):
                seen.append(seq)
                position = seq
            if log.done and position >= log.last:
                return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        await log.send(b"{}")
        await trio.testing.wait_all_tasks_blocked()
        await log.send(b"{}")
        log.close()
    assert seen == [1, 2]
    with pytest.raises(trio.ClosedResourceError):
        await log.send(b"{}")


def test_one_reader_at_a_time() -> None:
    log = EventLog("1", max_bytes=10)
    log.attach()
    with pytest.raises(RuntimeError, match="already has a reader"):
        log.attach()
    log.detach()
    log.attach()


@given(st.lists(st.integers(min_value=0, max_value=300), max_size=60), st.integers(min_value=1, max_value=2000),
       st.integers(min_value=0, max_value=80))
@settings(max_examples=300, deadline=None)
def test_memory_is_bounded_and_gaps_are_reported(sizes: list[int], bound: int, position: int) -> None:
    async def check() -> None:
        log = EventLog("s", max_bytes=bound)
        for size in sizes:
            await log.send(b"x" * size)
        retained = sum(len(m) for _, m in log._events)
        assert retained <= bound or len(log._events) == 1  # one oversized event may stand alone
        assert log.last == len(sizes)
        start = min(position, log.last)
        try:
            events = log.events_after(start)
        except StreamGap:
            first = log._events[0][0]
            assert start + 1 < first
            return
        assert [seq for seq, _ in events] == list(range(start + 1, log.last + 1))
        assert [len(m) for _, m in events] == sizes[start:]

    trio.run(check)
