"""Egress in the policy: ``network = "none"`` (default) or ``network.allow``, file:line for every entry, org
ceilings that refuse a wider user entry (at launch and at ``warden policy check``), ``policy explain``'s words."""

from __future__ import annotations

import ipaddress
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import WARDEN
from warden.consent import build_pin_consent
from warden.egress import parse_allow_entry
from warden.errors import ConfigError
from warden.policy import (
    Effect,
    EffectivePolicy,
    PinEntry,
    PinState,
    decide,
    explain,
    launch_facts,
    launch_manifest,
    load_policy_file,
)
from warden.policy._load import parse_policy


def policy(tmp_path: Path, org: str | None, user: str) -> EffectivePolicy:
    org_file = None
    if org is not None:
        (tmp_path / "org.toml").write_text(org)
        org_file = load_policy_file(tmp_path / "org.toml", "org")
    (tmp_path / "user.toml").write_text(user)
    return EffectivePolicy(org_file, load_policy_file(tmp_path / "user.toml", "user"))


USER = """
[servers.gh]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-github"]
network.allow = ["api.github.com:443", "*.githubusercontent.com:443"]
"""


def test_the_default_is_no_network(tmp_path: Path) -> None:
    sp = policy(tmp_path, None, "[servers.x]\ncommand = \"x\"\n").server("x")
    assert not sp.network.value.enabled
    assert sp.network.value.to_json() == "none"
    assert any("none (no network at all)" in line for line in explain(sp, None)[0])


def test_allow_entries_keep_their_lines(tmp_path: Path) -> None:
    sp = policy(tmp_path, None, USER).server("gh")
    rules = sp.network.value
    assert [e.text for e in rules.allow] == ["api.github.com:443", "*.githubusercontent.com:443"]
    assert rules.where("api.github.com:443") == f"user {tmp_path / 'user.toml'}:5 (servers.gh.network.allow[0])"
    assert decide(launch_facts(sp)).effect is Effect.ALLOW
    lines = explain(sp, None)[0]
    assert "  network                      only through warden's egress proxy, to: <- " \
           f"user {tmp_path / 'user.toml'}:5 (servers.gh.network)" in lines
    assert f"    api.github.com:443         <- user {tmp_path / 'user.toml'}:5 (servers.gh.network.allow[0])" in lines
    assert "    names may resolve to: public addresses (anything else refused)" in lines
    manifest = launch_manifest(sp.argv, (), {}, sp.network.value.to_json())
    assert manifest["network"] == {"allow": ["*.githubusercontent.com:443", "api.github.com:443"],
                                   "allow_addresses": []}


def test_a_malformed_entry_is_a_config_error_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "user.toml").write_text('[servers.x]\ncommand = "x"\nnetwork.allow = ["api.github.com"]\n')
    with pytest.raises(ConfigError, match=r"user.toml:3.*has no port: write HOST:PORT"):
        load_policy_file(tmp_path / "user.toml", "user")
    (tmp_path / "user.toml").write_text('[servers.x]\ncommand = "x"\nnetwork = "host"\n')
    with pytest.raises(ConfigError, match=r"user.toml:3"):
        load_policy_file(tmp_path / "user.toml", "user")


ORG = """
[org]
commands = ["*"]

[defaults.network]
allow = ["api.github.com:443", "*.example.org:443"]
"""


def test_the_org_ceiling_refuses_a_wider_user_entry(tmp_path: Path) -> None:
    user = USER + '\n[servers.ok]\ncommand = "x"\nnetwork.allow = ["a.example.org:443"]\n'
    eff = policy(tmp_path, ORG, user)
    sp = eff.server("gh")
    [violation] = sp.network_violations
    assert violation.message == (f"network.allow entry '*.githubusercontent.com:443' (user {tmp_path / 'user.toml'}:5 "
                                 "(servers.gh.network.allow[1])) lies outside the org's egress ceiling")
    assert str(violation.source) == f"org {tmp_path / 'org.toml'}:5 (defaults.network)"
    decision = decide(launch_facts(sp))
    assert decision.effect is Effect.DENY
    assert decision.reason == violation.message
    assert decide(launch_facts(eff.server("ok"))).effect is Effect.ALLOW
    checked = subprocess.run([WARDEN, "policy", "check", "--org-policy", str(tmp_path / "org.toml"),
                              str(tmp_path / "user.toml")],
                             capture_output=True, text=True, check=False)
    assert checked.returncode == 2
    assert f"servers.gh: launch refused: {violation.message} [{violation.source}]" in checked.stderr


