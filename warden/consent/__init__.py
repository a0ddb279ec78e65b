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
* :func:`review` ``(store, server, prompter)`` — the interactive terminal walk.
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
from warden.consent._terminal import Prompter, ReviewSummary, describe_entry, review

__all__ = [
    "CallConfirmation",
    "PinConsent",
    "Prompter",
    "ReviewSummary",
    "build_call_confirmation",
    "build_pin_consent",
    "describe_entry",
    "read_call_confirmation",
    "read_pin_consent",
    "refusal",
    "review",
]
