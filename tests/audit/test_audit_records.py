"""Records: canonical JSON equals the rfc8785 reference, the index splice equals a fresh encoding, the 65,535-byte
cap never truncates silently, secrets are redacted at every detail level, malformed fields are refused."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from warden.audit import (
    MAX_RECORD_BYTES,
    RECORD_VERSION,
    Arguments,
    CanonicalizationError,
    Consent,
    Decision,
    Detail,
    Event,
    InvalidRecord,
    Outcome,
    Record,
    Recovery,
    canonical_json,
    decode_record,
    digest,
)
from warden.audit._records import MAX_SAFE_INTEGER, check_record, encode_record, prepare_record

from .helpers import decision

TIME = "2026-11-30T05:15:00.123456Z"

json_scalars = (st.none() | st.booleans() | st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)
                | st.floats(allow_nan=False, allow_infinity=False) | st.text())
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_canonical_json_is_rfc8785(value: Any) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


def test_canonical_json_refuses_what_rfc8785_cannot_represent() -> None:
    for bad in (float("nan"), 2**53, {"k": [float("inf")]}, "\ud800", {1: 2}, object()):
        with pytest.raises(CanonicalizationError):
            canonical_json(bad)
    # keys beyond the BMP sort by UTF-16 code units, as RFC 8785 requires
    assert canonical_json({"\ue000": 1, "\U0001f600": 2}) == rfc8785.dumps({"\ue000": 1, "\U0001f600": 2})


@pytest.mark.parametrize("beside", [None, 1.5, {"\U0001f600": 1}], ids=["alone", "after-a-float", "after-astral-key"])
def test_canonical_json_refuses_nesting_beyond_64_levels_on_either_encoder(beside: object) -> None:
    """A float or an astral key sends a value to the rfc8785 path; the depth limit must hold there too (a hostile
    server's 600-deep tool definition next to a float was pinned, then crashed the pin store's serializer)."""
    deep: Any = {}
    for _ in range(65):
        deep = {"a": deep}
    with pytest.raises(CanonicalizationError, match="nested deeper than 64 levels"):
        canonical_json([beside, deep])
    assert canonical_json([beside, deep["a"]["a"]])  # 64 objects under the list: the most it takes


texts = st.text(max_size=40)
digests = st.binary(max_size=8).map(digest)


@st.composite
def records(draw: st.DrawFn) -> Record:
    args = draw(st.none() | st.builds(lambda v, d: Arguments.capture(v, d), json_values, st.sampled_from(Detail)))
    return Record(
        event=draw(st.sampled_from(Event)), server_name=draw(st.none() | texts), server_id=draw(st.none() | digests),
        client=draw(st.none() | texts), method=draw(st.none() | st.sampled_from(["tools/call", "roots/list"])),
        target=draw(st.none() | texts), target_digest=draw(st.none() | digests), rule=draw(st.none() | texts),
        decision=draw(st.none() | st.sampled_from(Decision)), consent=draw(st.none() | st.sampled_from(Consent)),
        reason=draw(st.none() | texts), arguments=args, decision_index=draw(st.none() | st.integers(0, 2**40)),
        outcome=draw(st.none() | st.sampled_from(Outcome)), result_size=draw(st.none() | st.integers(0, 2**40)),
        exit_code=draw(st.none() | st.integers(-255, 255)), signal=draw(st.none() | st.integers(1, 64)),
        error=draw(st.none() | texts), violation=draw(st.none() | texts),
        recovered=draw(st.none() | st.builds(Recovery, anchor_size=st.integers(0, 9), size=st.integers(0, 9),
                                             truncated_bytes=st.integers(0, 9), reason=st.text(max_size=9))))


@settings(max_examples=300, deadline=None)
@given(records(), st.integers(0, MAX_SAFE_INTEGER))
def test_prepared_record_splice_equals_full_encoding(record: Record, index: int) -> None:
    prepared = prepare_record(record, untrusted_time=TIME, pid=4242)
    stored = prepared.at(index)
    full = encode_record(msgspec.structs.replace(record, v=RECORD_VERSION, index=index, untrusted_time=TIME,
                                                 pid=4242))
    assert stored == full
    # the stored bytes are the RFC 8785 form of what they say
    assert rfc8785.dumps(json.loads(stored, parse_int=float)) == stored  # floats: RFC 8785 numbers are doubles
    back = decode_record(stored)
    assert back.index == index
    assert encode_record(back) == stored


def test_record_is_compact_and_self_describing() -> None:
    stored = prepare_record(decision(7), untrusted_time=TIME, pid=99).at(12)
    doc = json.loads(stored)
    assert doc["v"] == RECORD_VERSION
    assert doc["index"] == 12
    assert doc["untrusted_time"] == TIME
    assert doc["pid"] == 99
    assert "outcome" not in doc  # unset fields are left out, not written as null


@pytest.mark.parametrize(("change", "why"), [
    ({"server_id": "sha256:" + "A" * 64}, "digest"),
    ({"target_digest": "md5:abc"}, "length"),
    ({"method": "not a method"}, "MCP method"),
    ({"signal": 0}, ">= 1"),
    ({"server_name": "x" * 300}, "length <= 256"),
    ({"decision_index": -1}, ">= 0"),
    ({"error": "\ud800"}, "not encodable"),
])
def test_malformed_fields_are_refused(change: dict[str, Any], why: str) -> None:
    with pytest.raises(InvalidRecord, match=why):
        check_record(msgspec.structs.replace(decision(), **change))
    with pytest.raises(InvalidRecord, match=why):
        prepare_record(msgspec.structs.replace(decision(), **change), untrusted_time=TIME, pid=1)


def test_detail_levels_and_secrets() -> None:
    value = {"path": "/etc/passwd", "api_key": "sk-live-123", "nested": [{"Authorization": "Bearer x"}],
             "note": "contains hunter22 inline", "n": 3}
    secrets = {"hunter22"}
    h = Arguments.capture(value, Detail.HASH, secret_values=secrets)
    assert not h.has_value
    assert h.digest == digest(rfc8785.dumps(value))
    full = json.loads(bytes(Arguments.capture(value, Detail.FULL, secret_values=secrets).value))
    assert full == {"path": "/etc/passwd", "api_key": "[REDACTED]", "nested": [{"Authorization": "[REDACTED]"}],
                    "note": "contains [REDACTED] inline", "n": 3}
    red = json.loads(bytes(Arguments.capture(value, Detail.REDACTED, secret_values=secrets).value))
    assert red == {"path": "[REDACTED]", "api_key": "[REDACTED]", "nested": [{"Authorization": "[REDACTED]"}],
                   "note": "[REDACTED]", "n": 3}
    # every level keeps the digest of the original, unredacted arguments
    assert h.digest == Arguments.capture(value, Detail.FULL).digest
    big = Arguments.capture({"n": 2**60}, Detail.FULL)
    assert (big.detail, big.noncanonical, big.has_value) == (Detail.HASH, True, False)


def test_secret_values_are_cut_by_the_one_redactor_and_a_short_one_keeps_only_the_digest() -> None:
    value = {"note": "a hunter22-and-more b", "n": 1234567890123, "hunter22": "x"}
    full = json.loads(bytes(Arguments.capture(value, Detail.FULL, secret_values={"hunter22", "hunter22-and-more",
                                                                               "1234567890"}).value))
    assert full == {"note": "a [REDACTED] b", "n": "[REDACTED]", "[REDACTED]": "x"}  # longest first, numbers too
    short = Arguments.capture(value, Detail.FULL, secret_values={"hunter22", "abc"})  # too short to redact
    assert (short.detail, short.has_value, short.digest) == (Detail.HASH, False, digest(rfc8785.dumps(value)))


def test_oversize_records_shrink_explicitly_never_silently() -> None:
    huge_args = Arguments.capture({"blob": "y" * 70_000}, Detail.FULL)
    rec = decision(arguments=huge_args)
    stored = prepare_record(rec, untrusted_time=TIME, pid=1).at(MAX_SAFE_INTEGER)
    assert len(stored) <= MAX_RECORD_BYTES
    doc = json.loads(stored)
    assert doc["arguments"] == {"detail": "hash", "digest": huge_args.digest, "oversize": True}
    assert "oversize" not in doc  # the record itself did not need cutting
    worst = Record(event=Event.SANDBOX_VIOLATION, error="\x01" * 50_000, reason="é" * 70_000,
                   violation="v" * 80_000, arguments=huge_args, server_name="\x02" * 256, client="\x03" * 256,
                   rule="\x04" * 256, target="\x05" * 2048)
    stored = prepare_record(worst, untrusted_time=TIME, pid=(1 << 31) - 1).at(MAX_SAFE_INTEGER)
    assert len(stored) <= MAX_RECORD_BYTES
    doc = json.loads(stored)
    assert doc["oversize"] is True
    assert doc["reason"].startswith("[oversize: 70000 characters, sha256:")
    assert doc["error"] == f"[oversize: 50000 characters, {digest(chr(1).encode() * 50_000)}]"
