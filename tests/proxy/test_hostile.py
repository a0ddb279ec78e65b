"""Hostile upstream and hostile host: warden stays up, memory stays bounded, the other side gets a clear error where
one is due (issue 2 acceptance: hostile input)."""

from __future__ import annotations

import json

import trio
from hypothesis import given
from hypothesis import strategies as st

from tests.support import RAWSERVER, RawHost, rss_kib, through_warden
from warden.audit import bounded_text, digest
from warden.audit._records import Event, Record, check_record
from warden.gateway.link import host_name

MB = 1024 * 1024


async def test_hostile_upstream_garbage_bad_utf8_and_non_objects_are_dropped() -> None:
    host = await RawHost.start(through_warden(RAWSERVER))
    await host.initialize()
    answer = await host.call(1, "garbage")
    assert answer["result"]["content"][0]["text"] == "garbage sent"  # type: ignore[index]
    assert (await host.call(2, "echo", {"text": "still here"}))["result"]
    await host.close()
    # Nothing malformed was relayed (the junk includes a bare {"jsonrpc": "2.0"}): the host saw exactly the
    # answers to its own three requests.
    assert [(m.get("id"), sorted(k for k in m if k != "jsonrpc")) for m in host.seen] == [
        (0, ["id", "result"]), (1, ["id", "result"]), (2, ["id", "result"])]


async def test_hostile_upstream_100MB_line_is_dropped_with_bounded_memory() -> None:
    host = await RawHost.start(through_warden(RAWSERVER))
    await host.initialize()
    before = rss_kib(host.process.pid)
    answer = await host.call(1, "bigline", {"mb": 100}, timeout=60)
    assert answer["result"]["content"][0]["text"] == "bigline sent"  # type: ignore[index]
    growth_mib = (rss_kib(host.process.pid) - before) / 1024
    assert growth_mib < 64, f"warden grew by {growth_mib:.0f} MiB reading a 100 MB line"
    assert not any(m.get("method") == "notifications/message" for m in host.seen)  # the oversized one was dropped
    await host.close()


async def test_MS02_response_to_an_id_never_sent_and_duplicates_are_dropped() -> None:
    host = await RawHost.start(through_warden(RAWSERVER))
    await host.initialize()
    assert (await host.call(1, "badid"))["result"]["content"][0]["text"] == "badid sent"  # type: ignore[index]
    assert (await host.call(2, "dup"))["result"]["content"][0]["text"] == "first"  # type: ignore[index]
    assert (await host.call(3, "echo", {"text": "ok"}))["result"]
    await trio.sleep(0.3)
    await host.close()
    ids = [m.get("id") for m in host.seen if "method" not in m]
    assert ids.count(2) == 1
    assert 987654 not in ids


async def test_notification_burst_of_100k_is_carried_with_bounded_memory() -> None:
    host = await RawHost.start(through_warden(RAWSERVER))
    await host.initialize()
    before = rss_kib(host.process.pid)
    await host.request(1, "tools/call", {"name": "flood", "arguments": {"count": 100_000}})
    answer = await host.response(1, timeout=120)
    assert answer["result"]["content"][0]["text"] == "flooded"  # type: ignore[index]
    growth_mib = (rss_kib(host.process.pid) - before) / 1024
    assert growth_mib < 64, f"warden grew by {growth_mib:.0f} MiB relaying 100k notifications"
    notes = sum(1 for m in host.seen if m.get("method") == "notifications/message")
    assert notes == 100_000
    await host.close()


async def test_hostile_host_garbage_gets_errors_where_an_id_is_known() -> None:
    host = await RawHost.start(through_warden(RAWSERVER))
    await host.initialize()
    await host.send_raw(b"not json at all\n")
    await host.send_raw(b'{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"\xff"}}\n')
    await host.send_raw(b"[1,2,3]\n")
    await host.send_raw(b'{"jsonrpc":"2.0","id":42,"method":"tools/call","params":[1]}\n')
    await host.send_raw(b'{"jsonrpc":"2.0","id":43,"method":"tools/call","params":{"name":\n')
    await host.send_raw(b'{"jsonrpc":"2.0","id":"w-999","result":{}}\n')  # a response to nothing
    await host.send_raw(b'{"jsonrpc":"2.0","id":"warden-1","result":{}}\n' * 2)  # duplicate answers to nothing
    errors = {}
    for id_ in (41, 42, 43):
        errors[id_] = (await host.response(id_))["error"]["code"]  # type: ignore[index]
    assert errors == {41: -32700, 42: -32602, 43: -32700}
    assert (await host.call(44, "echo", {"text": "alive"}))["result"]
    await host.close()


