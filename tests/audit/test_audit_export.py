"""Export formats: every record kind to OCSF 1.6 (validated against the OCSF schema that ``ocsf-json-schema``
embeds, with ``jsonschema``), to Timesketch JSONL with its three mandatory fields, and ``export --follow``."""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
import pty
import subprocess
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from ocsf_json_schema import OcsfJsonSchemaEmbedded, get_ocsf_schema

from tests.support import WARDEN
from warden.audit import (
    Arguments,
    Consent,
    Decision,
    Detail,
    Egress,
    Event,
    Grant,
    Outcome,
    Package,
    Record,
    Recovery,
    digest,
)
from warden.audit._export import OCSF_VERSION, TIMESTAMP_DESC, ocsf_event, timesketch_event
from warden.audit._records import decode_record, prepare_record
from warden.audit._store import Store, format_time
from warden.cli import main

from .helpers import decision

T0 = 1_800_000_000.0
ORIGIN = "warden.invalid/audit/00112233445566778899aabbccddeeff"
HOSTILE = "add<script>alert(1)</script>\x1b[2K\u202e"


def _package(version: str, previous: str | None) -> Package:
    return Package(ecosystem="npm", name="pkg", version=version, requested="npm:pkg@latest",
                   integrity="sha512-" + HOSTILE, lock_digest=digest(b"lock"), tree_digest=digest(b"tree"),
                   install_scripts=("pkg",), previous_version=previous, approved_by="me (uid 1000)")


def _grant() -> Grant:
    return Grant(resource="https://mcp.example.com/mcp", issuer="https://auth.example.com", client_id=HOSTILE,
                 scopes=("mcp:read", "offline_access"), token_digest=digest(b"access-token"))


def sample(event: Event) -> Record:
    """A record of each kind with every field that kind carries, and hostile text where a server controls it."""
    common: dict[str, Any] = dict(server_name="rug", server_id=digest(b"manifest"))
    by_event: dict[Event, dict[str, Any]] = {
        Event.AUDIT_OPENED: {}, Event.AUDIT_CLOSED: {},
        Event.AUDIT_RECOVERED: dict(recovered=Recovery(anchor_size=3, size=5, truncated_bytes=17, reason="opened")),
        Event.AUDIT_PAUSED: dict(reason="the disk is full: audited actions are refused"),
        Event.AUDIT_RESUMED: dict(reason="the disk has room again"),
        Event.SERVER_LAUNCHED: dict(common, sandbox_digest=digest(b"profile"), policy_digest=digest(b"p"),
                                    target="python3 rugpull_server.py"),
        Event.SERVER_EXITED: dict(common, error="exited with status 1: " + HOSTILE, exit_code=1),
        Event.SERVER_REFUSED: dict(common, policy_digest=digest(b"p"), error="sandbox unavailable"),
        Event.POLICY_LOADED: dict(common, policy_digest=digest(b"p")),
        Event.CONFIG_RELOADED: dict(target="/home/u/.config/warden/warden.toml", reason="changed: git " + HOSTILE,
                                    error="warden.toml:3: expected '=' " + HOSTILE),
        Event.PIN_CREATED: dict(common, method="tool", target=HOSTILE, target_digest=digest(b"d1"), reason="new"),
        Event.PIN_APPROVED: dict(common, method="tool", target="add", target_digest=digest(b"d1"),
                                 consent=Consent.ELICITATION),
        Event.PIN_CHANGED: dict(common, method="tool", target="add", target_digest=digest(b"d2"),
                                previous_digest=digest(b"d1"), reason="description changed"),
        Event.PIN_REVOKED: dict(common, method="tool", target="add", target_digest=digest(b"d2")),
        Event.PACKAGE_INTAKE: dict(common, target="npm:pkg@1.0.0", target_digest=digest(b"tree1"),
                                   consent=Consent.POLICY, package=_package("1.0.0", None)),
        Event.PACKAGE_UPDATED: dict(common, target="npm:pkg@1.1.0", target_digest=digest(b"tree2"),
                                    previous_digest=digest(b"tree1"), consent=Consent.TERMINAL,
                                    package=_package("1.1.0", "1.0.0")),
        Event.AUTH_AUTHORIZED: dict(common, target="https://mcp.example.com/mcp", grant=_grant()),
        Event.AUTH_REFRESHED: dict(common, target="https://mcp.example.com/mcp", grant=_grant()),
        Event.CALL_DECIDED: dict(common, client="claude-code 2.1", method="tools/call", target=HOSTILE,
                                 target_digest=digest(b"d1"), policy_digest=digest(b"p"),
                                 rule="user /home/u/.config/warden/warden.toml:12 (tools.add)",
                                 decision=Decision.DENY, reason="tool 'add' changed since it was approved",
                                 request_digest=digest(b"req"),
                                 arguments=Arguments.capture({"a": 1}, Detail.FULL), sandbox_digest=digest(b"s")),
        Event.CALL_OUTCOME: dict(common, method="tools/call", decision_index=11, outcome=Outcome.ERROR,
                                 error="boom " + HOSTILE),
        Event.SANDBOX_VIOLATION: dict(common, violation="connect(2) to 10.0.0.1:443 refused " + HOSTILE),
        Event.EGRESS_DECIDED: dict(common, method="CONNECT", target="evil.test:443", decision=Decision.DENY,
                                   rule='network.allow = ["evil.test:443"]', reason="not on the list " + HOSTILE,
                                   egress=Egress(host="evil.test", port=443)),
        Event.EGRESS_CLOSED: dict(common, method="CONNECT", target="api.github.com:443", decision_index=3,
                                  outcome=Outcome.OK, egress=Egress(host="api.github.com", port=443,
                                                                    address="140.82.0.1", sent=517, received=4096)),
    }
    return Record(event=event, **by_event[event])


