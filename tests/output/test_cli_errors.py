"""What the ``warden`` command itself writes to stderr when it stops: usage errors, a command's error line and an
internal error (a bug) all leave redacted and escaped, through the real entry point in a real process, and the
bytes are checked as the terminal would get them."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support import PYTHON, WARDEN, shows_a_crash
from warden import logs
from warden.escape import char_class, for_terminal
from warden.secrets import Redactor

SECRET = "sekrit-Zq8vX2mP-cli"
# Everything a pasted server string can carry to a terminal: erase the line, an OSC 8 hyperlink, a right-to-left
# override, a C1 control sequence introducer, a line break followed by a forged warden line, and a secret.
NASTY = (f"x\x1b[2K\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\\u202e\x9b[31m\nwarden: error: forged "
         f"{SECRET}")
NASTY_SHOWN = ("x\\x1b[2K\\x1b]8;;https://evil.example/\\x1b\\click\\x1b]8;;\\x1b\\<U+202E>\\x9b[31m\\nwarden: "
               "error: forged [REDACTED]")
# argv cannot carry NUL (the kernel ends an argument there); files and exception messages can.
NASTY_NUL = NASTY.replace("[31m", "[31m\x00")
NASTY_NUL_SHOWN = NASTY_SHOWN.replace("[31m", "[31m\\x00")
BUG_HINT = ("warden: hint: this is a bug in warden; please report it with the output of the same command run as "
            "`warden -vv …` (it adds the traceback)")


def _register_secret(state: Path) -> None:
    done = subprocess.run([WARDEN, "--state-dir", str(state), "secrets", "set", "PASTED_TOKEN"], input=SECRET,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def _warden(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([WARDEN, *args], capture_output=True, timeout=60, check=False, stdin=subprocess.DEVNULL)


def _safe_lines(err: bytes) -> list[str]:
    """stderr as the terminal gets it: valid UTF-8, no byte of the secret's text, no control or hidden character but
    the line breaks, and every line warden's own (a usage line or ``warden: …``), none of them forged."""
    assert SECRET.encode() not in err
    text = err.decode("utf-8")
    assert [ch for ch in text if ch != "\n" and char_class(ch) is not None] == []
    lines = text.removesuffix("\n").split("\n")
    assert all(line.startswith(("usage: ", " ", "warden: ")) for line in lines), lines
    assert not any(line.startswith("warden: error: forged") for line in lines)
    return lines


def test_a_usage_error_quoting_a_pasted_argument_is_escaped_and_redacted(state_dir: Path) -> None:
    _register_secret(state_dir)
    done = _warden("pins", "list", "s", NASTY)  # one positional too many: argparse quotes it as it was typed
    assert done.returncode == 2
    assert done.stdout == b""
    assert _safe_lines(done.stderr)[-1] == f"warden: error: unrecognized arguments: {NASTY_SHOWN}"
    done = _warden("pins", "show", "s", "--kind", NASTY)  # a bad choice, from a verb's own parser
    assert done.returncode == 2
    lines = _safe_lines(done.stderr)
    assert lines[0].startswith("usage: warden pins show ")
    assert lines[-1].startswith("warden: error: argument --kind: invalid choice: 'x\\x1b[2K")
    assert "forged [REDACTED]' (choose from 'server', " in lines[-1]


def test_a_usage_error_is_redacted_with_the_registry_of_the_state_dir_on_the_command_line(tmp_path: Path,
                                                                                          state_dir: Path) -> None:
    """The state dir given before the command (spelt any way argparse takes it) is read before the parse fails;
    the environment's state dir (``state_dir`` here) holds no secret."""
    other = tmp_path.parent / f"{tmp_path.name}-other-state"
    other.mkdir(mode=0o700)
    _register_secret(other)
    for spelling in (["--state-dir", str(other)], [f"--state-dir={other}"], ["--state", str(other)]):
        done = _warden(*spelling, NASTY)
        assert done.returncode == 2
        line = _safe_lines(done.stderr)[-1]
        assert line.startswith("warden: error: argument COMMAND: invalid choice: 'x\\x1b[2K")
        assert "forged [REDACTED]' (choose from 'run', " in line
    done = _warden(NASTY)
    assert done.returncode == 2
    assert SECRET.encode() in done.stderr  # the control: this registry does not know the value


