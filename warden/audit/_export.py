"""Audit records as a SIEM or a timeline tool takes them: JSON lines, Timesketch JSONL, OCSF 1.6. Pure code.

Each exporter turns one stored record (its exact bytes and its decoded :class:`Record`) into one JSON object. Field
values are the record's own, never rewritten: a forwarder hands an analyst what the log holds. Only the
human-readable summaries (Timesketch ``message``, OCSF ``message``) go through
:func:`warden.escape.for_terminal`, because a person reads them in a table; the analyst still has the exact values
in the other fields, and the exact stored bytes in OCSF ``raw_data`` (with their RFC 6962 leaf hash in
``raw_data_hash``, so a SIEM can tie an event to the signed tree). Redaction is the output channel's job (the CLI
applies the secrets registry to each line).

**OCSF classes, and why** (OCSF 1.6.0, validated in ``tests/audit`` against the schemas ``ocsf-json-schema``
embeds, with the ``security_control`` profile where a record carries a decision):

================================ =========================== ==========================================================
record kind                      OCSF class                  why
================================ =========================== ==========================================================
``call.decided``, ``call.outcome`` API Activity (6003)       an MCP request is an API call by an actor (the host) to a
                                                             service (the server): ``api.operation`` is the method,
                                                             ``action_id`` allow/deny, ``policy`` the rule (file:line);
                                                             decision and outcome share ``api.request.uid``
``pin.created/approved/changed/  Entity Management (3004)    a pin is a managed entity (a definition the policy
revoked``                                                    refers to): created, enabled by an approval, updated by a
                                                             server (a rug pull, severity High), disabled when revoked
``server.launched/exited/         Application Lifecycle      an MCP server is an application warden starts and stops;
refused``, ``policy.loaded``,    (6002)                      a refused start is a Start that failed, action Denied
``config.reloaded``                                          (and so is a refused reload)
``audit.opened/closed/recovered/ Event Log Activity (1008)  these are the audit log's own life: started, stopped,
paused/resumed``                                             (Other: Recover) a torn tail cut after a crash, and
                                                             disabled (High: every action refused) while the disk
                                                             is full, enabled again after
``sandbox.violation``            Detection Finding (2004)    warden detected a server doing what its sandbox forbids
================================ =========================== ==========================================================

Process Activity (1007) was the other candidate for servers; it requires a device and a process object warden's
records do not carry (the launch manifest is a digest), so it would need invented values.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Callable
from typing import Any, Final

import msgspec

from warden import __version__
from warden.audit._records import Decision, Event, Outcome, Record
from warden.escape import for_terminal

__all__ = ["FORMATS", "OCSF_VERSION", "TIMESTAMP_DESC", "export_line", "ocsf_event", "summary", "timesketch_event"]

OCSF_VERSION: Final = "1.6.0"
TIMESTAMP_DESC: Final = "warden audit writer time (untrusted)"
FORMATS: Final = ("jsonl", "timesketch", "ocsf")

_ENCODE: Final = msgspec.json.Encoder(order="sorted").encode
_INFO, _LOW, _MEDIUM, _HIGH = 1, 2, 3, 4
_OTHER: Final = 99


def _epoch_us(untrusted_time: str) -> int:
    """Microseconds since the epoch from the record's fixed-width RFC 3339 time (0 when absent or malformed)."""
    try:
        t = datetime.datetime.strptime(untrusted_time, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.UTC)
    except ValueError:
        return 0
    return (int(t.replace(microsecond=0).timestamp()) * 1_000_000) + t.microsecond


def summary(r: Record) -> str:
    """One line a person reads in a timeline: what happened, to what, and the verdict. Terminal-safe."""
    parts = [r.event.value]
    if r.server_name:
        parts.append(f"server {r.server_name}")
    if r.method:
        parts.append(r.method)
    if r.target:
        parts.append(repr(r.target))
    if r.decision is not None:
        parts.append(r.decision.value + (f" by {r.consent.value}" if r.consent else ""))
    if r.outcome is not None:
        parts.append(f"outcome {r.outcome.value} of #{r.decision_index}")
    if r.rule:
        parts.append(f"rule {r.rule}")
    for text in (r.reason, r.error, r.violation):
        if text:
            parts.append(text if len(text) <= 200 else text[:199] + "…")
    if r.recovered is not None:
        parts.append(r.recovered.reason)
    return for_terminal(": ".join(parts[:1]) + (" " + ", ".join(parts[1:]) if parts[1:] else ""))


# -- Timesketch ---------------------------------------------------------------------------------------------------