def stored(record: Record, index: int = 12) -> tuple[Record, bytes]:
    raw = prepare_record(record, untrusted_time=format_time(T0), pid=4242).at(index)
    return decode_record(raw), raw


@functools.cache
def ocsf_schemas() -> OcsfJsonSchemaEmbedded:
    return OcsfJsonSchemaEmbedded(get_ocsf_schema(version=OCSF_VERSION))


@functools.cache
def class_validator(class_uid: int, profiles: tuple[str, ...]) -> jsonschema.Draft202012Validator:
    schemas = ocsf_schemas()
    name = schemas.lookup_class_name_from_uid(class_uid=class_uid)
    schema = schemas.get_class_schema(class_name=name, profiles=list(profiles))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def validate_ocsf(event: dict[str, Any]) -> None:
    profiles = tuple(event["metadata"].get("profiles", ()))
    errors = sorted(class_validator(event["class_uid"], profiles).iter_errors(event), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:10])


EXPECTED_CLASS = {
    Event.CALL_DECIDED: 6003, Event.CALL_OUTCOME: 6003,
    Event.PIN_CREATED: 3004, Event.PIN_APPROVED: 3004, Event.PIN_CHANGED: 3004, Event.PIN_REVOKED: 3004,
    Event.SERVER_LAUNCHED: 6002, Event.SERVER_EXITED: 6002, Event.SERVER_REFUSED: 6002, Event.POLICY_LOADED: 6002,
    Event.CONFIG_RELOADED: 6002,
    Event.AUDIT_OPENED: 1008, Event.AUDIT_CLOSED: 1008, Event.AUDIT_RECOVERED: 1008, Event.AUDIT_PAUSED: 1008,
    Event.AUDIT_RESUMED: 1008,
    Event.SANDBOX_VIOLATION: 2004,
    Event.PACKAGE_INTAKE: 3004, Event.PACKAGE_UPDATED: 3004,  # a package entry pinned into the store: an entity
    Event.EGRESS_DECIDED: 4001, Event.EGRESS_CLOSED: 4001,  # a connection through the egress proxy
    Event.AUTH_AUTHORIZED: 3004, Event.AUTH_REFRESHED: 3004,  # an OAuth grant warden holds: an entity it manages
}


def test_every_record_kind_has_an_ocsf_class() -> None:
    assert set(EXPECTED_CLASS) == set(Event)  # a new event kind must be given a class (and a reason) here


