"""Cutting registered secret values out of text, JSON values and JSON wire bytes.

A :class:`Redactor` is built once from the registry (see :func:`warden.secrets.load_redactor`) and applied at each
output channel. It matches every value literally with one Aho-Corasick automaton (``ahocorasick-rs``), leftmost
longest, so a secret that contains another is cut whole and the cost of a pass does not grow with the number of
values (Python's ``re`` alternation did: 10 MB/s with ten values, 1 MB/s with a hundred; see ``bench/redact.py``).

On wire bytes it looks for each value as UTF-8 and in every JSON spelling an encoder commonly writes (raw UTF-8,
``\\uXXXX`` in lower or upper case, ``\\/`` included); only a message that holds one is decoded, redacted string by
string (keys too; a number whose digits hold a secret becomes the string ``"[REDACTED]"``) and re-encoded, so
ordinary traffic passes byte for byte and a redacted message is still valid JSON. Bytes that are not one JSON
value (an SSE event, several messages one per line) are redacted line by line the same way.

Replacing a value can make a new one appear (``XD]abcdefg`` + the value ``D]abcdefg`` after ``[REDACTED]``), so
every pass repeats until nothing registered is left, and a text that still holds one after a few passes becomes
``[REDACTED]`` as a whole: redaction fails closed.

What redaction cannot do, and does not pretend to: a hostile server that knows a secret can always re-encode it
(base64, reversed, every letter as ``\\u00XX``) before sending it. Redaction stops the honest leak — a debug print,
an error that echoes its input, a token inside a description — and keeps warden's own channels (its messages,
logs, audit records, pin store, displays) free of the value in clear.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any, Final, final

import ahocorasick_rs
import msgspec

__all__ = ["MIN_SECRET_LENGTH", "REDACTED", "Redactor", "looks_secret", "redactable"]

REDACTED: Final = "[REDACTED]"
MIN_SECRET_LENGTH: Final = 8
"""Shorter values are not secrets warden can redact without blanking ordinary text (``1``, ``true``, a port). The
store refuses them; ``warden run`` refuses to hand one to a server under a secret-looking name (see
``looks_secret``) and names every other one it hands unredacted in its log, so there is no silent gap."""
_PASSES: Final = 4
_DFA_PATTERNS: Final = 512
_REDACTED_BYTES: Final = REDACTED.encode()

_SECRET_NAME: Final = re.compile(r"(TOKEN|SECRET|PASSW|PASSPHRASE|API_?KEY|PRIVATE|CREDENTIAL|AUTH|\bPAT\b|_PAT$"
                                 r"|COOKIE|SESSION)", re.IGNORECASE)
_UPPER_ESCAPE: Final = re.compile(r"\\u([0-9a-f]{4})")


def looks_secret(name: str) -> bool:
    """Whether an environment variable's name says its value is a secret (``GITHUB_PERSONAL_ACCESS_TOKEN``)."""
    return _SECRET_NAME.search(name) is not None


def redactable(value: str) -> bool:
    """Whether ``value`` can be registered: at least :data:`MIN_SECRET_LENGTH` characters and not part of the
    ``[REDACTED]`` marker itself (a text holding the marker would always hold it)."""
    return len(value) >= MIN_SECRET_LENGTH and value not in REDACTED


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _wire_forms(value: str) -> set[bytes]:
    """Every common way ``value`` appears inside a JSON string on the wire."""
    ascii_form = json.dumps(value)[1:-1]
    forms = {_utf8(value), msgspec.json.encode(value)[1:-1], ascii_form.encode(),
             _UPPER_ESCAPE.sub(lambda m: "\\u" + m.group(1).upper(), ascii_form).encode()}
    return forms | {form.replace(b"/", b"\\/") for form in forms}


