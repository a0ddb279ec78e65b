"""Per-request capability checks (PX/SA/EL), roots (RT), launch and call decisions."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.policy.helpers import server
from warden.paths import within
from warden.policy import (
    Effect,
    ElicitationFacts,
    HostCapabilities,
    LaunchFacts,
    ListEntryFacts,
    PinState,
    PromptGetFacts,
    ResourceReadFacts,
    RootsRequestFacts,
    SamplingFacts,
    ToolCallFacts,
    check_elicitation_url,
    decide,
    filter_roots,
    launch_facts,
    resolve_argument_paths,
)
from warden.policy.pins import arguments_digest
from warden.protocol.roots import RootError, normalize_file_uri, path_to_file_uri

A = PinState.APPROVED
ALL = HostCapabilities(True, True, True, True, True, True)
OPEN = """
[servers.s.capabilities]
sampling = "with-tools"
sampling_context = true
elicitation = "url"
"""


def test_host_capabilities_parsing() -> None:
    assert HostCapabilities.from_client_capabilities({"elicitation": {}}).elicitation_form
    url_only = HostCapabilities.from_client_capabilities({"elicitation": {"url": {}}})
    assert url_only.elicitation_url
    assert not url_only.elicitation_form
    both = HostCapabilities.from_client_capabilities({"elicitation": {"form": {}, "url": {}}})
    assert both.elicitation_form
    assert both.elicitation_url
    s = HostCapabilities.from_client_capabilities({"sampling": {"tools": {}}})
    assert s.sampling
    assert s.sampling_tools
    assert not s.sampling_context
    assert HostCapabilities.from_client_capabilities(None) == HostCapabilities()
    assert not HostCapabilities.from_client_capabilities({"sampling": True}).sampling


def test_PX01_sampling_needs_the_host_capability(tmp_path: Path) -> None:
    sp = server(tmp_path, user=OPEN)
    d = decide(SamplingFacts(sp, HostCapabilities()))
    assert d.effect is Effect.DENY
    assert "host did not declare the sampling capability" in d.reason
    assert "PX01" in str(d.rule)
    assert decide(SamplingFacts(sp, HostCapabilities(sampling=True))).allowed


def test_sampling_off_by_policy(tmp_path: Path) -> None:
    d = decide(SamplingFacts(server(tmp_path), ALL))
    assert d.effect is Effect.DENY
    assert d.rule.key == "capabilities.sampling"


def test_PX03_SA07_tools_in_sampling(tmp_path: Path) -> None:
    sp = server(tmp_path, user=OPEN)
    d = decide(SamplingFacts(sp, HostCapabilities(sampling=True), has_tools=True))
    assert d.effect is Effect.DENY
    assert "sampling.tools" in d.reason
    on_only = server(tmp_path, user="[servers.s.capabilities]\nsampling='on'\n")
    d = decide(SamplingFacts(on_only, ALL, has_tools=True))
    assert d.effect is Effect.DENY
    assert "with tools" in d.reason
    assert decide(SamplingFacts(sp, ALL, has_tools=True)).allowed


@pytest.mark.parametrize(("ic", "single", "host_ctx", "expected"), [
    (None, False, False, "none"), ("none", True, True, "none"),
    ("thisServer", True, True, "thisServer"), ("thisServer", False, True, "none"),
    ("thisServer", True, False, "none"), ("allServers", True, True, "none"), ("weird", True, True, "none"),
])
def test_PX04_PX06_include_context_is_scoped(tmp_path: Path, ic: str | None, single: bool, host_ctx: bool,
                                             expected: str) -> None:
    sp = server(tmp_path, user=OPEN)
    host = HostCapabilities(sampling=True, sampling_context=host_ctx)
    d = decide(SamplingFacts(sp, host, include_context=ic, single_upstream=single))
    assert d.allowed
    assert d.include_context == expected


def test_include_context_needs_policy(tmp_path: Path) -> None:
    sp = server(tmp_path, user="[servers.s.capabilities]\nsampling='on'\n")
    d = decide(SamplingFacts(sp, ALL, include_context="thisServer", single_upstream=True))
    assert d.include_context == "none"
    assert "sampling_context" in d.reason


def test_PX01_elicitation_form(tmp_path: Path) -> None:
    sp = server(tmp_path, user=OPEN)
    schema = {"type": "object", "properties": {"name": {"type": "string"}}}
    assert decide(ElicitationFacts(sp, HostCapabilities(), "form", requested_schema=schema)).effect is Effect.DENY
    assert decide(ElicitationFacts(sp, HostCapabilities(elicitation_url=True), "form",
                                   requested_schema=schema)).effect is Effect.DENY
    assert decide(ElicitationFacts(sp, HostCapabilities(elicitation_form=True), "form",
                                   requested_schema=schema)).allowed
    off = server(tmp_path)
    assert decide(ElicitationFacts(off, ALL, "form", requested_schema=schema)).effect is Effect.DENY


@pytest.mark.parametrize(("schema", "why"), [
    ({"type": "object", "properties": {"p": {"type": "object"}}}, "EL03"),
    ({"type": "object", "properties": {"p": {"type": "array", "items": {"type": "string"}}}}, "EL03"),
    ({"type": "object", "properties": {"password": {"type": "string"}}}, "EL07"),
    ({"type": "object", "properties": {"k": {"type": "string", "title": "Your API key"}}}, "EL07"),
    ({"type": "object", "properties": {"d": {"type": "string", "format": "ipv4"}}}, "EL03"),
    ({"type": "array"}, "object with properties"),
])
def test_EL03_EL07_form_schema_checks(tmp_path: Path, schema: dict[str, object], why: str) -> None:
    d = decide(ElicitationFacts(server(tmp_path, user=OPEN), ALL, "form", requested_schema=schema))
    assert d.effect is Effect.DENY
    assert why in d.reason


def test_PX02_url_mode_needs_elicitation_url(tmp_path: Path) -> None:
    sp = server(tmp_path, user=OPEN)
    url = "https://auth.example.com/connect?state=abc"
    d = decide(ElicitationFacts(sp, HostCapabilities(elicitation_form=True), "url", url=url))
    assert d.effect is Effect.DENY
    assert "elicitation.url" in d.reason
    assert decide(ElicitationFacts(sp, HostCapabilities(elicitation_url=True), "url", url=url)).allowed
    form_only = server(tmp_path, user="[servers.s.capabilities]\nelicitation='form'\n")
    assert decide(ElicitationFacts(form_only, ALL, "url", url=url)).effect is Effect.DENY
    assert decide(ElicitationFacts(sp, ALL, "carrier-pigeon")).effect is Effect.DENY


@pytest.mark.parametrize(("url", "problem"), [
    ("http://example.com/x", "not https"), ("https://user:pw@example.com/", "credentials"),
    ("https://user@example.com/", "credentials"), ("javascript:alert(1)", "not https"),
    ("https:///path", "no host"), ("https://exa mple.com", "whitespace"), ("https://example.com/\u202e", "invisible"),
    ("", "missing"), ("https://example.com/" + "a" * 2100, "longer"), ("https://[::1/", "does not parse"),
])
def test_url_elicitation_urls_are_checked(url: str, problem: str) -> None:
    assert problem in (check_elicitation_url(url) or "")


def test_url_elicitation_punycode_is_forwarded_whole() -> None:
    assert check_elicitation_url("https://xn--80ak6aa92e.com/login") is None


def test_roots_request_needs_policy_and_host(tmp_path: Path) -> None:
    none = server(tmp_path)
    assert decide(RootsRequestFacts(none, ALL)).effect is Effect.DENY
    sp = server(tmp_path, user=f"[servers.s.capabilities]\nroots=['{tmp_path}']\n")
    d = decide(RootsRequestFacts(sp, HostCapabilities()))
    assert d.effect is Effect.DENY
    assert "PX01" in str(d.rule)
    assert decide(RootsRequestFacts(sp, ALL)).allowed


# --- roots ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("uri", "error"), [
    ("file://host/etc", "names host 'host'"), ("file://localhost/etc", "names host 'localhost'"),
    ("https://example.com/", "only file:// roots"), ("relative/path", "only file:// roots"),
    ("file:/etc", "file:///absolute"), ("file:////server/share", "network share"),
    ("file:///a/../../etc", "climbs above"), ("file:///%2e%2e/etc", "climbs above"),
    ("file:///a/%2E%2E/%2e%2E/etc", "climbs above"), ("file:///a%2f..%2f..%2fetc", "escaped '/'"),
    ("file:///a%00b", "control"), ("file:///a b", "whitespace"), ("file:///a?x=1", "query"),
    ("file:///a#f", "fragment"), ("file:///a\\..\\b", "backslash"), ("file:///%5c", "backslash"),
    ("file:///%zz", "malformed"), ("file:///%C3", "UTF-8"), ("FILE:///etc", "only file:// roots"),
])
def test_RT04_RT05_bad_root_uris(uri: str, error: str) -> None:
    with pytest.raises(RootError, match=error):
        normalize_file_uri(uri)


@pytest.mark.parametrize(("uri", "path"), [
    ("file:///home/u/p", "/home/u/p"), ("file:///home/u/p/", "/home/u/p"), ("file:///home/./u//p", "/home/u/p"),
    ("file:///home/u/x/../p", "/home/u/p"), ("file:///home/u/%2e%2e/u/p", "/home/u/p"),
    ("file:///caf%C3%A9", "/café"), ("file:///a/%252e%252e/b", "/a/%2e%2e/b"), ("file:///", "/"),
])
def test_root_uris_normalise(uri: str, path: str) -> None:
    assert normalize_file_uri(uri) == path


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "..", ".", "%2e%2e", "%2E.", "", "c%20d", "é"]), max_size=8))
def test_RT05_normalised_roots_never_escape_by_dots(segments: list[str]) -> None:
    uri = "file:///base/" + "/".join(segments)
    try:
        path = normalize_file_uri(uri)
    except RootError:
        return
    assert ".." not in path.split("/")
    assert "." not in path.split("/")
    assert "//" not in path
    assert normalize_file_uri(path_to_file_uri(path)) == path


def test_within_is_component_wise() -> None:
    assert within("/home/u", "/home/u")
    assert within("/home/u/x", "/home/u")
    assert within("/x", "/")
    assert not within("/home/user", "/home/u")
    assert not within("/home", "/home/u")


def test_RT07_roots_filtered_with_symlinks(tmp_path: Path) -> None:
    allowed = tmp_path / "proj"
    (allowed / "sub").mkdir(parents=True)
    outside = tmp_path / "secret"
    outside.mkdir()
    (allowed / "escape").symlink_to(outside)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "into").symlink_to(allowed / "sub")
    sp = server(tmp_path, user=f"[servers.s.capabilities]\nroots=['{allowed}']\n")
    roots = [{"uri": path_to_file_uri(str(allowed)), "name": "project"},
             {"uri": path_to_file_uri(str(allowed / "sub"))},
             {"uri": path_to_file_uri(str(allowed / "escape"))},
             {"uri": path_to_file_uri(str(allowed / "missing"))},
             {"uri": path_to_file_uri(str(tmp_path / "elsewhere" / "into"))},
             {"uri": f"file://{allowed}/../secret"},
             {"uri": "file://host" + str(allowed)},
             {"uri": 42}, "not a root"]
    kept, refused = filter_roots(sp, roots)
    assert kept == [{"uri": path_to_file_uri(str(allowed)), "name": "project"},
                    {"uri": path_to_file_uri(str(allowed / "sub"))}]
    reasons = [d.reason for _, d in refused]
    assert "resolves (through a symlink)" in reasons[0]
    assert "does not exist" in reasons[1]
    assert "outside the directories" in reasons[2]  # lexically outside, even though its target is inside
    assert "outside the directories" in reasons[3]
    assert "names host" in reasons[4]
    assert all(d.effect is Effect.DENY for _, d in refused)
    assert len(refused) == 7


# --- calls, lists, prompts, resources ------------------------------------------------------------------------

def test_DESIGN3_unknown_pending_changed_revoked_are_refused_with_the_approve_command(tmp_path: Path) -> None:
    sp = server(tmp_path)
    for state, text in ((PinState.UNKNOWN, "not in server 's''s current list"), (PinState.PENDING, "is new"),
                        (PinState.CHANGED, "changed since it was approved"), (PinState.REVOKED, "was revoked")):
        d = decide(ToolCallFacts(sp, "add", state, A, {}))
        assert d.effect is Effect.DENY, d
        assert text in d.reason, d
        if state is not PinState.UNKNOWN:
            assert d.hint is not None
            assert "warden pins approve s add" in d.hint
    assert decide(ToolCallFacts(sp, "add", PinState.PENDING, A, {}, consent_channel=True)).effect is Effect.ASK
    assert decide(ToolCallFacts(sp, "add", PinState.REVOKED, A, {}, consent_channel=True)).effect is Effect.DENY
    d = decide(ToolCallFacts(sp, "add", A, PinState.CHANGED, {}))
    assert d.effect is Effect.DENY
    assert "changed its launch manifest" in d.reason
    assert "pins review s" in (d.hint or "")


def test_on_new_deny_never_asks_in_band(tmp_path: Path) -> None:
    sp = server(tmp_path, user="[defaults]\non_new='deny'\non_changed='deny'\n")
    for state in (PinState.PENDING, PinState.CHANGED):
        d = decide(ToolCallFacts(sp, "add", state, A, {}, consent_channel=True))
        assert d.effect is Effect.DENY
        assert d.rule.key in ("defaults.on_new", "defaults.on_changed")


def test_confirm_binds_to_the_exact_arguments(tmp_path: Path) -> None:
    sp = server(tmp_path, user="[servers.s.tools]\nconfirm=['rm*']\n")
    args = {"path": "/tmp/x"}
    assert decide(ToolCallFacts(sp, "rm", A, A, args, consent_channel=True)).effect is Effect.CONFIRM
    d = decide(ToolCallFacts(sp, "rm", A, A, args))
    assert d.effect is Effect.DENY
    assert "no form elicitation" in d.reason
    ok = decide(ToolCallFacts(sp, "rm", A, A, args, confirmed_arguments_digest=arguments_digest(args)))
    assert ok.allowed
    assert "exactly these arguments" in ok.reason
    other = decide(ToolCallFacts(sp, "rm", A, A, {"path": "/etc"}, consent_channel=True,
                                 confirmed_arguments_digest=arguments_digest(args)))
    assert other.effect is Effect.CONFIRM


def test_argument_rules(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "link").symlink_to("/etc")
    sp = server(tmp_path, user=f"""
