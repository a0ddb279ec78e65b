"""What the gateway writes to the audit log, and when.

Write-ahead: an allowed ``tools/call`` / ``prompts/get`` / ``resources/read`` (or a server question forwarded to a
host) is forwarded only after its ``call.decided`` record is durable; its ``call.outcome`` follows without holding
up the answer (durable with the next decision, or within ``audit.LATER_WITHIN`` seconds). If the log
cannot take the record, :meth:`Recorder.decided` raises and the action is refused — warden never does what it
could not record. Denials, pin events and the server's lifecycle are recorded too; a failure to record one of
those is logged, and the next allowed action is refused (the log stays failed until warden restarts).

The two records of every allowed call are written through templates (:class:`warden.audit.RecordTemplate`), one
per tool, rule and host for decisions and one per method and outcome for outcomes: only the request digest and
arguments, or the decision index and the result's digest and size, are encoded per call. Anything less common (a
content-rule finding, a flow rule's evidence, an error text) builds its record in full.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, final

import msgspec
import trio

from warden import audit
from warden.errors import AuditError
from warden.gateway.link import Caller
from warden.policy import ContentFinding, Decision, Detection, Effect, PinEntry

log = logging.getLogger(__name__)

_PIN_EVENTS: Final = {"new": audit.Event.PIN_CREATED, "changed": audit.Event.PIN_CHANGED,
                      "rejected": audit.Event.PIN_CHANGED, "tofu-approved": audit.Event.PIN_APPROVED,
                      "reverted": audit.Event.PIN_APPROVED}
_CONSENT: Final = {"trust-on-first-use": audit.Consent.TRUST_ON_FIRST_USE, "elicitation": audit.Consent.ELICITATION}
_TARGET_MAX: Final = 2000  # tool and prompt names, resource URIs


def _redactions(found: Sequence[tuple[str, str]]) -> tuple[audit.Redaction, ...]:
    """What content rules cut out, by rule and digest, each once, at most as many as a record holds."""
    unique = list(dict.fromkeys(found))[:audit.MAX_REDACTIONS]
    return tuple(audit.Redaction(rule=rule, digest=digest) for rule, digest in unique)
_TEXT_MAX: Final = 4000  # reasons and errors (a server's error text is the server's to choose)
_RULE_MAX: Final = 256
#: Templates kept per recorder before the cache starts again (only allowed calls make one: pinned tools x rules x
#: hosts, so this is not reached in practice; the bound keeps it so).
_TEMPLATES_MAX: Final = 256
_DECIDED_HOLES: Final = ("request_digest",)
_DECIDED_HOLES_ARGS: Final = ("arguments", "request_digest")
_OUTCOME_HOLES: Final = ("decision_index", "result_digest", "result_size")


@final
class Recorder:
    """The audit log as the gateway of one server sees it. ``log`` None means auditing was switched off with
    ``--unsafe-no-audit`` (warned about at start); every method is then a no-op."""

    def __init__(self, log_: audit.AuditLog | None, *, server: str, server_id: str, policy_digest: str,
                 sandbox_digest: str | None, detail: str, sandbox_notes: Sequence[str] = ()) -> None:
        self._log = log_
        self._server = server
        self._server_id = server_id
        self._policy = policy_digest
        self._sandbox = sandbox_digest
        self._detail = audit.Detail(detail)
        self._sandbox_notes = "; ".join(sandbox_notes) or None  # limits enforced weaker than written
        self._templates: dict[tuple[Any, ...], audit.RecordTemplate] = {}

    def _record(self, event: audit.Event, **fields: Any) -> audit.Record:
        return audit.Record(event=event, server_name=self._server, server_id=self._server_id, **fields)

    def _template(self, key: tuple[Any, ...], record: audit.Record, holes: tuple[str, ...]) -> audit.RecordTemplate:
        template = self._templates.get(key)
        if template is None:
            if len(self._templates) >= _TEMPLATES_MAX:
                self._templates.clear()
            template = self._templates[key] = audit.RecordTemplate(record, holes)
        return template

    async def _append(self, record: audit.Record) -> int | None:
        if self._log is None:
            return None
        return await self._log.append(record)

    async def _append_quietly(self, record: audit.Record) -> None:
        try:
            await self._append(record)
        except AuditError as exc:
            self._could_not_record(record, exc)

    def _could_not_record(self, record: audit.Record, exc: AuditError) -> None:
        log.error("%s: audit: could not record %s: %s", self._server, record.event, exc.message)

    # -- lifecycle ----------------------------------------------------------------------------------------------

    async def policy_loaded(self) -> None:
        await self._append_quietly(self._record(audit.Event.POLICY_LOADED, policy_digest=self._policy))

    async def launched(self, label: str) -> None:
        await self._append_quietly(self._record(audit.Event.SERVER_LAUNCHED, sandbox_digest=self._sandbox,
                                                policy_digest=self._policy,
                                                target=audit.bounded_text(label, _TARGET_MAX),
                                                reason=self._sandbox_notes))

    async def exited(self, reason: str) -> None:
        await self._append_quietly(self._record(audit.Event.SERVER_EXITED, error=audit.bounded_text(reason, _TEXT_MAX)))

    async def refused(self, reason: str) -> None:
        await self._append_quietly(self._record(audit.Event.SERVER_REFUSED, policy_digest=self._policy,
                                                error=audit.bounded_text(reason, _TEXT_MAX)))

    async def pins(self, detections: Sequence[Detection]) -> None:
        for d in detections:
            consent = audit.Consent.TRUST_ON_FIRST_USE if d.event == "tofu-approved" else None
            await self._append_quietly(self._record(
                _PIN_EVENTS[d.event], method=d.kind, target=audit.bounded_text(d.key, _TARGET_MAX),
                target_digest=d.digest,
                previous_digest=d.previous_digest, consent=consent, reason=d.detail or d.event))

    async def approved(self, entries: Sequence[PinEntry]) -> None:
        """Approvals a human gave in-band (through the host's elicitation)."""
        for entry in entries:
            await self._append_quietly(self._record(
                audit.Event.PIN_APPROVED, method=entry.kind, target=audit.bounded_text(entry.key, _TARGET_MAX),
                target_digest=entry.digest,
                consent=audit.Consent.ELICITATION))

    # -- decisions and outcomes ---------------------------------------------------------------------------------

    async def decided(self, *, method: str, target: str, decision: Decision, approval: PinEntry | None,
                      request: bytes | None, caller: Caller, arguments: Mapping[str, Any] | None = None,
                      confirmed: bool = False, findings: Sequence[ContentFinding] = (),
                      consent: audit.Consent | None = None) -> int | None:
        """Record a decision on a request of ``caller``; returns the record's index (to tie the
        outcome to it). ``consent``: how a human confirmed it, when not in-band (the approval webhook).
        ``findings``: what the content rules found in the arguments: recorded by digest, and their values are kept
        out of the recorded arguments at every detail level.

        Raises:
            AuditError: the decision allowed the action but the log could not make it durable: refuse it.
        """
        if self._log is None:
            return None
        record = self._decision(method=method, target=target, decision=decision, approval=approval, request=request,
                                caller=caller, arguments=arguments, confirmed=confirmed, findings=findings,
                                consent=consent)
        if decision.effect is Effect.ALLOW:
            return await self._log.append(record)
        assert isinstance(record, audit.Record), "only an allowed call's record is filled from a template"
        await self._append_quietly(record)
        return None

    def decided_then(self, then: Callable[[int | AuditError], None], *, method: str, target: str,
                     decision: Decision, approval: PinEntry | None, request: bytes, caller: Caller,
                     arguments: Mapping[str, Any] | None, findings: Sequence[ContentFinding]) -> bool:
        """:meth:`decided` for an allowed request, without waiting (the host's reader decides it): ``then`` gets
        the record's index once it is durable, or the error that refused it (:meth:`audit.AuditLog.append_then`),
        and is where the request is forwarded (write-ahead). False: auditing is off, nothing will call ``then``.

        Raises:
            AuditError: the log refused the record at once (it failed earlier, or the record is malformed).
        """
        if self._log is None:
            return False
        self._log.append_then(self._decision(method=method, target=target, decision=decision, approval=approval,
                                             request=request, caller=caller, arguments=arguments,
                                             findings=findings), then)
        return True

    def _decision(self, *, method: str, target: str, decision: Decision, approval: PinEntry | None,
                  request: bytes | None, caller: Caller, arguments: Mapping[str, Any] | None,
                  findings: Sequence[ContentFinding], confirmed: bool = False,
                  consent: audit.Consent | None = None) -> audit.Record | audit.FilledRecord:
        """The ``call.decided`` record of :meth:`decided`: an allowed call's through its template."""
        allowed = decision.effect is Effect.ALLOW
        given, consent = consent, None
        if allowed:
            if given is not None:
                consent = given
            elif confirmed:
                consent = audit.Consent.ELICITATION
            elif approval is not None and approval.approved_by:
                consent = _CONSENT.get(approval.approved_by, audit.Consent.TERMINAL)
            else:
                consent = audit.Consent.POLICY
        target_digest = approval.digest if approval is not None else None
        if allowed and request is not None and not findings and decision.evidence is None:
            key = (method, target, target_digest, decision.rule, decision.reason, consent, caller, arguments is None)
            template = self._templates.get(key) or self._template(
                key, self._decided(method, target, target_digest, decision, consent, caller),
                _DECIDED_HOLES if arguments is None else _DECIDED_HOLES_ARGS)
            if arguments is None:
                return template.fill(request_digest=audit.digest(request))
            return template.fill(request_digest=audit.digest(request),
                                 arguments=audit.Arguments.capture(arguments, self._detail))
        return msgspec.structs.replace(
            self._decided(method, target, target_digest, decision, consent, caller),
            request_digest=audit.digest(request) if request is not None else None,
            arguments=audit.Arguments.capture(arguments, self._detail, secret_values=[f.value for f in findings])
            if arguments is not None else None,
            redactions=_redactions([(f.rule, f.digest) for f in findings]),
            evidence_index=decision.evidence.index if decision.evidence is not None else None)

    def _decided(self, method: str, target: str, target_digest: str | None, decision: Decision,
                 consent: audit.Consent | None, caller: Caller) -> audit.Record:
        """A ``call.decided`` record without what differs from call to call (request, arguments, findings)."""
        return self._record(
            audit.Event.CALL_DECIDED, client=caller.client, principal=caller.principal, method=method,
            target=audit.bounded_text(target, _TARGET_MAX), target_digest=target_digest, policy_digest=self._policy,
            rule=audit.bounded_text(str(decision.rule), _RULE_MAX),
            decision=audit.Decision.ALLOW if decision.effect is Effect.ALLOW else audit.Decision.DENY,
            consent=consent, reason=audit.bounded_text(decision.reason, _TEXT_MAX), sandbox_digest=self._sandbox)

    def outcome(self, index: int | None, *, method: str, result: bytes | None, error: str | None = None,
                outcome: audit.Outcome | None = None, redactions: Sequence[tuple[str, str]] = (),
                target: str | None = None) -> None:
        """Record how an allowed action ended, on the event loop's next pass (:meth:`outcome_after`, for an ending
        that writes no answer: a task's end, a cancellation). ``target``: what ended, when it is not the request
        itself (a call's task: its first outcome is the task's creation, this one its end)."""
        after = self.outcome_after(index, method=method, result=result, error=error, outcome=outcome,
                                   redactions=redactions, target=target)
        if after is not None:
            trio.lowlevel.current_trio_token().run_sync_soon(after)

    def outcome_after(self, index: int | None, *, method: str, result: bytes | None, error: str | None = None,
                      outcome: audit.Outcome | None = None, redactions: Sequence[tuple[str, str]] = (),
                      target: str | None = None) -> Callable[[], None] | None:
        """The outcome record of :meth:`outcome`, to be built and queued by whoever writes the answer once it has
        written it (:class:`~warden.gateway.link.Handled`, :meth:`~warden.gateway.link.Answer.send`): nothing
        waits for it to be durable (the decision was), so its digest and encoding stay out of the host's round
        trip. None: nothing to record (auditing is off, or the action had no decision record)."""
        if index is None or self._log is None:
            return None
        return functools.partial(self._outcome, index, method, result, error, outcome, redactions, target)

    def _outcome(self, index: int, method: str, result: bytes | None, error: str | None,
                 outcome: audit.Outcome | None, redactions: Sequence[tuple[str, str]] = (),
                 target: str | None = None) -> None:
        """The outcome record itself. Runs as a callback (of the event loop, or of the channel that wrote the
        answer), where an exception would end warden or break the channel rather than fail this call: whatever goes
        wrong is logged instead (the decision is already durable)."""
        assert self._log is not None
        kind = outcome or (audit.Outcome.OK if result is not None else audit.Outcome.ERROR)
        try:
            if result is not None and not error and not redactions and target is None:
                key = (method, kind)
                template = self._templates.get(key) or self._template(
                    key, self._record(audit.Event.CALL_OUTCOME, method=method, outcome=kind), _OUTCOME_HOLES)
                self._log.append_later(template.fill(decision_index=index, result_digest=audit.digest(result),
                                                     result_size=len(result)))
                return
            record = self._record(
                audit.Event.CALL_OUTCOME, method=method, decision_index=index, outcome=kind,
                target=audit.bounded_text(target, _TARGET_MAX) if target is not None else None,
                result_digest=audit.digest(result) if result is not None else None,
                result_size=len(result) if result is not None else None,
                error=audit.bounded_text(error, _TEXT_MAX) if error else None,
                redactions=_redactions(redactions))
            self._log.append_later(record)
        except AuditError as exc:
            log.error("%s: audit: could not record the outcome of %s: %s", self._server, method, exc.message)
        except Exception:
            log.exception("%s: audit: could not record the outcome of %s", self._server, method)
