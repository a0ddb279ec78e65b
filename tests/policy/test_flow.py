"""Issue 17 item 1: the flow policy as data -- classification, the pure decision, layering, the taint ledger."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.policy.helpers import server, warden, write
from warden.errors import ConfigError, StateError
from warden.policy import (
    Effect,
    PinState,
    Source,
    TaintLedger,
    TaintMark,
    ToolCallFacts,
    classify,
    clear_session,
    decide,
    explain,
    host_process_session,
    host_session_ended,
    load_policy_file,
    tainted_sessions,
)
from warden.policy.pins import arguments_digest


def builtin(key: str) -> Source:
    return Source("builtin", None, None, key)


FLOW = """
[defaults.flow]
sources = ["fetch", "web__*"]
sinks = ["send_*"]
exempt = ["send_nothing"]
"""
MARK = TaintMark("web", "fetch", 7)


def facts(sp: object, tool: str, *, taint: tuple[TaintMark, ...] = (MARK,), channel: bool = False,
          confirmed: str | None = None, annotations: dict[str, object] | None = None,
          reaches_network: bool = False, approval_channel: bool = False) -> ToolCallFacts:
    role = classify(sp.flow, sp.name, tool, annotations, reaches_network=reaches_network,  # type: ignore[attr-defined]
                    builtin=builtin)
    return ToolCallFacts(sp, tool, PinState.APPROVED, PinState.APPROVED, {"to": "x"},  # type: ignore[arg-type]
                         consent_channel=channel, confirmed_arguments_digest=confirmed, flow_role=role, taint=taint,
                         session="host-abc", approval_channel=approval_channel)


def test_listed_roles_match_tool_names_and_server__tool(tmp_path: Path) -> None:
    sp = server(tmp_path, "web", user=FLOW)
    assert classify(sp.flow, "web", "fetch", None, reaches_network=False, builtin=builtin).source is not None
    role = classify(sp.flow, "web", "anything", None, reaches_network=False, builtin=builtin)
    assert role.source is not None
    assert role.source.key == "defaults.flow.sources[1]"
    other = classify(sp.flow, "mail", "anything", None, reaches_network=False, builtin=builtin)
    assert other.source is None
    assert other.sink is None
    sink = classify(sp.flow, "mail", "send_email", None, reaches_network=False, builtin=builtin).sink
    assert sink is not None
    assert sink.line == 4
    assert sink.file is not None
    assert sink.file.endswith("user.toml")
    exempt = classify(sp.flow, "mail", "send_nothing", None, reaches_network=False, builtin=builtin)
    assert exempt.sink is None


def test_an_exempt_naming_a_server_is_not_matched_by_another_servers_tool_name(tmp_path: Path) -> None:
    """``exempt = ["time__*"]`` means server ``time``'s tools. A hostile server ``evil`` that names its tool
    ``time__post`` must stay a sink (before: the glob was matched against the bare tool name too, so the name the
    server chose made it exempt, and it ran after a source had tainted the session)."""
    sp = server(tmp_path, "evil", user='[defaults.flow]\nsinks = ["*"]\nexempt = ["time__*", "get_time"]\n')
    assert classify(sp.flow, "evil", "time__post", None, reaches_network=True, builtin=builtin).sink is not None
    assert classify(sp.flow, "evil", "post", None, reaches_network=True, builtin=builtin).sink is not None
    assert classify(sp.flow, "time", "now", None, reaches_network=True, builtin=builtin).sink is None
    assert classify(sp.flow, "evil", "get_time", None, reaches_network=True, builtin=builtin).sink is None  # bare


@pytest.mark.parametrize(("hints", "network", "source", "sink"), [
    ({"readOnlyHint": True, "openWorldHint": True}, False, True, False),
    ({"readOnlyHint": True}, True, False, False),            # read-only, open world not said: not a source
    ({"readOnlyHint": False, "openWorldHint": True}, True, False, True),
    ({"readOnlyHint": False, "openWorldHint": True}, False, False, False),  # no network: cannot send out
    ({"openWorldHint": False}, True, False, False),
    (None, True, False, True),                                 # no annotations: spec defaults (write, open world)
])
def test_roles_derived_from_annotations(tmp_path: Path, hints: dict[str, object] | None, network: bool,
                                        source: bool, sink: bool) -> None:
    sp = server(tmp_path, "s", user="")
    role = classify(sp.flow, "s", "t", hints, reaches_network=network, builtin=builtin)
    assert (role.source is not None, role.sink is not None) == (source, sink)
    off = server(tmp_path, "s", user="[defaults.flow]\nannotations = false\n")
    none = classify(off.flow, "s", "t", hints, reaches_network=network, builtin=builtin)
    assert none.source is None
    assert none.sink is None


def test_a_sink_in_a_tainted_session_is_denied_with_the_source_as_evidence(tmp_path: Path) -> None:
    sp = server(tmp_path, "mail", user=FLOW)
    d = decide(facts(sp, "send_email"))
    assert d.effect is Effect.DENY
    assert d.evidence == MARK
    assert "web/fetch (audit record #7)" in d.reason
    assert d.rule.key == "defaults.flow.sinks[0]"
    assert d.hint == "if that content is safe, clear the session's taint in a terminal: warden flow clear host-abc"
    assert decide(facts(sp, "send_email", taint=())).allowed  # a clean session
    assert decide(facts(sp, "fetch")).allowed  # sources are not refused, they taint
    assert decide(facts(sp, "send_email", channel=True)).effect is Effect.DENY  # "deny" does not ask


def test_confirm_mode_asks_a_human_and_binds_the_answer_to_the_arguments(tmp_path: Path) -> None:
    sp = server(tmp_path, "mail", user=FLOW + 'on_violation = "confirm"\n')
    assert decide(facts(sp, "send_email", channel=True)).effect is Effect.CONFIRM
    assert decide(facts(sp, "send_email", approval_channel=True)).effect is Effect.CONFIRM
    no_one = decide(facts(sp, "send_email"))
    assert no_one.effect is Effect.DENY
    assert "no human can be asked" in no_one.reason
    ok = decide(facts(sp, "send_email", confirmed=arguments_digest({"to": "x"})))
    assert ok.allowed
    assert ok.evidence == MARK
    assert not decide(facts(sp, "send_email", confirmed=arguments_digest({"to": "y"}))).allowed


def test_other_denials_come_before_the_flow_rule(tmp_path: Path) -> None:
    sp = server(tmp_path, "mail", user=FLOW + '[defaults.tools]\ndeny = ["send_email"]\n')
    d = decide(facts(sp, "send_email"))
    assert d.effect is Effect.DENY
    assert d.evidence is None
    assert d.rule.key == "defaults.tools.deny[0]"


ORG = """
[org]
commands = ["*"]

