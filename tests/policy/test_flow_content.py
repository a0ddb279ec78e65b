"""Issue 17 item 2: content rules over results and arguments -- detectors, redaction that keeps JSON and
outputSchema valid, refusals, RE2-only patterns, layering, and the audit log holding digests, never values."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.policy.helpers import server, write
from tests.support import PYTHON, WARDEN, RawHost, through_warden, write_config
from warden.errors import ConfigError
from warden.policy import (
    ContentScanner,
    Effect,
    PinState,
    Source,
    ToolCallFacts,
    decide,
    load_policy_file,
    screen_arguments,
    screen_result,
)

BUILTIN = Source("builtin", None, None, "content")
FLOW_SERVER = [PYTHON, str(Path(__file__).parent.parent / "fixtures" / "flow_server.py")]
AWS = "AKIAIOSFODNN7EXAMPLE"
GITHUB = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx3Yb0gFAKEKEYFORTESTSONLYxx1234567890abcdefghij\n"
       "kLmNoPqRsTuVwXyZ0123456789+/ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghij==\n-----END RSA PRIVATE KEY-----")


def sha(value: str) -> str:
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()


def scanner(tmp_path: Path, side: str = "results", user: str = "", org: str | None = None,
            secrets: tuple[str, ...] = ()) -> tuple[ContentScanner, int]:
    sp = server(tmp_path, "s", user=user, org=org)
    return ContentScanner(sp.content, side, "t", secrets, builtin=BUILTIN), sp.content.max_scan_bytes.value


def result_of(text: str) -> bytes:
    return msgspec.json.encode({"content": [{"type": "text", "text": text}]})


alnum = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", min_size=1)
upper = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=16, max_size=16)
tokens = st.one_of(
    upper.map(lambda s: ("aws_access_key", "AKIA" + s)),
    st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", min_size=36, max_size=40)
    .map(lambda s: ("github_token", "ghp_" + s)),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_", min_size=22, max_size=40)
    .map(lambda s: ("github_token", "github_pat_" + s)),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=10, max_size=30)
    .map(lambda s: ("slack_token", "xoxb-" + s)),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC0123456789_-", min_size=20, max_size=40)
    .map(lambda s: ("anthropic_key", "sk-ant-" + s)),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC0123456789", min_size=20, max_size=40)
    .map(lambda s: ("openai_key", "sk-proj-" + s)),
    st.tuples(alnum, alnum).map(lambda p: ("jwt", f"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIx{p[0]}.sig{p[1]}sig12345678")),
    st.just(("private_key", PEM)),
)
# Text around a token: words and punctuation a token never continues into (a boundary on both sides).
prose = st.text(alphabet=st.sampled_from([*list(" .,;:!?()\n\"'<>{}"), "é", "日", "本", "\u202e", "\\"]), max_size=30)


@settings(max_examples=200, deadline=None)
@given(before=prose, token=tokens, after=prose, escape=st.booleans())
def test_every_detector_cuts_its_token_out_and_the_result_stays_json(tmp_path_factory: pytest.TempPathFactory,
                                                                      before: str, token: tuple[str, str],
                                                                      after: str, escape: bool) -> None:
    rule, value = token
    scan, limit = _shared_scanner(tmp_path_factory)
    text = before + value + after
    raw = json.dumps({"content": [{"type": "text", "text": text}]}, ensure_ascii=escape).encode()
    screened = screen_result(scan, raw, max_scan_bytes=limit, output_schema=None)
    assert screened.refused is None
    assert screened.raw is not None
    out = json.loads(screened.raw)  # valid JSON, always
    shown = out["content"][0]["text"]
    assert value not in shown
    assert value not in screened.raw.decode()
    assert f"[REDACTED:{rule}]" in shown
    assert [(f.rule, f.digest) for f in screened.findings] == [(rule, sha(value))]


_SCANNERS: dict[str, tuple[ContentScanner, int]] = {}


def _shared_scanner(factory: pytest.TempPathFactory) -> tuple[ContentScanner, int]:
    if "s" not in _SCANNERS:
        _SCANNERS["s"] = scanner(factory.mktemp("scan"))
    return _SCANNERS["s"]


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200))
def test_text_without_credentials_passes_byte_for_byte(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    scan, limit = _shared_scanner(tmp_path_factory)
    raw = msgspec.json.encode({"content": [{"type": "text", "text": text}], "isError": False})
    screened = screen_result(scan, raw, max_scan_bytes=limit, output_schema=None)
    assert screened.refused is None
    if not screened.findings:
        assert screened.raw == raw  # nothing found: the exact bytes the server sent
    else:
        assert screened.raw is not None
        json.loads(screened.raw)


def test_a_pem_block_and_tokens_in_one_result(tmp_path: Path) -> None:
    scan, limit = scanner(tmp_path)
    raw = result_of(f"config:\n{PEM}\naws = {AWS}\ngh = {GITHUB}\n")
    screened = screen_result(scan, raw, max_scan_bytes=limit, output_schema=None)
    assert screened.raw is not None
    assert json.loads(screened.raw)["content"][0]["text"] == (
        "config:\n[REDACTED:private_key]\naws = [REDACTED:aws_access_key]\ngh = [REDACTED:github_token]\n")
    assert {f.digest for f in screened.findings} == {sha(PEM), sha(AWS), sha(GITHUB)}


def test_the_registry_values_are_cut_out_in_every_json_spelling(tmp_path: Path) -> None:
    secret = 'pa"ss/w\\ord-1234'
    scan, limit = scanner(tmp_path, secrets=(secret,))
    for raw in (msgspec.json.encode({"t": f"x {secret} y"}), json.dumps({"t": f"x {secret} y"}).replace(
            "/", "\\/").encode()):
        screened = screen_result(scan, raw, max_scan_bytes=limit, output_schema=None)
        assert screened.raw is not None
        assert json.loads(screened.raw) == {"t": "x [REDACTED:secrets_registry] y"}


SCHEMA = {"type": "object", "properties": {"token": {"type": "string"}}, "required": ["token"]}
STRICT = {"type": "object", "properties": {"token": {"type": "string", "pattern": "^AKIA[0-9A-Z]{16}$"}}}


def test_redaction_never_breaks_the_output_schema_it_refuses_instead(tmp_path: Path) -> None:
    scan, limit = scanner(tmp_path)
    raw = msgspec.json.encode({"content": [{"type": "text", "text": json.dumps({"token": AWS})}],
                               "structuredContent": {"token": AWS}})
    free = screen_result(scan, raw, max_scan_bytes=limit, output_schema=SCHEMA)
    assert free.raw is not None
    assert json.loads(free.raw)["structuredContent"] == {"token": "[REDACTED:aws_access_key]"}
    assert json.loads(json.loads(free.raw)["content"][0]["text"]) == {"token": "[REDACTED:aws_access_key]"}
    strict = screen_result(scan, raw, max_scan_bytes=limit, output_schema=STRICT)
    assert strict.raw is None
    assert strict.refused is not None
    assert "would break the tool's outputSchema" in strict.refused
    assert [f.digest for f in strict.findings] == [sha(AWS), sha(AWS)]


def test_deny_and_oversize_and_non_json_are_refused(tmp_path: Path) -> None:
    scan, limit = scanner(tmp_path, user='[defaults.content]\nresults = "deny"\n')
    denied = screen_result(scan, result_of(AWS), max_scan_bytes=limit, output_schema=None)
    assert denied.raw is None
    assert denied.refused == "the result holds aws_access_key (content rule action 'deny')"
    big = result_of("x" * 5000)
    too_big = screen_result(scan, big, max_scan_bytes=4096, output_schema=None)
    assert too_big.raw is None
    assert too_big.refused is not None
    assert "refused rather than passed unscanned" in \
        too_big.refused
    garbled = screen_result(scan, b'{"a": "\\u00' + AWS.encode(), max_scan_bytes=limit, output_schema=None)
    assert garbled.raw is None


def test_policy_rules_use_re2_and_apply_per_side_and_tool(tmp_path: Path) -> None:
    user = """
