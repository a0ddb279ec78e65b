"""Show definitions to a human: old and new side by side, every hidden character made visible and named.

The display is JSON-shaped (sorted keys, two-space indent) but strings are rendered with
:func:`warden.escape.for_terminal` (after JSON's own backslash and quote escapes, so the result stays unambiguous):
an ANSI escape shows as ``\\x1b[2K``, a line feed inside a string as ``\\n`` (it cannot start a forged line) and a
zero-width space as ``<U+200B>``, which :func:`hidden_legend` then names. Lines are wrapped, never truncated: a
truncated line could hide the very instruction the reviewer needs to see.
"""

from __future__ import annotations

import difflib
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

from warden.escape import char_class, char_name, for_terminal

__all__ = ["hidden_legend", "render_definition", "side_by_side"]


def _string(s: str) -> str:
    return '"' + for_terminal(s.replace("\\", "\\\\").replace('"', '\\"')) + '"'


def _lines(value: Any, indent: int, prefix: str) -> Iterator[str]:
    pad = "  " * indent
    if isinstance(value, dict):
        if not value:
            yield f"{pad}{prefix}{{}}"
            return
        yield f"{pad}{prefix}{{"
        items = sorted(value.items())
        for i, (k, v) in enumerate(items):
            comma = "," if i < len(items) - 1 else ""
            sub = list(_lines(v, indent + 1, f"{_string(str(k))}: "))
            sub[-1] += comma
            yield from sub
        yield f"{pad}}}"
    elif isinstance(value, list):
        if not value:
            yield f"{pad}{prefix}[]"
            return
        yield f"{pad}{prefix}["
        for i, v in enumerate(value):
            sub = list(_lines(v, indent + 1, ""))
            if i < len(value) - 1:
                sub[-1] += ","
            yield from sub
        yield f"{pad}]"
    elif isinstance(value, str):
        yield f"{pad}{prefix}{_string(value)}"
    else:
        yield f"{pad}{prefix}{json.dumps(value)}"


def render_definition(value: Any) -> list[str]:
    """The display lines of a definition (or of a bare string such as the instructions)."""
    return list(_lines(value, 0, ""))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def hidden_legend(value: Any) -> list[str]:
    """One line per distinct hidden character in ``value``: how it is shown, its Unicode name, kind and count.
    Line feeds are left out: descriptions often have several lines, and the display shows each one as ``\\n``."""
    counts: Counter[tuple[str, str]] = Counter()
    for s in _strings(value):
        for ch in s:
            kind = char_class(ch)
            if kind is not None and ch != "\n":
                counts[(ch, kind)] += 1
    return [f"{for_terminal(ch)} {char_name(ch)}  {kind}, {n}x" for (ch, kind), n in sorted(counts.items())]


def _wrap(line: str, width: int) -> list[str]:
    if width <= 0:
        return [line]
    return [line[i:i + width] for i in range(0, len(line), width)] or [""]


def side_by_side(old: Any, new: Any, *, width: int = 120, old_title: str = "approved",
                 new_title: str = "current") -> str:
    """Old and new definitions in two columns. Markers: ``|`` changed, ``<`` only old, ``>`` only new."""
    left, right = render_definition(old), render_definition(new)
    col = max(20, (width - 3) // 2)
    rows: list[tuple[str, str, str]] = [(old_title, " ", new_title), ("-" * col, " ", "-" * col)]
    sm = difflib.SequenceMatcher(a=left, b=right, autojunk=False)
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            rows.extend((left[i], " ", right[j]) for i, j in zip(range(i1, i2), range(j1, j2), strict=True))
            continue
        a, b = left[i1:i2], right[j1:j2]
        for k in range(max(len(a), len(b))):
            la = a[k] if k < len(a) else ""
            lb = b[k] if k < len(b) else ""
            mark = "|" if k < len(a) and k < len(b) else "<" if k < len(a) else ">"
            rows.append((la, mark, lb))
    out: list[str] = []
    for la, mark, lb in rows:
        wa, wb = _wrap(la, col), _wrap(lb, col)
        for k in range(max(len(wa), len(wb))):
            ca = wa[k] if k < len(wa) else ""
            cb = wb[k] if k < len(wb) else ""
            out.append(f"{ca:<{col}} {mark if k == 0 else mark if mark != ' ' else ' '} {cb}".rstrip())
    return "\n".join(out)
