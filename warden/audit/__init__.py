"""The append-only, tamper-evident audit log: records, RFC 6962 Merkle tree, signed checkpoints, verification.

How the gateway uses it (write-ahead: await the record *before* forwarding; the outcome goes in after)::

    from warden import audit

    async with audit.open_audit_log(state_dir) as log:        # one per process; share it between tasks
        log.add_secrets(server_env_secrets)                   # cut out of every later record
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
  nothing is cut silently. Secrets are redacted at every detail level.
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
from warden.audit._log import LATER_WITHIN, AuditLog, AuditLogStatistics, open_audit_log
from warden.audit._merkle import ProofError
from warden.audit._note import CosignatureVerifier, Ed25519Verifier, NoteError, parse_vkey
from warden.audit._records import (
    MAX_RECORD_BYTES,
    RECORD_VERSION,
    Arguments,
    Consent,
    Decision,
    Detail,
    Event,
    InvalidRecord,
    Outcome,
    Record,
    Recovery,
    bounded_text,
    decode_record,
    digest,
    redact_secrets,
)
from warden.audit._verify import CheckpointSource, VerifiedLog, verify_log
from warden.canonical import CanonicalizationError, canonical_json

__all__ = [
    "LATER_WITHIN",
    "MAX_RECORD_BYTES",
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
    "Decision",
    "Detail",
    "Ed25519Verifier",
    "Event",
    "ForkEvidence",
    "InvalidRecord",
    "NoteError",
    "Outcome",
    "ProofError",
    "Record",
    "Recovery",
    "SignedCheckpoint",
    "TlogProof",
    "VerifiedLog",
    "bounded_text",
    "canonical_json",
    "decode_record",
    "digest",
    "format_tlog_proof",
    "open_audit_log",
    "open_checkpoint",
    "parse_tlog_proof",
    "parse_vkey",
    "redact_secrets",
    "verify_log",
    "verify_tlog_proof",
]