[[servers.s.arguments]]
tool = "read*"
argument = "path"
under = ["{proj}"]
[[servers.s.arguments]]
tool = "many"
argument = "paths.*"
under = ["{proj}"]
[[servers.s.arguments]]
tool = "pick"
argument = "mode"
enum = ["a", 1]
required = true
[[servers.s.arguments]]
tool = "pick"
argument = "opts.name"
pattern = "[a-z]+"
max_length = 5
""")

    def call(tool: str, args: dict[str, object]) -> Effect:
        return decide(ToolCallFacts(sp, tool, A, A, args,
                                    resolved_paths=resolve_argument_paths(sp, tool, args))).effect

    assert call("read", {"path": f"{proj}/a.txt"}) is Effect.ALLOW
    assert call("read", {"path": f"file://{proj}/a.txt"}) is Effect.ALLOW
    assert call("read", {"path": f"{proj}/../etc/passwd"}) is Effect.DENY
    assert call("read", {"path": "relative.txt"}) is Effect.DENY
    assert call("read", {"path": f"{proj}/link/passwd"}) is Effect.DENY  # symlink out
    assert call("read", {"path": 7}) is Effect.DENY
    assert call("read", {}) is Effect.ALLOW  # not required
    assert call("many", {"paths": [f"{proj}/a", f"{proj}/b"]}) is Effect.ALLOW
    assert call("many", {"paths": [f"{proj}/a", "/etc/shadow"]}) is Effect.DENY
    assert call("pick", {"mode": "a"}) is Effect.ALLOW
    assert call("pick", {"mode": 1}) is Effect.ALLOW
    assert call("pick", {"mode": True}) is Effect.DENY  # True == 1 but is not 1
    assert call("pick", {}) is Effect.DENY
    assert call("pick", {"mode": "a", "opts": {"name": "abc"}}) is Effect.ALLOW
    assert call("pick", {"mode": "a", "opts": {"name": "abcdef"}}) is Effect.DENY
    assert call("pick", {"mode": "a", "opts": {"name": "AB"}}) is Effect.DENY


def test_RT05_path_argument_escaping_through_a_symlink_then_dotdot_is_refused(tmp_path: Path) -> None:
    """A symlink inside the allowed dir followed by ``..``: lexically ``/proj/link/../secret.txt`` is
    ``/proj/secret.txt`` (inside), but the kernel follows ``link`` first and opens ``/outside/secret.txt``. Both the
    path as written and as normalized must resolve inside (before: only the normalized one was resolved)."""
    proj, outside = tmp_path / "proj", tmp_path / "outside"
    (proj / "sub").mkdir(parents=True)
    (outside / "deep").mkdir(parents=True)
    (outside / "secret.txt").write_text("S")
    (proj / "link").symlink_to(outside / "deep")
    sp = server(tmp_path, user=f"[[servers.s.arguments]]\ntool = 'read'\nargument = 'path'\nunder = ['{proj}']\n")

    def call(args: dict[str, object]) -> Effect:
        paths = resolve_argument_paths(sp, "read", args)
        return decide(ToolCallFacts(sp, "read", A, A, args, resolved_paths=paths)).effect

    written = f"{proj}/link/../secret.txt"
    assert Path(written).read_text() == "S"  # what a server opening the argument as given reads
    assert call({"path": written}) is Effect.DENY
    assert call({"path": f"file://{proj}/link/%2e%2e/secret.txt"}) is Effect.DENY
    assert call({"path": f"{proj}/sub/../sub/x"}) is Effect.ALLOW  # a '..' that stays inside is still fine


def test_RT05_two_path_arguments_that_print_alike_do_not_share_a_resolved_path(tmp_path: Path) -> None:
    """``{"a.b": {"c": P}}`` and ``{"a": {"b.c": Q}}`` are both at ``a.b.c``: the real path of the inside one
    must not vouch for the symlinked one (before: resolved paths were keyed by that dotted name, the last won)."""
    proj = tmp_path / "proj"
    (proj / "sub").mkdir(parents=True)
    (proj / "link").symlink_to("/etc")
    sp = server(tmp_path, user=f"[[servers.s.arguments]]\ntool = 'many'\nargument = '*.*'\nunder = ['{proj}']\n")
    args: dict[str, object] = {"a.b": {"c": f"{proj}/link/passwd"}, "a": {"b.c": f"{proj}/sub"}}
    d = decide(ToolCallFacts(sp, "many", A, A, args, resolved_paths=resolve_argument_paths(sp, "many", args)))
    assert d.effect is Effect.DENY
    assert "through a symlink" in d.reason


def test_lists_prompts_resources_are_gated_the_same(tmp_path: Path) -> None:
    sp = server(tmp_path, user="[servers.s.prompts]\ndeny=['secret*']\n[servers.s.resources]\nallow=['mem://*']\n")
    assert decide(ListEntryFacts(sp, "tool", "add", A, A)).allowed
    assert decide(ListEntryFacts(sp, "tool", "add", PinState.PENDING, A)).effect is Effect.DENY
    assert decide(ListEntryFacts(sp, "tool", "add", A, PinState.PENDING)).effect is Effect.DENY
    assert decide(ListEntryFacts(sp, "instructions", "", PinState.CHANGED, A)).effect is Effect.DENY
    assert decide(ListEntryFacts(sp, "server", "", A, A)).allowed
    assert decide(PromptGetFacts(sp, "greet", A, A)).allowed
    assert decide(PromptGetFacts(sp, "secret_x", A, A)).effect is Effect.DENY
    assert decide(PromptGetFacts(sp, "greet", PinState.PENDING, A)).effect is Effect.DENY
    assert decide(ResourceReadFacts(sp, "mem://notes", A, A)).allowed
    assert decide(ResourceReadFacts(sp, "file:///etc/passwd", A, A)).effect is Effect.DENY
    assert decide(ResourceReadFacts(sp, "mem://notes", PinState.UNKNOWN, A)).effect is Effect.DENY


def test_launch_decisions(tmp_path: Path) -> None:
    (tmp_path / "srv" / "data").mkdir(parents=True)
    org = f"""
