"""Which tool and prompt names warden refuses to pin (invariant 12): they are hidden from hosts, never approvable.

A name is what a person approves and what a model picks, so a name that reads as something else is an attack, not
a finding to wave through with ``--accept-findings``:

* **outside the spec's character set** — 1 to 128 of ``A-Z a-z 0-9 _ - .`` (MCP 2025-11-25 and 2026-07-28, "Tool
  Names"; prompts are held to the same set). That excludes every control character (``\\n`` forges a row in
  ``pins list``, ESC repaints a terminal, OSC 8 plants a hyperlink), bidi overrides (U+202E), invisible and
  non-ASCII look-alike letters, spaces (``read_file `` beside ``read_file``);
* **a twin of another entry of the same server and kind** — equal once case, surrounding space and look-alike
  characters are folded away (``Read_File`` / ``read_file``, ``get_fi1e`` / ``get_file``, Cyrillic ``rеad`` /
  ``read``). Every member of such a group is refused, since nothing says which one the server meant;
* **holding a registered secret value** (``warden.secrets``) — tool, prompt, resource URI or template alike: the
  pin store, its views, logs and host lists would have to carry it, and a redacted name could not be called.

Pure: the caller passes the names of one list and the redactor; nothing here reads files.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Final

from warden.escape import for_terminal
from warden.policy.pins._types import EntryKind
from warden.secrets import Redactor

__all__ = ["NAME_KINDS", "name_skeleton", "refused_names"]

NAME_KINDS: Final[frozenset[EntryKind]] = frozenset({"tool", "prompt"})
_SPEC_NAME: Final = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
# What folds together: ASCII digits and letter pairs read as one another, and the Cyrillic and Greek letters
# that render like Latin ones (NFKC already folds full-width forms, ligatures and mathematical alphabets).
_LOOKALIKE: Final = str.maketrans({
    "0": "o", "1": "l", "i": "l", "|": "l",
    "а": "a", "в": "b", "е": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p", "с": "c", "т": "t",
    "у": "y", "х": "x", "ѕ": "s", "і": "l", "ј": "j", "ԁ": "d", "ԛ": "q", "ԝ": "w", "ɡ": "g",
    "α": "a", "β": "b", "ε": "e", "η": "n", "ι": "l", "κ": "k", "ν": "v", "ο": "o", "ρ": "p", "τ": "t",
    "υ": "u", "χ": "x",
})
_PAIRS: Final = (("rn", "m"), ("vv", "w"), ("cl", "d"))


def name_skeleton(name: str) -> str:
    """What ``name`` looks like to a reader: NFKC, invisible and format characters dropped, surrounding space
    stripped, case folded, look-alikes mapped to one letter. Two names with one skeleton are twins."""
    text = "".join(ch for ch in unicodedata.normalize("NFKC", name) if unicodedata.category(ch) not in ("Cf", "Cc",
                                                                                                       "Mn"))
    text = text.strip().casefold().translate(_LOOKALIKE)
    for pair, single in _PAIRS:
        text = text.replace(pair, single)
    return text


def refused_names(kind: EntryKind, names: Iterable[str], redactor: Redactor) -> Mapping[str, str]:
    """The names of one complete list of ``kind`` that must not be pinned, each with the reason (naming the
    rule and, escaped, the twin). Resource URIs and templates are only checked for secrets (any character may be
    in a URI; views escape them)."""
    names = list(names)
    refused = {name: f"the {'name' if kind in NAME_KINDS else 'key'} holds a registered secret value [names: secret]"
               for name in names if redactor.found_in(name)}
    if kind not in NAME_KINDS:
        return refused
    for name in names:
        if name not in refused and not _SPEC_NAME.fullmatch(name):
            refused[name] = (f"the name is not 1-128 of A-Z a-z 0-9 _ - . (the spec's {kind} name characters); "
                             "control, invisible, look-alike and space characters can forge what a person reads "
                             "[names: charset]")
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(name_skeleton(name), []).append(name)
    for twins in groups.values():
        if len(twins) < 2:
            continue
        for name in twins:
            others = ", ".join(repr(for_terminal(t)) for t in twins if t != name)
            refused.setdefault(name, f"the name differs from {others} only by case, spacing or look-alike "
                                     "characters; nothing says which one is meant [names: twin]")
    return refused
