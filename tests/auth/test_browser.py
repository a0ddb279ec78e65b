"""How the authorization URL reaches the user: shown in full through ``for_terminal`` with its host set apart,
and a browser opened only with consent - ``always`` (consent given in advance), never when headless under
``ask`` (no terminal to ask on: the URL is printed), never under ``never``. The browser is ``$BROWSER``, here a
script that leaves a mark when it is started; each case runs in its own session (``setsid``), so there is
certainly no controlling terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from warden.auth import describe_authorization_url

HOSTILE = "https://auth.example.com\u202e.evil/authorize?x=\x1b[2J&state=s"


def test_url_is_escaped_and_its_host_set_apart() -> None:
    plain = describe_authorization_url(HOSTILE, "srv\x07", highlight=False)
    assert ">>> auth.example.com<U+202E>.evil <<<" in plain
    assert "\x1b" not in plain
    assert "\u202e" not in plain
    assert "\x07" not in plain
    assert "x=\\x1b[2J&state=s" in plain
    lit = describe_authorization_url("https://auth.example.com/a", "srv", highlight=True)
    assert "\x1b[1;7m auth.example.com \x1b[0m" in lit


@pytest.mark.parametrize(("mode", "opened"), [("always", True), ("ask", False), ("never", False)])
def test_browser_opens_only_with_consent(tmp_path: Path, mode: str, opened: bool) -> None:
    mark = tmp_path / "opened"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\necho "$1" > {mark}\n')
    browser.chmod(0o755)
    script = ("import trio, sys; from warden.auth.browser import present_authorization_url; "
              f"trio.run(present_authorization_url, 'https://auth.example.com/authorize?state=s', 'srv', {mode!r})")
    env = {**os.environ, "BROWSER": f"{browser} %s", "DISPLAY": ""}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env,
                          start_new_session=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "https://auth.example.com/authorize?state=s" in done.stderr  # headless or not: the URL is shown
    assert ">>> auth.example.com <<<" in done.stderr
    assert mark.exists() is opened
    if opened:
        assert mark.read_text().strip() == "https://auth.example.com/authorize?state=s"


def test_a_look_alike_host_is_set_apart_in_its_ascii_form() -> None:
    """A server's metadata names the authorization server; a Cyrillic U+0430 for the first Latin "a" makes
    accounts.google.com the attacker's. The host the user is told to check is shown as DNS looks it up (before:
    as the look-alike)."""
    url = "https://\u0430ccounts.google.com/o/oauth2/auth?state=s"
    script = ("import sys, trio; from warden.auth.browser import present_authorization_url; "
              "trio.run(present_authorization_url, sys.argv[1], 'srv', 'never')")
    done = subprocess.run([sys.executable, "-c", script, url], capture_output=True, text=True, timeout=60,
                          start_new_session=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr.split("\n")[:3] == [
        "warden: srv needs your authorization. Sign in at >>> xn--ccounts-1fg.google.com <<<",
        "warden: open this URL in your browser:", f"  {url}"]
