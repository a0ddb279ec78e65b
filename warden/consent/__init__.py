"""Asking a human: terminal review, in-band elicitation to the host, refusal when nobody can be asked.

Public API (the gateway wires the in-band half; ``warden pins review`` uses the terminal half):

* :func:`build_pin_consent` ``(server, entries) -> PinConsent`` — ``elicitation/create`` params (form mode) naming
  warden and the server, showing each definition, digest and findings; send only when the host declared form
  elicitation. :func:`read_pin_consent` ``(request, result)`` gives the exact ``(kind, key, digest)`` items to pass
  to ``PinStore.approve_exact(server, items, by="elicitation")``, or None.
* :func:`build_call_confirmation` ``(server, tool, arguments, tool_digest=...) -> CallConfirmation`` and
  :func:`read_call_confirmation` ``(request, result) -> str | None`` — the confirmed arguments digest, to put in
  ``ToolCallFacts.confirmed_arguments_digest`` before deciding again.
* :func:`refusal` ``(decision) -> PolicyError`` — the error (reason, rule, approve command) when no channel exists.
* :class:`WebhookApprovals` ``(url, key).ask(ApprovalRequest) -> ApprovalVerdict`` — a call to confirm when no
  one can be asked in-band: a signed, expiring webhook exchange that fails closed (see ``_webhook.py``).
* :func:`review` ``(store, server, prompter)`` — the interactive terminal walk, one screen per server;
  :func:`describe_server`, :func:`describe_entry` and :func:`describe_launch` give its lines (already escaped);
  :func:`redaction_note` is the line that says a definition shown was stored redacted.
"""

from warden.consent._inband import (
    CallConfirmation,
    PinConsent,
    build_call_confirmation,
    build_pin_consent,
    read_call_confirmation,
    read_pin_consent,
    refusal,
)
from warden.consent._terminal import (
    Prompter,
    ReviewSummary,
    describe_entry,
    describe_launch,
    describe_server,
    entry_label,
    redaction_note,
    review,
)
from warden.consent._webhook import (
    ANSWER_DOMAIN,
    REQUEST_DOMAIN,
    ApprovalRequest,
    ApprovalVerdict,
    WebhookApprovals,
    sign_approval,
)

__all__ = [
    "ANSWER_DOMAIN",
    "REQUEST_DOMAIN",
    "ApprovalRequest",
    "ApprovalVerdict",
    "CallConfirmation",
    "PinConsent",
    "Prompter",
    "ReviewSummary",
    "WebhookApprovals",
    "build_call_confirmation",
    "build_pin_consent",
    "describe_entry",
    "describe_launch",
    "describe_server",
    "entry_label",
    "read_call_confirmation",
    "read_pin_consent",
    "redaction_note",
    "refusal",
    "review",
    "sign_approval",
]
