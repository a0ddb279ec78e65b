"""Property tests for everything the sandbox parses: shebang lines, pyvenv.cfg, package specs, bwrap's version and
status lines, the seccomp rule list. Hostile input is the normal case: each parser returns a value or None (or
raises its one documented error), never anything else.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from warden.errors import SandboxUnavailable
from warden.sandbox._bwrap import parse_status_line
from warden.sandbox._bwrap_binary import parse_version
from warden.sandbox._runtime import parse_pyvenv_home, parse_shebang
from warden.sandbox._seccomp import parse_rules

ROOT = Path(__file__).resolve().parents[2]


@given(st.binary(max_size=600))
def test_parse_shebang_never_raises(head: bytes) -> None:
    result = parse_shebang(head)
    if result is not None:
        interpreter, arg = result
        assert interpreter.startswith("/")
        assert "\0" not in interpreter
        assert arg is None or arg == arg.strip(" \t\r")


@given(st.sampled_from(["/usr/bin/env", "/usr/bin/python3", "/opt/node/bin/node"]),
       st.one_of(st.none(), st.text(alphabet="abcdefghij -=.", min_size=1, max_size=20)))
def test_parse_shebang_round_trips(interpreter: str, arg: str | None) -> None:
    line = f"#!{interpreter}" + (f" {arg}" if arg is not None else "") + "\nrest of file"
    parsed = parse_shebang(line.encode())
    expected_arg = arg.strip(" \t\r") if arg is not None and arg.strip(" \t\r") else None
    assert parsed == (interpreter, expected_arg)


def test_parse_shebang_examples() -> None:
    assert parse_shebang(b"#!/usr/bin/env node\n") == ("/usr/bin/env", "node")
    assert parse_shebang(b"#!/usr/bin/env -S node --flag\n") == ("/usr/bin/env", "-S node --flag")
    assert parse_shebang(b"#! /work/.venv/bin/python3\r\n") == ("/work/.venv/bin/python3", None)
    assert parse_shebang(b"#!relative/python\n") is None
    assert parse_shebang(b"#!/usr/bin/python3") is None  # no end of line within the head: not trusted
    assert parse_shebang(b"\x7fELF\x02\x01") is None


@given(st.text(max_size=400))
def test_parse_pyvenv_home_never_raises(text: str) -> None:
    home = parse_pyvenv_home(text)
    assert home is None or (home.startswith("/") and "\0" not in home)


def test_parse_pyvenv_home_examples() -> None:
    text = "home = /root/.pyenv/versions/3.11.7/bin\ninclude-system-site-packages = false\nversion = 3.11.7\n"
    assert parse_pyvenv_home(text) == "/root/.pyenv/versions/3.11.7/bin"
    assert parse_pyvenv_home("home=relative/bin\n") is None
    assert parse_pyvenv_home("version = 3\n") is None


@given(st.text(max_size=300))
def test_parse_version_never_raises(text: str) -> None:
    version = parse_version(text)
    assert version is None or (len(version) == 3 and all(v >= 0 for v in version))


def test_parse_version_examples() -> None:
    assert parse_version("bubblewrap 0.11.0\n") == (0, 11, 0)
    assert parse_version("bubblewrap 0.8.0") == (0, 8, 0)
    assert parse_version("bwrap 0.11.0") is None
    assert parse_version("bubblewrap 0.11") is None


@given(st.binary(max_size=5000))
def test_parse_status_line_never_raises(line: bytes) -> None:
    value = parse_status_line(line)
    assert value is None or isinstance(value, dict)


def test_parse_status_line_examples() -> None:
    assert parse_status_line(b'{ "child-pid": 6834, "pid-namespace": 4026532180 }') == {
        "child-pid": 6834, "pid-namespace": 4026532180}
    assert parse_status_line(b"[1, 2]") is None
    assert parse_status_line(b'{"child-pid": ' + b"1" * 5000 + b"}") is None


_JSONISH = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=10)),
                        lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                        max_leaves=20)


@given(st.text(max_size=500))
def test_parse_rules_on_arbitrary_text_only_raises_sandbox_unavailable(text: str) -> None:
    with contextlib.suppress(SandboxUnavailable):
        parse_rules(text)


@given(st.dictionaries(st.sampled_from(["version", "bad_arch", "rule", "extra"]), _JSONISH, max_size=4))
def test_parse_rules_on_arbitrary_structures_only_raises_sandbox_unavailable(document: dict[str, object]) -> None:
    text = "\n".join(f"{key} = {json.dumps(value)}" for key, value in document.items()
                     if isinstance(value, (int, str, bool)) and not isinstance(value, bool))
    with contextlib.suppress(SandboxUnavailable):
        parse_rules(text)


@pytest.mark.parametrize(("snippet", "message"), [
    ('action = "EPERM"\nsyscalls = ["mount"]', "why"),
    ('why = "x"\naction = "NOPE"\nsyscalls = ["mount"]', "is not an errno name"),
    ('why = "x"\naction = "EPERM"\nsyscalls = ["mo unt"]', "is not a syscall name"),
    ('why = "x"\naction = "EPERM"\nsyscalls = ["ioctl"]\nargs = [{arg = 1, op = "masked_eq", value = 1}]',
     "`mask` is required"),
    ('why = "x"\naction = "EPERM"\nsyscalls = ["ioctl"]\nargs = [{arg = 7, op = "eq", value = 1}]', "arg"),
    ('why = "x"\naction = "EPERM"\nsyscalls = ["ioctl"]\nargs = [{arg = 1, op = "eq", value = []}]', "empty"),
    ('why = "x"\naction = "EPERM"\nsyscalls = []', "syscalls"),
])
def test_invalid_rules_are_refused_with_the_reason(snippet: str, message: str) -> None:
    with pytest.raises(SandboxUnavailable, match=message):
        parse_rules(f'version = 1\nbad_arch = "kill_process"\n[[rule]]\n{snippet}\n')


def test_shipped_rule_list_covers_the_required_denials() -> None:
    rules = parse_rules((ROOT / "sandbox" / "seccomp.toml").read_text())
    denied = {name: rule for rule in rules.rule for name in rule.syscalls}
    for name in ("clone3", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
                 "io_uring_setup", "io_uring_enter", "io_uring_register"):
        assert denied[name].action == "ENOSYS", name
    for name in ("ptrace", "bpf", "userfaultfd", "kexec_load", "kexec_file_load", "init_module", "finit_module",
                 "delete_module", "keyctl", "add_key", "request_key", "unshare", "setns", "mount", "umount2",
                 "pivot_root", "chroot", "perf_event_open", "process_vm_readv", "process_vm_writev", "pidfd_getfd"):
        assert denied[name].action == "EPERM", name
    assert all(rule.why for rule in rules.rule)
    no_network = [rule for rule in rules.rule if rule.when == "no_network"]
    assert {name for rule in no_network for name in rule.syscalls} == {"socket", "socketpair"}
    assert rules.digest(network=False) != rules.digest(network=True)
