"""warden's own format vectors (audit/vectors/warden/): a small log built deterministically with a published test
key. The files pin the on-disk and signed formats byte for byte; FORMAT.md points at them. Set
WARDEN_REGENERATE_AUDIT_VECTORS=1 to rewrite them after an intended format change."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import msgspec
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from warden.audit import (
    Arguments,
    Consent,
    Decision,
    Detail,
    Event,
    Outcome,
    Record,
    Recovery,
    digest,
    verify_log,
    verify_tlog_proof,
)
from warden.audit._checkpoint import Checkpoint, format_tlog_proof, sign_checkpoint
from warden.audit._format import FRAME_NOTE, FRAME_RECORD, encode_frame
from warden.audit._merkle import Frontier, inclusion_proof, leaf_hash
from warden.audit._note import Ed25519Signer, parse_skey
from warden.audit._records import prepare_record
from warden.audit._store import format_time
from warden.audit._verify import CheckpointSource

from .helpers import REPO, VECTORS

OUT = VECTORS / "warden"
SCHEMA = json.loads((REPO / "audit" / "record.schema.json").read_text())
# A published test key, never a real log's: the Ed25519 seed 01 02 .. 20.
TEST_SEED = bytes(range(1, 33))
ORIGIN = "warden.invalid/audit/00000000000000000000000000000000"
T0 = 1_800_000_000.0


def _records() -> list[Record]:
    call = dict(server_name="filesystem", server_id=digest(b"manifest"), method="tools/call", target="read_file",
                target_digest=digest(b"read_file definition"), policy_digest=digest(b"policy"),
                sandbox_digest=digest(b"node profile"))
    return [
        Record(event=Event.AUDIT_OPENED),
        Record(event=Event.POLICY_LOADED, policy_digest=digest(b"policy")),
        Record(event=Event.SERVER_LAUNCHED, server_name="filesystem", server_id=digest(b"manifest"),
               sandbox_digest=digest(b"node profile")),
        Record(event=Event.PIN_CREATED, server_name="filesystem", target="read_file",
               target_digest=digest(b"read_file definition"), consent=Consent.TRUST_ON_FIRST_USE),
        Record(event=Event.CALL_DECIDED, **call, rule="tools.read_file", decision=Decision.ALLOW,
               consent=Consent.POLICY, request_digest=digest(b"request 1"),
               arguments=Arguments.capture({"path": "/project/README.md", "token": "s3cret"}, Detail.FULL)),
        Record(event=Event.CALL_OUTCOME, method="tools/call", server_name="filesystem", decision_index=4,
               outcome=Outcome.OK, result_digest=digest(b"result 1"), result_size=812),
        Record(event=Event.CALL_DECIDED, **{**call, "target": "write_file"}, rule="tools.default",
               decision=Decision.DENY, reason="write_file is not pinned", request_digest=digest(b"request 2"),
               arguments=Arguments.capture({"path": "/etc/passwd", "content": "x"}, Detail.REDACTED)),
        Record(event=Event.SANDBOX_VIOLATION, server_name="filesystem", violation="connect(2) to 1.1.1.1:443 denied"),
        Record(event=Event.SERVER_EXITED, server_name="filesystem", exit_code=0),
        Record(event=Event.AUDIT_RECOVERED, recovered=Recovery(anchor_size=3, size=9, truncated_bytes=11,
                                                                reason="opened: cut a torn tail of 11 bytes")),
        Record(event=Event.AUDIT_CLOSED),
    ]


def build() -> dict[str, bytes]:
    signer = _signer()
    entries = [prepare_record(r, untrusted_time=format_time(T0 + i / 10), pid=4242).at(i)
               for i, r in enumerate(_records())]
    frontier = Frontier()
    stored: list[bytes] = []
    for e in entries:
        stored.extend(frontier.append(leaf_hash(e)))
    cp = sign_checkpoint(Checkpoint(ORIGIN, len(entries), frontier.root()), signer)
    read = lambda ps: [stored[p] for p in ps]  # noqa: E731
    return {
        "signing.key": (signer.skey + "\n").encode(),
        "vkey": (signer.verifier.vkey + "\n").encode(),
        "entries.log": b"".join(encode_frame(FRAME_RECORD, e) for e in entries),
        "records.jsonl": b"".join(e + b"\n" for e in entries),
        "hashes.bin": b"".join(stored),
        "checkpoint": cp.note,
        "checkpoints.log": encode_frame(FRAME_NOTE, cp.note),
        "record-4.tlog-proof": format_tlog_proof(4, inclusion_proof(4, len(entries), read), cp, extra=entries[4]),
    }


def _signer() -> Ed25519Signer:
    return Ed25519Signer(ORIGIN, Ed25519PrivateKey.from_private_bytes(TEST_SEED))


def test_format_vectors_are_current() -> None:
    files = build()
    if os.environ.get("WARDEN_REGENERATE_AUDIT_VECTORS"):
        OUT.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (OUT / name).write_bytes(data)
    for name, data in files.items():
        assert (OUT / name).read_bytes() == data, f"audit/vectors/warden/{name} differs from the current format"


def test_format_vectors_verify() -> None:
    key = parse_skey((OUT / "signing.key").read_text()).verifier
    assert key.vkey == (OUT / "vkey").read_text().strip()
    result = verify_log((OUT / "entries.log").read_bytes(), log_key=key, deep=True,
                        checkpoints=[CheckpointSource("checkpoint", (OUT / "checkpoint").read_bytes())],
                        hashes=(OUT / "hashes.bin").read_bytes())
    assert result.size == 11
    proof, _cp = verify_tlog_proof((OUT / "record-4.tlog-proof").read_bytes(), key)
    assert proof.index == 4
    assert proof.extra is not None
    assert json.loads(proof.extra)["arguments"]["value"] == {"path": "/project/README.md", "token": "[REDACTED]"}


def test_schema_accepts_every_record_and_rejects_bad_ones() -> None:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    records = [json.loads(line) for line in (OUT / "records.jsonl").read_text().splitlines()]
    for record in records:
        validator.validate(record)
    for bad in ({"server_id": "sha256:XYZ"}, {"v": "warden-audit/2"}, {"unknown": 1}, {"decision": "maybe"},
                {"arguments": {"detail": "hash", "digest": digest(b"a"), "value": 1}}, {"index": -1}):
        with pytest.raises(jsonschema.ValidationError):
            validator.validate({**records[4], **bad})
    broken = dict(records[4])
    del broken["untrusted_time"]
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(broken)


def test_schema_and_decoder_agree_on_the_fields() -> None:
    fields = {f.name for f in msgspec.structs.fields(Record)}
    assert fields == set(SCHEMA["properties"])
    args = {f.name for f in msgspec.structs.fields(Arguments)}
    assert args == set(SCHEMA["properties"]["arguments"]["properties"])
    assert Path(REPO / "audit" / "FORMAT.md").exists()
