"""The sans-IO session engine, tested the h11 way: two engines wired back to back (warden's upstream side and a
peer), bytes cut at every position, and hypothesis sequences of sends, answers, progress and clock steps checked
against a model of what must hold."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warden.protocol.messages import CONNECTION_CLOSED, INVALID_REQUEST, decode_json, encode_result, parse_message
from warden.protocol.session import (
    Answered,
    Cancelled,
    Dropped,
    IncomingNotification,
    IncomingRequest,
    InvalidIncoming,
    Progress,
    Reply,
    Session,
    numeric_ids,
    string_ids,
)


def frame(message: bytes) -> bytes:
    return message + b"\n"


def pair() -> tuple[Session[str], Session[str]]:
    """warden as a client of a server, and the server: both the same engine."""
    return (Session(ids=numeric_ids, request_timeout=10, max_request_time=60),
            Session(ids=string_ids, request_timeout=10, max_request_time=60, progress_prefix=None))


def test_paired_request_and_answer_every_chunking() -> None:
    """A request and its answer cross intact however the bytes are cut, and the answer reaches its waiter."""
    client, _ = pair()
    wire, _pending = client.send_request("tools/call", {"name": "echo", "arguments": {"x": "é\u2028"}}, now=0,
                                         waiter="w1")
    data = frame(wire)
    for cut in range(len(data) + 1):
        _, server = pair()
        events = server.receive_data(data[:cut], now=0) + server.receive_data(data[cut:], now=0)
        assert len(events) == 1
        incoming = events[0]
        assert isinstance(incoming, IncomingRequest)
        assert incoming.request.method == "tools/call"
        assert decode_json(incoming.request.params or b"")["_meta"] == {"progressToken": "warden-1"}
        answer = server.respond(incoming.key, incoming.request.id, Reply(result=b'{"ok":true}'))
        assert answer is not None
        again = frame(answer)
        for cut2 in (0, 1, cut % len(again), len(again) - 1, len(again)):
            probe, _ = pair()
            _, p = probe.send_request("tools/call", {"name": "echo"}, now=0, waiter="w1")
            got = probe.receive_data(again[:cut2], now=0) + probe.receive_data(again[cut2:], now=0)
            assert got == [Answered(p, Reply(result=b'{"ok":true}'))]


def test_byte_by_byte_pipeline_of_many_messages() -> None:
    """Ten requests fed one byte at a time: ten in-flight requests, in order, none merged or lost."""
    client, server = pair()
    data = b"".join(frame(client.send_request("ping", None, now=0, waiter=str(i), progress=False)[0])
                    for i in range(10))
    events = [e for b in data for e in server.receive_data(bytes([b]), now=0)]
    assert [e.request.id for e in events if isinstance(e, IncomingRequest)] == [b"%d" % i for i in range(1, 11)]


def test_invariant_9_unknown_and_duplicate_answers_are_dropped() -> None:
    """covers: PX17, MS09 — an answer to an id warden never sent, a second answer and a late answer after a
    give-up are reported as dropped and reach no waiter."""
    client, _ = pair()
    _, pending = client.send_request("tools/list", None, now=0, waiter="w")
    assert isinstance(next(client.receive(parse_message(encode_result(b"99", b"{}")), now=0)), Dropped)
    first = list(client.receive(parse_message(encode_result(b"1", b"{}")), now=0))
    assert first == [Answered(pending, Reply(result=b"{}"))]
    second = list(client.receive(parse_message(encode_result(b"1", b"{}")), now=0))
    assert isinstance(second[0], Dropped)
    assert "did not send or already settled" in second[0].why
    _, other = client.send_request("tools/list", None, now=0, waiter="w2")
    assert client.give_up(other, "caller left") is not None
    late = list(client.receive(parse_message(encode_result(other.id, b"{}")), now=0))
    assert isinstance(late[0], Dropped)
    assert "gave up" in late[0].why
    # A string id that looks like warden's number is still another id (1 and "1" never meet).
    _, third = client.send_request("ping", None, now=0, waiter="w3")
    assert isinstance(next(client.receive(parse_message(encode_result(b'"3"', b"{}")), now=0)), Dropped)
    assert client.is_pending(third)


def test_MS04_timeout_cancels_and_LC09_initialize_is_never_cancelled() -> None:
    client, _ = pair()
    _, init = client.send_request("initialize", {"protocolVersion": "2025-11-25"}, now=0, waiter="i")
    _, call = client.send_request("tools/call", {"name": "x"}, now=0, waiter="c")
    assert client.next_deadline() == 10
    assert client.expire(9.999) == []
    expired = client.expire(10)
    assert {e.pending.method for e in expired} == {"initialize", "tools/call"}
    by_method = {e.pending.method: e.cancel for e in expired}
    assert by_method["initialize"] is None
    cancel = by_method["tools/call"]
    assert cancel is not None
    assert decode_json(cancel)["params"]["requestId"] == 2
    assert client.next_deadline() == math.inf
    assert not client.is_pending(init)
    assert not client.is_pending(call)


def test_MS05_MS06_progress_extends_up_to_the_hard_maximum() -> None:
    client, _ = pair()
    _, pending = client.send_request("tools/call", {"name": "slow"}, now=0, waiter="w")
    progress = b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"warden-1","progress":1}}'
    for now in range(5, 56, 5):
        events = list(client.receive(parse_message(progress), now=now))
        assert isinstance(events[0], Progress)
        assert events[0].params["progress"] == 1
        assert client.expire(now) == []
    assert client.next_deadline() == 60  # would be 65 without the hard maximum
    assert [e.pending for e in client.expire(60)] == [pending]
    # Progress for a token nobody waits on goes nowhere (it is not a notification for the gateway).
    assert list(client.receive(parse_message(progress), now=61)) == []


def test_MS08_a_stream_has_no_deadline() -> None:
    client, _ = pair()
    client.send_request("subscriptions/listen", {"notifications": {}}, now=0, waiter="l", stream=True, progress=False)
    assert client.next_deadline() == math.inf
    assert client.expire(1e12) == []


def test_MS30_peer_cancelled_ends_one_of_wardens_requests() -> None:
    client, _ = pair()
    _, listen = client.send_request("subscriptions/listen", {}, now=0, waiter="l", stream=True)
    note = b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}'
    events = list(client.receive(parse_message(note), now=0))
    assert isinstance(events[0], Answered)
    assert events[0].pending is listen
    assert events[0].reply.code == CONNECTION_CLOSED


def test_PX19_cancelled_incoming_request_gets_no_response() -> None:
    _, server = pair()
    events = server.receive_data(b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{}}\n', now=0)
    incoming = events[0]
    assert isinstance(incoming, IncomingRequest)
    cancel = server.receive_data(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}\n',
                                 now=0)
    assert cancel == [Cancelled(incoming.key)]
    assert server.respond(incoming.key, incoming.request.id, Reply(result=b"{}")) is None
    # The id is free again: the host may reuse it for a new request.
    assert isinstance(server.receive_data(b'{"jsonrpc":"2.0","id":7,"method":"ping"}\n', now=0)[0], IncomingRequest)


def test_duplicate_incoming_id_is_refused_while_in_flight() -> None:
    _, server = pair()
    server.receive_data(b'{"jsonrpc":"2.0","id":"a","method":"ping"}\n', now=0)
    events = server.receive_data(b'{"jsonrpc":"2.0","id":"a","method":"ping"}\n', now=0)
    assert isinstance(events[0], InvalidIncoming)
    assert events[0].answer is not None
    assert decode_json(events[0].answer)["error"]["code"] == INVALID_REQUEST
    # The number 1 and the string "1" are different requests.
    server.receive_data(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n', now=0)
    assert isinstance(server.receive_data(b'{"jsonrpc":"2.0","id":"1","method":"ping"}\n', now=0)[0],
                      IncomingRequest)


def test_invalid_and_oversized_input() -> None:
    client = Session[str](max_message_size=64)
    _, pending = client.send_request("ping", None, now=0, waiter="w", progress=False)
    events = client.receive_data(b'{"jsonrpc":"2.0","id":1,"result":' + b"[" * 10 + b"\n", now=0)
    assert isinstance(events[0], InvalidIncoming)
    assert events[0].answer is None
    assert events[0].invalid.id == b"1"
    settled = client.settle(b"1", Reply.failure(-32603, "unreadable"))
    assert isinstance(settled, Answered)
    assert settled.pending is pending
    assert not settled.reply.ok
    big = client.receive_data(b'{"jsonrpc":"2.0","id":5,"method":"x","params":{"p":"' + b"a" * 200 + b'"}}\n', now=0)
    assert isinstance(big[0], InvalidIncoming)
    assert big[0].answer is not None
    assert b"exceeds the 64-byte limit" in big[0].answer
    assert isinstance(client.receive_data(b"garbage\n", now=0)[0], InvalidIncoming)


def test_close_fails_everything_pending_once() -> None:
    client, _ = pair()
    sent = [client.send_request("ping", None, now=0, waiter=str(i))[1] for i in range(3)]
    failed = client.close("the server exited with status 3")
    assert [f.pending for f in failed] == sent
    assert all(f.reply.code == CONNECTION_CLOSED and "status 3" in f.reply.message for f in failed)
    assert client.close("again") == []
    with pytest.raises(ValueError, match="closed"):
        client.send_request("ping", None, now=0, waiter="late")


def test_notifications_pass_through_as_events() -> None:
    client, _ = pair()
    events = client.receive_data(b'{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}\n', now=0)
    assert isinstance(events[0], IncomingNotification)
    assert events[0].notification.method == "notifications/tools/list_changed"


# -- hypothesis: any sequence keeps the engine's promises ----------------------------------------------------------

_ops = st.lists(st.one_of(
    st.tuples(st.just("send"), st.sampled_from(["tools/call", "initialize", "ping"]), st.booleans()),
    st.tuples(st.just("answer"), st.integers(0, 40)),
    st.tuples(st.just("progress"), st.integers(0, 40)),
    st.tuples(st.just("tick"), st.floats(0, 30, allow_nan=False)),
    st.tuples(st.just("give_up"), st.integers(0, 40)),
    st.tuples(st.just("cancelled"), st.integers(0, 40)),
), max_size=60)


@settings(max_examples=300, deadline=None)
@given(_ops)
def test_any_sequence_settles_each_request_at_most_once(ops: list[tuple[Any, ...]]) -> None:
    client = Session[int](request_timeout=10, max_request_time=25)
    now = 0.0
    sent: dict[int, tuple[str, float, float]] = {}  # waiter -> (method, sent at, hard deadline)
    settled: set[int] = set()
    cancels: list[bytes] = []
    entries: dict[int, Any] = {}

    def check(events: list[Any]) -> None:
        for event in events:
            if isinstance(event, Answered):
                waiter = event.pending.waiter
                assert waiter in sent
                assert waiter not in settled
                settled.add(waiter)

    for op in ops:
        if op[0] == "send":
            n = len(sent) + 1
            _, pending = client.send_request(op[1], None, now=now, waiter=n, stream=op[2] and op[1] == "ping")
            sent[n] = (op[1], now, pending.hard_deadline)
            entries[n] = pending
        elif op[0] == "answer":
            check(client.receive_data(frame(encode_result(b"%d" % op[1], b"{}")), now=now))
        elif op[0] == "progress":
            check(client.receive_data(frame(
                b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"warden-%d"}}'
                % op[1]), now=now))
        elif op[0] == "cancelled":
            check(client.receive_data(frame(
                b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d}}' % op[1]), now=now))
        elif op[0] == "give_up":
            n = op[1]
            if n in entries:
                cancel = client.give_up(entries[n], "caller left")
                assert (cancel is not None) == (n not in settled and sent[n][0] != "initialize")
                settled.add(n)
        else:
            now += op[1]
            for expired in client.expire(now):
                waiter = expired.pending.waiter
                assert waiter not in settled
                settled.add(waiter)
                method, _, hard = sent[waiter]
                assert expired.pending.deadline <= now
                assert expired.pending.deadline <= hard
                assert (expired.cancel is None) == (method == "initialize")
                if expired.cancel is not None:
                    cancels.append(expired.cancel)
        assert client.next_deadline() > now or client.next_deadline() == math.inf
    for waiter, (_, _at, hard) in sent.items():
        if waiter not in settled and hard != math.inf:
            assert now < hard  # nothing outlives its hard maximum unnoticed
    assert all(b'"initialize"' not in c for c in cancels)