[org]
commands = ["srv *"]
env = ["OK_*"]
read_dirs = ["{tmp_path}/srv"]
"""
    sp = server(tmp_path, argv=("srv", "--x"), org=org,
                user=f"[servers.s]\nenv=['OK_A']\n[servers.s.sandbox]\nread_dirs=['{tmp_path}/srv/data']\n")
    assert decide(launch_facts(sp)).allowed
    assert "not among the commands" in decide(replace(launch_facts(sp), argv=("evil",))).reason
    assert "may not be passed" in decide(replace(launch_facts(sp), env_names=("SECRET",))).reason
    bad = server(tmp_path, argv=("srv", "a"), org=org, user="[servers.s.sandbox]\nread_dirs=['/home']\n")
    assert "outside the org's read_dirs" in decide(launch_facts(bad)).reason
    missing = server(tmp_path, argv=("srv", "a"), org=org,
                     user=f"[servers.s.sandbox]\nread_dirs=['{tmp_path}/srv/none']\n")
    assert "does not exist" in decide(launch_facts(missing)).reason
    assert "does not exist" in decide(LaunchFacts(sp)).reason  # facts without real paths pass no ceiling
    declared = server(tmp_path, argv=("other",), user="[servers.s]\ncommand='srv'\nargs=['a']\n")
    d = decide(launch_facts(declared))
    assert d.effect is Effect.DENY
    assert "is configured to run 'srv a'" in d.reason
    assert decide(launch_facts(server(tmp_path, argv=()))).effect is Effect.DENY


@pytest.mark.parametrize("label", ["read", "write"])
def test_a_symlink_in_the_user_dirs_does_not_lead_outside_the_org_dirs(tmp_path: Path, label: str) -> None:
    """The sandbox mounts what a dir resolves to, so the org ceiling is checked on the real path too: a user's
    ``{label}_dirs`` entry that is a symlink (inside the org's dirs) to /etc is refused."""
    allowed = tmp_path / "home"
    allowed.mkdir()
    (allowed / "etc").symlink_to("/etc")
    (allowed / "work").mkdir()
    org = f"[org]\n{label}_dirs = ['{allowed}']\n"

    def launch(entry: Path) -> str:
        sp = server(tmp_path, org=org, user=f"[defaults.sandbox]\n{label}_dirs = ['{entry}']\n")
        d = decide(launch_facts(sp))
        return "allowed" if d.allowed else d.reason

    assert launch(allowed / "work") == "allowed"
    assert launch(allowed / "etc") == (f"sandbox {label} dir '{allowed}/etc' leads through a symlink to '/etc', "
                                       f"outside the org's {label}_dirs")
    linked_org = tmp_path / "org-link"  # the org's own dir may be a symlink: its real path is what counts
    linked_org.symlink_to(allowed)
    org = f"[org]\n{label}_dirs = ['{linked_org}']\n"
    assert launch(linked_org / "work") == "allowed"
    assert "outside the org's" in launch(linked_org / "etc")


def test_decisions_are_deterministic(tmp_path: Path) -> None:
    sp = server(tmp_path, user="[servers.s.tools]\nconfirm=['x']\n")
    f = ToolCallFacts(sp, "x", A, A, {"a": 1}, consent_channel=True)
    assert {decide(f) for _ in range(5)} == {decide(f)}
    assert os.environ.get("WARDEN_STATE_DIR")  # the conftest isolation is in force


def test_a_refused_path_is_quoted_with_its_piled_marks_named(tmp_path: Path) -> None:
    """The reason goes to the host as the error text its user and model read: a path whose combining marks are
    piled on one letter (drawn over the host's lines around it) has all but the first three named, as every hidden
    character is (before: quoted as it was)."""
    proj = tmp_path / "proj"
    proj.mkdir()
    sp = server(tmp_path, user=f"[[servers.s.arguments]]\ntool = 'read'\nargument = 'path'\nunder = ['{proj}']\n")
    args = {"path": "/etc/x" + "\u0316" * 5}
    decision = decide(ToolCallFacts(sp, "read", A, A, args, resolved_paths=resolve_argument_paths(sp, "read", args)))
    assert decision.effect is Effect.DENY
    assert decision.reason.startswith("argument 'path' of tool 'read' is '/etc/x\u0316\u0316\u0316"
                                      "⟦U+0316 COMBINING GRAVE ACCENT BELOW⟧⟦U+0316 COMBINING GRAVE ACCENT BELOW⟧', "
                                      f"outside ['{proj}']")
