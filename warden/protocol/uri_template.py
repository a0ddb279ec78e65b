"""Which URIs a resource template (RFC 6570) can produce, as a regular expression for RE2 (linear time).

Used to route a ``resources/read`` of a URI no server listed to the one server whose template makes it. The
pattern is deliberately generous inside an expression (a simple ``{x}`` takes any run of characters but ``/``, ``?``
and ``#``; ``{+x}`` and ``{#x}`` take anything): routing only has to tell servers apart, and a URI that two
servers' templates both match is refused by the caller rather than guessed. Literal text is matched exactly.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["MAX_EXPRESSIONS", "template_pattern"]

MAX_EXPRESSIONS: Final = 16
"""A template with more expressions than this is not used for routing (no server needs that many)."""

_EXPRESSION: Final = re.compile(r"\{([^{}]*)\}")

_OPERATOR: Final = {
    "": "[^/?#]*",
    "+": ".*",
    "#": "(?:#.*)?",
    ".": r"(?:\.[^/?#]*)*",
    "/": "(?:/[^/?#]*)*",
    ";": "(?:;[^/?#]*)*",
    "?": r"(?:\?[^#]*)?",
    "&": "(?:&[^#]*)?",
}


def template_pattern(template: str) -> str | None:
    """A full-match pattern for the URIs ``template`` expands to, or None when it is not a template warden routes
    by (a stray brace, an unknown operator, an empty expression, more than :data:`MAX_EXPRESSIONS`)."""
    parts: list[str] = []
    at = 0
    count = 0
    for match in _EXPRESSION.finditer(template):
        literal = template[at:match.start()]
        if "{" in literal or "}" in literal:
            return None
        parts.append(re.escape(literal))
        body = match.group(1)
        operator = body[:1] if body[:1] in _OPERATOR and body[:1] else ""
        names = body[len(operator):]
        if not names or any(not re.fullmatch(r"[A-Za-z0-9_%.]+(?::[1-9]\d{0,3}|\*)?", n) for n in names.split(",")):
            return None
        parts.append(_OPERATOR[operator])
        count += 1
        at = match.end()
    tail = template[at:]
    if "{" in tail or "}" in tail or count > MAX_EXPRESSIONS:
        return None
    parts.append(re.escape(tail))
    return "".join(parts)
