"""The audit log's errors, all under ``warden.errors.AuditError``.

::

    AuditError
    ├── AuditLogFailed       a write or fsync failed: the log refuses every later append until warden restarts
    ├── AuditDiskFull        the disk is full: the log paused (recorded it) and refuses appends until space returns
    ├── AuditUnavailable     the log cannot be opened (missing key, foreign files, another format)
    ├── InvalidRecord        (warden.audit._records) a record is malformed; the action is refused
    └── VerificationError
        ├── ProofError       (_merkle) a Merkle proof or hash fails
        ├── NoteError        (_note) a signed note, key or signature fails
        └── ForkEvidence     two signed checkpoints that cannot both be true, with the proof
"""

from __future__ import annotations

from warden.errors import AuditError, VerificationError

__all__ = ["AuditDiskFull", "AuditLogFailed", "AuditUnavailable", "ForkEvidence"]


class AuditLogFailed(AuditError):
    """The log hit a write or fsync error (or found damage while writing) and is now permanently failed.

    After a failed fsync the kernel may already have dropped the dirty pages, so a retry that "succeeds" proves
    nothing (PostgreSQL's fsyncgate). The only safe continuation is a restart, whose recovery re-reads the disk.
    """


class AuditDiskFull(AuditError):
    """The disk holding the log is full: the log wrote ``audit.paused`` into its reserve and refuses every batch
    (the action is refused) until there is room again; then it writes ``audit.resumed`` and goes on. Not a failure
    of the log: nothing was written, nothing acknowledged is lost (see ``warden.audit._reserve``)."""


class AuditUnavailable(AuditError):
    """The audit log cannot be opened; the message says which file is wrong and the hint what to do."""


class ForkEvidence(VerificationError):
    """Two checkpoints signed by the log's key that describe diverging trees: proof the log was rewritten.

    ``evidence`` is self-contained text (both signed notes and the consistency proof that fails) to hand to
    whoever investigates.
    """

    def __init__(self, message: str, *, evidence: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.evidence = evidence
