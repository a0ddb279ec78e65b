"""Reading a server's ``WWW-Authenticate`` header (RFC 9110 §11.6.1): which scheme it asks for, and the Bearer
challenge's parameters (RFC 6750 §3, RFC 9728 §5.1) that start and steer OAuth discovery - ``resource_metadata``,
``scope`` and ``error``.

The header is written by the server, so it is hostile: it is parsed by a small total parser (every input gives an
answer, never an exception), bounded in size, and nothing from it is trusted beyond being text. Whether the
``resource_metadata`` URL may be fetched is decided by :mod:`warden.auth.discovery`, not here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, final

__all__ = ["MAX_CHALLENGE_LENGTH", "BearerChallenge", "Challenge", "bearer_challenge", "parse_challenges"]

MAX_CHALLENGE_LENGTH: Final = 8192
"""Header text past this is ignored: no legitimate challenge is that long."""
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TOKEN68: Final = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
_SPACE: Final = " \t"


@final
@dataclass(frozen=True, slots=True)
class Challenge:
    """One challenge: its scheme (lower-cased) and its parameters (names lower-cased; the first of a repeated
    name wins), or a token68 instead of parameters."""

    scheme: str
    params: dict[str, str] = field(default_factory=dict)
    token68: str | None = None


@final
@dataclass(frozen=True, slots=True)
class BearerChallenge:
    """What a Bearer challenge tells an OAuth client."""

    resource_metadata: str | None = None
    """RFC 9728: where the protected resource metadata is (absent: the client looks at the well-known URLs)."""
    scopes: tuple[str, ...] = ()
    """The scopes the request needs (RFC 6750 ``scope``), in the server's order, without duplicates."""
    error: str | None = None
    """``invalid_token``, ``insufficient_scope``, ... (RFC 6750 §3.1)."""

    @property
    def insufficient_scope(self) -> bool:
        return self.error == "insufficient_scope"


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i] in _SPACE:
        i += 1
    return i


def _quoted(text: str, i: int) -> tuple[str, int]:
    """The quoted-string starting at ``text[i] == '"'``, unescaped; an unterminated one runs to the end."""
    out: list[str] = []
    i += 1
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
            continue
        if ch == '"':
            return "".join(out), i + 1
        out.append(ch)
        i += 1
    return "".join(out), i


def _skip_to_comma(text: str, i: int) -> int:
    """Past the next top-level comma (or to the end): how malformed parts are stepped over."""
    while i < len(text) and text[i] != ",":
        if text[i] == '"':
            _, i = _quoted(text, i)
            continue
        i += 1
    return min(i + 1, len(text))


def parse_challenges(headers: Iterable[str]) -> list[Challenge]:
    """Every challenge in the given ``WWW-Authenticate`` field values (a response may send several fields, each
    with several comma-separated challenges). Malformed parts are skipped; this never raises."""
    text = ", ".join(headers)[:MAX_CHALLENGE_LENGTH]
    challenges: list[Challenge] = []
    i = 0
    while i < len(text):
        i = _skip_space(text, i)
        if i < len(text) and text[i] == ",":
            i += 1
            continue
        scheme = _TOKEN.match(text, i)
        if scheme is None:
            i = _skip_to_comma(text, i)
            continue
        i = _skip_space(text, scheme.end())
        params: dict[str, str] = {}
        token68: str | None = None
        # token68 form: "Scheme abc=="; a parameter needs a name, then "=", then a value
        candidate = _TOKEN68.match(text, i)
        if candidate is not None:
            after = _skip_space(text, candidate.end())
            if after >= len(text) or text[after] == ",":
                token68 = candidate.group()
                i = after
        while token68 is None and i < len(text):
            i = _skip_space(text, i)
            if i < len(text) and text[i] == ",":
                i += 1
                continue
            name = _TOKEN.match(text, i)
            if name is None:
                i = _skip_to_comma(text, i)
                continue
            j = _skip_space(text, name.end())
            if j >= len(text) or text[j] != "=":
                break  # a bare token: the next challenge's scheme
            j = _skip_space(text, j + 1)
            if j < len(text) and text[j] == '"':
                value, j = _quoted(text, j)
            else:
                bare = _TOKEN.match(text, j)
                if bare is None:
                    i = _skip_to_comma(text, j)
                    continue
                value, j = bare.group(), bare.end()
            params.setdefault(name.group().lower(), value)
            i = _skip_space(text, j)
            if i < len(text) and text[i] != ",":
                i = _skip_to_comma(text, i)
        challenges.append(Challenge(scheme.group().lower(), params, token68))
    return challenges


def bearer_challenge(headers: Iterable[str]) -> BearerChallenge | None:
    """The first Bearer challenge among the ``WWW-Authenticate`` values, or None when there is none."""
    for challenge in parse_challenges(headers):
        if challenge.scheme != "bearer":
            continue
        params = challenge.params
        scopes = tuple(dict.fromkeys(params.get("scope", "").split()))
        return BearerChallenge(resource_metadata=params.get("resource_metadata") or None, scopes=scopes,
                               error=params.get("error") or None)
    return None
