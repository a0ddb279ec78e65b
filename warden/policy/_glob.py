"""Globs for tool, prompt, resource, command and env names, with real syntax errors.

``fnmatch`` accepts anything (an unclosed ``[`` silently matches a literal bracket), so a typo in a deny rule would
quietly deny nothing. This compiler rejects what it cannot read. Syntax: ``*`` any run of characters (including
``/`` and the empty run), ``?`` one character, ``[abc]``/``[a-z]``/``[!a-z]`` one character from (or not from) a
class, ``\\`` escapes the next character. Matching is case-sensitive and anchored at both ends.

A compiled glob runs on RE2 (:mod:`warden.policy._regex`), like every other pattern warden matches: the names it
is matched against (tools, resource URIs, command lines) are chosen by a server or a model, and ``*a*a*a*a*b``
under Python's backtracking ``re`` took time exponential in the stars on a name that almost fits.
"""

from __future__ import annotations

import functools
import re

from warden.errors import ConfigError
from warden.policy._regex import LinearPattern, compile_linear

__all__ = ["GlobSyntaxError", "check_glob", "compile_glob", "glob_match"]


class GlobSyntaxError(ConfigError, ValueError):
    """The pattern is not a valid glob; the message says what is wrong and where. A ``ValueError`` too, so pydantic
    reports it as the policy field's validation error."""


@functools.lru_cache(maxsize=4096)
def compile_glob(pattern: str) -> LinearPattern:
    """Compile ``pattern`` (see the module docstring) to an RE2 matcher (use its ``fullmatch``); raise
    :class:`GlobSyntaxError`."""
    if not pattern:
        raise GlobSyntaxError("empty pattern (use \"*\" to match everything)")
    for ch in pattern:
        if ord(ch) < 0x20 or ord(ch) == 0x7F or (ch.isspace() and ch != " "):
            raise GlobSyntaxError(f"control or whitespace character U+{ord(ch):04X} in pattern")
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                raise GlobSyntaxError(f"'**' at position {i}: a single '*' already matches any run, '/' included")
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "\\":
            if i + 1 >= n:
                raise GlobSyntaxError("pattern ends with a lone '\\'")
            i += 1
            out.append(re.escape(pattern[i]))
        elif c == "[":
            j = i + 1
            negate = j < n and pattern[j] == "!"
            if negate:
                j += 1
            items: list[str] = []
            while j < n and pattern[j] != "]":
                a = pattern[j]
                if a == "\\":
                    if j + 1 >= n:
                        raise GlobSyntaxError("pattern ends with a lone '\\'")
                    j += 1
                    a = pattern[j]
                if j + 2 < n and pattern[j + 1] == "-" and pattern[j + 2] != "]":
                    b = pattern[j + 2]
                    if b < a:
                        raise GlobSyntaxError(f"reversed range '{a}-{b}' at position {j}")
                    items.append(f"{re.escape(a)}-{re.escape(b)}")
                    j += 3
                else:
                    items.append(re.escape(a))
                    j += 1
            if j >= n:
                raise GlobSyntaxError(f"'[' at position {i} is never closed")
            if not items:
                raise GlobSyntaxError(f"empty character class at position {i}")
            out.append(f"[{'^' if negate else ''}{''.join(items)}]")
            i = j
        elif c == "]":
            raise GlobSyntaxError(f"']' at position {i} closes no '['")
        else:
            out.append(re.escape(c))
        i += 1
    try:
        return compile_linear("(?s)" + "".join(out), bounded=False)
    except ValueError as exc:
        raise GlobSyntaxError(f"cannot be compiled: {exc}") from exc


def check_glob(pattern: str) -> str:
    """Validate ``pattern`` for pydantic (raises :class:`GlobSyntaxError`, a ``ValueError``); return it unchanged."""
    compile_glob(pattern)
    return pattern


def glob_match(pattern: str, name: str) -> bool:
    """True when ``name`` matches ``pattern`` entirely."""
    return compile_glob(pattern).fullmatch(name) is not None
