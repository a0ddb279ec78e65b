"""The bounded Server-Sent Events parser and encoder (WHATWG HTML §9.2 "Server-sent events").

The examples are the spec's own (§9.2.5 "Parsing an event stream", §9.2.6 "Interpreting an event stream") plus the
shapes MCP servers and the conformance suite send: JSON-RPC data events, the SEP-1699 priming event with
``id`` and ``retry``, keep-alive comments and the HTTP+SSE ``endpoint`` event."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from warden.errors import LocalProtocolError, RemoteProtocolError
from warden.protocol.sse import DEFAULT_MAX_EVENT_SIZE, SSEError, SSEEvent, SSEParser, encode_comment, encode_event


def parse(data: bytes, **kwargs: int) -> list[SSEEvent]:
    parser = SSEParser(**kwargs)
    events = parser.feed(data)
    parser.close()
    return events


def parse_bytewise(data: bytes, **kwargs: int) -> list[SSEEvent]:
    parser = SSEParser(**kwargs)
    events: list[SSEEvent] = []
    for i in range(len(data)):
        events += parser.feed(data[i : i + 1])
    parser.close()
    return events


def both(data: bytes) -> list[SSEEvent]:
    """Parse whole and one byte at a time; the results must agree."""
    whole = parse(data)
    assert parse_bytewise(data) == whole
    return whole


# ----------------------------------------------------------------------------------------- spec examples


def test_spec_stock_ticker_multiline_data() -> None:
    """WHATWG: data lines join with LF."""
    assert both(b"data: YHOO\ndata: +2\ndata: 10\n\n") == [SSEEvent(data="YHOO\n+2\n10")]


def test_spec_four_blocks_comment_id_and_reset() -> None:
    """WHATWG: a comment block, an event with id 1, one that resets the id, one with a leading space kept."""
    stream = b": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n"
    parser = SSEParser()
    events = parser.feed(stream)
    assert events == [SSEEvent(data="first event", id="1"), SSEEvent(data="second event", id="")]
    assert parser.close() is True  # the third block never got its blank line: discarded
    assert parse_bytewise(stream) == events


def test_spec_empty_data_and_unterminated_tail() -> None:
    """WHATWG: "data" alone gives an empty line of data; the last block has no blank line and is dropped."""
    assert both(b"data\n\ndata\ndata\n\ndata:") == [SSEEvent(data=""), SSEEvent(data="\n")]


def test_spec_space_after_colon_is_optional() -> None:
    """WHATWG: "data:test" and "data: test" are the same event."""
    assert both(b"data:test\n\ndata: test\n\n") == [SSEEvent(data="test"), SSEEvent(data="test")]


def test_event_type_and_default() -> None:
    assert both(b"event: endpoint\ndata: /messages?session_id=abc\n\nevent:\ndata: x\n\n") == [
        SSEEvent(data="/messages?session_id=abc", event="endpoint"),
        SSEEvent(data="x", event="message"),
    ]


@pytest.mark.parametrize("eol", [b"\n", b"\r", b"\r\n"])
def test_every_line_ending(eol: bytes) -> None:
    stream = eol.join([b"event: message", b"id: 7", b'data: {"jsonrpc":"2.0"}', b"", b""])
    assert both(stream) == [SSEEvent(data='{"jsonrpc":"2.0"}', id="7")]


def test_mixed_line_endings_and_crlf_split_across_chunks() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\ndata: b\r") == []  # the LF completes the CRLF of line one, not a blank line
    assert parser.feed(b"\n\r") == [SSEEvent(data="a\nb")]
    assert parser.feed(b"\n") == []  # CR then LF: one blank line, not two
    assert parser.feed(b"data: c\n\n") == [SSEEvent(data="c")]


def test_cr_cr_is_two_line_ends() -> None:
    assert both(b"data: a\r\rdata: b\r\r") == [SSEEvent(data="a"), SSEEvent(data="b")]


def test_bom_is_stripped_once_at_the_start_only() -> None:
    assert both(b"\xef\xbb\xbfdata: x\n\n") == [SSEEvent(data="x")]
    # a second BOM makes the field name "\ufeffdata": an unknown field, ignored
    assert both(b"\xef\xbb\xbf\xef\xbb\xbfdata: x\n\n") == []
    assert both(b"\xef\xbbdata: x\n\n") == []  # half a BOM is part of the field name


def test_comments_and_unknown_fields_are_ignored() -> None:
    """Keep-alives (":") and fields the format does not define never make or change an event."""
    assert both(b":\r\n: keep-alive\nfoo: bar\nDATA: shouting\ndata: x\n\n") == [SSEEvent(data="x")]
    assert both(b":\n\n:\n\n") == []


def test_id_persists_and_nul_id_is_ignored() -> None:
    stream = b"id: 1\ndata: a\n\ndata: b\n\nid: 2\x003\ndata: c\n\nid\ndata: d\n\n"
    parser = SSEParser()
    assert parser.feed(stream) == [
        SSEEvent(data="a", id="1"),
        SSEEvent(data="b", id="1"),
        SSEEvent(data="c", id="1"),
        SSEEvent(data="d", id=""),
    ]
    assert parser.last_event_id == ""


def test_id_without_data_still_sets_last_event_id() -> None:
    """WHATWG dispatch step 1 runs even when no event follows."""
    parser = SSEParser()
    assert parser.feed(b"id: 42\n\n") == []
    assert parser.last_event_id == "42"
    assert parser.feed(b"id: 43\n") == []
    assert parser.last_event_id == "42"  # not yet dispatched


def test_retry_digits_only() -> None:
    parser = SSEParser()
    assert parser.retry is None
    assert parser.feed(b"retry: 500\n\n") == []
    assert parser.retry == 500
    for bad in (b"retry: 10a\n", b"retry: -1\n", b"retry: 1.5\n", b"retry:\n", b"retry: \xd9\xa1\n",
                b"retry: 1234567890123456\n"):
        parser.feed(bad)
        assert parser.retry == 500, bad
    assert parser.feed(b"retry: 0\ndata: x\n\n") == [SSEEvent(data="x", retry=0)]
    assert parser.feed(b"data: y\n\n") == [SSEEvent(data="y")]  # retry belongs to its own block only
    assert parser.retry == 0


def test_sep1699_priming_event_and_message() -> None:
    """The conformance sse-retry scenario's GET stream: priming event (empty data), then the tool's response."""
    stream = (
        b"id: event-1\nretry: 500\ndata: \n\n"
        b'event: message\nid: event-2\ndata: {"jsonrpc":"2.0","id":1,"result":{"content":[]}}\n\n'
    )
    parser = SSEParser()
    assert parser.feed(stream) == [
        SSEEvent(data="", id="event-1", retry=500),
        SSEEvent(data='{"jsonrpc":"2.0","id":1,"result":{"content":[]}}', id="event-2"),
    ]
    assert (parser.last_event_id, parser.retry) == ("event-2", 500)


def test_close_reports_a_cut_event() -> None:
    parser = SSEParser()
    parser.feed(b"data: x\n\n")
    assert parser.close() is False
    parser = SSEParser()
    parser.feed(b"data: x\n")
    assert parser.close() is True
    with pytest.raises(RuntimeError, match=r"feed\(\) after close\(\)"):
        parser.feed(b"\n")


# ------------------------------------------------------------------------------------ bounds and hostility


def test_oversized_event_is_an_error() -> None:
    parser = SSEParser(max_event_size=64)
    assert parser.feed(b"data: " + b"a" * 40 + b"\n") == []
    with pytest.raises(SSEError, match="event stream event larger than 64 bytes"):
        parser.feed(b"data: " + b"b" * 40 + b"\n")


def test_overlong_line_without_newline_is_an_error_before_it_completes() -> None:
    """A peer that never sends a line break cannot make the parser buffer more than the bound."""
    parser = SSEParser(max_event_size=1024)
    fed = 0
    with pytest.raises(SSEError, match="larger than 1024 bytes"):  # noqa: PT012 - the loop is the attack
        while fed < 10_000:
            parser.feed(b"x" * 100)
            fed += 100
    assert fed == 1000  # refused on the first chunk past the bound


def test_overlong_comment_is_an_error_too() -> None:
    with pytest.raises(SSEError, match="larger than 16 bytes"):
        parse(b":" + b"c" * 32 + b"\n\n", max_event_size=16)


def test_limit_is_per_event() -> None:
    """Many events each within the bound are fine, however long the stream."""
    stream = b"data: " + b"a" * 50 + b"\n\n"
    assert parse(stream * 1000, max_event_size=64) == [SSEEvent(data="a" * 50)] * 1000


def test_default_limit_fits_a_16_mib_message() -> None:
    message = b"x" * (16 * 1024 * 1024)
    assert parse(b"data: " + message + b"\n\n") == [SSEEvent(data=message.decode())]
    assert DEFAULT_MAX_EVENT_SIZE > 16 * 1024 * 1024


@pytest.mark.parametrize(
    ("stream", "field"),
    [(b"data: \xff\n\n", "data"), (b"event: \xc3\n\n", "event"), (b"id: \xed\xa0\x80\n\n", "id")],
)
def test_invalid_utf8_is_an_error_not_replacement(stream: bytes, field: str) -> None:
    with pytest.raises(SSEError, match=f"{field} field is not valid UTF-8") as info:
        parse(stream)
    assert isinstance(info.value, RemoteProtocolError)


def test_invalid_utf8_where_it_is_never_read_is_ignored() -> None:
    assert both(b": \xff\xfe\n\xff: x\nretry: \xff\ndata: ok\n\n") == [SSEEvent(data="ok")]


def test_broken_parser_stays_broken() -> None:
    parser = SSEParser(max_event_size=8)
    with pytest.raises(SSEError):
        parser.feed(b"data: 123456789\n")
    with pytest.raises(SSEError, match="already failed"):
        parser.feed(b"\n")


def test_max_event_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        SSEParser(max_event_size=0)


# --------------------------------------------------------------------------------------------------- encoder


def test_encode_event_wire_form() -> None:
    assert encode_event('{"a":1}') == b'data: {"a":1}\n\n'
    wire = b"event: message\nid: e-2\nretry: 500\ndata: x\n\n"
    assert encode_event("x", event="message", id="e-2", retry=500) == wire
    assert encode_event("") == b"data: \n\n"
    assert encode_event("a\r\nb\rc\nd") == b"data: a\ndata: b\ndata: c\ndata: d\n\n"
    assert encode_event(" lead") == b"data:  lead\n\n"
    assert encode_comment() == b":\n"
    assert encode_comment(" keep-alive") == b": keep-alive\n"


def test_encoded_events_parse_back() -> None:
    stream = encode_event("one", id="1") + encode_comment() + encode_event(" two\nlines ", event="e", retry=9)
    assert both(stream) == [SSEEvent(data="one", id="1"), SSEEvent(data=" two\nlines ", event="e", id="1", retry=9)]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"event": "a\nb"}, "event type cannot contain a line break"),
        ({"id": "a\rb"}, "id cannot contain a line break"),
        ({"id": "a\x00b"}, "id cannot contain NUL"),
        ({"retry": -1}, "non-negative int"),
        ({"retry": True}, "non-negative int"),
        ({"retry": 1.5}, "non-negative int"),
    ],
)
def test_encoder_refuses_field_injection(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(LocalProtocolError, match=match):
        encode_event("x", **kwargs)  # type: ignore[arg-type]


def test_encoder_refuses_text_without_utf8_form() -> None:
    with pytest.raises(LocalProtocolError, match="valid Unicode"):
        encode_event("\ud800")
    with pytest.raises(LocalProtocolError, match="comment cannot contain a line break"):
        encode_comment("a\nb")


# ------------------------------------------------------------------------------------------------ properties


def feed_chunks(data: bytes, cuts: list[int], max_event_size: int) -> tuple[list[SSEEvent], str, int | None] | None:
    """Feed ``data`` split at ``cuts``; the events, last id and retry, or None if the parser raised SSEError."""
    parser = SSEParser(max_event_size=max_event_size)
    events: list[SSEEvent] = []
    bounds = [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
    try:
        for lo, hi in itertools.pairwise(bounds):
            events += parser.feed(data[lo:hi])
    except SSEError:
        return None
    parser.close()
    return events, parser.last_event_id, parser.retry


SSE_BYTES = st.lists(
    st.sampled_from(
        [b"data", b"data:", b"data: ", b"event:", b"id:", b"retry:", b":", b" ", b"x", b"1", b"\xff", b"\xc3\xa9",
         b"\x00", b"\r", b"\n", b"\r\n", b"\xef\xbb\xbf"]
    )
    | st.binary(max_size=6),
    max_size=40,
).map(b"".join)


@given(st.binary(max_size=512), st.integers(min_value=1, max_value=64))
def test_parser_raises_only_its_own_error(data: bytes, max_event_size: int) -> None:
    """Arbitrary bytes: events, or SSEError - never anything else."""
    parser = SSEParser(max_event_size=max_event_size)
    try:
        parser.feed(data)
    except SSEError:
        return
    parser.close()


@settings(max_examples=400)
@given(SSE_BYTES, st.lists(st.integers(min_value=0), max_size=8), st.integers(min_value=4, max_value=48))
@example(b"data: a\r\ndata: b\n\n", [8], 48)  # CRLF split between chunks: one line end, not two
@example(b"data: 0123456789\n: comment that fits alone\n\n", [], 30)  # line + gathered data over the bound
def test_chunking_never_changes_the_result(data: bytes, cuts: list[int], max_event_size: int) -> None:
    """Any split, including one byte at a time, gives the same events, last id and retry - or the same error."""
    whole = feed_chunks(data, [], max_event_size)
    assert feed_chunks(data, cuts, max_event_size) == whole
    assert feed_chunks(data, list(range(len(data))), max_event_size) == whole


FIELD_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\x00"), max_size=20)


@given(
    st.lists(
        st.tuples(
            st.text(st.characters(blacklist_categories=("Cs",)), max_size=30),
            st.none() | FIELD_TEXT,
            st.none() | FIELD_TEXT,
            st.none() | st.integers(min_value=0, max_value=10**15 - 1),
        ),
        max_size=5,
    )
)
def test_encode_then_parse_round_trip(items: list[tuple[str, str | None, str | None, int | None]]) -> None:
    """Whatever the encoder writes, the parser reads back (line breaks in data come back as LF)."""
    stream = b"".join(encode_event(data, event=event, id=id_, retry=retry) for data, event, id_, retry in items)
    expected: list[SSEEvent] = []
    last_id = ""
    for data, event, id_, retry in items:
        last_id = id_ if id_ is not None else last_id
        normalised = data.replace("\r\n", "\n").replace("\r", "\n")
        expected.append(SSEEvent(data=normalised, event=event or "message", id=last_id, retry=retry))
    assert both(stream) == expected