def test_an_org_without_network_forbids_every_entry(tmp_path: Path) -> None:
    sp = policy(tmp_path, '[org]\ncommands = ["*"]\n[defaults]\nnetwork = "none"\n', USER).server("gh")
    assert len(sp.network_violations) == 2
    assert decide(launch_facts(sp)).effect is Effect.DENY


def test_egress_needs_the_bwrap_sandbox(tmp_path: Path) -> None:
    sp = policy(tmp_path, None, USER + '[servers.gh.sandbox]\nkind = "container"\n'
                                       'image = "x@sha256:' + "0" * 64 + '"\n').server("gh")
    decision = decide(launch_facts(sp))
    assert decision.effect is Effect.DENY
    assert "only bwrap sandboxes use" in decision.reason


ENTRIES = ["a.example.org:443", "*.example.org:443", "example.org:443", "api.github.com:443", "api.github.com:80",
           "10.0.0.0/8:443", "10.1.0.0/16:443", "[fd00::/8]:443"]
RANGES = ["10.0.0.0/8", "10.1.0.0/16", "127.0.0.1/32", "fd00::/8"]
network = st.fixed_dictionaries({}, optional={"allow": st.lists(st.sampled_from(ENTRIES), max_size=3),
                                              "allow_addresses": st.lists(st.sampled_from(RANGES), max_size=2)})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.none(), st.just("none"), network), st.one_of(st.just("none"), network))
def test_no_user_network_widens_the_org(org_network: Any, user_network: Any) -> None:
    org: dict[str, Any] = {"org": {}}
    if org_network is not None:
        org["defaults"] = {"network": org_network}
    eff = EffectivePolicy(parse_policy(org, {}, path=Path("org.toml"), role="org"),
                          parse_policy({"servers": {"s": {"network": user_network}}}, {}, path=Path("user.toml"),
                                       role="user"))
    sp = eff.server("s", ("srv",))
    if decide(launch_facts(sp)).effect is not Effect.ALLOW or org_network is None:
        return
    ceiling = [] if org_network == "none" else [parse_allow_entry(e) for e in org_network.get("allow", [])]
    for entry in sp.network.value.allow:
        assert any(entry.within(c) for c in ceiling), entry
    org_ranges = [] if org_network == "none" else org_network.get("allow_addresses", [])
    for net in sp.network.value.allow_addresses:
        assert any(net.version == ipaddress.ip_network(r).version and net.subnet_of(ipaddress.ip_network(r))  # type: ignore[arg-type]
                   for r in org_ranges)


def test_the_launch_approval_says_the_egress_in_words() -> None:
    manifest = launch_manifest(("npx", "-y", "gh"), (), {}, {"allow": ["api.github.com:443"],
                                                             "allow_addresses": []})
    entry = PinEntry("gh", "server", "", PinState.PENDING, "sha256:" + "0" * 64, manifest, None, None, (),
                     "2026-12-02T00:00:00Z", None, None, None)
    message = build_pin_consent("gh", [entry]).params["message"]
    assert ("   network: only through warden's egress proxy, to api.github.com:443 (each name must resolve to a "
            "public address; every connection is recorded)") in message.splitlines()
    quiet = PinEntry("t", "server", "", PinState.PENDING, "sha256:" + "0" * 64, launch_manifest(("t",), (), {}),
                     None, None, (), "2026-12-02T00:00:00Z", None, None, None)
    assert "   network: none: this server cannot reach any network" in \
        build_pin_consent("t", [quiet]).params["message"].splitlines()
