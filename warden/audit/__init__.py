"""The append-only, tamper-evident audit log: records, RFC 6962 Merkle tree, signed checkpoints, verification.

How the gateway uses it (write-ahead: await the record *before* forwarding; the outcome goes in after)::

    from warden import audit

    async with audit.open_audit_log(state_dir) as log:        # one per process; share it between tasks;
        ...                                                   # redacts with the state dir's secrets registry
        ...
        decided = await log.append(audit.Record(              # returns once durable; raises -> refuse the call
            event=audit.Event.CALL_DECIDED, method="tools/call",
            server_name=name, server_id=identity_digest,
            target=tool_name, target_digest=pinned_digest,
            policy_digest=policy_digest, rule=decision.rule,
            decision=audit.Decision.ALLOW, consent=audit.Consent.POLICY,
            request_digest=audit.digest(request_wire_bytes),
            arguments=audit.Arguments.capture(params.get("arguments"), audit.Detail.HASH),
            sandbox_digest=profile_digest))
        ... forward, get the result ...
        log.append_later(audit.Record(                        # nothing waits on it: the next append carries it
            event=audit.Event.CALL_OUTCOME, method="tools/call", decision_index=decided,
            outcome=audit.Outcome.OK, result_digest=audit.digest(result_wire_bytes),
            result_size=len(result_wire_bytes)))

Promises:

* ``append`` returns the record's index only after an ``fdatasync`` covered it. Concurrent appends share one
  ``fdatasync`` (group commit); the flock, writes and syncs run in a worker thread, never on the event loop.
  ``append_then`` is ``append`` for a caller that must not wait: a continuation gets the index (or the error).
  ``append_later`` queues a record nothing waits on; it is durable within ``LATER_WITHIN`` seconds.
* Any write or fsync error fails the log for good: that ``append`` and every later one raise
  :class:`AuditLogFailed` (an ``AuditError``). Refuse the action when ``append`` raises; recovery on the next
  start re-reads the disk. A malformed record raises :class:`InvalidRecord` (also an ``AuditError``) without
  failing the log.
* Several ``warden`` processes may share a state directory: they append to one log with one consistent tree
  (an flock per batch; each batch first catches up on what others appended, and rolls forward what a crashed
  writer left).
* Records are canonical JSON (RFC 8785), at most 65,535 bytes: a larger one loses its argument values (digest
  kept, ``arguments.oversize``), then oversize free text is replaced by its length and digest (``oversize``);
  nothing is cut silently. Secrets are redacted at every detail level: every string of every record, whichever
  process writes it, has the values of the state directory's secrets registry (``warden.secrets``) cut out before
  anything is shortened.
* Checkpoints (C2SP tlog-checkpoint, Ed25519) are published at most every ``checkpoint_interval`` seconds while
  records flow and when the log closes; every one is kept in ``checkpoints.log``; a checkpoint inconsistent with
  the previous one is never signed. ``await log.checkpoint()`` publishes one now (e.g. to hand to a witness).

Verification is separate from writing: :func:`verify_log` is pure (bytes in, :class:`VerifiedLog` or one
:class:`~warden.errors.VerificationError` out). ``warden audit`` (``warden/cli/audit.py``) drives it.
Format and threat model: ``audit/FORMAT.md``.
"""

from warden.audit._checkpoint import (
    Checkpoint,
    SignedCheckpoint,
    TlogProof,
    format_tlog_proof,
    open_checkpoint,
    parse_tlog_proof,
    verify_tlog_proof,
)
from warden.audit._errors import AuditLogFailed, AuditUnavailable, ForkEvidence
from warden.audit._export import FORMATS, export_line
from warden.audit._files import KEY_FILE
from warden.audit._log import LATER_WITHIN, AuditLog, AuditLogStatistics, open_audit_log
from warden.audit._merkle import HASH_SIZE, ProofError
from warden.audit._note import CosignatureVerifier, Ed25519Verifier, NoteError, parse_vkey
from warden.audit._reader import LogFollower, LogReader, RawRecord
from warden.audit._records import (
    MAX_RECORD_BYTES,
    MAX_REDACTIONS,
    RECORD_VERSION,
    Arguments,
    Consent,
    Decision,
    Detail,
    Egress,
    Event,
    FilledRecord,
    Grant,
    InvalidRecord,
    Outcome,
    Package,
    Record,
    RecordTemplate,
    Recovery,
    Redaction,
    bounded_text,
    decode_record,
    digest,
    redact_secrets,
)
from warden.audit._report import ReportOptions, write_report
from warden.audit._reserve import ENTRIES_RESERVE, fallocate_supported
from warden.audit._store import Store, format_time
from warden.audit._tiles import write_tiles
from warden.audit._verify import CheckpointSource, VerifiedLog, verify_log
from warden.audit._witness import (
    Cosigned,
    Witness,
    WitnessClient,
    cosign_in_background,
    cosign_latest,
    load_witnesses,
    read_witnessed,
    rfc3339_utc,
    save_witnesses,
    summarize_witnesses,
    witness_verdict,
    witnessed_sources,
)
from warden.canonical import CanonicalizationError, canonical_json

__all__ = [
    "ENTRIES_RESERVE",
    "FORMATS",
    "HASH_SIZE",
    "KEY_FILE",
    "LATER_WITHIN",
    "MAX_RECORD_BYTES",
    "MAX_REDACTIONS",
    "RECORD_VERSION",
    "Arguments",
    "AuditLog",
    "AuditLogFailed",
    "AuditLogStatistics",
    "AuditUnavailable",
    "CanonicalizationError",
    "Checkpoint",
    "CheckpointSource",
    "Consent",
    "CosignatureVerifier",
    "Cosigned",
    "Decision",
    "Detail",
    "Ed25519Verifier",
    "Egress",
    "Event",
    "FilledRecord",
    "ForkEvidence",
    "Grant",
    "InvalidRecord",
    "LogFollower",
    "LogReader",
    "NoteError",
    "Outcome",
    "Package",
    "ProofError",
    "RawRecord",
    "Record",
    "RecordTemplate",
    "Recovery",
    "Redaction",
    "ReportOptions",
    "SignedCheckpoint",
    "Store",
    "TlogProof",
    "VerifiedLog",
    "Witness",
    "WitnessClient",
    "bounded_text",
    "canonical_json",
    "cosign_in_background",
    "cosign_latest",
    "decode_record",
    "digest",
    "export_line",
    "fallocate_supported",
    "format_time",
    "format_tlog_proof",
    "load_witnesses",
    "open_audit_log",
    "open_checkpoint",
    "parse_tlog_proof",
    "parse_vkey",
    "read_witnessed",
    "redact_secrets",
    "rfc3339_utc",
    "save_witnesses",
    "summarize_witnesses",
    "verify_log",
    "verify_tlog_proof",
    "witness_verdict",
    "witnessed_sources",
    "write_report",
    "write_tiles",
]
