"""``capabilities.elicitation_rate``: how many questions a server may put to the host's user, as a token bucket.

A rate is written ``"COUNT/UNIT"`` (``"10/min"``; UNIT is ``s``, ``min`` or ``h``). The bucket holds COUNT
questions and refills at COUNT per UNIT, continuously: a server may ask COUNT back to back, then one every
UNIT/COUNT. A flood is cut after COUNT, and a server that keeps flooding stays cut, because a refused question
takes nothing from the bucket but gives the server nothing either.

Everything here is pure: the caller passes ``now`` (trio's clock in the gateway, which tests move by hand), and the
arithmetic is exact (:class:`~fractions.Fraction`), so "refilled after exactly UNIT/COUNT" holds at the boundary
instead of depending on float rounding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Final, final

__all__ = ["DEFAULT_ELICITATION_RATE", "MAX_RATE_COUNT", "Bucket", "Rate", "check_rate", "parse_rate", "take"]

_UNITS: Final[dict[str, int]] = {"s": 1, "min": 60, "h": 3600}
_RATE: Final = re.compile(r"([0-9]{1,6})/(s|min|h)")
MAX_RATE_COUNT: Final = 10_000
DEFAULT_ELICITATION_RATE: Final = "10/min"
"""Ten back to back, then one every six seconds: more than a person answers (every question waits for a human),
so a normal server never meets it, while a server that asks in a loop is stopped after ten."""


@final
@dataclass(frozen=True, slots=True)
class Rate:
    """``count`` questions per ``window`` seconds: the bucket's size, and how long an empty one takes to fill."""

    count: int
    window: Fraction

    def __str__(self) -> str:
        for unit, seconds in _UNITS.items():
            if self.window == seconds:
                return f"{self.count}/{unit}"
        return f"{self.count} per {float(self.window):g} s"

    def meet(self, other: Rate) -> Rate:
        """The largest rate within both, for layering an org ceiling over a user value: the smaller burst,
        refilled at the slower pace (so ``"5/min"`` met with ``"100/h"`` is 5 at once, then one every 36 s)."""
        count = min(self.count, other.count)
        slower = self if self.count * other.window < other.count * self.window else other
        return Rate(count, count * slower.window / slower.count)


def parse_rate(text: str) -> Rate:
    """Read ``"COUNT/UNIT"``.

    Raises:
        ValueError: anything else, naming the form expected (pydantic reports it with the file and line).
    """
    match = _RATE.fullmatch(text)
    if match is None:
        raise ValueError(f"{text[:40]!r} is not a rate: write COUNT/UNIT, e.g. \"10/min\" (UNIT is s, min or h)")
    count = int(match.group(1))
    if not 1 <= count <= MAX_RATE_COUNT:
        raise ValueError(f"{text!r}: the count must be 1 to {MAX_RATE_COUNT} (to refuse every question, set "
                         "elicitation = \"off\")")
    return Rate(count, Fraction(_UNITS[match.group(2)]))


def check_rate(text: str) -> str:
    """``text`` if it is a rate (the model's validator; the effective policy parses it again)."""
    parse_rate(text)
    return text


@final
@dataclass(frozen=True, slots=True)
class Bucket:
    """A bucket's state at ``at``: the questions it still admits, and how many it refused since it last admitted
    one (the current burst; the gateway records a burst's first refusal and counts the rest)."""

    tokens: Fraction
    at: Fraction
    refused: int = 0


def take(bucket: Bucket | None, rate: Rate, now: float) -> tuple[bool, Bucket]:
    """Admit one question at ``now`` or refuse it; returns the verdict and the bucket after it. ``None`` is a full
    bucket (nothing asked yet). A clock that went back refills nothing (the elapsed time counts as zero)."""
    instant = Fraction(now)
    if bucket is None:
        tokens, refused = Fraction(rate.count), 0
    else:
        elapsed = max(Fraction(0), instant - bucket.at)
        tokens = min(Fraction(rate.count), bucket.tokens + elapsed * rate.count / rate.window)
        refused = bucket.refused
        instant = max(instant, bucket.at)
    if tokens >= 1:
        return True, Bucket(tokens - 1, instant)
    return False, Bucket(tokens, instant, refused + 1)