@pytest.mark.parametrize("event", list(Event), ids=lambda e: e.value)
def test_every_record_kind_exports_to_valid_ocsf(event: Event) -> None:
    record, raw = stored(sample(event))
    out = ocsf_event(record, raw, ORIGIN)
    validate_ocsf(out)
    assert out["class_uid"] == EXPECTED_CLASS[event]
    assert out["type_uid"] == out["class_uid"] * 100 + out["activity_id"]
    assert out["metadata"]["version"] == "1.6.0"
    assert out["metadata"]["uid"] == f"{ORIGIN}/12"
    assert out["raw_data"] == raw.decode()  # the exact stored bytes, to recompute the leaf hash
    assert out["raw_data_hash"]["value"] == hashlib.sha256(b"\x00" + raw).hexdigest()
    assert out["time"] == int(T0 * 1000)
    assert "\x1b" not in out["message"]
    assert "\u202e" not in out["message"]


def test_a_kind_without_a_class_still_exports_as_a_valid_base_event() -> None:
    from warden.audit._export import _base_event

    record, raw = stored(sample(Event.POLICY_LOADED))
    out = _base_event(record, raw, ORIGIN)
    validate_ocsf(out)
    assert (out["class_uid"], out["type_uid"], out["activity_name"]) == (0, 99, "policy.loaded")


def test_ocsf_validation_can_fail() -> None:
    """The schema check is real: a wrong type, a missing required field or an unknown attribute is refused."""
    record, raw = stored(sample(Event.CALL_DECIDED))
    good = ocsf_event(record, raw, ORIGIN)
    for broken in ({**good, "time": "yesterday"}, {k: v for k, v in good.items() if k != "api"},
                   {**good, "made_up": 1}, {**good, "action_id": 77}):
        with pytest.raises(AssertionError):
            validate_ocsf(broken)


def test_ocsf_decision_carries_the_rule_the_verdict_and_the_request_id_its_outcome_shares() -> None:
    record, raw = stored(sample(Event.CALL_DECIDED), index=11)
    decided = ocsf_event(record, raw, ORIGIN)
    assert decided["action_id"] == 2
    assert decided["disposition_id"] == 2
    assert decided["policy"]["name"] == "user /home/u/.config/warden/warden.toml:12 (tools.add)"
    assert decided["resources"][0]["name"] == HOSTILE  # the exact value, for the analyst
    assert decided["api"]["operation"] == "tools/call"
    outcome_record, outcome_raw = stored(sample(Event.CALL_OUTCOME), index=13)
    outcome = ocsf_event(outcome_record, outcome_raw, ORIGIN)
    assert outcome["api"]["request"]["uid"] == decided["api"]["request"]["uid"] == f"{ORIGIN}/11"
    assert outcome["status_id"] == 2
    changed_record, changed_raw = stored(sample(Event.PIN_CHANGED))
    assert ocsf_event(changed_record, changed_raw, ORIGIN)["severity_id"] == 4  # a rug pull is High


@pytest.mark.parametrize("event", list(Event), ids=lambda e: e.value)
def test_every_record_kind_exports_to_timesketch(event: Event) -> None:
    record, raw = stored(sample(event))
    out = timesketch_event(record, raw, ORIGIN)
    assert out["message"]
    assert isinstance(out["message"], str)
    assert out["datetime"] == "2027-01-15T08:00:00.000000Z"
    assert out["timestamp_desc"] == TIMESTAMP_DESC
    assert out["timestamp"] == int(T0 * 1_000_000)
    assert out["event"] == event.value
    assert all(not isinstance(v, dict | list) for v in out.values())  # flat, as Timesketch indexes it
    assert "\x1b" not in out["message"]


# -- through the CLI, on a real log --------------------------------------------------------------------------------


@pytest.fixture
def log(state_dir: Path) -> Path:
    store = Store.open(state_dir, clock=lambda: T0)
    store.commit([Record(event=Event.AUDIT_OPENED)])
    store.commit([sample(e) for e in Event if e is not Event.AUDIT_OPENED], publish=True)
    store.close()
    return state_dir


