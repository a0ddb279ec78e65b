"""The instructions quarantine is decide()'s: the instructions' pin state is a fact like any other, and while new or
changed instructions wait for approval nothing an approved server offers is listed or forwarded. Plain facts in, a
decision out; the gateway's side (hosts see nothing, calls refused) is proven in tests/e2e/test_pins_through_warden."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.policy.helpers import server
from warden.policy import (
    Decision,
    Effect,
    Facts,
    ListEntryFacts,
    PinState,
    PromptGetFacts,
    ResourceReadFacts,
    ServerPolicy,
    Source,
    ToolCallFacts,
    decide,
)

A = PinState.APPROVED
PINS_RULE = Source("builtin", None, None, "pins")
HINT = "review them: warden pins diff s --kind instructions; then approve: warden pins approve s --kind instructions"

Build = Callable[[ServerPolicy, PinState, PinState, PinState], Facts]
"""Facts of one kind: (policy, the entry's pin, the server's pin, the instructions' pin) -> facts."""

KINDS: dict[str, Build] = {
    "list tool": lambda sp, pin, srv, ins: ListEntryFacts(sp, "tool", "add", pin, srv, instructions_pin=ins),
    "list prompt": lambda sp, pin, srv, ins: ListEntryFacts(sp, "prompt", "greet", pin, srv, instructions_pin=ins),
    "list resource": lambda sp, pin, srv, ins: ListEntryFacts(sp, "resource", "mem://a", pin, srv,
                                                              instructions_pin=ins),
    "list template": lambda sp, pin, srv, ins: ListEntryFacts(sp, "resource_template", "mem://{x}", pin, srv,
                                                              instructions_pin=ins),
    "tools/call": lambda sp, pin, srv, ins: ToolCallFacts(sp, "add", pin, srv, {}, instructions_pin=ins),
    "prompts/get": lambda sp, pin, srv, ins: PromptGetFacts(sp, "greet", pin, srv, instructions_pin=ins),
    "resources/read": lambda sp, pin, srv, ins: ResourceReadFacts(sp, "mem://a", pin, srv, instructions_pin=ins),
}


@pytest.fixture(scope="module")
def sp(tmp_path_factory: pytest.TempPathFactory) -> ServerPolicy:
    return server(tmp_path_factory.mktemp("quarantine"))


def is_quarantine(decision: Decision) -> bool:
    return decision.effect is Effect.DENY and decision.rule == PINS_RULE and "its instructions" in decision.reason


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("state", "what"), [(PinState.CHANGED, "changed since they were approved"),
                                             (PinState.PENDING, "are new and not approved"),
                                             (PinState.UNKNOWN, "are new and not approved"),
                                             (PinState.REVOKED, "were revoked")])
def test_unapproved_instructions_hold_everything_an_approved_server_offers(sp: ServerPolicy, kind: str,
                                                                           state: PinState, what: str) -> None:
    decision = decide(KINDS[kind](sp, A, A, state))
    assert decision == Decision(Effect.DENY, f"server 's': its instructions {what}; nothing it offers is usable "
                                             "until they are approved", PINS_RULE, hint=HINT)
    assert decide(KINDS[kind](sp, A, A, A)).allowed  # the same entry, its instructions approved


@pytest.mark.parametrize("kind", KINDS)
def test_an_unapproved_server_is_refused_for_itself_not_its_instructions(sp: ServerPolicy, kind: str) -> None:
    decision = decide(KINDS[kind](sp, A, PinState.CHANGED, PinState.CHANGED))
    assert decision.effect is Effect.DENY
    assert "changed its launch manifest" in decision.reason


def test_a_request_that_can_ask_in_band_asks_for_the_instructions_first(sp: ServerPolicy) -> None:
    """A call, prompt or read that can ask a human in-band is asked about the waiting instructions (the guard's
    question carries them), even when its own entry is approved: before, such a request was decided on its own
    pins, so an approved tool stayed callable while the lists it came from hid it. Revoked instructions, or a
    policy that denies what is new or changed, are never asked about. A list entry is never asked about, so the
    quarantine holds it whatever the channel, and an out-of-band channel (a webhook, which cannot approve pins)
    does not lift it."""
    changed = PinState.CHANGED
    for facts in (ToolCallFacts(sp, "add", A, A, {}, consent_channel=True, instructions_pin=changed),
                  PromptGetFacts(sp, "greet", A, A, True, instructions_pin=changed),
                  ResourceReadFacts(sp, "mem://a", A, A, True, instructions_pin=changed)):
        assert decide(facts) == Decision(Effect.ASK, "server 's': its instructions changed since they were approved",
                                         sp.on_changed.source, hint=HINT)
    assert is_quarantine(decide(ToolCallFacts(sp, "add", A, A, {}, consent_channel=True,
                                              instructions_pin=PinState.REVOKED)))
    assert is_quarantine(decide(ListEntryFacts(sp, "tool", "add", A, A, True, instructions_pin=changed)))
    assert is_quarantine(decide(ToolCallFacts(sp, "add", A, A, {}, approval_channel=True,
                                              instructions_pin=changed)))


def test_the_instructions_own_entry_is_decided_on_its_pin(sp: ServerPolicy) -> None:
    assert decide(ListEntryFacts(sp, "instructions", "", A, A, instructions_pin=PinState.CHANGED)).allowed
    assert decide(ListEntryFacts(sp, "server", "", A, A, instructions_pin=PinState.CHANGED)).allowed


pin_states = st.sampled_from(PinState)


@given(instructions=pin_states, server_pin=pin_states, entry_pin=pin_states, kind=st.sampled_from(sorted(KINDS)))
def test_the_quarantine_is_a_deny_iff_instructions_wait_on_an_approved_server(
        sp: ServerPolicy, instructions: PinState, server_pin: PinState, entry_pin: PinState, kind: str) -> None:
    """Any instructions pin state x server pin state x kind: the instructions' DENY is decided exactly when the
    instructions are not approved while the server is, whatever the entry's own pin; otherwise the fact changes
    nothing (the decision is the one made with approved instructions). With the entry approved and allowed: DENY
    iff the instructions are not approved while the server is, or the server is not approved itself."""
    build = KINDS[kind]
    decision = decide(build(sp, entry_pin, server_pin, instructions))
    held = instructions is not A and server_pin is A
    assert is_quarantine(decision) is held
    if not held:
        assert decision == decide(build(sp, entry_pin, server_pin, A))
    approved_entry = decide(build(sp, A, server_pin, instructions))
    assert (approved_entry.effect is Effect.DENY) is (held or server_pin is not A)