def timesketch_event(r: Record, raw: bytes, origin: str) -> dict[str, Any]:
    """A Timesketch JSONL event: the three mandatory fields (``message``, ``datetime``, ``timestamp_desc``), the
    time in microseconds, and every record field flat (nested ones as their JSON)."""
    event: dict[str, Any] = msgspec.json.decode(raw)
    args = event.pop("arguments", None)
    if args is not None:
        event["arguments_digest"] = args.get("digest")
        event["arguments_detail"] = args.get("detail")
        if "value" in args:
            event["arguments"] = _ENCODE(args["value"]).decode()
    for nested in ("recovered", "package", "grant", "egress"):  # flat, as Timesketch indexes it: nested as JSON text
        value = event.pop(nested, None)
        if value is not None:
            event[nested] = _ENCODE(value).decode()
    event.update(message=summary(r), datetime=r.untrusted_time, timestamp=_epoch_us(r.untrusted_time),
                 timestamp_desc=TIMESTAMP_DESC, data_type="warden:audit:record", audit_origin=origin,
                 leaf_hash=hashlib.sha256(b"\x00" + raw).hexdigest())
    return event


# -- OCSF -----------------------------------------------------------------------------------------------------------


def _base(r: Record, raw: bytes, origin: str, *, class_uid: int, activity_id: int, activity_name: str,
          severity_id: int, decided: bool) -> dict[str, Any]:
    category_uid = class_uid // 1000
    metadata: dict[str, Any] = {
        "version": OCSF_VERSION,
        "product": {"name": "warden", "vendor_name": "warden", "version": __version__},
        "uid": f"{origin}/{r.index}", "sequence": r.index, "log_name": origin, "log_provider": "warden audit log",
        "original_time": r.untrusted_time, "labels": [r.event.value],
    }
    if decided:
        metadata["profiles"] = ["security_control"]
    event: dict[str, Any] = {
        "class_uid": class_uid, "category_uid": category_uid, "activity_id": activity_id,
        "activity_name": activity_name, "type_uid": class_uid * 100 + activity_id,
        "time": _epoch_us(r.untrusted_time) // 1000, "severity_id": severity_id, "metadata": metadata,
        "message": summary(r), "raw_data": raw.decode("utf-8", "replace"),
        "raw_data_hash": {"algorithm_id": 3, "value": hashlib.sha256(b"\x00" + raw).hexdigest()},
    }
    unmapped = {k: v for k, v in (("pid", r.pid), ("server_id", r.server_id), ("sandbox_digest", r.sandbox_digest),
                                  ("client", r.client)) if v}
    if unmapped:
        event["unmapped"] = unmapped
    return event


def _security_control(event: dict[str, Any], r: Record, *, denied: bool) -> None:
    event["action_id"] = 2 if denied else 1
    event["disposition_id"] = 2 if denied else 1
    if r.policy_digest or r.rule:
        policy: dict[str, Any] = {"uid": r.policy_digest or "", "name": r.rule or "", "is_applied": True}
        if r.reason:
            policy["desc"] = r.reason
        event["policy"] = policy


def _api_activity(r: Record, raw: bytes, origin: str) -> dict[str, Any]:
    outcome = r.event is Event.CALL_OUTCOME
    denied = r.decision is Decision.DENY
    read = r.method in ("resources/read", "prompts/get")
    severity = _MEDIUM if denied else _LOW if outcome and r.outcome not in (None, Outcome.OK) else _INFO
    event = _base(r, raw, origin, class_uid=6003, activity_id=2 if read else _OTHER,
                  activity_name="Read" if read else "Invoke", severity_id=severity, decided=not outcome)
    request_index = r.decision_index if outcome else r.index
    api: dict[str, Any] = {"operation": r.method or "unknown",
                           "request": {"uid": f"{origin}/{request_index}"},
                           "service": {"name": r.server_name or "", **({"uid": r.server_id} if r.server_id else {})}}
    if r.request_digest or r.arguments is not None:
        api["request"]["data"] = {k: v for k, v in (
            ("request_digest", r.request_digest),
            ("arguments_digest", r.arguments.digest if r.arguments is not None else None)) if v}
    if outcome:
        response: dict[str, Any] = {"code": 0 if r.outcome is Outcome.OK else 1}
        if r.result_digest:
            response["data"] = {"result_digest": r.result_digest, "result_size": r.result_size}
        if r.error:
            response["error_message"] = r.error
        api["response"] = response
        event["status_id"] = 1 if r.outcome is Outcome.OK else 2
        event["status"] = "Success" if r.outcome is Outcome.OK else "Failure"
        event["status_detail"] = r.outcome.value if r.outcome else "unknown"
    event["api"] = api
    event["actor"] = {"app_name": r.client or "unknown host"}
    if r.principal is not None:  # who was authenticated (OCSF actor.user), beside what the host called itself
        event["actor"]["user"] = {"name": r.principal, "uid": r.principal}
    if r.consent is not None:
        event["actor"]["authorizations"] = [{"decision": f"{r.decision.value if r.decision else 'allow'} "
                                                         f"({r.consent.value})"}]
    event["src_endpoint"] = {"name": r.client or "unknown host"}
    if r.server_name:
        event["dst_endpoint"] = {"svc_name": r.server_name}
    if r.target:
        resource: dict[str, Any] = {"name": r.target, "type": _target_type(r.method)}
        if r.target_digest:
            resource["uid"] = r.target_digest
        event["resources"] = [resource]
    if not outcome:
        _security_control(event, r, denied=denied)
    return event


