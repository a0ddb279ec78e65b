"""Make every invisible or deceptive character visible, and name it.

A description can carry text the human reviewing it never sees but the model reads: zero-width characters, bidi
controls that reorder what is displayed, Unicode tag characters (an invisible copy of ASCII), ANSI/CSI escapes that
rewrite the terminal, C1 controls. Whatever warden shows a human (diffs, reviews, consent messages) goes through
:func:`render_visible`, which replaces each such character with ``⟦U+200B ZERO WIDTH SPACE⟧``. The bracket
characters themselves are rendered the same way when they occur in the input, so a server cannot forge a marker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, final

from warden import escape
from warden.escape import char_name

OPEN: Final = "\u27e6"
CLOSE: Final = "\u27e7"


def char_class(ch: str) -> str | None:
    """Why ``ch`` must be made visible in a reviewed text, or None for an ordinary character (and for line feed,
    which a description may hold): :func:`warden.escape.char_class`, plus ``marker`` for warden's own ⟦ ⟧."""
    if ch == "\n":
        return None
    if ch in (OPEN, CLOSE):
        return "marker"
    return escape.char_class(ch)


def label(ch: str) -> str:
    """``⟦U+200B ZERO WIDTH SPACE⟧``."""
    return f"{OPEN}U+{ord(ch):04X} {char_name(ch)}{CLOSE}"


def render_visible(text: str) -> str:
    """``text`` with every character :func:`char_class` flags, and every combining mark piled past
    :data:`~warden.escape.MAX_STACKED_MARKS` on one character (drawn over the lines around it), replaced by its
    :func:`label`; nothing removed."""
    if all(" " <= ch <= "~" or ch == "\n" for ch in text):
        return text
    piled = escape.overstacked(text)
    return "".join(label(ch) if char_class(ch) is not None or i in piled else ch for i, ch in enumerate(text))


@final
@dataclass(frozen=True, slots=True)
class HiddenChar:
    """One flagged character: where it is in the string, what it is and why it was flagged."""

    index: int
    char: str
    kind: str

    @property
    def label(self) -> str:
        return label(self.char)


def hidden_chars(text: str) -> list[HiddenChar]:
    """Every character of ``text`` that :func:`render_visible` would replace, in order."""
    out: list[HiddenChar] = []
    for i, ch in enumerate(text):
        kind = char_class(ch)
        if kind is not None:
            out.append(HiddenChar(i, ch, kind))
    return out
