"""Env values in a config (``${secret:NAME}``, ``${env:NAME}``, literals): the grammar, resolution at launch, the
"host meant it for the server" warning, and ``warden secrets`` / ``policy check`` / ``policy explain`` around them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import WARDEN, sandbox_writable
from warden.errors import ConfigError
from warden.policy import SandboxSettings, load_effective_policy, resolve_env, unpassed_env, unpassed_env_warning
from warden.policy._values import check_env_table, check_env_value
from warden.sandbox import check_sandbox_settings
from warden.sandbox._uids import SANDBOX_GID
from warden.secrets import SecretStore

CANARY = "canary-Zq8vX2mP-value"


def warden(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([WARDEN, *args], capture_output=True, text=True, input=stdin, timeout=60, check=False,
                          env={**os.environ, **(env or {})})


def config(text: str) -> Path:
    path = Path(os.environ["WARDEN_CONFIG"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True)
literal = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12).filter(
    lambda s: "${" not in s and "\x00" not in s and not s.endswith("$"))
parts = st.lists(st.one_of(literal, names.map(lambda n: "${env:" + n + "}"),
                           names.map(lambda n: "${secret:" + n + "}")), max_size=5)


@given(parts, st.dictionaries(names, literal, max_size=4), st.dictionaries(names, literal, max_size=4))
@settings(max_examples=400, deadline=None)
def test_a_value_resolves_to_its_parts(pieces: list[str], host_env: dict[str, str],
                                       secrets: dict[str, str]) -> None:
    value = "".join(pieces)
    assert check_env_value(value) == value
    missing_secret = [p[9:-1] for p in pieces if p.startswith("${secret:") and p[9:-1] not in secrets]
    missing_env = [p[6:-1] for p in pieces if p.startswith("${env:") and p[6:-1] not in host_env]

    def secret(name: str) -> str:
        if name not in secrets:
            raise ConfigError(f"there is no secret {name!r}")
        return secrets[name]

    if missing_secret:
        with pytest.raises(ConfigError, match="there is no secret"):
            resolve_env({"V": value}, host_env, secret)
        return
    env, missing = resolve_env({"V": value}, host_env, secret)
    if missing_env:
        assert (env, missing) == ({}, ["V"])
        return
    expected = "".join(secrets[p[9:-1]] if p.startswith("${secret:") else host_env[p[6:-1]] if p.startswith("${env:")
                       else p for p in pieces)
    assert env == {"V": expected}
    assert missing == []


@pytest.mark.parametrize(("value", "message"), [
    ("${input:token}", "only ${secret:NAME}"),
    ("${workspaceFolder}/x", "only ${secret:NAME}"),
    ("${secret:}", "does not name a secret"),
    ("${env:1X}", "does not name a variable"),
    ("a\x00b", "NUL"),
])
def test_other_references_are_refused(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("$", r"\$").replace("{", r"\{")):
        check_env_value(value)


def test_a_literal_under_a_secret_name_is_refused() -> None:
    with pytest.raises(ValueError, match="warden secrets set GITHUB_TOKEN") as refused:
        check_env_table({"GITHUB_TOKEN": "ghp_0123456789"})
    assert "ghp_0123456789" not in str(refused.value)
    check_env_table({"DEBUG": "1", "MEMORY_FILE_PATH": "/x/m.json", "GITHUB_TOKEN": "${secret:gh}"})


def test_config_env_table_is_loaded_with_its_references(isolated_env: Path) -> None:
    path = config('[servers.gh]\ncommand = "npx"\n'
                  'env = { GITHUB_PERSONAL_ACCESS_TOKEN = "${secret:gh}", DEBUG = "1" }\n')
    sp = load_effective_policy(path, None, {}).server("gh")
    assert sp.env_names.value == ("GITHUB_PERSONAL_ACCESS_TOKEN", "DEBUG")
    assert sp.env_values == {"GITHUB_PERSONAL_ACCESS_TOKEN": "${secret:gh}", "DEBUG": "1"}
    listed = load_effective_policy(config('[servers.gh]\nenv = ["A"]\n'), None, {}).server("gh")
    assert listed.env_values == {"A": "${env:A}"}


def test_a_secret_in_clear_in_a_config_is_refused_with_its_line(isolated_env: Path) -> None:
    path = config('[servers.gh]\ncommand = "npx"\nenv = { API_TOKEN = "abcdefgh12345678" }\n')
    r = warden("policy", "check", str(path))
    assert r.returncode == 2
    assert f"{path}:3" in r.stderr
    assert "warden secrets set API_TOKEN" in r.stderr
    assert "abcdefgh12345678" not in r.stderr


def test_unpassed_env_names_what_the_host_meant_for_the_server() -> None:
    host_env = {"PATH": "/usr/bin", "HOME": "/root", "GITHUB_PERSONAL_ACCESS_TOKEN": CANARY, "LANG": "C",
                "XDG_RUNTIME_DIR": "/run", "AWS_SECRET_ACCESS_KEY": CANARY, "MEMORY_FILE_PATH": "/m.json"}
    argv = ("npx", "-y", "@modelcontextprotocol/server-github")
    assert unpassed_env("github", argv, {}, host_env) == ["GITHUB_PERSONAL_ACCESS_TOKEN"]
    assert unpassed_env("github", argv, {"GITHUB_PERSONAL_ACCESS_TOKEN": "${env:X}"}, host_env) == []
    assert unpassed_env("mem", ("npx", "-y", "@modelcontextprotocol/server-memory"), {}, host_env) == \
        ["MEMORY_FILE_PATH"]
    # the directories of an interpreter or script path are not the server's name (CI ran from /check/work)
    noisy = {**host_env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "NODE_ENV": "production", "WORK_DIR": "/w"}
    assert unpassed_env("github", ("/check/work/main/.venv/bin/python3", "/check/work/tests/env_server.py"), {},
                        noisy) == ["GITHUB_PERSONAL_ACCESS_TOKEN"]
    warning = unpassed_env_warning("github", argv, {"DEBUG": "${env:DEBUG}"}, host_env, "/c/warden.toml")
    assert warning is not None
    assert CANARY not in warning
    assert 'under [servers.github] in /c/warden.toml: env = ["DEBUG", "GITHUB_PERSONAL_ACCESS_TOKEN"]' in warning
    table = unpassed_env_warning("github", argv, {"X": "${secret:x}"}, host_env, "/c/warden.toml")
    assert table is not None
    assert table.endswith('env = { X = "${secret:x}", GITHUB_PERSONAL_ACCESS_TOKEN = '
                          '"${env:GITHUB_PERSONAL_ACCESS_TOKEN}" }')


def test_secrets_cli_set_list_rm(isolated_env: Path) -> None:
    r = warden("secrets", "set", "gh.token", stdin=CANARY + "\n")
    assert r.returncode == 0, r.stderr
    assert "${secret:gh.token}" in r.stdout
    assert SecretStore(isolated_env, keyring=None).get("gh.token") == CANARY, "the final newline is dropped"
    r = warden("secrets", "set", "other", "--from-env", "MY_VALUE", env={"MY_VALUE": CANARY + "2"})
    assert r.returncode == 0, r.stderr
    listed = warden("secrets", "list")
    assert listed.stdout.splitlines() == ["gh.token", "other"]
    assert CANARY not in listed.stdout + listed.stderr
    assert warden("secrets", "rm", "gh.token").returncode == 0
    gone = warden("secrets", "rm", "gh.token")
    assert gone.returncode == 2
    assert "there is no secret 'gh.token'" in gone.stderr
    short = warden("secrets", "set", "x", stdin="short")
    assert short.returncode == 2
    assert "too short to be redacted" in short.stderr
    unset = warden("secrets", "set", "x", "--from-env", "NOPE_NOT_SET")
    assert unset.returncode == 2
    assert "NOPE_NOT_SET: that variable is not set" in unset.stderr


def test_policy_check_refuses_what_run_refuses(isolated_env: Path, tmp_path: Path) -> None:
    outer = tmp_path / "project"
    (outer / "docs").mkdir(parents=True)
    path = config(f'[servers.fs]\ncommand = "npx"\n[servers.fs.sandbox]\nwrite_dirs = ["{outer}"]\n'
                  f'read_dirs = ["{outer / "docs"}"]\n'
                  f'[servers.gh]\ncommand = "npx"\nenv = {{ T = "${{secret:missing.one}}" }}\n'
                  f'[servers.gone]\ncommand = "npx"\n[servers.gone.sandbox]\nread_dirs = ["{tmp_path / "nope"}"]\n')
    r = warden("policy", "check", str(path))
    assert r.returncode == 2
    with pytest.raises(Exception) as at_launch:  # noqa: PT011 - the exact message is compared below
        check_sandbox_settings(SandboxSettings(write_dirs=(str(outer),), read_dirs=(str(outer / "docs"),)),
                           state_dir=isolated_env)
    launch_message = str(at_launch.value)
    assert f"{path}:1: servers.fs: {launch_message}" in r.stderr, "the same words as the launch refusal"
    assert "lies inside the writable" in launch_message
    assert f"{path}:6: servers.gh: env T refers to ${{secret:missing.one}}, which is not set (fix: warden secrets " \
           "set missing.one)" in r.stderr
    assert f"servers.gone: read_dirs entry {tmp_path / 'nope'} does not exist" in r.stderr
    template = warden("policy", "check", "--file-only", str(path))
    assert template.returncode == 0, template.stderr


def test_policy_check_applies_the_org_ceilings(isolated_env: Path, tmp_path: Path) -> None:
    org = tmp_path / "org.toml"
    org.write_text('[org]\ncommands = ["uvx *"]\n')
    path = config('[servers.a]\ncommand = "npx"\nargs = ["-y", "x"]\n')
    r = warden("policy", "check", "--org-policy", str(org), str(path))
    assert r.returncode == 2
    assert "servers.a: launch refused: command 'npx -y x' is not among the commands the org policy allows" in r.stderr


def test_explain_a_server_started_with_a_command_after_dashes(isolated_env: Path, tmp_path: Path) -> None:
    config("[servers.adhoc.tools]\ndeny = [\"rm\"]\n")
    before = warden("policy", "explain", "--server", "adhoc")
    assert before.returncode == 0
    assert "-- CMD ARGS" in before.stdout, "says how to decide the launch instead of a bare deny"
    given = warden("policy", "explain", "--name", "adhoc", "--", "uvx", "mcp-server-time")
    assert "-> allow: launch of 'uvx mcp-server-time' allowed" in given.stdout
    from warden.policy import PinStore
    PinStore(isolated_env).observe_server("adhoc", {"command": "uvx", "args": ["mcp-server-time"], "env": []},
                                          on_new="ask")
    pinned = warden("policy", "explain", "--server", "adhoc")
    assert "-> allow: launch of 'uvx mcp-server-time' allowed" in pinned.stdout
    assert "command from the identity pinned at its last launch" in pinned.stdout
    assert "deny: no command" not in pinned.stdout


def test_policy_check_and_run_agree_on_the_memory_budget(isolated_env: Path) -> None:
    """memory_mb that the tmpfs sizes use up: ``warden run`` refuses it where memory is bounded per process, and
    accepts it where a cgroup bounds the sandbox; ``policy check`` says the same on this machine."""
    from tests.support import RAWSERVER
    path = config(f'[servers.m]\ncommand = "{RAWSERVER[0]}"\nargs = ["{RAWSERVER[1]}"]\non_new = "tofu"\n'
                  '[servers.m.sandbox.limits]\nmemory_mb = 64\ntmp_size_mb = 64\n')
    checked = warden("policy", "check", str(path))
    ran = subprocess.run([WARDEN, "run", "--name", "m"], input='{"jsonrpc":"2.0","id":1,"method":"initialize",'
                         '"params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t",'
                         '"version":"1"}}}\n', capture_output=True, text=True, timeout=60, check=False)
    refused_at_launch = "leaves" in ran.stderr and "memory_mb = 64" in ran.stderr
    assert (checked.returncode != 0) == refused_at_launch, (checked.stderr, ran.stderr[-2000:])
    if refused_at_launch:
        assert "memory_mb = 64 leaves" in checked.stderr


def test_policy_check_refuses_a_write_dir_no_sandbox_uid_could_write(isolated_env: Path, tmp_path: Path) -> None:
    """As root, warden runs a server as its write dir's owner, or as a dedicated uid in the sandbox group when root
    owns it: a root-owned write dir without that group is refused by ``policy check`` in ``run``'s words (the
    server would meet EACCES), and passes once the group may write it. Not root, the dir is the user's own and
    passes as it is."""
    project = tmp_path / "project"
    project.mkdir()
    path = config(f'[servers.fs]\ncommand = "npx"\nargs = ["-y", "@modelcontextprotocol/server-filesystem"]\n'
                  f'[servers.fs.sandbox]\nwrite_dirs = ["{project}"]\n')  # a bare npx: refused as no package
    r = warden("policy", "check", str(path))
    if os.geteuid() == 0:
        assert r.returncode == 2
        assert f"{path}:1: servers.fs: write dir {project} belongs to root, and warden never runs a server as " \
               "root" in r.stderr
        assert f"chgrp {SANDBOX_GID} {project} && chmod g+rwxs {project}" in r.stderr
        sandbox_writable(project)
        r = warden("policy", "check", str(path))
    assert r.returncode == 0, r.stderr
