"""The engine-driven path behind a real ``warden run --unsafe-no-audit`` (the only mode that takes it: with the
audit log on, every call keeps a task of its own), on real pipes, where forwards and answers are held and written
once per read (``flush_held``). The hostile cases of ``test_hostile.py`` keep their behaviour on this path: many
calls in one read are each answered exactly once, answers to ids warden never sent and duplicate answers are
dropped (MS02, invariant 9), a request the host cancels in the same read gets no answer (PX19), unreadable lines
from the server are dropped, a reused request id is refused, and a notification flood from the server around a
call in flight is carried in order before its answer."""

from __future__ import annotations

import json

from tests.support import RAWSERVER, RawHost, through_warden


async def _host() -> RawHost:
    host = await RawHost.start(through_warden(RAWSERVER, "--unsafe-no-audit"))
    await host.initialize()
    assert (await host.call(1, "echo", {"text": "warm"}))["result"]  # the tools list is known: calls go inline
    return host


def _call(id_: object, tool: str, arguments: dict[str, object]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id_, "method": "tools/call",
                       "params": {"name": tool, "arguments": arguments}}).encode() + b"\n"


async def test_many_calls_in_one_read_are_each_answered_once_with_their_own_result() -> None:
    host = await _host()
    await host.send_raw(b"".join(_call(100 + n, "echo", {"text": f"n{n}"}) for n in range(64)))
    for n in range(64):
        answer = await host.response(100 + n)
        assert answer["result"]["content"][0]["text"] == f"n{n}"  # type: ignore[index]
    await host.close()
    ids = [m.get("id") for m in host.seen if "method" not in m]
    assert sorted(i for i in ids if isinstance(i, int) and i >= 100) == list(range(100, 164))


async def test_MS02_answers_to_ids_never_sent_and_duplicates_are_dropped_on_the_fast_path() -> None:
    host = await _host()
    await host.send_raw(_call(2, "badid", {}) + _call(3, "dup", {}) + _call(4, "echo", {"text": "ok"}))
    assert (await host.response(2))["result"]["content"][0]["text"] == "badid sent"  # type: ignore[index]
    assert (await host.response(3))["result"]["content"][0]["text"] == "first"  # type: ignore[index]
    assert (await host.response(4))["result"]
    assert (await host.call(5, "echo", {"text": "after"}))["result"]
    await host.close()
    ids = [m.get("id") for m in host.seen if "method" not in m]
    assert ids.count(3) == 1
    assert 987654 not in ids


async def test_PX19_a_call_cancelled_in_the_same_read_gets_no_answer() -> None:
    host = await _host()
    cancel = json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                         "params": {"requestId": 7, "reason": "user"}}).encode() + b"\n"
    await host.send_raw(_call(7, "slow", {"seconds": 1}) + cancel + _call(8, "echo", {"text": "next"}))
    assert (await host.response(8))["result"]["content"][0]["text"] == "next"  # type: ignore[index]
    assert (await host.call(9, "slow", {"seconds": 1.5}, timeout=30))["result"]  # past the cancelled one's end
    await host.close()
    assert 7 not in [m.get("id") for m in host.seen if "method" not in m]


async def test_garbage_from_the_server_is_dropped_and_a_reused_id_is_refused() -> None:
    host = await _host()
    assert (await host.call(10, "garbage"))["result"]["content"][0]["text"] == "garbage sent"  # type: ignore[index]
    await host.send_raw(_call(11, "slow", {"seconds": 1}) + _call(11, "echo", {"text": "dup"}))
    first = await host.response(11)
    assert first["error"]["message"] == "request id already in use"  # type: ignore[index]
    second = await host.response(11)
    assert second["result"]["content"][0]["text"] == "slow done"  # type: ignore[index]
    await host.close()
    assert all(set(m) <= {"jsonrpc", "id", "result", "error"} for m in host.seen)


async def test_a_notification_flood_around_a_call_is_carried_before_its_answer() -> None:
    host = await _host()
    await host.send_raw(_call(12, "flood", {"count": 5000}) + _call(13, "echo", {"text": "beside"}))
    assert (await host.response(12, timeout=120))["result"]["content"][0]["text"] == "flooded"  # type: ignore[index]
    assert (await host.response(13))["result"]
    flood_answer = next(i for i, m in enumerate(host.seen) if m.get("id") == 12)
    notes = [i for i, m in enumerate(host.seen) if m.get("method") == "notifications/message"]
    assert len(notes) == 5000
    assert max(notes) < flood_answer  # the server sent them first; warden kept its order
    await host.close()
