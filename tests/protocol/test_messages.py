"""Message classification never raises, keeps wire bytes, and answers what it must."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warden.protocol.messages import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    MAX_NESTING,
    PARSE_ERROR,
    ErrorResponse,
    Invalid,
    Notification,
    Request,
    Response,
    encode_error,
    encode_notification,
    encode_request,
    encode_result,
    id_key,
    nested_deeper_than,
    parse_message,
    scan_prefix,
)


def test_request_keeps_raw_id_and_params() -> None:
    raw = b'{"jsonrpc":"2.0","id":12345678901234567890123,"method":"tools/call","params":{"b":1.50,"a":[1]}}'
    msg = parse_message(raw)
    assert msg == Request(b"12345678901234567890123", "tools/call", b'{"b":1.50,"a":[1]}', raw)


@pytest.mark.parametrize(("raw", "kind"), [
    (b'{"jsonrpc":"2.0","method":"notifications/initialized"}', Notification),
    (b'{"jsonrpc":"2.0","id":"a","result":{}}', Response),
    (b'{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"nope"}}', ErrorResponse),
    (b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"bad"}}', ErrorResponse),
])
def test_kinds(raw: bytes, kind: type) -> None:
    assert isinstance(parse_message(raw), kind)


@pytest.mark.parametrize(("raw", "code", "id_raw", "is_request"), [
    (b"not json", PARSE_ERROR, None, False),
    (b'{"jsonrpc":"2.0","id":4,"method":"x","params":{"a":"\xff"}}', PARSE_ERROR, b"4", True),
    (b'{"jsonrpc":"2.0","id":5,"method":"x","params":{"a":"\\ud800"}}', PARSE_ERROR, b"5", True),
    (b'{"jsonrpc":"2.0","id":6,"method":"x","params":{', PARSE_ERROR, b"6", True),
    (b"[1,2]", INVALID_REQUEST, None, False),
    (b'"x"', INVALID_REQUEST, None, False),
    (b'{"id":1,"method":"x"}', INVALID_REQUEST, b"1", True),
    (b'{"jsonrpc":"1.0","id":1,"method":"x"}', INVALID_REQUEST, b"1", True),
    (b'{"jsonrpc":"2.0","id":null,"method":"x"}', INVALID_REQUEST, None, True),
    (b'{"jsonrpc":"2.0","id":true,"method":"x"}', INVALID_REQUEST, None, True),
    (b'{"jsonrpc":"2.0","id":{"a":1},"method":"x"}', INVALID_REQUEST, None, True),
    (b'{"jsonrpc":"2.0","id":1,"method":5}', INVALID_REQUEST, b"1", True),
    (b'{"jsonrpc":"2.0","id":1,"method":""}', INVALID_REQUEST, b"1", True),
    (b'{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}', INVALID_PARAMS, b"1", True),
    (b'{"jsonrpc":"2.0","id":1,"method":"x","result":{}}', INVALID_REQUEST, b"1", True),
    (b'{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"m"}}', INVALID_REQUEST, b"1", False),
    (b'{"jsonrpc":"2.0","result":{}}', INVALID_REQUEST, None, False),
    (b'{"jsonrpc":"2.0","id":1,"result":5}', INVALID_REQUEST, b"1", False),
    (b'{"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"m"}}', INVALID_REQUEST, b"1", False),
    (b'{"jsonrpc":"2.0","id":1}', INVALID_REQUEST, b"1", False),
])
def test_invalid_messages(raw: bytes, code: int, id_raw: bytes | None, is_request: bool) -> None:
    msg = parse_message(raw)
    assert isinstance(msg, Invalid)
    assert (msg.code, msg.id, msg.is_request) == (code, id_raw, is_request)


@settings(max_examples=500)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    msg = parse_message(data)
    assert msg.raw == data


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20)


@settings(max_examples=300)
@given(st.one_of(st.integers(), st.text()), st.text(min_size=1), st.dictionaries(st.text(max_size=8), json_values))
def test_encoded_request_round_trips(id_value: object, method: str, params: dict[str, object]) -> None:
    id_raw = msgspec.json.encode(id_value)
    params_raw = msgspec.json.encode(params)
    raw = encode_request(id_raw, method, params_raw)
    msg = parse_message(raw)
    assert msg == Request(id_raw, method, params_raw, raw)
    assert json.loads(raw) == {"jsonrpc": "2.0", "id": id_value, "method": method, "params": params}


_id_values = st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12))


@settings(max_examples=300)
@given(_id_values, st.one_of(st.none(), st.dictionaries(st.text(max_size=8), json_values)), st.booleans())
def test_what_parse_message_keeps_is_what_decoding_the_spans_gives(id_value: object, params: dict[str, object] | None,
                                                                 notify: bool) -> None:
    """A request's or notification's id and params are decoded once, by :func:`parse_message`: what it keeps is
    exactly what decoding its raw spans gives, and a message built without it (nothing kept) reads the same."""
    id_raw = msgspec.json.encode(id_value)
    params_raw = None if params is None else msgspec.json.encode(params)
    raw = encode_notification("m", params_raw) if notify else encode_request(id_raw, "m", params_raw)
    msg = parse_message(raw)
    assert isinstance(msg, Notification if notify else Request)
    expected = {} if params_raw is None else msgspec.json.decode(params_raw)
    assert msg.decoded_params() == expected
    built = Notification("m", params_raw, raw) if notify else Request(id_raw, "m", params_raw, raw)
    assert built == msg
    assert built.decoded_params() == expected
    if isinstance(msg, Request) and isinstance(built, Request):
        assert msg.key() == built.key() == id_key(msgspec.json.decode(id_raw))


@pytest.mark.parametrize("value", [1, 1.0, -0.0, "1", True, None, [1], {"a": 1}, 2**70, 1.5])
def test_id_key_fast_path_agrees_with_the_general_rule(value: object) -> None:
    """``1`` and ``1.0`` are one id; ``1`` and ``"1"`` two; anything else is told apart by its type and repr."""
    general = (type(value).__name__ if not isinstance(value, float) else "int",
               value if isinstance(value, str | int | float) else repr(value))
    assert id_key(value) == general


@settings(max_examples=200)
@given(st.integers(), st.dictionaries(st.text(max_size=8), json_values))
def test_encoded_results_errors_and_notifications_round_trip(id_value: int, body: dict[str, object]) -> None:
    id_raw = str(id_value).encode()
    body_raw = msgspec.json.encode(body)
    assert parse_message(encode_result(id_raw, body_raw)) == Response(id_raw, body_raw, encode_result(id_raw, body_raw))
    err = parse_message(encode_error(id_raw, -32000, "boom", body))
    assert isinstance(err, ErrorResponse)
    assert (err.id, err.code, err.message) == (id_raw, -32000, "boom")
    note = parse_message(encode_notification("notifications/x", body_raw))
    assert note == Notification("notifications/x", body_raw, encode_notification("notifications/x", body_raw))


def test_scan_prefix_finds_top_level_id_only() -> None:
    assert scan_prefix(b'{"jsonrpc":"2.0","params":{"id":99,"s":"}\\""},"id":"abc","method":"x') == (b'"abc"', True)
    assert scan_prefix(b'{"method":"m","id":1') == (None, True)  # number may continue past the prefix
    assert scan_prefix(b'{"method":"m","id":12,') == (b"12", True)
    assert scan_prefix(b'{"id":null,"method":"m"}') == (None, True)
    assert scan_prefix(b'{"\\u0069d":3,') == (b"3", False)
    assert scan_prefix(b"[1]") == (None, False)


@settings(max_examples=500)
@given(st.binary(max_size=200))
def test_scan_prefix_never_raises(data: bytes) -> None:
    id_raw, _ = scan_prefix(data)
    assert id_raw is None or id_raw[:1] == b'"' or id_raw[:1] in b"-0123456789"


@settings(max_examples=300)
@given(st.one_of(st.integers(), st.text(max_size=20)), st.dictionaries(st.text(max_size=5), json_values, max_size=3),
       st.integers(min_value=1, max_value=400))
def test_scan_prefix_agrees_with_a_full_parse(id_value: object, params: dict[str, object], cut: int) -> None:
    raw = encode_request(msgspec.json.encode(id_value), "m", msgspec.json.encode(params))
    id_raw, has_method = scan_prefix(raw[:cut])
    if id_raw is not None:
        assert json.loads(id_raw) == id_value
    if cut >= len(raw):
        assert id_raw == msgspec.json.encode(id_value)
        assert has_method


_number_texts = st.sampled_from(["1e400", "-1e400", "1E+309", "1" + "0" * 400, "2.5e-400", "1.5", "-0", "12"])


@settings(max_examples=300)
@given(st.sampled_from(["id", "params", "result"]), _number_texts, st.booleans())
def test_every_raw_span_parse_message_keeps_can_be_decoded(where: str, number: str, nested: bool) -> None:
    """A number no double holds (1e400) is valid JSON syntax: such a message is refused at parse time, so no
    later decode of a kept id, params or result meets the error (a host sending one crashed warden)."""
    value = f'{{"a":[{number}]}}' if nested else f'{{"a":{number}}}'
    raw = {"id": f'{{"jsonrpc":"2.0","id":{number},"method":"ping"}}',
           "params": f'{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{value}}}',
           "result": f'{{"jsonrpc":"2.0","id":1,"result":{value}}}'}[where].encode()
    message = parse_message(raw)
    if not isinstance(message, Invalid):
        for span in (getattr(message, name, None) for name in ("id", "params", "result")):
            if isinstance(span, bytes):
                msgspec.json.decode(span)
    if "e400" in number or "E+309" in number:
        assert isinstance(message, Invalid)
        assert message.code == (INVALID_PARAMS if where == "params" else INVALID_REQUEST)
        assert message.id == (number.encode() if where == "id" else b"1")  # echoed raw: the error can name it


@pytest.mark.parametrize("where", ["top", "params", "result", "error"])
def test_a_message_nested_beyond_the_decoders_limit_is_invalid_not_an_exception(where: str) -> None:
    """msgspec raises RecursionError (not a DecodeError) past about a thousand levels; over HTTP that was a 500
    with a traceback, and on stdio the reader's crash."""
    deep = "[" * 5000 + "]" * 5000
    raw = {"top": f'{{"x":{deep}}}',
           "params": f'{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"x":{deep}}}}}',
           "result": f'{{"jsonrpc":"2.0","id":1,"result":{{"x":{deep}}}}}',
           "error": f'{{"jsonrpc":"2.0","id":1,"error":{{"code":1,"message":"m","data":{deep}}}}}'}[where].encode()
    message = parse_message(raw)
    assert isinstance(message, Invalid)
    assert message.code == INVALID_REQUEST


