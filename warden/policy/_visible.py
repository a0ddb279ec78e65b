"""Make every invisible or deceptive character visible, and name it.

A description can carry text the human reviewing it never sees but the model reads: zero-width characters, bidi
controls that reorder what is displayed, Unicode tag characters (an invisible copy of ASCII), ANSI/CSI escapes that
rewrite the terminal, C1 controls. Whatever warden shows a human (diffs, reviews, consent messages) goes through
:func:`render_visible`, which replaces each such character with ``⟦U+200B ZERO WIDTH SPACE⟧``. The bracket
characters themselves are rendered the same way when they occur in the input, so a server cannot forge a marker.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Final, final

OPEN: Final = "\u27e6"
CLOSE: Final = "\u27e7"

_C0_NAMES: Final = (
    "NULL", "START OF HEADING", "START OF TEXT", "END OF TEXT", "END OF TRANSMISSION", "ENQUIRY", "ACKNOWLEDGE",
    "BELL", "BACKSPACE", "CHARACTER TABULATION", "LINE FEED", "LINE TABULATION", "FORM FEED", "CARRIAGE RETURN",
    "SHIFT OUT", "SHIFT IN", "DATA LINK ESCAPE", "DEVICE CONTROL ONE", "DEVICE CONTROL TWO", "DEVICE CONTROL THREE",
    "DEVICE CONTROL FOUR", "NEGATIVE ACKNOWLEDGE", "SYNCHRONOUS IDLE", "END OF TRANSMISSION BLOCK", "CANCEL",
    "END OF MEDIUM", "SUBSTITUTE", "ESCAPE", "INFORMATION SEPARATOR FOUR", "INFORMATION SEPARATOR THREE",
    "INFORMATION SEPARATOR TWO", "INFORMATION SEPARATOR ONE",
)
_C1_NAMES: Final = (
    "PADDING CHARACTER", "HIGH OCTET PRESET", "BREAK PERMITTED HERE", "NO BREAK HERE", "INDEX", "NEXT LINE",
    "START OF SELECTED AREA", "END OF SELECTED AREA", "CHARACTER TABULATION SET",
    "CHARACTER TABULATION WITH JUSTIFICATION", "LINE TABULATION SET", "PARTIAL LINE FORWARD",
    "PARTIAL LINE BACKWARD", "REVERSE LINE FEED", "SINGLE SHIFT TWO", "SINGLE SHIFT THREE", "DEVICE CONTROL STRING",
    "PRIVATE USE ONE", "PRIVATE USE TWO", "SET TRANSMIT STATE", "CANCEL CHARACTER", "MESSAGE WAITING",
    "START OF GUARDED AREA", "END OF GUARDED AREA", "START OF STRING", "SINGLE GRAPHIC CHARACTER INTRODUCER",
    "SINGLE CHARACTER INTRODUCER", "CONTROL SEQUENCE INTRODUCER", "STRING TERMINATOR", "OPERATING SYSTEM COMMAND",
    "PRIVACY MESSAGE", "APPLICATION PROGRAM COMMAND",
)
# Letters that render as nothing although their category says "letter" or "symbol".
_BLANK_LOOKALIKES: Final = frozenset({0x115F, 0x1160, 0x3164, 0xFFA0, 0x2800, 0x034F, 0x180E})
BIDI_CONTROLS: Final = frozenset({0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)})


def char_class(ch: str) -> str | None:
    """Why ``ch`` must be made visible, or None for an ordinary visible character (and for line feed).

    Classes: ``control`` (C0/DEL/C1), ``bidi``, ``tag`` (U+E0000–U+E007F), ``variation-selector``, ``format``
    (other Cf: zero-width, soft hyphen, word joiner, BOM…), ``space`` (any space but U+0020), ``separator``
    (line/paragraph separators), ``private-use``, ``unassigned``, ``blank`` (letters that render as nothing),
    ``marker`` (warden's own ⟦ ⟧ brackets).
    """
    cp = ord(ch)
    if ch == "\n":
        return None
    if cp < 0x20 or 0x7F <= cp <= 0x9F:
        return "control"
    if cp < 0x7F:
        return None
    if cp in BIDI_CONTROLS:
        return "bidi"
    if 0xE0000 <= cp <= 0xE007F:
        return "tag"
    if 0xFE00 <= cp <= 0xFE0F or 0xE0100 <= cp <= 0xE01EF:
        return "variation-selector"
    if cp in _BLANK_LOOKALIKES:
        return "blank"
    if ch in (OPEN, CLOSE):
        return "marker"
    cat = unicodedata.category(ch)
    if cat == "Cf":
        return "format"
    if cat == "Zs":
        return "space"
    if cat in ("Zl", "Zp"):
        return "separator"
    if cat == "Co":
        return "private-use"
    if cat in ("Cn", "Cs"):
        return "unassigned"
    return None


def char_name(ch: str) -> str:
    """The Unicode name of ``ch``, with names for the C0/C1 controls that ``unicodedata`` leaves unnamed."""
    cp = ord(ch)
    if cp < 0x20:
        return _C0_NAMES[cp]
    if cp == 0x7F:
        return "DELETE"
    if 0x80 <= cp <= 0x9F:
        return _C1_NAMES[cp - 0x80]
    return unicodedata.name(ch, "UNNAMED CHARACTER")


def label(ch: str) -> str:
    """``⟦U+200B ZERO WIDTH SPACE⟧``."""
    return f"{OPEN}U+{ord(ch):04X} {char_name(ch)}{CLOSE}"


def render_visible(text: str) -> str:
    """``text`` with every character :func:`char_class` flags replaced by its :func:`label`; nothing removed."""
    if all(" " <= ch <= "~" or ch == "\n" for ch in text):
        return text
    return "".join(label(ch) if char_class(ch) is not None else ch for ch in text)


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