def _target_type(method: str | None) -> str:
    return {"tools/call": "tool", "prompts/get": "prompt", "resources/read": "resource"}.get(method or "", "request")


_PIN_ACTIVITY: Final = {Event.PIN_CREATED: (1, "Create", _INFO), Event.PIN_APPROVED: (8, "Enable", _INFO),
                        Event.PIN_CHANGED: (3, "Update", _HIGH), Event.PIN_REVOKED: (9, "Disable", _LOW),
                        Event.PACKAGE_INTAKE: (1, "Create", _INFO), Event.PACKAGE_UPDATED: (3, "Update", _INFO),
                        Event.AUTH_AUTHORIZED: (1, "Create", _INFO), Event.AUTH_REFRESHED: (3, "Update", _INFO)}


def _entity_management(r: Record, raw: bytes, origin: str) -> dict[str, Any]:
    activity_id, name, severity = _PIN_ACTIVITY[r.event]
    event = _base(r, raw, origin, class_uid=3004, activity_id=activity_id, activity_name=name,
                  severity_id=severity, decided=False)
    kind = "package" if r.package is not None else "oauth grant" if r.grant is not None else \
        f"pinned {r.method or 'definition'}"
    entity: dict[str, Any] = {"name": r.target or r.method or "", "type": kind}
    if r.target_digest:
        entity["uid"] = r.target_digest
    data = {k: v for k, v in (("server_name", r.server_name), ("previous_digest", r.previous_digest)) if v}
    if data:
        entity["data"] = data
    event["entity"] = entity
    if r.consent is not None:
        event["actor"] = {"app_name": f"warden ({r.consent.value})"}
    if r.reason:
        event["comment"] = r.reason
    return event


_APP_ACTIVITY: Final = {Event.SERVER_LAUNCHED: (3, "Start"), Event.SERVER_EXITED: (4, "Stop"),
                        Event.SERVER_REFUSED: (3, "Start"), Event.POLICY_LOADED: (_OTHER, "Policy Load"),
                        Event.CONFIG_RELOADED: (_OTHER, "Config Reload")}


def _application_lifecycle(r: Record, raw: bytes, origin: str) -> dict[str, Any]:
    activity_id, name = _APP_ACTIVITY[r.event]
    refused = r.event is Event.SERVER_REFUSED or (r.event is Event.CONFIG_RELOADED and r.error is not None)
    event = _base(r, raw, origin, class_uid=6002, activity_id=activity_id, activity_name=name,
                  severity_id=_MEDIUM if refused else _INFO, decided=refused or r.event is Event.POLICY_LOADED)
    app: dict[str, Any] = {"name": r.server_name or "warden"}
    if r.server_id:
        app["uid"] = r.server_id
    if r.target:
        app["path"] = r.target
    event["app"] = app
    if refused:
        event["status_id"], event["status"] = 2, "Failure"
        _security_control(event, r, denied=True)
    elif r.event is Event.POLICY_LOADED:
        _security_control(event, r, denied=False)
    if r.error:
        event["status_detail"] = r.error
    if r.exit_code is not None or r.signal is not None:
        event.setdefault("unmapped", {}).update({k: v for k, v in (("exit_code", r.exit_code),
                                                                   ("signal", r.signal)) if v is not None})
    return event


_LOG_ACTIVITY: Final = {Event.AUDIT_OPENED: (6, "Start"), Event.AUDIT_CLOSED: (7, "Stop"),
                        Event.AUDIT_RECOVERED: (_OTHER, "Recover"), Event.AUDIT_PAUSED: (10, "Disable"),
                        Event.AUDIT_RESUMED: (9, "Enable")}


def _event_log_activity(r: Record, raw: bytes, origin: str) -> dict[str, Any]:
    activity_id, name = _LOG_ACTIVITY[r.event]
    severity = {Event.AUDIT_RECOVERED: _MEDIUM, Event.AUDIT_PAUSED: _HIGH}.get(r.event, _INFO)
    event = _base(r, raw, origin, class_uid=1008, activity_id=activity_id, activity_name=name,
                  severity_id=severity, decided=False)
    event["log_name"] = origin
    event["log_provider"] = "warden"
    if r.reason:
        event["status_detail"] = r.reason
    if r.recovered is not None:
        event["status_detail"] = r.recovered.reason
        event.setdefault("unmapped", {}).update(anchor_size=r.recovered.anchor_size, size=r.recovered.size,
                                                truncated_bytes=r.recovered.truncated_bytes)
    return event