def export(capsys: pytest.CaptureFixture[str], state_dir: Path, *args: str) -> list[dict[str, Any]]:
    assert main(["--state-dir", str(state_dir), "audit", "export", *args]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_export_each_format_from_a_real_log(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jsonl = export(capsys, log, "--format", "jsonl")
    assert [r["index"] for r in jsonl] == list(range(len(Event)))
    stored_bytes = (log / "audit" / "entries.log").read_bytes()
    ocsf = export(capsys, log, "--format", "ocsf")
    assert len(ocsf) == len(jsonl)
    for event in ocsf:
        validate_ocsf(event)
        assert event["raw_data"].encode() in stored_bytes
    sketch = export(capsys, log, "--format", "timesketch")
    assert {e["event"] for e in sketch} == {e.value for e in Event}
    assert all({"message", "datetime", "timestamp_desc"} <= set(e) for e in sketch)


def test_export_since_keeps_later_records(state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = Store.open(state_dir, clock=lambda: T0)
    store.commit([decision(1, untrusted_time=format_time(T0 + 10)), decision(2, untrusted_time=format_time(T0 + 20))],
                 publish=True)
    store.close()
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(T0 + 15))
    out = export(capsys, state_dir, "--format", "jsonl", "--since", since)
    assert [r["request_digest"] for r in out] == [digest(b"request 2")]


def test_export_redacts_registered_secrets(state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A secret that reached a record anyway (registered after it was written) does not leave through export."""
    store = Store.open(state_dir, clock=lambda: T0)
    store.commit([Record(event=Event.SERVER_EXITED, server_name="s", error="token ghp_s3cr3tvalue123 rejected")],
                 publish=True)
    store.close()
    from warden.secrets import SecretStore

    SecretStore(state_dir).set("GH", "ghp_s3cr3tvalue123")
    for fmt in ("jsonl", "timesketch", "ocsf"):
        assert main(["--state-dir", str(state_dir), "audit", "export", "--format", fmt]) == 0
        out = capsys.readouterr().out
        assert "ghp_s3cr3tvalue123" not in out
        assert "[REDACTED]" in out


def test_export_follow_delivers_a_record_committed_after_it_started(log: Path) -> None:
    proc = subprocess.Popen([WARDEN, "--state-dir", str(log), "audit", "export",
                             "--format", "ocsf", "--follow"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        first = [json.loads(proc.stdout.readline()) for _ in Event]  # the existing records come first
        assert [e["metadata"]["sequence"] for e in first] == list(range(len(Event)))
        store = Store.open(log)
        store.commit([decision(99, target="late_tool")])
        store.close()
        late = json.loads(proc.stdout.readline())  # blocks until warden streams it (the test's timeout bounds it)
        validate_ocsf(late)
        assert late["resources"][0]["name"] == "late_tool"
        assert late["metadata"]["sequence"] == len(Event)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert proc.returncode in (0, -15), proc.stderr.read() if proc.stderr else ""


@pytest.mark.parametrize("fmt", ["jsonl", "timesketch", "ocsf"])
def test_export_to_a_terminal_escapes_what_a_terminal_would_obey_and_keeps_the_values(state_dir: Path,
                                                                                        fmt: str) -> None:
    """A server's error text in a record (C1 CSI, bidi override, line separator, zero-width space) reaches a
    responder's terminal through ``audit export`` as ``\\uXXXX`` escapes, the same JSON values (before: written as
    stored, so the terminal obeyed them); to a pipe or a file it stays byte for byte (a SIEM reads it)."""
    hostile = "bad\u009b2J\u202etxt.exe\u2028forged line\u200b"
    store = Store.open(state_dir, clock=lambda: T0)
    store.commit([Record(event=Event.SERVER_EXITED, server_name="s", error=hostile)], publish=True)
    store.close()
    command = [WARDEN, "--state-dir", str(state_dir), "audit", "export", "--format", fmt]
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(command, stdout=follower, stderr=subprocess.PIPE)
        os.close(follower)
        shown = b""
        while chunk := _read_pty(leader):
            shown += chunk
        assert proc.wait(timeout=60) == 0
    finally:
        os.close(leader)
    text = shown.decode()
    assert not any(ch in text for ch in "\u009b\u202e\u2028\u200b")
    assert "\\u009b" in text
    assert "\\u202e" in text
    piped = subprocess.run(command, capture_output=True, check=True).stdout.decode()
    assert hostile in piped or json.dumps(hostile)[1:-1] in piped
    assert [json.loads(line) for line in text.replace("\r\n", "\n").split("\n") if line] == \
        [json.loads(line) for line in piped.split("\n") if line]  # (splitlines() would split at U+2028)


def _read_pty(fd: int) -> bytes:
    """What the pty holds, or b"" once the writer closed it (EIO on Linux)."""
    try:
        return os.read(fd, 65536)
    except OSError as exc:
        if exc.errno == errno.EIO:
            return b""
        raise
