"""Newline framing with a size cap: byte-at-a-time equivalence, bounded memory, oversized lines."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from warden.protocol.framing import OVERSIZED_PREFIX_BYTES, LineFramer, Oversized


def feed_all(framer: LineFramer, chunks: list[bytes]) -> list[object]:
    out: list[object] = []
    for chunk in chunks:
        out.extend(framer.feed(chunk))
    out.extend(framer.close())
    return out


def test_ST01_lines_split_on_newline_and_blank_lines_skipped() -> None:
    framer = LineFramer(100)
    assert framer.feed(b'{"a":1}\n\n  \n{"b":2}\r\n{"c"') == [b'{"a":1}', b'{"b":2}\r']
    assert framer.feed(b":3}\n") == [b'{"c":3}']
    assert framer.buffered == 0


def test_line_at_exactly_the_limit_passes_and_one_more_byte_does_not() -> None:
    framer = LineFramer(10)
    assert framer.feed(b"x" * 10 + b"\n") == [b"x" * 10]
    frames = framer.feed(b"y" * 11 + b"\n")
    assert frames == [Oversized(b"y" * 11, 11)]
    assert frames[0].size == 11


def test_oversized_line_without_newline_is_reported_once_and_discarded_until_newline() -> None:
    framer = LineFramer(10_000)
    frames = framer.feed(b'{"id":7,' + b"z" * 20_000)
    assert len(frames) == 1
    assert isinstance(frames[0], Oversized)
    assert frames[0].prefix.startswith(b'{"id":7,')
    assert len(frames[0].prefix) == OVERSIZED_PREFIX_BYTES
    assert framer.buffered == 0
    assert framer.feed(b"z" * 100_000) == []
    assert framer.buffered == 0
    assert framer.feed(b'zzz\n{"ok":1}\n') == [b'{"ok":1}']


def test_100MB_line_keeps_memory_bounded() -> None:
    framer = LineFramer(16 * 1024 * 1024)
    chunk = b"a" * (1024 * 1024)
    seen: list[object] = []
    for _ in range(100):
        seen.extend(framer.feed(chunk))
        assert framer.buffered <= 16 * 1024 * 1024
    seen.extend(framer.feed(b"\n{}\n"))
    assert len(seen) == 2
    assert isinstance(seen[0], Oversized)
    assert seen[1] == b"{}"


def test_close_returns_a_final_unterminated_line() -> None:
    framer = LineFramer(100)
    assert framer.feed(b'{"x":1}') == []
    assert framer.close() == [b'{"x":1}']


@settings(max_examples=300)
@given(st.lists(st.binary(max_size=60), max_size=20), st.integers(min_value=2, max_value=64))
def test_chunking_never_changes_the_frames(chunks: list[bytes], limit: int) -> None:
    """Whatever the chunk boundaries, the same frames come out (h11's byte-at-a-time rule)."""
    data = b"".join(chunks)
    whole = feed_all(LineFramer(limit), [data])
    one_byte = feed_all(LineFramer(limit), [data[i:i + 1] for i in range(len(data))])
    as_given = feed_all(LineFramer(limit), chunks)
    assert whole == one_byte == as_given
    for frame in whole:
        assert isinstance(frame, Oversized) or (len(frame) <= limit and b"\n" not in frame and frame.strip())