def _depth(value: object) -> int:
    """The test's own oracle: how deep ``value`` nests objects and arrays."""
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


BRACKETY = st.text(alphabet='[]{}"\\ax\n\u2028', max_size=6)
JSON_VALUES = st.recursive(st.none() | st.integers() | BRACKETY,
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(BRACKETY, inner, max_size=3),
                           max_leaves=30)


@settings(max_examples=500)
@given(JSON_VALUES, st.integers(0, 8), st.booleans())
def test_nesting_is_measured_outside_strings_whatever_they_hold(value: object, limit: int, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert nested_deeper_than(text, limit) is (_depth(value) > limit)


@pytest.mark.parametrize("where", ["params", "result", "error"])
def test_a_message_nested_past_max_nesting_is_invalid_and_keeps_its_id(where: str) -> None:
    """Deeper than ``MAX_NESTING`` is refused where it is framed, so that nothing later reads it again deeper down
    the stack (where msgspec's limit is lower); at the limit it is read whole."""
    def message(levels: int) -> bytes:  # the envelope and its member add two levels
        deep = "[" * levels + "]" * levels
        return {"params": f'{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"x":{deep}}}}}',
                "result": f'{{"jsonrpc":"2.0","id":7,"result":{{"x":{deep}}}}}',
                "error": f'{{"jsonrpc":"2.0","id":7,"error":{{"code":1,"message":"m","data":{deep}}}}}'
                }[where].encode()

    assert not isinstance(parse_message(message(MAX_NESTING - 2)), Invalid)
    refused = parse_message(message(MAX_NESTING - 1))
    assert isinstance(refused, Invalid)
    assert (refused.code, refused.reason, refused.id) == (INVALID_REQUEST, "message is nested deeper than 256 levels",
                                                          b"7")
    assert refused.is_request is (where == "params")