[defaults.flow]
sources = ["fetch"]
sinks = ["send_*"]
on_violation = "deny"
"""


def test_the_org_ceiling_cannot_be_loosened_by_exempt_or_on_violation(tmp_path: Path) -> None:
    user = '[defaults.flow]\nexempt = ["*"]\non_violation = "confirm"\nannotations = false\n'
    sp = server(tmp_path, "mail", user=user, org=ORG)
    role = classify(sp.flow, "mail", "send_email", None, reaches_network=False, builtin=builtin)
    assert role.sink is not None
    assert role.sink.layer == "org"
    assert sp.flow.on_violation.value == "deny"
    assert decide(facts(sp, "send_email", channel=True)).effect is Effect.DENY


names = st.sampled_from(["fetch", "send_email", "send_x", "read", "web__fetch", "mail__send_email"])
globs = st.lists(st.sampled_from(["fetch", "send_*", "*", "read", "mail__*", "web__f*", "x?"]), max_size=3)


def flow_table(sources: list[str], sinks: list[str], exempt: list[str], violation: str | None,
               annotations: bool | None) -> str:
    lines = ["[defaults.flow]", f"sources = {sources!r}", f"sinks = {sinks!r}", f"exempt = {exempt!r}"]
    if violation is not None:
        lines.append(f"on_violation = {violation!r}")
    if annotations is not None:
        lines.append(f"annotations = {str(annotations).lower()}")
    return "\n".join(lines).replace("'", '"') + "\n"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(org=st.tuples(globs, globs, globs, st.sampled_from([None, "deny", "confirm"]), st.sampled_from([None, True])),
       user=st.tuples(globs, globs, globs, st.sampled_from([None, "deny", "confirm"]),
                      st.sampled_from([None, True, False])),
       tool=names, hints=st.sampled_from([None, {"readOnlyHint": True, "openWorldHint": True}]),
       network=st.booleans())
def test_no_user_config_loosens_the_org_flow_policy(tmp_path: Path, org: tuple, user: tuple, tool: str,  # type: ignore[type-arg]
                                                     hints: dict[str, object] | None, network: bool) -> None:
    """Whatever the user writes, every role the org policy gives a tool survives, and a violation is never
    handled more loosely than the org says."""
    server_name, _, bare = tool.rpartition("__")
    server_name = server_name or "mail"
    org_text = "[org]\ncommands = [\"*\"]\n\n" + flow_table(*org)
    alone = server(tmp_path / "a", server_name, org=org_text)
    both = server(tmp_path / "b", server_name, user=flow_table(*user), org=org_text)
    ceiling = classify(alone.flow, server_name, bare, hints, reaches_network=network, builtin=builtin)
    effective = classify(both.flow, server_name, bare, hints, reaches_network=network, builtin=builtin)
    for mine, theirs in ((ceiling.source, effective.source), (ceiling.sink, effective.sink)):
        if mine is not None and (mine.layer == "org" or org[4] is True):
            assert theirs is not None
    if org[3] == "deny":
        assert both.flow.on_violation.value == "deny"
    if org[4] is True:
        assert both.flow.annotations.value


def test_bad_flow_globs_and_values_are_refused_with_their_line(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", '[servers.s.flow]\nsources = ["ok"]\nsinks = ["[unclosed"]\n'
                                      'on_violation = "allow"\n')
    with pytest.raises(ConfigError) as err:
        load_policy_file(path)
    assert f"{path}:3: servers.s.flow.sinks[0]" in err.value.message
    assert f"{path}:4: servers.s.flow.on_violation" in err.value.message


def test_explain_names_the_role_and_the_tainted_verdict(tmp_path: Path) -> None:
    sp = server(tmp_path, "mail", user=FLOW)
    lines, _ = explain(sp, "send_email")
    text = "\n".join(lines)
    assert "flow sinks: 'send_*' <- user" in text
    assert "flow role (by the lists; the tool's annotations may add one): a sink" in text
    assert "in a session a source has tainted: deny <- user" in text
    assert "content.results              'redact'" in text
    out = warden("policy", "explain", "--server", "mail", "--tool", "send_email", "--", "srv",
                 env={**os.environ, "WARDEN_CONFIG": str(tmp_path / "user.toml")})
    assert out.returncode == 0, out.stderr
    assert "in a session a source has tainted: deny" in out.stdout


def test_the_ledger_is_shared_between_processes_and_cleared_only_by_clear(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    one, two = TaintLedger(state, "host-x"), TaintLedger(state, "host-x")
    assert one.marks() == () == two.marks()
    one.mark(MARK, client="rawhost 1")
    one.mark(MARK)  # idempotent
    assert two.marks() == (MARK,)
    assert (state / "flow" / "host-x.json").stat().st_mode & 0o777 == 0o600
    assert [s.session for s in tainted_sessions(state)] == ["host-x"]
    assert TaintLedger(state, "host-y").marks() == ()
    assert clear_session(state, "host-x")
    assert not clear_session(state, "host-x")
    assert two.marks() == ()


def test_an_unreadable_ledger_is_an_error_never_a_clean_session(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "flow").mkdir(parents=True, mode=0o700)
    bad = state / "flow" / "host-x.json"
    bad.write_text("{not json")
    bad.chmod(0o600)
    with pytest.raises(StateError, match="not readable"):
        TaintLedger(state, "host-x").marks()
    for key in ("../x", "", ".", "a/b", "x" * 129):
        with pytest.raises(StateError):
            TaintLedger(state, key)


def test_a_host_process_session_names_the_process_and_its_start(tmp_path: Path) -> None:
    key = host_process_session(os.getpid())
    assert key is not None
    assert key.startswith("host-")
    assert f"-{os.getpid()}-" in key
    assert host_process_session(os.getpid()) == key
    assert host_process_session(2**22 + 7) is None  # no such process
    assert not host_session_ended(key)
    boot, pid, start = key.split("-")[1:]
    assert host_session_ended(f"host-{boot}-{pid}-{int(start) + 1}")  # that pid, started at another time
    assert host_session_ended(f"host-00000000-{pid}-{start}")  # another boot
    assert not host_session_ended("link-abc")


def test_policy_files_show_flow(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", textwrap.dedent(FLOW))
    assert load_policy_file(path).model.defaults.flow.sinks == ("send_*",)


async def test_a_remote_servers_writing_tools_are_derived_sinks(tmp_path: Path) -> None:
    """Over HTTP a server can always send data out; a sandboxed stdio server (no network) cannot."""
    from warden.gateway.guard import Guard
    from warden.policy import PinStore, launch_manifest

    sp = server(tmp_path, "remote", ("https://mcp.example.com/",), user="")
    tools = [{"name": "post", "inputSchema": {"type": "object"}, "annotations": {"openWorldHint": True}},
             {"name": "read", "inputSchema": {"type": "object"},
              "annotations": {"readOnlyHint": True, "openWorldHint": True}}]
    state = tmp_path / "state"
    for kind, sink in (("http", True), ("bwrap", False)):
        guard = Guard(policy=sp, store=PinStore(state), manifest=launch_manifest(sp.argv, (), {"kind": kind}))
        await guard.observe_list("tools/list", tools)
        assert (guard.flow_role("post").sink is not None) is sink
        assert guard.flow_role("read").source is not None
        assert guard.flow_role("read").sink is None


def test_flow_list_names_an_unreadable_ledger_instead_of_crashing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "flow").mkdir(parents=True, mode=0o700)
    for name, text in (("host-a.json", "[1, 2]"), ("host-b.json", "{bad")):
        (state / "flow" / name).write_text(text)
        (state / "flow" / name).chmod(0o600)
        with pytest.raises(StateError, match=f"taint ledger .*{name} is not readable"):
            tainted_sessions(state)
        (state / "flow" / name).unlink()