def _automaton(patterns: Iterable[bytes]) -> ahocorasick_rs.BytesAhoCorasick | None:
    """Leftmost-longest, as a DFA while that stays small (10x faster than the library's default choice at ten
    values, ``bench/redact.py``), a contiguous NFA beyond (a DFA over thousands of handed values would take
    hundreds of MiB)."""
    kept = sorted(set(patterns))
    if not kept:
        return None
    implementation = ahocorasick_rs.Implementation.DFA if len(kept) <= _DFA_PATTERNS \
        else ahocorasick_rs.Implementation.ContiguousNFA
    return ahocorasick_rs.BytesAhoCorasick(kept, matchkind=ahocorasick_rs.MatchKind.LeftmostLongest,
                                           implementation=implementation)


def _cut(data: bytes, matcher: ahocorasick_rs.BytesAhoCorasick) -> bytes | None:
    """``data`` with every match replaced, pass after pass until none is left (``[REDACTED]`` as a whole when
    some still is after :data:`_PASSES` passes); None when there was no match at all."""
    out = data
    for _ in range(_PASSES + 1):
        matches = matcher.find_matches_as_indexes(out)
        if not matches:
            return None if out is data else out
        parts: list[bytes] = []
        at = 0
        for _, start, end in matches:
            parts += (out[at:start], _REDACTED_BYTES)
            at = end
        parts.append(out[at:])
        out = b"".join(parts)
    return out if not matcher.find_matches_as_indexes(out) else _REDACTED_BYTES


@final
class Redactor:
    """The registered secret values, compiled for matching. Immutable; :meth:`with_values` makes a wider one."""

    __slots__ = ("_text", "_values", "_wire")

    def __init__(self, values: Iterable[str] = ()) -> None:
        kept = sorted({v for v in values if redactable(v)}, key=lambda v: (-len(v), v))
        self._values: tuple[str, ...] = tuple(kept)
        self._text = _automaton(_utf8(v) for v in kept)
        self._wire = _automaton(form for v in kept for form in _wire_forms(v))

    def __bool__(self) -> bool:
        return bool(self._values)

    def __repr__(self) -> str:  # never the values
        return f"Redactor({len(self._values)} values)"

    @property
    def values(self) -> tuple[str, ...]:
        return self._values

    def with_values(self, values: Iterable[str]) -> Redactor:
        """A redactor for these values and the ones already here."""
        return Redactor((*self._values, *values))

    def found_in(self, text: str) -> bool:
        return self._text is not None and bool(self._text.find_matches_as_indexes(_utf8(text)))

    def text(self, text: str) -> str:
        """``text`` with every registered value replaced by ``[REDACTED]`` (``text`` itself when none is there)."""
        if self._text is None:
            return text
        cut = _cut(_utf8(text), self._text)
        return text if cut is None else cut.decode("utf-8", "surrogatepass")

    def json_value(self, value: Any) -> Any:
        """A copy of a decoded JSON value with every registered value cut out of its strings and keys."""
        if self._text is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k): self.json_value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.json_value(v) for v in value]
        if isinstance(value, int | float) and not isinstance(value, bool) and self.found_in(repr(value)):
            return REDACTED
        return value

    def wire(self, raw: bytes) -> bytes:
        """JSON wire bytes with every registered value cut out; ``raw`` itself (the same object) when none is
        there. Bytes that are not one JSON value are redacted line by line: a line holding JSON from its first
        ``{`` or ``[`` on (an SSE ``data:`` line, NDJSON) keeps its JSON valid; any other line has the matches
        replaced in the bytes."""
        if self._wire is None or not self._wire.find_matches_as_indexes(raw):
            return raw
        whole = self._json(raw)
        if whole is not None:
            return whole
        return b"\n".join(self._line(line) for line in raw.split(b"\n"))

    def _json(self, raw: bytes) -> bytes | None:
        try:
            return msgspec.json.encode(self.json_value(msgspec.json.decode(raw)))
        except (msgspec.DecodeError, msgspec.EncodeError, RecursionError, ValueError):
            return None

    def _line(self, line: bytes) -> bytes:
        assert self._wire is not None
        if not self._wire.find_matches_as_indexes(line):
            return line
        starts = [i for i in (line.find(b"{"), line.find(b"[")) if i >= 0]
        if starts:
            body = self._json(line[min(starts):])
            if body is not None:
                return line[:min(starts)] + body
        cut = _cut(line, self._wire)
        return line if cut is None else cut
