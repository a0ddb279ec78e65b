"""The guard's decision cache (issue 13 item 4): a call decided on its name alone is decided once per state of the
pin store and of what warden listed, and is exactly as strict as deciding each time — an approval or a revocation
made by another process counts on the very next call, watched or not, and nothing that depends on arguments is
ever taken from the cache."""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path

import msgspec
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.policy.helpers import server, warden
from warden.gateway.guard import Guard
from warden.gateway.pinwatch import watch_file
from warden.policy import Effect, PinStore, launch_manifest

TOOLS = [{"name": "echo", "inputSchema": {"type": "object"}}, {"name": "write", "inputSchema": {"type": "object"}}]
ARGUMENT_RULE = """
[[servers.s.arguments]]
tool = "write"
argument = "path"
enum = ["/tmp/ok"]
"""


async def _guard(tmp: Path, user: str = "") -> Guard:
    policy = server(tmp, "s", ("srv",), user=f'[defaults]\non_new = "tofu"\n{user}')
    guard = Guard(policy=policy, store=PinStore(tmp / "state"), manifest=launch_manifest(policy.argv, (), {}))
    await guard.observe_identity()
    await guard.observe_instructions(None)
    await guard.observe_list("tools/list", TOOLS)
    return guard


def _pins(tmp: Path, *args: str) -> None:
    result = warden("--state-dir", str(tmp / "state"), "pins", *args, "--yes")
    assert result.returncode == 0, result.stderr


def _effect(guard: Guard, tool: str = "echo", arguments: dict[str, object] | None = None) -> Effect:
    return guard.decide_call(tool, arguments or {}, channel=False).effect


async def test_a_revocation_and_an_approval_by_another_process_count_on_the_very_next_call(tmp_path: Path) -> None:
    """Unwatched, the store is looked at on each decision: a change made by the ``warden pins`` command, another
    process, invalidates the cached decision at once."""
    guard = await _guard(tmp_path)
    assert _effect(guard) is Effect.ALLOW
    cached = guard.decide_call("echo", {}, channel=False)
    assert guard.decide_call("echo", {"other": 1}, channel=False) is cached  # decided once, on the name alone
    _pins(tmp_path, "revoke", "s", "echo")
    refused = guard.decide_call("echo", {}, channel=False)
    assert refused.effect is Effect.DENY
    assert "revoked" in refused.reason
    _pins(tmp_path, "approve", "s", "echo")
    assert _effect(guard) is Effect.ALLOW


async def test_a_watched_store_sees_a_revocation_by_another_process_before_the_next_call(tmp_path: Path) -> None:
    """Watched (no ``stat`` per decision), the watch re-reads the store when the other process replaces the file,
    and the next decision is made on what it read: the cached one is not used again."""
    guard = await _guard(tmp_path)
    seen = trio.Event()

    async def changed() -> None:
        guard.pins_changed()
        seen.set()

    async with trio.open_nursery() as nursery:
        guard.watched(await nursery.start(watch_file, guard.store.path, changed))
        assert _effect(guard) is Effect.ALLOW
        await trio.to_thread.run_sync(_pins, tmp_path, "revoke", "s", "echo")
        with trio.fail_after(10):
            await seen.wait()
        assert _effect(guard) is Effect.DENY
        nursery.cancel_scope.cancel()


async def test_a_new_list_invalidates_cached_decisions(tmp_path: Path) -> None:
    """A changed definition is quarantined when the list is observed: the call is refused from then on."""
    guard = await _guard(tmp_path)
    assert _effect(guard) is Effect.ALLOW
    await guard.observe_list("tools/list", [{**TOOLS[0], "description": "now different"}, TOOLS[1]])
    assert _effect(guard) is Effect.DENY


