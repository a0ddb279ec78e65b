"""Issue 11 items 1 and 2 through ``warden run`` with a hostile server (tests/fixtures/leaky_server.py): rows 43-48
of the attack battery (sandbox-and-audit.md B.8, extended; rows 35-42 are the sandbox's).

One scenario runs once for the module, the way a user meets it: a canary secret handed by the policy's
``env = ["LEAK_TOKEN"]`` and another kept in warden's secrets store; a first ``warden run`` sees the server's lists
(pending), ``warden pins approve --yes --accept-findings`` in another process (which never saw ``LEAK_TOKEN``)
approves, a second ``warden run`` calls the tools (a result, a logging notification, an error with ``data``, a crash
with the secret on stderr), then every view is read: ``pins list|show``, ``audit show|tail`` (table and
``--json``). Each test asserts one channel: 43 messages to the host, 44 warden's stderr, 45 the audit log, 46 the
pin store, 47 forged names (refused, never forwarded, escaped in ``audit show|tail``), 48 twin names.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.support import FIXTURES, PYTHON, WARDEN, RawHost, sandbox_readable
from warden.policy.pins import digest
from warden.secrets import SecretStore

TOKEN = "canary-env-Qz7w9LmX2"
KNOWN = "canary-store-Vb4n8KpR6"
SPELLINGS = [s for v in (TOKEN, KNOWN) for s in (v, json.dumps(v)[1:-1], v.replace("-", "\\u002d"))]
FORGED = ["nl\nFORGED_LINE [approved]", "erase\x1b[2K\x1b[1Gok", "link\x1b]8;;http://evil.invalid/\x1b\\click\x1b]8;;\x1b\\",
          "rtl\u202etxt.exe", "zw\u200bsp"]
TWINS = ["lookup", "Lookup", "lookup ", "l00kup"]


@dataclass
class Scenario:
    state: Path
    host_messages: list[dict[str, Any]] = field(default_factory=list)
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    stderr: str = ""
    views: dict[str, str] = field(default_factory=dict)


def _env(home: Path, **extra: str) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "WARDEN_STATE_DIR": str(home / "state"),
            "WARDEN_CONFIG": str(home / "config" / "warden.toml"), "XDG_STATE_HOME": str(home / "xdg-state"),
            "XDG_CONFIG_HOME": str(home / "xdg-config"), **extra}


def _cli(home: Path, *args: str) -> str:
    # wide enough that no value folds in its table cell: the views are searched for each value's escaped form whole
    done = subprocess.run([WARDEN, *args], capture_output=True, text=True, env=_env(home, COLUMNS="1000"),
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


async def _host_session(scenario: Scenario, home: Path, control: Path, calls: list[str], log: Path) -> None:
    argv = [WARDEN, "run", "--name", "leaky", "--", PYTHON, str(FIXTURES / "leaky_server.py"), str(control)]
    with log.open("ab") as stderr:
        host = await RawHost.start(argv, env=_env(home, LEAK_TOKEN=TOKEN), stderr=stderr)
        await host.initialize()
        await host.request(1, "tools/list")
        scenario.answers["tools/list"] = await host.response(1)
        await host.request(2, "resources/list")
        scenario.answers["resources/list"] = await host.response(2)
        for i, name in enumerate(calls, start=10):
            scenario.answers[name] = await host.call(i, name)
        await host.close()
        scenario.host_messages += host.seen


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    home = tmp_path_factory.mktemp("leaky")
    home.chmod(0o700)
    control = sandbox_readable(home.parent / f"{home.name}-control")
    control.mkdir(exist_ok=True)
    control.chmod(0o755)
    (control / "known.txt").write_text(KNOWN)
    (control / "known.txt").chmod(0o644)
    config = home / "config" / "warden.toml"
    config.parent.mkdir()
    config.write_text(f'[defaults]\non_new = "ask"\n\n[defaults.sandbox]\nread_dirs = ["{control}"]\n\n'
                      '[servers.leaky]\nenv = ["LEAK_TOKEN"]\n')
    (home / "state").mkdir(mode=0o700)
    SecretStore(home / "state", keyring=None).set("KNOWN_TOKEN", KNOWN)
    scenario = Scenario(home / "state")
    log = home / "warden-stderr.log"
    trio.run(_host_session, scenario, home, control, [], log)
    scenario.views["pins approve"] = _cli(home, "pins", "approve", "leaky", "--yes", "--accept-findings")
    trio.run(_host_session, scenario, home, control, ["say", "fail", "crash"], log)
    scenario.stderr = log.read_text(errors="replace")
    scenario.views |= {
        "pins list": _cli(home, "pins", "list"), "pins show": _cli(home, "pins", "show", "leaky", "say"),
        "audit show": _cli(home, "audit", "show"), "audit show --json": _cli(home, "audit", "show", "--json"),
        "audit tail": _cli(home, "audit", "tail", "-n", "500")}
    return scenario


def _assert_clean(text: str, where: str) -> None:
    for spelling in SPELLINGS:
        assert spelling not in text, f"{where} holds a secret ({spelling!r})"


def test_B08_43_secrets_never_reach_the_host(scenario: Scenario) -> None:
    for message in scenario.host_messages:
        _assert_clean(json.dumps(message, ensure_ascii=False), "a host message")
    say = scenario.answers["say"]["result"]["content"][0]["text"]  # type: ignore[index]
    # a tool result is cut first by the result-side content rule (issue 17), which names its rule
    assert say == "env=[REDACTED:secrets_registry] store=[REDACTED:secrets_registry]"
    logging = [m for m in scenario.host_messages if m.get("method") == "notifications/message"
               and m["params"].get("logger") == "leaky"]  # type: ignore[index, union-attr]
    assert [m["params"]["data"] for m in logging] == ["logging env=[REDACTED] store=[REDACTED]"]  # type: ignore[index]
    assert scenario.answers["fail"]["error"] == {"code": -32000, "message": "bad token [REDACTED]",
                                                 "data": {"store": "[REDACTED]",
                                                          "both": ["env=[REDACTED] store=[REDACTED]"]}}
    crash = json.dumps(scenario.answers["crash"]["error"])
    assert "exited with status 3" in crash
    assert "fatal: cannot use env=[REDACTED] store=[REDACTED]" in crash
    said = json.dumps(scenario.answers["tools/list"])
    assert "Says things (debug: env=[REDACTED] store=[REDACTED])" in said


def test_B08_44_secrets_and_escapes_never_reach_warden_s_stderr(scenario: Scenario) -> None:
    _assert_clean(scenario.stderr, "warden's stderr")
    assert "debug env=[REDACTED] store=[REDACTED]" in scenario.stderr
    assert "\x1b" not in scenario.stderr
    assert "\u202e" not in scenario.stderr
    assert "\\x1b[2K\\x1b[1Gwarden: INFO: forged log line" in scenario.stderr  # shown, not obeyed
    assert not any(line.startswith("warden: INFO: forged") for line in scenario.stderr.splitlines())


def test_B08_45_secrets_never_reach_the_audit_log_whoever_writes(scenario: Scenario) -> None:
    raw = (scenario.state / "audit" / "entries.log").read_bytes()
    _assert_clean(raw.decode(errors="replace"), "entries.log")
    records = [json.loads(line) for line in scenario.views["audit show --json"].splitlines()]
    approved = [r for r in records if r["event"] == "pin.approved" and r.get("consent") == "terminal"]
    assert {r["target"] for r in approved} >= {"say", "fail", "crash", "mem://notes/plain"}
    for view in ("pins approve", "audit show", "audit show --json", "audit tail"):
        _assert_clean(scenario.views[view], view)


def test_B08_46_the_pin_store_keeps_the_real_digest_of_a_redacted_definition(scenario: Scenario) -> None:
    text = (scenario.state / "pins.json").read_text()
    _assert_clean(text, "pins.json")
    say = json.loads(text)["servers"]["leaky"]["tool:say"]
    assert say["redacted"] is True
    assert say["state"] == "approved"
    assert say["definition"]["description"] == "Says things (debug: env=[REDACTED] store=[REDACTED])"
    real = {"name": "say", "description": f"Says things (debug: env={TOKEN} store={KNOWN})",
            "inputSchema": {"type": "object"}}
    assert say["digest"] == say["approved_digest"] == digest(real)
    keys = set(json.loads(text)["servers"]["leaky"])
    assert "resource:mem://notes/plain" in keys
    assert not any("get_" in k or "notes/canary" in k for k in keys)
    for view in ("pins list", "pins show"):
        _assert_clean(scenario.views[view], view)


def test_B08_47_forged_names_are_refused_and_shown_escaped(scenario: Scenario) -> None:
    listed = {t["name"] for t in scenario.answers["tools/list"]["result"]["tools"]}  # type: ignore[index]
    assert listed == {"say", "fail", "crash"}
    keys = set(json.loads((scenario.state / "pins.json").read_text())["servers"]["leaky"])
    assert not any(f"tool:{name}" in keys for name in FORGED + TWINS)
    for view in ("audit show", "audit tail"):
        out = scenario.views[view]
        for raw in ("\x1b", "\u202e", "\u200b"):
            assert raw not in out, (view, raw)
        assert not any(line.startswith("FORGED_LINE") for line in out.splitlines()), view
        for shown in ("nl\\nFORGED_LINE [approved]", "erase\\x1b[2K\\x1b[1Gok", "rtl<U+202E>txt.exe",
                      "link\\x1b]8;;http://evil.invalid/\\x1b\\click\\x1b]8;;\\x1b\\", "zw<U+200B>sp"):
            assert shown in out, (view, shown)
    as_json = scenario.views["audit show --json"]
    assert "[names: charset]" in as_json
    for raw in ("\x1b", "\u202e", "\u200b", "\n\"", "FORGED_LINE [approved]\n"):
        assert raw not in as_json, raw
    targets = {json.loads(line).get("target") for line in as_json.splitlines()}
    assert set(FORGED) <= targets  # the same values, written as JSON escapes


def test_B08_48_twin_names_are_all_refused(scenario: Scenario) -> None:
    listed = {t["name"] for t in scenario.answers["tools/list"]["result"]["tools"]}  # type: ignore[index]
    assert not listed & set(TWINS)
    twins = [json.loads(line) for line in scenario.views["audit show --json"].splitlines()
             if "[names: twin]" in line]
    assert {r["target"] for r in twins} >= {"lookup", "Lookup", "l00kup"}


async def test_B08_43_secrets_never_reach_an_http_host(tmp_path: Path) -> None:
    """The HTTP face's one redaction point (every response body: JSON answers and SSE events), through
    ``warden run --http`` and a legacy session."""
    from tests.http_server.warden_http import warden_http
    from tests.support import write_config

    control = tmp_path.parent / f"{tmp_path.name}-control"  # not inside the writable tmp_path
    control.mkdir()
    (control / "known.txt").write_text(KNOWN)
    sandbox_readable(control)
    write_config(tmp_path, read_dirs=(str(control),), extra='[servers.leaky]\nenv = ["LEAK_TOKEN"]\n')
    state = Path(os.environ["WARDEN_STATE_DIR"])
    state.mkdir(mode=0o700, exist_ok=True)
    SecretStore(state, keyring=None).set("KNOWN_TOKEN", KNOWN)
    env = {**os.environ, "LEAK_TOKEN": TOKEN}
    server = [PYTHON, str(FIXTURES / "leaky_server.py"), str(control)]
    bodies: list[str] = []
    for round_ in range(2):
        async with warden_http(server, "--name", "leaky", cwd=tmp_path, env=env) as w:
            session = await w.initialize()
            for i, (method, params) in enumerate([("tools/list", {}), ("resources/list", {}),
                                                  ("tools/call", {"name": "fail", "arguments": {}}),
                                                  ("tools/call", {"name": "say", "arguments": {}})]):
                response = await w.post({"jsonrpc": "2.0", "id": i + 1, "method": method, "params": params},
                                        w.headers(mcp_session_id=session))
                bodies.append(response.text)
            stderr = "\n".join(w.stderr)
        if round_ == 0:
            done = subprocess.run([WARDEN, "pins", "approve", "leaky", "--yes", "--accept-findings"],
                                  capture_output=True, text=True, timeout=120, env=env)
            assert done.returncode == 0, done.stderr
    for body in bodies:
        _assert_clean(body, "an HTTP response")
    _assert_clean(stderr, "warden's stderr")
    assert any("bad token [REDACTED]" in body for body in bodies)
    assert any("env=[REDACTED] store=[REDACTED]" in body for body in bodies[4:])
