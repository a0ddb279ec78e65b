"""Policy files: file:line errors, the TOML line locator, globs, shipped policies, check and explain."""

from __future__ import annotations

import os
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.policy.helpers import policy_from, warden, write
from tests.support import ROOT
from warden.errors import ConfigError
from warden.paths import absolute_path
from warden.policy import GlobSyntaxError, compile_glob, glob_match, load_effective_policy, load_policy_file
from warden.policy._toml import key_lines

POLICIES = ROOT / "policies"


def test_unknown_keys_and_bad_globs_are_reported_with_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", """\
        [defaults]
        on_new = "ask"

        [servers.fs.tools]
        alow = ["read_*"]
        deny = ["ok", "[unclosed"]

        [[servers.fs.arguments]]
        tool = "*"
        argument = "path"
        undr = ["/x"]
        """)
    with pytest.raises(ConfigError) as info:
        load_policy_file(path)
    msg = info.value.message
    assert f"{path}:5: servers.fs.tools.alow: unknown key 'alow' (did you mean 'allow'?)" in msg
    assert f"{path}:6: servers.fs.tools.deny[1]: '[' at position 0 is never closed" in msg
    assert f"{path}:11: servers.fs.arguments[0].undr: unknown key 'undr' (did you mean 'under'?)" in msg
    assert msg.index(":5:") < msg.index(":6:") < msg.index(":11:")


@pytest.mark.parametrize(("pattern", "error"), [
    ("", "empty pattern"), ("a[b", "never closed"), ("a]", "closes no"), ("[]", "empty character class"),
    ("[z-a]", "reversed range"), ("x\\", "lone"), ("**", "single '\\*'"), ("a\tb", "control or whitespace"),
])
def test_bad_globs(pattern: str, error: str) -> None:
    with pytest.raises(GlobSyntaxError, match=error):
        compile_glob(pattern)


def test_glob_semantics() -> None:
    assert glob_match("read_*", "read_file")
    assert not glob_match("read_*", "xread_file")
    assert glob_match("file:///home/*", "file:///home/a/b")
    assert glob_match("[!a-c]x", "dx")
    assert not glob_match("[!a-c]x", "bx")
    assert glob_match("a\\*", "a*")
    assert not glob_match("a\\*", "ab")
    assert glob_match("?", "é")
    assert not glob_match("?", "")


def test_launch_settings_are_refused_in_an_org_policy(tmp_path: Path) -> None:
    path = write(tmp_path / "org.toml", """\
        [org]
        sandbox_kinds = ["bwrap"]
        [servers.x]
        command = "evil"
        """)
    with pytest.raises(ConfigError, match=r"org.toml:4: servers.x.command: 'command' is a launch setting"):
        load_policy_file(path)


def test_org_table_refused_in_user_config(tmp_path: Path) -> None:
    path = write(tmp_path / "u.toml", "[org]\ncommands = ['x']\n")
    with pytest.raises(ConfigError, match=r"u.toml:1: org: the \[org\] table is only valid in an org policy"):
        load_policy_file(path, "user")


@pytest.mark.parametrize(("text", "error"), [
    ("[servers.x]\nenv = ['WARDEN_STATE_DIR']\n", "warden's own variables"),
    ("[servers.x]\nenv = ['TOKEN=abc']\n", "not an environment variable name"),
    ("[servers.'bad name']\ncommand='x'\n", "server name 'bad name'"),
    ("[defaults.capabilities]\nroots = ['relative']\n", "must be an absolute path"),
    ("[defaults.capabilities]\nroots = ['/a/../b']\n", "must not contain '..'"),
    ("[servers.x.sandbox]\nread_dirs = ['/home/u/../../etc']\n", "must not contain '..'"),
    ("[servers.x.sandbox]\nwrite_dirs = ['data']\n", "must be an absolute path"),
    ("[servers.x.sandbox]\nworkdir = \"/srv/\\u0000\"\n", "contains a NUL or newline"),
    ("[[servers.x.arguments]]\ntool='*'\nargument='p'\n", "needs at least one of"),
    ("[[servers.x.arguments]]\ntool='*'\nargument='p'\npattern='('\n", "invalid regular expression"),
    ("[servers.x.sandbox]\nkind='chroot'\n", "Input should be"),
    ("[defaults]\ncommand='x'\n", "cannot name a command"),
    ("x = [1,", "invalid TOML"),
])
def test_invalid_values(tmp_path: Path, text: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        load_policy_file(write(tmp_path / "u.toml", text), "user")


@pytest.mark.parametrize(("text", "hint"), [
    ("x = [1,", "fix the syntax at its last line (a value, quote or bracket left open)"),
    ("x = 1\ny = \"open", "fix the syntax at its last line (a value, quote or bracket left open)"),
    ("x = 1\ny = = 2\nz = 3\n", "fix the syntax at the line shown"),
])
def test_a_toml_error_s_hint_points_where_the_error_says(tmp_path: Path, text: str, hint: str) -> None:
    """tomllib names a line, or says "at end of document": the hint said "the line shown" for both (a new user's
    trial found no line shown)."""
    with pytest.raises(ConfigError) as refused:
        load_policy_file(write(tmp_path / "u.toml", text), "user")
    assert refused.value.hint == hint


@settings(max_examples=500)
@given(st.text(alphabet="/.ab\0\n", max_size=16))
def test_a_written_path_is_refused_or_comes_back_absolute_normalized_and_unchanged_by_a_second_pass(text: str) -> None:
    """One check for every path a config, policy or profile names (sandbox dirs, org ceilings, roots, profiles)."""
    try:
        path = absolute_path(text)
    except ValueError:
        assert not text.startswith("/") or "\0" in text or "\n" in text or ".." in text.split("/")
        return
    assert path.startswith("/")
    assert not path.startswith("//")
    assert ".." not in path.split("/")
    assert "." not in path.split("/")[1:]
    assert path == "/" or ("//" not in path and not path.endswith("/"))
    assert absolute_path(path) == path
    assert os.path.realpath(path) == os.path.realpath(text)


def test_policy_check_cli(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.toml", "[servers.fs.tools]\nalow = ['x']\ndeny = ['a[']\n")
    good = POLICIES / "default.toml"
    r = warden("policy", "check", str(good), str(bad))
    assert r.returncode == 2
    assert f"{good}: ok (user config, 0 server(s))" in r.stdout
    assert f"{bad}:2: servers.fs.tools.alow: unknown key 'alow'" in r.stderr
    assert f"{bad}:3: servers.fs.tools.deny[0]: '[' at position 1 is never closed" in r.stderr


def test_shipped_policies_are_valid() -> None:
    files = sorted(POLICIES.glob("*.toml")) + sorted((POLICIES / "examples").glob("*.toml"))
    assert len(files) >= 6
    r = warden("policy", "check", "--file-only", *map(str, files))  # templates: /home/me/project is not here
    assert r.returncode == 0, r.stderr
    assert "examples/org.toml: ok (org policy" in r.stdout


def test_default_toml_says_what_no_config_does(tmp_path: Path) -> None:
    with_file = load_effective_policy(POLICIES / "default.toml", None,
                                      {}).server("x", ("cmd",))
    without = load_effective_policy(tmp_path / "missing.toml", None, {}).server("x", ("cmd",))
    a, b = with_file.to_json(), without.to_json()
    a.pop("files"), b.pop("files")
    for kind in ("tools", "prompts", "resources"):
        for layer in a[kind]:
            layer.pop("layer")
        for layer in b[kind]:
            layer.pop("layer")
    assert a == b


def test_explain_names_the_deciding_rule(tmp_path: Path) -> None:
    org = write(tmp_path / "org.toml", """\
        [org]
        sandbox_kinds = ["bwrap"]
        [defaults.tools]
        deny = ["*exec*"]
        """)
    user = write(tmp_path / "user.toml", """\
        [servers.s]
        command = "srv"
        [servers.s.tools]
        allow = ["read_*", "run_exec"]
        confirm = ["read_secret"]
        """)
    r = warden("--config", str(user), "policy", "explain", "--server", "s", "--org-policy", str(org), "--tool",
               "run_exec")
    assert r.returncode == 0, r.stderr
    assert "tool 'run_exec' (pin approved, arguments not considered): deny" in r.stdout
    assert f"decided by: org {org}:4 (defaults.tools.deny[0])" in r.stdout
    r = warden("--config", str(user), "policy", "explain", "--server", "s", "--org-policy", str(org), "--tool",
               "write_x")
    assert f"decided by: user {user}:4 (servers.s.tools.allow)" in r.stdout
    r = warden("--config", str(user), "policy", "explain", "--server", "s", "--org-policy", str(org), "--tool",
               "read_secret")
    assert "allowed after a human confirms each call" in r.stdout
    assert f"decided by: user {user}:5 (servers.s.tools.confirm[0])" in r.stdout


def test_missing_explicit_org_policy_fails_closed(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"org policy .* does not exist"):
        load_effective_policy(None, None, {"WARDEN_ORG_POLICY": str(tmp_path / "nope.toml")})


def test_missing_explicit_config_fails_closed(tmp_path: Path) -> None:
    """``--config`` with a mistyped path is refused, not read as "no config" (which would drop its deny rules);
    a missing default config is the shipped defaults."""
    missing = tmp_path / "typo.toml"
    r = warden("--config", str(missing), "policy", "explain", "--server", "s")
    assert r.returncode == ConfigError.exit_code, r.stderr
    assert f"config file {missing} does not exist" in r.stderr
    assert load_effective_policy(missing).server("s", ["srv"]).on_new.source.layer == "default"


def test_ad_hoc_server_gets_defaults_and_org_ceilings(tmp_path: Path) -> None:
    p = policy_from(tmp_path, user="[servers.other]\ncommand='x'\n",
                    org="[org]\ncommands=['npx *']\n[defaults]\non_new='ask'\n")
    sp = p.server("adhoc", ["npx", "-y", "pkg"])
    assert sp.declared_argv is None
    assert sp.argv == ("npx", "-y", "pkg")
    assert sp.on_new.value == "ask"
    with pytest.raises(ConfigError, match="server name"):
        p.server("bad/name", ["x"])


# --- the line locator, property-tested against tomllib ---------------------------------------------------------

keys = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True) | st.sampled_from(["a.b", "with space", "é"])
scalars = st.integers(-5, 5) | st.booleans() | st.text(alphabet="ab #=[]{}\"'\n\\", max_size=6)


def _key(k: str) -> str:
    return k if k.replace("_", "a").isalnum() and k.isascii() else '"' + k.replace('"', '\\"') + '"'


def _val(v: Any, style: int) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        if style == 1 and "'''" not in v and not v.endswith("'") and not v.startswith("\n"):
            return "'''" + v + "'''"
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, list):
        sep = ",\n  # c\n  " if style == 2 else ", "
        return "[" + sep.join(_val(x, style) for x in v) + "]"
    raise AssertionError(v)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(keys, st.dictionaries(keys, scalars | st.lists(scalars, max_size=3), max_size=4),
                       min_size=1, max_size=4), st.integers(0, 2))
def test_key_lines_finds_every_key(doc: dict[str, dict[str, Any]], style: int) -> None:
    text = "# generated\n"
    expected: dict[tuple[str, ...], int] = {}
    for table, body in doc.items():
        expected[(table,)] = text.count("\n") + 1
        text += f"[{_key(table)}]  # table\n"
        for k, v in body.items():
            text += "\n"
            expected[(table, k)] = text.count("\n") + 1
            text += f"{_key(k)} = {_val(v, style)}\n"
    assert tomllib.loads(text) == doc
    found = key_lines(text)
    for path, line in expected.items():
        assert found[path] == line, (path, text)


def test_key_lines_inline_tables_and_array_tables() -> None:
    text = 'a = { b = 1, c = [ { d = 2 } ] }\n[[t]]\nx = 1\n[[t]]\nx = 2\n[t.s]\ny = """\nk = 3\n"""\n'
    found = key_lines(text)
    assert found[("a", "c", 0, "d")] == 1
    assert found[("t", 0, "x")] == 3
    assert found[("t", 1, "x")] == 5
    assert found[("t", 1, "s", "y")] == 7
    assert ("t", 1, "s", "k") not in found


def test_a_glob_matches_in_linear_time_whatever_name_it_is_given() -> None:
    """``*a*a*a*a*a*a*a*a*b`` against a 60-character name that almost fits: matched by RE2 in linear time (before:
    Python's backtracking ``re`` took about a minute on this machine, on the gateway's one thread, for a name a
    server or a model chooses)."""
    started = time.perf_counter()
    assert not glob_match("*a*a*a*a*a*a*a*a*b", "a" * 60)
    assert glob_match("*a*a*a*a*a*a*a*a*b", "a" * 60 + "b")
    assert time.perf_counter() - started < 10  # a bound on a hang, not a speed measurement (old: ~1 min)


@pytest.mark.parametrize(("pattern", "name"), [
    ("tool name", "tool name"), ("é*ü", "éxxü"), ("a.b", "a.b"), ("[.-]x", "-x"), ("\\*", "*"), ("a?c", "a\nc"),
    ("(x)|y", "(x)|y"), ("{a}", "{a}"), ("$^", "$^"), ("#&~", "#&~"),
])
def test_glob_literals_are_literal_under_the_linear_engine(pattern: str, name: str) -> None:
    assert glob_match(pattern, name)
    assert not glob_match(pattern, name + "x")
