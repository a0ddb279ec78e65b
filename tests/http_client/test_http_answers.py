"""The pure rules of :mod:`warden.protocol.http_answers`: case tables, then hypothesis properties over hostile input."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from warden.errors import RemoteProtocolError
from warden.protocol.http_answers import (
    MAX_RESUME_DELAY,
    MIN_RESUME_DELAY,
    AnswerKind,
    classify,
    falls_back_to_sse,
    http_failure,
    media_type,
    redirect_target,
    request_outcome,
    resolve_endpoint,
    resumable_event_id,
    resume_delay,
    same_origin,
    valid_session_id,
)
from warden.protocol.messages import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    UNSUPPORTED_PROTOCOL_VERSION,
    ErrorResponse,
    Response,
)
from warden.protocol.probe import StdioProbe

MODERN_CODES = {HEADER_MISMATCH, MISSING_REQUIRED_CLIENT_CAPABILITY, UNSUPPORTED_PROTOCOL_VERSION}


@pytest.mark.parametrize(("status", "content_type", "session", "kind"), [
    (200, "application/json", False, AnswerKind.JSON),
    (200, "Application/JSON; charset=utf-8", False, AnswerKind.JSON),
    (200, "text/event-stream", False, AnswerKind.EVENT_STREAM),
    (201, "text/event-stream;charset=utf-8", True, AnswerKind.EVENT_STREAM),
    (202, None, True, AnswerKind.ACCEPTED),
    (202, "application/json", False, AnswerKind.ACCEPTED),
    (204, None, False, AnswerKind.ACCEPTED),
    (200, "text/html", False, AnswerKind.FAILURE),
    (200, None, False, AnswerKind.FAILURE),
    (400, "application/json", False, AnswerKind.JSON),
    (404, "application/json", False, AnswerKind.JSON),
    (404, "application/json", True, AnswerKind.SESSION_LOST),
    (404, "text/plain", True, AnswerKind.SESSION_LOST),
    (400, "text/plain", False, AnswerKind.FAILURE),
    (500, "text/html", False, AnswerKind.FAILURE),
    (307, None, False, AnswerKind.REDIRECT),
    (308, "text/html", True, AnswerKind.REDIRECT),
    (301, None, False, AnswerKind.FAILURE),
    (302, None, False, AnswerKind.FAILURE),
    (303, None, False, AnswerKind.FAILURE),
    (400, "text/event-stream", False, AnswerKind.FAILURE),
])
def test_classify(status: int, content_type: str | None, session: bool, kind: AnswerKind) -> None:
    assert classify(status, content_type, carried_session=session) is kind


def test_media_type() -> None:
    assert media_type(None) == ""
    assert media_type("") == ""
    assert media_type(" Text/Event-Stream ; charset=utf-8") == "text/event-stream"


def _error(id_: Any, code: int, data: Any = None) -> bytes:
    error: dict[str, Any] = {"code": code, "message": "m"}
    if data is not None:
        error["data"] = data
    return json.dumps({"jsonrpc": "2.0", "id": id_, "error": error}).encode()


def test_ER09_success_to_this_request_is_delivered() -> None:
    body = b'{"jsonrpc":"2.0","id":7,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}'
    outcome = request_outcome(b"7", 200, body)
    assert isinstance(outcome, Response)
    assert outcome.raw == body


@pytest.mark.parametrize("code", sorted(MODERN_CODES))
@pytest.mark.parametrize("status", [400, 404, 405])
def test_ER10_modern_error_in_a_4xx_is_delivered_as_is(status: int, code: int) -> None:
    outcome = request_outcome(b"3", status, _error(3, code, {"supported": ["2026-07-28"]}))
    assert isinstance(outcome, ErrorResponse)
    assert outcome.code == code


def test_ER10_error_with_null_id_is_bound_to_the_request() -> None:
    outcome = request_outcome(b'"abc"', 400, _error(None, UNSUPPORTED_PROTOCOL_VERSION, {"supported": []}))
    assert isinstance(outcome, ErrorResponse)
    assert outcome.id == b'"abc"'
    assert json.loads(outcome.raw)["error"]["data"] == {"supported": []}


def test_ER10_404_method_not_found_to_discover_reads_as_legacy_in_the_probe() -> None:
    outcome = request_outcome(b"1", 404, _error(1, METHOD_NOT_FOUND))
    assert isinstance(outcome, ErrorResponse)
    probe = StdioProbe()
    probe.start()
    step = probe.on_error(outcome.code, None)
    assert type(step).__name__ == "Legacy"


@pytest.mark.parametrize(("status", "body"), [
    (400, b"Bad Request"),
    (200, b"{}"),
    (200, b'{"jsonrpc":"2.0","id":2,"result":{}}'),  # another id
    (400, b'{"jsonrpc":"2.0","id":1,"result":{}}'),  # a success under an error status
    (200, b"<html></html>"),
    (500, b""),
    (400, b'{"jsonrpc":"2.0","id":99,"error":{"code":-32022,"message":"x"}}'),  # another id's error
])
def test_ER11_anything_else_is_a_warden_error_carrying_the_status(status: int, body: bytes) -> None:
    outcome = request_outcome(b"1", status, body)
    assert isinstance(outcome, ErrorResponse)
    assert outcome.id == b"1"
    assert outcome.code == INTERNAL_ERROR
    assert json.loads(outcome.error)["data"] == {"httpStatus": status}


def test_ER12_fallback_statuses() -> None:
    assert [s for s in range(100, 600) if falls_back_to_sse(s)] == [400, 404, 405]


def test_http_failure_shows_a_printable_snippet_only() -> None:
    failure = http_failure(b"1", 502, "HTTP 502", b"<h1>bad\x1b[31m gateway</h1>" + b"x" * 500)
    message = json.loads(failure.error)["message"]
    assert message.startswith("HTTP 502: <h1>bad")
    assert "\x1b" not in message
    assert message.endswith("…")
    assert len(message) < 260
    assert http_failure(b"1", None, "broke").error == b'{"code":-32603,"message":"broke"}'


@pytest.mark.parametrize(("a", "b", "same"), [
    ("http://h/mcp", "http://h:80/other", True),
    ("https://H.example/mcp", "https://h.example:443/x", True),
    ("http://h/mcp", "https://h/mcp", False),
    ("http://h:8000/", "http://h:8001/", False),
    ("http://h/", "http://g/", False),
    ("http://h/", "ftp://h/", False),
    ("http://h:bad/", "http://h/", False),
    ("mailto:x", "mailto:x", False),
])
def test_same_origin(a: str, b: str, same: bool) -> None:
    assert same_origin(a, b) is same


def test_SS02_endpoint_resolution() -> None:
    assert resolve_endpoint("http://h:1/sse", "/messages?sessionId=a") == "http://h:1/messages?sessionId=a"
    assert resolve_endpoint("http://h:1/a/sse", "msg") == "http://h:1/a/msg"
    assert resolve_endpoint("http://h:1/sse", "http://h:1/m#frag") == "http://h:1/m"
    for bad in ("http://other:1/m", "//other/m", "https://h:1/m", "", "  ", "/m\r\nX: y", "http://u:p@h:1/m"):
        with pytest.raises(RemoteProtocolError):
            resolve_endpoint("http://h:1/sse", bad)


def test_AU06_redirects_only_within_the_origin() -> None:
    assert redirect_target("https://h/mcp", "/mcp/") == "https://h/mcp/"
    with pytest.raises(RemoteProtocolError, match="another origin"):
        redirect_target("https://h/mcp", "https://evil.example/mcp")
    with pytest.raises(RemoteProtocolError, match="without a Location"):
        redirect_target("https://h/mcp", None)
    # an unbalanced IPv6 bracket makes urljoin raise ValueError, which no caller expects
    with pytest.raises(RemoteProtocolError, match=r"^the server's redirect is not a valid URL \(Invalid IPv6 URL\)$"):
        redirect_target("https://h/mcp", "//[evil/mcp")


def test_session_id_and_resume_delay_bounds() -> None:
    assert valid_session_id("abc-123_~!")
    assert not valid_session_id("")
    assert not valid_session_id("has space")
    assert not valid_session_id("tab\t")
    assert not valid_session_id("é")
    assert not valid_session_id("a" * 1025)
    assert resumable_event_id("stream-1_ev 42") == "stream-1_ev 42"
    assert resumable_event_id("x" * 1024) == "x" * 1024
    for unsendable in ("", "é", "ev\x01", "ev\x7f", "ev\t1", " ev", "ev ", "x" * 1025):
        assert resumable_event_id(unsendable) == ""
    assert resume_delay(None) == 1.0
    assert resume_delay(500) == 0.5
    assert resume_delay(0) == resume_delay(99) == MIN_RESUME_DELAY == 0.1  # no reconnecting in a busy loop
    assert resume_delay(10**15) == MAX_RESUME_DELAY


# -- properties ---------------------------------------------------------------------------------------------------

ids = st.one_of(st.integers(-(2**53), 2**53).map(lambda i: str(i).encode()),
                st.text(max_size=8).map(lambda s: json.dumps(s).encode()))
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                       max_size=3), max_leaves=8)


@given(request_id=ids, status=st.integers(100, 599), body=st.binary(max_size=300))
def test_property_request_outcome_never_raises_and_always_answers_this_request(
        request_id: bytes, status: int, body: bytes) -> None:
    outcome = request_outcome(request_id, status, body)
    assert outcome.id == request_id
    if isinstance(outcome, ErrorResponse) and outcome.code in MODERN_CODES:
        assert str(outcome.code).encode() in body  # a modern code comes only from the server's own body


@given(request_id=ids, status=st.integers(100, 599),
       message=st.fixed_dictionaries({"jsonrpc": st.sampled_from(["2.0", "1.0"])},
                                     optional={"id": json_values, "result": json_values, "error": json_values,
                                               "method": json_values}))
def test_property_structured_bodies(request_id: bytes, status: int, message: dict[str, Any]) -> None:
    outcome = request_outcome(request_id, status, json.dumps(message).encode())
    assert outcome.id == request_id
    if isinstance(outcome, Response):
        assert 200 <= status < 300


@given(status=st.integers(0, 999), content_type=st.one_of(st.none(), st.text(max_size=40)),
       session=st.booleans())
def test_property_classify_is_total(status: int, content_type: str | None, session: bool) -> None:
    kind = classify(status, content_type, carried_session=session)
    if kind is AnswerKind.EVENT_STREAM:
        assert 200 <= status < 300


@given(reference=st.text(max_size=60))
def test_property_endpoint_is_same_origin_or_refused(reference: str) -> None:
    base = "http://127.0.0.1:8080/sse"
    try:
        target = resolve_endpoint(base, reference)
    except RemoteProtocolError:
        return
    assert same_origin(base, target)
    assert "#" not in target