def _detection_finding(r: Record, raw: bytes, origin: str) -> dict[str, Any]:
    event = _base(r, raw, origin, class_uid=2004, activity_id=1, activity_name="Create", severity_id=_HIGH,
                  decided=False)
    info: dict[str, Any] = {"uid": f"{origin}/{r.index}", "title": "sandbox violation",
                            "types": ["sandbox violation"]}
    if r.violation:
        info["desc"] = r.violation
    event["finding_info"] = info
    if r.server_name:
        event["resources"] = [{"name": r.server_name, "type": "MCP server",
                               **({"uid": r.server_id} if r.server_id else {})}]
    return event


def _network_activity(r: Record, raw: bytes, origin: str) -> dict[str, Any]:
    """``egress.decided`` (Open, or Refuse when denied) and ``egress.closed`` (Close, with the bytes each way):
    OCSF Network Activity, the server's sandbox as the source, the destination as the proxy resolved it."""
    closed = r.event is Event.EGRESS_CLOSED
    denied = r.decision is Decision.DENY
    activity_id, name = (2, "Close") if closed else (5, "Refuse") if denied else (1, "Open")
    event = _base(r, raw, origin, class_uid=4001, activity_id=activity_id, activity_name=name,
                  severity_id=_MEDIUM if denied else _INFO, decided=not closed)
    if not closed:
        _security_control(event, r, denied=denied)
    event["src_endpoint"] = {"name": r.server_name or "", "type": "MCP server sandbox"}
    event["connection_info"] = {"direction_id": 2, "protocol_name": "tcp"}  # outbound
    if r.egress is not None:
        destination: dict[str, Any] = {"hostname": r.egress.host, "port": r.egress.port}
        if r.egress.address:
            destination["ip"] = r.egress.address
        event["dst_endpoint"] = destination
        if closed:
            sent, received = r.egress.sent or 0, r.egress.received or 0
            event["traffic"] = {"bytes_out": sent, "bytes_in": received, "bytes": sent + received}
    return event


def _base_event(r: Record, raw: bytes, origin: str) -> dict[str, Any]:
    """OCSF Base Event (class 0, activity Other) for a record kind added after this table: still valid OCSF,
    with everything in ``raw_data``, until the kind is given its class here (a test fails until it is)."""
    return _base(r, raw, origin, class_uid=0, activity_id=_OTHER, activity_name=r.event.value, severity_id=_INFO,
                 decided=False)


_OCSF: Final[dict[Event, Callable[[Record, bytes, str], dict[str, Any]]]] = {
    Event.CALL_DECIDED: _api_activity, Event.CALL_OUTCOME: _api_activity,
    **dict.fromkeys((Event.PIN_CREATED, Event.PIN_APPROVED, Event.PIN_CHANGED, Event.PIN_REVOKED,
                     Event.PACKAGE_INTAKE, Event.PACKAGE_UPDATED, Event.AUTH_AUTHORIZED, Event.AUTH_REFRESHED),
                    _entity_management),
    **dict.fromkeys((Event.SERVER_LAUNCHED, Event.SERVER_EXITED, Event.SERVER_REFUSED, Event.POLICY_LOADED,
                     Event.CONFIG_RELOADED), _application_lifecycle),
    **dict.fromkeys((Event.AUDIT_OPENED, Event.AUDIT_CLOSED, Event.AUDIT_RECOVERED, Event.AUDIT_PAUSED,
                     Event.AUDIT_RESUMED), _event_log_activity),
    Event.SANDBOX_VIOLATION: _detection_finding,
    Event.EGRESS_DECIDED: _network_activity, Event.EGRESS_CLOSED: _network_activity,
}


def ocsf_event(r: Record, raw: bytes, origin: str) -> dict[str, Any]:
    """The OCSF 1.6 event for one record (see the module docstring for the class of each kind)."""
    return _OCSF.get(r.event, _base_event)(r, raw, origin)


def export_line(fmt: str, r: Record, raw: bytes, origin: str) -> bytes:
    """One output line (without its newline) in ``fmt``: ``jsonl`` is the stored bytes themselves."""
    if fmt == "jsonl":
        return raw
    if fmt == "timesketch":
        return _ENCODE(timesketch_event(r, raw, origin))
    if fmt == "ocsf":
        return _ENCODE(ocsf_event(r, raw, origin))
    raise ValueError(f"unknown export format {fmt!r}")