[[defaults.content.rules]]
name = "internal"
pattern = 'corp\\.internal'
on = "results"
tools = ["t"]

[[defaults.content.rules]]
name = "ticket"
pattern = "TICKET-[0-9]+"
on = "arguments"
action = "redact"
"""
    results, limit = scanner(tmp_path, user=user)
    out = screen_result(results, result_of('see "db.corp.internal" TICKET-12'), max_scan_bytes=limit,
                        output_schema=None)
    assert out.raw is not None
    assert json.loads(out.raw)["content"][0]["text"] == 'see "db.[REDACTED:internal]" TICKET-12'
    args, _ = scanner(tmp_path, side="arguments", user=user)
    redacted, findings = screen_arguments(args, {"body": "fix TICKET-12 now", "n": 3})
    assert redacted == {"body": "fix [REDACTED:ticket] now", "n": 3}
    assert findings[0].action == "redact"
    assert findings[0].source.key == "defaults.content.rules[1]"


@pytest.mark.parametrize("pattern", [r"(a)\\1", r"(?=a)b", r"a(?!b)", r"(?<=x)y", r"a++"])
def test_a_pattern_re2_cannot_compile_is_refused_with_its_line(tmp_path: Path, pattern: str) -> None:
    path = write(tmp_path / "c.toml", f'[[defaults.content.rules]]\nname = "x"\npattern = "{pattern}"\n')
    with pytest.raises(ConfigError) as err:
        load_policy_file(path)
    where = f"{path}:3: defaults.content.rules[0].pattern: invalid regular expression for RE2, the linear-time engine"
    assert where in err.value.message
    arg = write(tmp_path / "a.toml", f'[[defaults.arguments]]\ntool = "t"\nargument = "a"\npattern = "{pattern}"\n')
    with pytest.raises(ConfigError, match="for RE2, the linear-time engine"):
        load_policy_file(arg)
    out = subprocess.run([WARDEN, "policy", "check", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert f"{path}:3:" in out.stderr


def test_a_catastrophic_pattern_under_python_re_is_linear_under_re2(tmp_path: Path) -> None:
    """``(a+)+$`` takes exponential time in a backtracking engine on "aaa...b"; RE2 answers in one pass."""
    path = write(tmp_path / "c.toml", '[[defaults.arguments]]\ntool = "*"\nargument = "q"\npattern = "(a+)+$"\n')
    sp = server(tmp_path, "s", user=path.read_text())
    d = decide(ToolCallFacts(sp, "t", PinState.APPROVED, PinState.APPROVED, {"q": "a" * 50_000 + "b"}))
    assert d.effect is Effect.DENY
    assert "does not match" in d.reason


def test_arguments_with_a_credential_are_refused_by_decide(tmp_path: Path) -> None:
    sp = server(tmp_path, "s", user="")
    scan = ContentScanner(sp.content, "arguments", "t", (), builtin=BUILTIN)
    args = {"to": "a@example.com", "body": f"key {AWS}"}
    _, findings = screen_arguments(scan, args)
    d = decide(ToolCallFacts(sp, "t", PinState.APPROVED, PinState.APPROVED, args, content_findings=findings))
    assert d.effect is Effect.DENY
    assert d.reason == f"argument 'body' of tool 't' holds a credential (aws_access_key, {sha(AWS)}); content rule " \
                       "action 'deny'"
    assert AWS not in d.reason


def test_DESIGN10_a_credential_written_as_a_key_is_not_echoed_by_the_refusal(tmp_path: Path) -> None:
    """A credential as an object key (``{"AKIA…": 1}``, or a registry value as a nested key) is found, and the
    refusal's reason (which the audit record and the host's error carry) names the key as redacted (before: the
    finding's ``where`` held the key as sent, so the reason quoted the credential in clear)."""
    sp = server(tmp_path, "s", user="")
    secret = "hunter2-registered-value"
    scan = ContentScanner(sp.content, "arguments", "t", (secret,), builtin=BUILTIN)
    for args in ({AWS: 1}, {"q": {secret: {"x": GITHUB}}}):
        redacted, findings = screen_arguments(scan, args)
        d = decide(ToolCallFacts(sp, "t", PinState.APPROVED, PinState.APPROVED, args, content_findings=findings))
        assert d.effect is Effect.DENY
        shown = json.dumps([d.reason, [f.where for f in findings], redacted])
        assert not [v for v in (AWS, secret, GITHUB) if v in shown], shown
    assert d.reason.startswith("argument 'q.[REDACTED:secrets_registry]' of tool 't' holds a credential")


def test_the_org_action_is_a_floor_and_its_rules_always_apply(tmp_path: Path) -> None:
    org = '[org]\ncommands = ["*"]\n\n[defaults.content]\nresults = "deny"\nmax_scan_bytes = 2048\n\n' \
          '[[defaults.content.rules]]\nname = "org-rule"\npattern = "FORBIDDEN"\n'
    sp = server(tmp_path, "s", user='[defaults.content]\nresults = "redact"\nmax_scan_bytes = 999999\n', org=org)
    assert sp.content.results.value == "deny"
    assert sp.content.results.source.layer == "org"
    assert sp.content.max_scan_bytes.value == 2048
    assert [r.name for r, _ in sp.content.rules] == ["org-rule"]


def audit_json() -> list[dict[str, Any]]:
    out = subprocess.run([WARDEN, "audit", "show", "--json"], capture_output=True, text=True, timeout=60, check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


async def leak_session(tmp_path: Path, extra: str = "", *, log: Path | None = None) -> RawHost:
    write_config(tmp_path, extra=extra)
    argv = [*FLOW_SERVER, *(("--log", str(log)) if log else ())]
    host = await RawHost.start(through_warden(argv, "--name", "leaky"))
    await host.initialize()
    await host.request(1, "tools/list")
    await host.response(1)
    return host


def state_bytes(tmp_path: Path) -> bytes:
    import os
    state = Path(os.environ["WARDEN_STATE_DIR"])
    return b"".join(p.read_bytes() for p in state.rglob("*") if p.is_file())


async def test_through_warden_a_leaking_result_is_redacted_and_the_log_holds_digests(tmp_path: Path) -> None:
    host = await leak_session(tmp_path)
    answer = await host.call(2, "leak")
    structured = await host.call(3, "leak_structured")
    strict = await host.call(4, "leak_strict")
    assert await host.close() == 0
    text = answer["result"]["content"][0]["text"]  # type: ignore[index]
    assert "[REDACTED:private_key]" in text
    assert "[REDACTED:aws_access_key]" in text
    assert "[REDACTED:github_token]" in text
    assert json.loads(json.dumps(answer))  # the host got JSON-RPC it can parse
    assert structured["result"]["structuredContent"] == {"token": "[REDACTED:github_token]", "note": "ok"}  # type: ignore[index]
    error = strict["error"]
    assert isinstance(error, dict)
    assert "would break the tool's outputSchema" in error["message"]
    outcomes = [r for r in audit_json() if r["event"] == "call.outcome"]
    leak = outcomes[0]
    assert {x["digest"] for x in leak["redactions"]} == {sha(PEM), sha(AWS), sha("ghp_" + GITHUB[4:])}
    assert {x["rule"] for x in outcomes[2]["redactions"]} == {"aws_access_key"}
    stored = state_bytes(tmp_path)
    for value in (AWS, GITHUB, "MIIEowIBAAKCAQEAx3Yb0g"):
        assert value.encode() not in stored  # audit log, pins, ledgers: digests only


async def test_through_warden_resource_contents_are_redacted_too(tmp_path: Path) -> None:
    host = await leak_session(tmp_path)
    await host.request(2, "resources/list")
    await host.response(2)
    await host.request(3, "resources/read", {"uri": "file:///srv/config.ini"})
    read = await host.response(3)
    assert await host.close() == 0
    assert read["result"]["contents"][0]["text"] == "[aws]\nkey = [REDACTED:aws_access_key]\n"  # type: ignore[index]
    outcome = [r for r in audit_json() if r["event"] == "call.outcome"][-1]
    assert outcome["redactions"] == [{"rule": "aws_access_key", "digest": sha(AWS)}]


async def test_through_warden_a_deny_policy_refuses_the_result(tmp_path: Path) -> None:
    host = await leak_session(tmp_path, '[defaults.content]\nresults = "deny"\n')
    refused = await host.call(2, "leak")
    fine = await host.call(3, "fetch", {"url": "https://example.com/"})
    assert await host.close() == 0
    error = refused["error"]
    assert isinstance(error, dict)
    assert error["code"] == -32602
    assert "aws_access_key, github_token, private_key (content rule action 'deny')" in error["message"]
    assert "result" in fine


async def test_through_warden_arguments_are_refused_or_redacted_before_the_server_sees_them(tmp_path: Path) -> None:
    log = tmp_path / "sent.jsonl"
    host = await leak_session(tmp_path, log=log)
    refused = await host.call(2, "send_email", {"to": "a@example.com", "body": f"here: {AWS}"})
    assert await host.close() == 0
    assert "holds a credential (aws_access_key" in refused["error"]["message"]  # type: ignore[index]
    assert not log.exists()
    decided = [r for r in audit_json() if r["event"] == "call.decided"]
    assert decided[-1]["redactions"] == [{"rule": "aws_access_key", "digest": sha(AWS)}]
    host = await leak_session(tmp_path, '[servers.leaky]\naudit_arguments = "full"\n\n'
                                        '[defaults.content]\narguments = "redact"\n', log=log)
    assert "result" in await host.call(2, "send_email", {"to": "a@example.com", "body": f"here: {AWS}"})
    assert await host.close() == 0
    assert json.loads(log.read_text()) == {"to": "a@example.com", "body": "here: [REDACTED:aws_access_key]"}
    assert AWS.encode() not in state_bytes(tmp_path)


actions = st.sampled_from([None, "redact", "deny"])


@settings(max_examples=60, deadline=None)
@given(org=st.tuples(actions, actions, st.sampled_from([None, 2048, 1 << 20])),
       user=st.tuples(actions, actions, st.sampled_from([None, 1024, 4096, 1 << 22])),
       org_rule=st.booleans())
def test_no_user_config_loosens_the_org_content_rules(tmp_path_factory: pytest.TempPathFactory,
                                                       org: tuple[str | None, str | None, int | None],
                                                       user: tuple[str | None, str | None, int | None],
                                                       org_rule: bool) -> None:
    """Whatever the user writes: an org 'deny' stays 'deny' on either side, the org's scan limit is never
    raised, and every org rule applies."""
    def table(values: tuple[str | None, str | None, int | None], rule: bool) -> str:
        lines = ["[defaults.content]"]
        for key, value in zip(("results", "arguments", "max_scan_bytes"), values, strict=True):
            if value is not None:
                lines.append(f"{key} = {json.dumps(value)}")
        if rule:
            lines += ["", "[[defaults.content.rules]]", 'name = "org-rule"', 'pattern = "ORG[0-9]+"']
        return "\n".join(lines) + "\n"

    tmp = tmp_path_factory.mktemp("layers")
    sp = server(tmp, "s", user=table(user, False), org='[org]\ncommands = ["*"]\n\n' + table(org, org_rule))
    for side, (o, _) in (("results", (org[0], user[0])), ("arguments", (org[1], user[1]))):
        if o == "deny":
            assert getattr(sp.content, side).value == "deny"
    if org[2] is not None:
        assert sp.content.max_scan_bytes.value <= org[2]
    assert ("org-rule" in [r.name for r, _ in sp.content.rules]) == org_rule
    scan = ContentScanner(sp.content, "results", "any_tool", (), builtin=BUILTIN)
    out = screen_result(scan, result_of("x ORG42 y"), max_scan_bytes=1 << 20, output_schema=None)
    assert (out.findings != ()) == org_rule


def test_the_org_decides_where_approvals_go(tmp_path: Path) -> None:
    user = '[approvals]\nwebhook = "http://127.0.0.1:1/user"\nsecret = "${secret:U}"\n'
    org = '[org]\ncommands = ["*"]\n\n[approvals]\nwebhook = "https://approvals.example.com/org"\n' \
          'secret = "${secret:O}"\n'
    both = server(tmp_path, "s", user=user, org=org)
    assert both.approvals is not None
    assert both.approvals.value.webhook == "https://approvals.example.com/org"
    assert both.approvals.source.layer == "org"
    mine = server(tmp_path, "s", user=user)
    assert mine.approvals is not None
    assert mine.approvals.value.webhook == "http://127.0.0.1:1/user"
    assert server(tmp_path, "s", user="").approvals is None


async def test_through_warden_a_result_too_large_to_scan_is_refused(tmp_path: Path) -> None:
    host = await leak_session(tmp_path, "[defaults.content]\nmax_scan_bytes = 4096\n")
    small = await host.call(2, "big", {"kb": 1})
    large = await host.call(3, "big", {"kb": 8})
    assert await host.close() == 0
    assert "result" in small
    assert "more than content.max_scan_bytes (4096) warden scans; it is refused rather than passed unscanned" in \
        large["error"]["message"]  # type: ignore[index]


@settings(max_examples=300, deadline=None)
@given(pattern=st.text(alphabet=st.sampled_from(list("ab()[]{}*+?|\\^$.:=!<>,-0123456789PxdswkQE")), max_size=24))
def test_a_policy_regex_compiles_with_re2_or_is_refused_as_a_value_error(pattern: str) -> None:
    """Whatever a policy file holds: RE2 compiles it (and then matches in linear time) or it is refused with a
    ValueError, which pydantic turns into the file:line problem -- never another exception."""
    from warden.policy._regex import check_linear, linear_fullmatch

    problem: str | None = None
    try:
        check_linear(pattern)
    except ValueError as exc:
        problem = str(exc)
    if problem is not None:
        assert problem.startswith(("invalid regular expression for RE2", "pattern longer"))
    else:
        assert linear_fullmatch(pattern, "ab" * 500) in (True, False)


def test_output_schema_patterns_run_in_linear_time_or_the_result_is_refused(tmp_path: Path) -> None:
    """A server writes its outputSchema: its patterns run under RE2 (jsonschema's own ``re`` would backtrack on a
    crafted result), and one RE2 cannot run means the redaction cannot be checked: refused."""
    scan, limit = scanner(tmp_path)
    evil = {"type": "object", "properties": {"token": {"type": "string"},
                                             "note": {"type": "string", "pattern": "^(a+)+$"}}}
    raw = msgspec.json.encode({"content": [], "structuredContent": {"token": AWS, "note": "a" * 40 + "!"}})
    out = screen_result(scan, raw, max_scan_bytes=limit, output_schema=evil)
    assert out.raw is not None  # both invalid (the note never matched): delivered redacted, in linear time
    backref = {"type": "object", "properties": {"token": {"type": "string"}},
               "patternProperties": {r"^(x)\1$": {"type": "string"}}}
    refused = screen_result(scan, msgspec.json.encode({"structuredContent": {"token": AWS}}), max_scan_bytes=limit,
                            output_schema=backref)
    assert refused.raw is None
    assert refused.refused is not None
    assert "cannot check in linear time" in refused.refused
    remote = {"$ref": "https://schemas.example.com/x.json"}
    unresolvable = screen_result(scan, msgspec.json.encode({"structuredContent": {"token": AWS}}),
                                 max_scan_bytes=limit, output_schema=remote)
    assert unresolvable.raw is not None  # never fetched; an unresolvable schema says nothing, redaction stands
