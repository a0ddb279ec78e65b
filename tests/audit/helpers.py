"""Shared helpers for the audit tests: paths to the vectors, record builders, file surgery for tamper tests."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from warden.audit import Arguments, Consent, Decision, Detail, Event, Record, digest

REPO = Path(__file__).resolve().parents[2]
VECTORS = REPO / "audit" / "vectors"
PROBES = VECTORS / "tdmerkle" / "testdata"


def load_json(name: str) -> Any:
    return json.loads((VECTORS / name).read_text())


def b64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def decision(n: int = 0, **over: Any) -> Record:
    """A typical tools/call decision record; ``n`` makes the request digest unique."""
    fields: dict[str, Any] = dict(
        event=Event.CALL_DECIDED, method="tools/call", server_name="fs", server_id=digest(b"fs-manifest"),
        target="read_file", target_digest=digest(b"read_file-def"), policy_digest=digest(b"policy"),
        rule="tools.read_file", decision=Decision.ALLOW, consent=Consent.POLICY,
        request_digest=digest(b"request %d" % n),
        arguments=Arguments.capture({"path": f"/tmp/{n}"}, Detail.HASH), sandbox_digest=digest(b"profile"))
    fields.update(over)
    return Record(**fields)
