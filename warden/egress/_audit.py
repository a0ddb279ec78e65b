"""Egress decisions as audit records: ``egress.decided`` before a connection is made (write-ahead: the proxy
refuses when it cannot be recorded), ``egress.closed`` with the bytes each way when it ends.

A refusal is also a warning on warden's stderr, the log a host keeps of its server, naming the policy line that
would allow it: the proxy's answer says the same to the server's HTTP client, but clients often put only their own
words in the tool result (mcp-server-fetch: "Failed to fetch robots.txt ... due to a connection issue"), and
without this line a user would find the reason only in the audit log."""

from __future__ import annotations

import logging
import time
from typing import Final, final

from warden import audit
from warden.egress._allow import Verdict
from warden.egress._proxy import EgressDecision, EgressTally, refusal_text
from warden.logs import LineRate

log = logging.getLogger(__name__)

REFUSALS_PER_SECOND: Final = 2.0
"""Refusal warnings one server's connections may write to warden's log a second, after :data:`REFUSAL_BURST`: a
server retrying a refused host in a loop gets a few, not one per attempt (:class:`~warden.logs.LineRate`); the
audit log records every one."""
REFUSAL_BURST: Final = 20.0


@final
class EgressRecorder:
    """Writes one server's egress records to ``log`` (None: ``--unsafe-no-audit``, nothing is written)."""

    def __init__(self, log: audit.AuditLog | None, *, server_name: str, server_id: str | None,
                 policy_digest: str | None) -> None:
        self._log = log
        self._server_name = server_name
        self._server_id = server_id
        self._policy_digest = policy_digest
        self._warnings = LineRate(REFUSALS_PER_SECOND, REFUSAL_BURST)

    def _egress(self, d: EgressDecision, tally: EgressTally | None = None) -> audit.Egress:
        return audit.Egress(host=audit.bounded_text(d.host, 256), port=d.port, address=d.address,
                            sent=None if tally is None else tally.sent,
                            received=None if tally is None else tally.received)

    async def decided(self, decision: EgressDecision) -> int | None:
        held = None if decision.allowed else self._warnings.admit(time.monotonic())
        if held:
            log.warning("%s: (%d more egress refusals not shown; the audit log has each)", self._server_name, held)
        if held is not None:
            log.warning("%s: egress %s", self._server_name,
                        refusal_text(Verdict(False, decision.reason, decision.rule)))
        if self._log is None:
            return None
        return await self._log.append(audit.Record(
            event=audit.Event.EGRESS_DECIDED, server_name=self._server_name, server_id=self._server_id,
            policy_digest=self._policy_digest, method=decision.method or None,
            target=audit.bounded_text(f"{decision.host}:{decision.port}", 2048) if decision.host else None,
            rule=audit.bounded_text(decision.rule, 256),
            decision=audit.Decision.ALLOW if decision.allowed else audit.Decision.DENY,
            consent=audit.Consent.POLICY if decision.allowed else None,
            reason=decision.reason, egress=self._egress(decision)))

    def closed(self, decision: EgressDecision, index: int | None, tally: EgressTally) -> None:
        if self._log is None:
            return
        self._log.append_later(audit.Record(
            event=audit.Event.EGRESS_CLOSED, server_name=self._server_name, server_id=self._server_id,
            method=decision.method or None, decision_index=index,
            target=audit.bounded_text(f"{decision.host}:{decision.port}", 2048),
            outcome=audit.Outcome.OK if tally.error is None else audit.Outcome.FAILED, error=tally.error,
            egress=self._egress(decision, tally)))