async def test_argument_rules_credentials_and_confirmations_are_decided_every_time(tmp_path: Path) -> None:
    """A tool an argument rule names is never served from the cache; nor is a call whose arguments hold a
    credential."""
    guard = await _guard(tmp_path, ARGUMENT_RULE)
    assert _effect(guard, "write", {"path": "/tmp/ok"}) is Effect.ALLOW
    assert _effect(guard, "write", {"path": "/etc/passwd"}) is Effect.DENY
    assert _effect(guard, "write", {"path": "/tmp/ok"}) is Effect.ALLOW
    assert _effect(guard, "echo", {"text": "hi"}) is Effect.ALLOW
    assert _effect(guard, "echo", {"text": "key AKIAIOSFODNN7EXAMPLE"}) is Effect.DENY
    assert _effect(guard, "echo", {"text": "hi"}) is Effect.ALLOW


SECRET_SHAPES = ["AKIAABCDEFGHIJKLMNOP", "ghp_" + "a" * 36, "sk-ant-" + "b" * 24, "xoxb-1234567890-abc",
                 "eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.sig", "-----BEGIN PRIVATE KEY-----abc"]
_texts = st.one_of(st.text(max_size=30), st.sampled_from(SECRET_SHAPES),
                   st.builds(lambda a, s, b: f"{a}{s}{b}", st.text(max_size=5), st.sampled_from(SECRET_SHAPES),
                             st.text(max_size=5)))
_values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), _texts),
                       lambda inner: st.one_of(st.lists(inner, max_size=4),
                                               st.dictionaries(_texts, inner, max_size=4)), max_leaves=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(_texts, _values, min_size=1, max_size=4), st.sampled_from(["plain", "escaped", "slashes"]))
def test_arguments_screened_with_their_wire_bytes_find_exactly_what_a_full_walk_finds(
        tmp_path: Path, arguments: dict[str, object], form: str) -> None:
    """``Guard.screen_arguments(..., raw=)`` skips the string-by-string walk only where no detector can match
    the wire bytes (the check a result goes through first): whatever the arguments and however the host spelled
    them (escapes, ``\\/``), it finds and redacts exactly what the full walk does."""
    encoded = msgspec.json.encode({"name": "echo", "arguments": arguments})
    raw = {"plain": encoded, "escaped": json.dumps({"name": "echo", "arguments": arguments}).encode(),
           "slashes": encoded.replace(b"/", b"\\/")}[form]
    guard = trio.run(_guard, tmp_path / secrets.token_hex(4))
    full = guard.screen_arguments("echo", arguments)
    fresh = dict(arguments)  # another object: the guard's last answer is not reused
    fast = guard.screen_arguments("echo", fresh, raw=raw)
    assert [(f.rule, f.digest, f.where) for f in fast[1]] == [(f.rule, f.digest, f.where) for f in full[1]]
    assert fast[0] == full[0]


async def test_a_hostile_resource_template_cannot_stall_the_gateway_with_backtracking(tmp_path: Path) -> None:
    """A server lists the template ``xa{+v}a{+v}...b``; a ``resources/read`` of ``xaaa...a`` (almost fits) was
    matched by Python's backtracking ``re``, in time exponential in the operators: 0.9 s at 30 characters, 35 s at
    40, all of it on the gateway's one trio thread. Matched by RE2 now, linear in the URI."""
    guard = await _guard(tmp_path)
    hostile = "x" + "a{+v}" * 12 + "b"
    await guard.observe_list("resources/templates/list", [{"uriTemplate": hostile, "name": "h"},
                                                          {"uriTemplate": "mem://notes/{id}", "name": "n"}])
    for n in (40, 4000):  # the first one alone took 35 s before
        started = time.monotonic()
        assert guard.decide_read("x" + "a" * n, channel=False).effect is Effect.DENY
        assert time.monotonic() - started < 10  # a bound on a hang, not a speed measurement (linear: microseconds)
    assert guard.decide_read("mem://notes/1", channel=False).effect is Effect.ALLOW
    assert guard.decide_read("mem://notes/1/2", channel=False).effect is Effect.DENY  # {id} is one segment
    assert guard.decide_read("x" + "a" * 12 + "b", channel=False).effect is Effect.ALLOW  # it still fits itself