def test_a_command_s_error_line_about_a_hostile_policy_file_is_escaped_and_redacted(tmp_path: Path,
                                                                                   state_dir: Path) -> None:
    _register_secret(state_dir)
    name = "".join(c if c.isascii() and c.isprintable() and c not in '"\\' else f"\\u{ord(c):04x}"
                   for c in NASTY_NUL)
    policy = tmp_path / "pasted.toml"
    policy.write_text(f'[servers."{name}"]\ncommand = "srv"\n')  # the name as TOML spells it: \\u001b and so on
    done = _warden("policy", "check", "--user", str(policy))
    assert done.returncode == 2
    error, problem, hint = _safe_lines(done.stderr)
    quoted = repr(NASTY_NUL.replace(SECRET, "[REDACTED]"))  # the validator quotes it with repr()
    assert error == f"warden: error: 1 problem(s) in {policy}:"  # each problem on a line of its own, escaped alone
    assert problem == (f"warden:   {policy}:1: servers.{NASTY_NUL_SHOWN}: server name {quoted} must be 1-64 of "
                       "A-Z a-z 0-9 _ . -")
    assert hint == f"warden: hint: fix {policy} and check it with `warden policy check {policy}`"


# A command with a bug: the verb's function replaced, before the parser is built, by one that raises what a server
# could have put in an exception (read from a file, so that it can hold NUL).
_BUGGY = """
import sys
from pathlib import Path
import warden.cli.pins

def bug(ctx, args):
    error = RuntimeError(Path(sys.argv[1]).read_text(encoding="utf-8"))
    raise ExceptionGroup("unhandled errors", [error, ValueError("second")]) if sys.argv[2] == "group" else error

warden.cli.pins.list_command = bug
from warden.cli import main
sys.exit(main(sys.argv[3:]))
"""


def _buggy(message: Path, *args: str, group: bool = False) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([PYTHON, "-c", _BUGGY, str(message), "group" if group else "plain", *args],
                          capture_output=True, timeout=60, check=False, stdin=subprocess.DEVNULL)


def test_an_internal_error_is_one_escaped_line_and_exit_70(tmp_path: Path, state_dir: Path) -> None:
    _register_secret(state_dir)
    message = tmp_path / "message"
    message.write_text(NASTY_NUL, encoding="utf-8")
    done = _buggy(message, "pins", "list")
    assert done.returncode == os.EX_SOFTWARE == 70
    lines = _safe_lines(done.stderr)
    assert lines == [f"warden: internal error: RuntimeError: {NASTY_NUL_SHOWN}", BUG_HINT]
    assert b"Traceback" not in done.stderr
    assert shows_a_crash(lines[0])  # what the fuzz batteries look for in warden's stderr
    message.write_text(NASTY_NUL + "y" * 5000, encoding="utf-8")
    done = _buggy(message, "pins", "list")
    assert done.returncode == 70
    line, hint = _safe_lines(done.stderr)
    assert line == f"warden: internal error: RuntimeError: {NASTY_NUL_SHOWN}{'y' * 300}"[:300 + 8] + "…"
    assert hint == BUG_HINT
    message.write_text(NASTY_NUL, encoding="utf-8")
    done = _buggy(message, "pins", "list", group=True)  # what a nursery raises: its first leaf is named
    assert done.returncode == 70
    assert _safe_lines(done.stderr) == [
        f"warden: internal error: RuntimeError (first of 2 in an exception group): {NASTY_NUL_SHOWN}", BUG_HINT]


def test_with_vv_the_traceback_follows_escaped_redacted_and_prefixed(tmp_path: Path, state_dir: Path) -> None:
    _register_secret(state_dir)
    message = tmp_path / "message"
    message.write_text(NASTY_NUL, encoding="utf-8")
    done = _buggy(message, "-vv", "pins", "list")
    assert done.returncode == 70
    lines = [line for line in _safe_lines(done.stderr) if not line.startswith("warden: DEBUG: ")]  # keyring's
    first, *traceback, hint = lines
    assert first == f"warden: internal error: RuntimeError: {NASTY_NUL_SHOWN}"
    assert traceback[0] == "warden: traceback: Traceback (most recent call last):"
    assert all(line.startswith("warden: traceback: ") for line in traceback)
    # the message's own line break starts a line of the traceback block, never a line of its own
    shown = NASTY_NUL_SHOWN.split("\\n")
    assert traceback[-2:] == [f"warden: traceback: RuntimeError: {shown[0]}", f"warden: traceback: {shown[1]}"]
    assert hint == "warden: hint: this is a bug in warden; please report it with the output above"


# -- the escaping point of these lines ----------------------------------------------------------------------------

# Secrets that the escape forms (``\\xNN``, ``<U+XXXX>``) and the marker cannot spell, with or without a control
# inside: so "the value is not in the output" is exactly "it was redacted" (a printable value built from, say,
# hex digits could be spelt by the escape of a control character the input really held).
_PLAIN = "ghijklmnopqsvwyzGHIJKLMNOPQSVWYZ_-!%é日"
plain_secrets = st.builds(lambda a, c, b: a + c + b, st.text(_PLAIN, min_size=4, max_size=8),
                          st.sampled_from(["", "\x1b", "\n", "\x9b", "\u202e", "\x00"]),
                          st.text(_PLAIN, min_size=4, max_size=8))