async def test_hostile_host_100MB_line_without_newline_is_refused_with_the_id() -> None:
    host = await RawHost.start(through_warden(RAWSERVER))
    await host.initialize()
    before = rss_kib(host.process.pid)
    await host.send_raw(b'{"jsonrpc":"2.0","id":77,"method":"tools/call","params":{"name":"echo","arguments":{"t":"')
    chunk = b"a" * MB
    for _ in range(100):
        await host.send_raw(chunk)
    answer = await host.response(77, timeout=60)
    assert answer["error"]["code"] == -32600  # type: ignore[index]
    assert "exceeds" in answer["error"]["message"]  # type: ignore[index]
    growth_mib = (rss_kib(host.process.pid) - before) / 1024
    assert growth_mib < 64, f"warden grew by {growth_mib:.0f} MiB reading a 100 MB line"
    await host.send_raw(b'"}}}\n')
    assert (await host.call(78, "echo", {"text": "alive"}))["result"]
    await host.close()


async def test_hostile_host_100k_notifications_in_a_burst() -> None:
    host = await RawHost.start(through_warden(RAWSERVER))
    await host.initialize()
    before = rss_kib(host.process.pid)
    line = json.dumps({"jsonrpc": "2.0", "method": "notifications/progress",
                       "params": {"progressToken": "x", "progress": 1}}).encode() + b"\n"
    await host.send_raw(line * 100_000)
    assert (await host.call(1, "echo", {"text": "alive"}, timeout=60))["result"]
    growth_mib = (rss_kib(host.process.pid) - before) / 1024
    assert growth_mib < 64
    await host.close()


async def test_hostile_host_reused_request_id_is_refused() -> None:
    host = await RawHost.start(through_warden(RAWSERVER))
    await host.initialize()
    await host.request(5, "tools/call", {"name": "slow", "arguments": {"seconds": 1}})
    await host.request(5, "tools/call", {"name": "echo", "arguments": {"text": "dup"}})
    first = await host.response(5)
    assert first["error"]["message"] == "request id already in use"  # type: ignore[index]
    second = await host.response(5)
    assert second["result"]["content"][0]["text"] == "slow done"  # type: ignore[index]
    await host.close()


@given(st.one_of(st.none(), st.integers(), st.text(), st.lists(st.text(), max_size=2),
                 st.dictionaries(st.sampled_from(["name", "version", "title"]),
                                 st.one_of(st.text(max_size=400), st.integers(), st.none()), max_size=3)))
def test_any_clientInfo_becomes_a_short_recordable_host_name_or_none(client_info: object) -> None:
    """The host's self-reported name goes into every decision record: whatever it sends (wrong types, lone
    surrogates, kilobytes), the name is None or text of at most 256 characters that a record can encode."""
    name = host_name(client_info)
    if name is None:
        return
    assert 0 < len(name) <= 256
    check_record(Record(event=Event.CALL_DECIDED, client=name))
    assert isinstance(client_info, dict)
    assert name.startswith(client_info["name"].encode("utf-8", "replace").decode()[:256])


@given(st.text(max_size=600), st.integers(min_value=120, max_value=400))
def test_a_long_text_is_cut_for_its_record_with_its_length_and_digest_never_silently(text: str, limit: int) -> None:
    """Server error texts, refusal reasons and tool names are the other side's to choose: a record keeps at most
    ``limit`` characters of one, and a cut one ends with the full text's length and SHA-256."""
    kept = bounded_text(text, limit)
    assert len(kept) <= limit
    if kept != text:
        full = digest(text.encode("utf-8", "surrogatepass"))
        assert kept.endswith(f"…[{len(text)} characters, {full}]")
        assert text.startswith(kept[: kept.index("…[")])
