"""Record templates: a filled template is stored as exactly the bytes of the whole record, each hole's value is
checked by its field's rule, and anything a template cannot do byte for byte (a secret, an oversize record) takes
the full path. A template changes how fast a record is stored, never what is stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warden.audit import (
    Arguments,
    Detail,
    Event,
    InvalidRecord,
    Outcome,
    Record,
    RecordTemplate,
    digest,
    open_audit_log,
)
from warden.audit._records import prepare_filled, prepare_record
from warden.secrets import Redactor

from .helpers import decision
from .test_audit_log import verify_dir

TIME = "2026-12-07T12:00:00.000000Z"
SECRET = "sk-live-0123456789abcdefghijkl"
_json = st.recursive(st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                  max_size=4), max_leaves=12)
_texts = st.text(min_size=1, max_size=60)


def _decided(**over: Any) -> RecordTemplate:
    base = msgspec.structs.replace(decision(0, **over), request_digest=None, arguments=None)
    return RecordTemplate(base, ("arguments", "request_digest"))


def _same_bytes(template: RecordTemplate, values: dict[str, Any], redactor: Redactor | None = None) -> None:
    filled = template.fill(**values)
    spliced = prepare_filled(filled, untrusted_time=TIME, pid=4242, redactor=redactor or Redactor())
    assert spliced is not None
    whole = prepare_record(filled.record(), untrusted_time=TIME, pid=4242)
    for index in (0, 7, 123_456_789):
        assert spliced.at(index) == whole.at(index)


@settings(max_examples=200, deadline=None)
@given(target=_texts, reason=_texts, client=st.none() | _texts, args=_json, detail=st.sampled_from(list(Detail)),
       n=st.integers(0, 10**6))
def test_a_filled_decision_is_the_whole_records_bytes(target: str, reason: str, client: str | None, args: Any,
                                                      detail: Detail, n: int) -> None:
    template = _decided(target=target, reason=reason, client=client)
    _same_bytes(template, {"request_digest": digest(b"%d" % n),
                           "arguments": Arguments.capture({"a": args}, detail)})


@settings(max_examples=100, deadline=None)
@given(index=st.integers(0, 2**53 - 1), size=st.integers(0, 2**53 - 1), method=st.sampled_from(
    ["tools/call", "resources/read", "prompts/get"]), kind=st.sampled_from(list(Outcome)))
def test_a_filled_outcome_is_the_whole_records_bytes(index: int, size: int, method: str, kind: Outcome) -> None:
    template = RecordTemplate(Record(event=Event.CALL_OUTCOME, method=method, outcome=kind, server_name="fs",
                                     server_id=digest(b"fs")), ("decision_index", "result_digest", "result_size"))
    _same_bytes(template, {"decision_index": index, "result_digest": digest(b"r"), "result_size": size})


@pytest.mark.parametrize(("values", "match"), [
    ({"request_digest": "sha256:" + "A" * 64}, "must look like sha256"),
    ({"request_digest": "md5:0"}, "must look like sha256"),
    ({"request_digest": 7}, "must look like sha256"),
])
def test_a_bad_digest_in_a_hole_is_refused(values: dict[str, Any], match: str) -> None:
    template = RecordTemplate(msgspec.structs.replace(decision(0), request_digest=None), ("request_digest",))
    with pytest.raises(InvalidRecord, match=match):
        prepare_filled(template.fill(**values), untrusted_time=TIME, pid=1, redactor=Redactor())


@pytest.mark.parametrize("value", [-1, 2**53, True, 1.0, "3"])
def test_a_bad_count_in_a_hole_is_refused(value: Any) -> None:
    template = RecordTemplate(Record(event=Event.CALL_OUTCOME, method="tools/call"),
                              ("decision_index", "result_digest", "result_size"))
    with pytest.raises(InvalidRecord, match="decision_index must be an integer"):
        prepare_filled(template.fill(decision_index=value, result_digest=digest(b""), result_size=0),
                       untrusted_time=TIME, pid=1, redactor=Redactor())


def test_bad_arguments_in_a_hole_are_refused() -> None:
    template = _decided()
    with pytest.raises(InvalidRecord, match=r"audit\.Arguments"):
        prepare_filled(template.fill(request_digest=digest(b""), arguments={"path": "/"}),
                       untrusted_time=TIME, pid=1, redactor=Redactor())
    hashed_with_value = Arguments(detail=Detail.HASH, digest=digest(b""), value=msgspec.Raw(b"{}"))
    with pytest.raises(InvalidRecord, match="must not carry a value"):
        prepare_filled(template.fill(request_digest=digest(b""), arguments=hashed_with_value),
                       untrusted_time=TIME, pid=1, redactor=Redactor())


def test_a_malformed_fixed_field_is_refused_when_the_template_is_first_used() -> None:
    template = RecordTemplate(Record(event=Event.CALL_DECIDED, method="tools/call", target_digest="nope"),
                              ("request_digest",))
    with pytest.raises(InvalidRecord, match="target_digest"):
        prepare_filled(template.fill(request_digest=digest(b"")), untrusted_time=TIME, pid=1, redactor=Redactor())


def test_a_template_refuses_holes_it_cannot_have() -> None:
    with pytest.raises(ValueError, match="cannot be a template hole"):
        RecordTemplate(Record(event=Event.CALL_DECIDED), ("reason",))
    with pytest.raises(ValueError, match="which is a hole"):
        RecordTemplate(decision(0), ("request_digest",))
    with pytest.raises(ValueError, match="envelope"):
        RecordTemplate(Record(event=Event.CALL_DECIDED, pid=3), ("request_digest",))
    with pytest.raises(ValueError, match="was given"):
        _decided().fill(request_digest=digest(b""))


def test_secrets_and_oversize_take_the_full_path() -> None:
    redactor = Redactor().with_values([SECRET])
    holding = _decided(reason=f"token {SECRET}")
    filled = holding.fill(request_digest=digest(b""), arguments=Arguments.capture({"p": 1}, Detail.FULL))
    assert prepare_filled(filled, untrusted_time=TIME, pid=1, redactor=redactor) is None
    clean = _decided()
    secret_args = clean.fill(request_digest=digest(b""), arguments=Arguments.capture({"p": SECRET}, Detail.FULL))
    assert prepare_filled(secret_args, untrusted_time=TIME, pid=1, redactor=redactor) is None
    big = clean.fill(request_digest=digest(b""), arguments=Arguments.capture({"p": "x" * 70_000}, Detail.FULL))
    assert prepare_filled(big, untrusted_time=TIME, pid=1, redactor=Redactor()) is None


async def test_the_log_stores_a_template_record_exactly_as_the_whole_one(tmp_path: Path) -> None:
    """Through the log: the spliced record, the secret-bearing one (redacted by the full path) and the oversize one
    (shrunk by ``fit_record``) all verify, and equal what the whole records are stored as."""
    template = _decided()
    async with open_audit_log(tmp_path, secrets=[SECRET]) as log:
        plain = template.fill(request_digest=digest(b"1"), arguments=Arguments.capture({"p": 1}, Detail.FULL))
        secret = template.fill(request_digest=digest(b"2"), arguments=Arguments.capture({"p": SECRET}, Detail.FULL))
        big = template.fill(request_digest=digest(b"3"),
                            arguments=Arguments.capture({"p": "x" * 70_000}, Detail.FULL))
        for filled in (plain, secret, big):
            await log.append(filled)
            await log.append(filled.record())
    _, records = verify_dir(tmp_path)
    decided = [r for r in records if r["event"] == "call.decided"]
    assert len(decided) == 6
    for a, b in zip(decided[::2], decided[1::2], strict=True):
        for r in (a, b):
            r.pop("index"), r.pop("untrusted_time")
        assert a == b
    assert SECRET not in json.dumps(records)
    assert decided[4].get("oversize") or decided[4]["arguments"].get("oversize")
