"""Showing the user where to authorize, and opening a browser only with their consent.

The authorization URL is built from metadata a remote server chose, so the user must see where it leads before
anything opens it: the full URL is shown (through :func:`warden.escape.for_terminal`, so it cannot rewrite the
terminal) with its host set apart - highlighted on a terminal, bracketed in a log - since the host is what a
phishing URL fakes. Then:

* ``ask`` (the default): on a terminal warden asks whether to open the browser; without one (headless) it only
  prints the URL, and the user opens it anywhere - the redirect comes back to this machine's loopback listener.
* ``always``: the user consented in advance (``--oauth-browser always``); the URL is still shown.
* ``never``: only print the URL.

The browser is Python's :mod:`webbrowser` (which honours ``$BROWSER``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import webbrowser
from typing import Final, Literal
from urllib.parse import urlsplit

import trio

from warden import logs
from warden.escape import for_terminal

__all__ = ["BrowserMode", "describe_authorization_url", "present_authorization_url"]

log = logging.getLogger(__name__)

BrowserMode = Literal["ask", "always", "never"]
_BOLD: Final = "\x1b[1;7m"
_RESET: Final = "\x1b[0m"


def _host_shown(url: str) -> str:
    """``url``'s host as DNS will look it up: a name in another script in its IDNA form (``xn--…``), so a look-alike
    of a known name (a Cyrillic U+0430 for the first ``a`` of ``accounts.google.com``) cannot pass for it where the
    user is told to look; what IDNA cannot encode shows each character that is not ASCII as ``<U+XXXX>``."""
    host = urlsplit(url).hostname or "?"
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return "".join(ch if ch.isascii() else f"<U+{ord(ch):04X}>" for ch in for_terminal(host))


def describe_authorization_url(url: str, server: str, *, highlight: bool) -> str:
    """The lines that show ``url``: which server wants it, the host set apart (in ASCII, see :func:`_host_shown`),
    and the full URL, all escaped."""
    host = _host_shown(url)
    marked = f"{_BOLD} {host} {_RESET}" if highlight else f">>> {host} <<<"
    return (f"warden: {for_terminal(server)} needs your authorization. Sign in at {marked}\n"
            f"warden: open this URL in your browser:\n  {for_terminal(url)}")


def _ask_on_tty(question: str) -> bool | None:
    """True/False from the controlling terminal; None when there is none (headless)."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    with open(fd, "r+", encoding="utf-8", errors="replace", closefd=True) as tty:
        tty.write(question)
        tty.flush()
        answer = tty.readline()
    return answer.strip().lower() in ("y", "yes")


def _tty_available() -> bool:
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return False
    os.close(fd)
    return True


async def present_authorization_url(url: str, server: str, mode: BrowserMode) -> None:
    """Show ``url`` and, with consent, open it. Returns at once when no question is asked; never raises for a
    browser that cannot be started (the URL was shown)."""
    interactive = mode == "ask" and _tty_available()
    highlight = interactive or (hasattr(sys.stderr, "isatty") and sys.stderr.isatty())
    logs.say(describe_authorization_url(url, server, highlight=highlight))
    if mode == "never":
        return
    if mode == "ask":
        if not interactive:
            log.info("no terminal to ask on: open the URL above yourself (headless)")
            return
        consent = await trio.to_thread.run_sync(_ask_on_tty, "warden: open it in your browser now? [y/N] ",
                                                abandon_on_cancel=True)
        if not consent:
            return
    with contextlib.suppress(webbrowser.Error, OSError):
        opened = await trio.to_thread.run_sync(webbrowser.open, url)
        if not opened:
            log.warning("no browser could be started: open the URL above yourself")