@given(secrets=st.lists(plain_secrets, min_size=1, max_size=3), parts=st.lists(st.text(max_size=12), max_size=6),
       keep_newlines=st.booleans(), limit=st.none() | st.integers(0, 80))
def test_shown_lines_never_hold_a_secret_or_a_control(secrets: list[str], parts: list[str], keep_newlines: bool,
                                                      limit: int | None) -> None:
    """:func:`warden.logs.shown`, which every CLI error line and traceback goes through: redacted first, then
    escaped, then cut — so neither the escape nor the cut can keep a value the registry holds."""
    text = "".join(p + secrets[i % len(secrets)] for i, p in enumerate(parts)) + "".join(secrets)
    logs.use_redactor(Redactor(secrets))
    try:
        out = logs.shown(text, keep_newlines=keep_newlines, limit=limit)
    finally:
        logs.use_redactor(Redactor())
    assert not any(secret in out for secret in secrets)
    assert all(char_class(ch) is None or (keep_newlines and ch == "\n") for ch in out)
    whole = for_terminal(Redactor(secrets).text(text), keep_newlines=keep_newlines)
    assert out == (whole if limit is None or len(whole) <= limit else whole[:limit] + "…")


@given(st.text().filter(lambda t: all(char_class(ch) is None for ch in t)))
def test_shown_keeps_printable_text_that_holds_no_secret(text: str) -> None:
    logs.use_redactor(Redactor(["never-in-the-text-\x1b"]))
    try:
        assert logs.shown(text) == text
    finally:
        logs.use_redactor(Redactor())


def test_python_dash_m_warden_is_the_same_entry_point(state_dir: Path) -> None:
    """``python -m warden`` runs the console script's ``main``: the same usage error, escaped and redacted the same
    way, with the same exit status."""
    _register_secret(state_dir)
    module = subprocess.run([PYTHON, "-m", "warden", "pins", "list", "s", NASTY], capture_output=True, timeout=60,
                            check=False, stdin=subprocess.DEVNULL)
    script = _warden("pins", "list", "s", NASTY)
    assert (module.returncode, module.stdout) == (2, b"")
    assert _safe_lines(module.stderr)[-1] == f"warden: error: unrecognized arguments: {NASTY_SHOWN}"
    assert module.stderr.replace(b"__main__.py", b"warden") == script.stderr


def test_pins_views_echo_a_pasted_server_name_redacted_and_escaped(state_dir: Path) -> None:
    """A server name typed after ``warden pins list`` is echoed in the view's own line ("no pins for server …"):
    that line leaves through the same redacting, escaping display point as the rest of the view."""
    _register_secret(state_dir)
    done = _warden("--state-dir", str(state_dir), "pins", "list", NASTY)
    assert (done.returncode, done.stderr) == (0, b"")
    assert done.stdout.decode() == f"no pins for server {NASTY_SHOWN!r}\n"
    done = _warden("--state-dir", str(state_dir), "pins", "diff", NASTY)  # an error: stderr, same rules
    assert done.returncode == 5
    assert _safe_lines(done.stderr)[0] == f"warden: error: no pins for server {NASTY!r}".replace(SECRET, "[REDACTED]")


def test_a_reader_that_goes_away_is_not_reported_as_a_bug(state_dir: Path) -> None:
    """``warden pins list | head`` closes the pipe early: warden stops quietly, with 128 + SIGPIPE, instead of an
    "internal error" line asking for a bug report."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([WARDEN, "pins", "list"], stdout=write, stderr=subprocess.PIPE, text=True,
                              timeout=60, check=False)
    finally:
        os.close(write)
    assert done.returncode == 141, done.stderr
    assert done.stderr == ""


def test_a_line_warden_says_is_never_split_by_its_log_thread(capfd: pytest.CaptureFixture[str]) -> None:
    """warden's log lines are written by a thread of their own to the same stderr. ``print`` wrote a line's text and
    its line end apart, and a log line landed between them: ``warden serve --http`` once announced its URL as
    ``http://127.0.0.1:34381/mcpwarden: WARNING: ...`` (make test). A line said with :func:`logs.say` is one write.
    The switch interval is cut to a microsecond so that the threads interleave (``print`` fails this every run)."""
    logs.configure(logging.INFO, stream=sys.stderr)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        chatter = threading.Thread(target=lambda: [logging.getLogger("warden.test").warning("log line %d", i)
                                                   for i in range(3000)])
        chatter.start()
        for i in range(3000):
            logs.say(f"said line {i}")
        chatter.join()
    finally:
        sys.setswitchinterval(interval)
        logs.shutdown()
    said = [line for line in capfd.readouterr().err.splitlines() if "said line" in line]
    assert said == [f"said line {i}" for i in range(3000)]
