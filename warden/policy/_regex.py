"""Regular expressions written in policy files, compiled by RE2: matching time is linear in the input, whatever
the pattern.

Python's ``re`` backtracks, so a pattern such as ``(a+)+$`` takes exponential time on a crafted input -- and the
inputs here (tool arguments, server results) are written by a model or a hostile server. RE2 has no
backreferences and no lookaround, which is what makes it linear; a pattern that needs them is refused when the
policy is loaded (``warden policy check`` names its file and line), never at the first call.
"""

from __future__ import annotations

import functools
from typing import Any, Final

import re2

__all__ = ["LinearPattern", "check_linear", "compile_linear", "linear_fullmatch"]

LinearPattern = Any
"""A compiled RE2 pattern (``re2._Regexp``; the binding ships no type information)."""

_MAX_PATTERN: Final = 4096
_MAX_MEM: Final = 8 << 20  # RE2's own bound on a compiled program: a huge pattern fails to compile, not to run


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # the error comes back as an exception; RE2 must not write to warden's stderr
    options.max_mem = _MAX_MEM
    return options


@functools.lru_cache(maxsize=1024)
def compile_linear(pattern: str | bytes, *, bounded: bool = True) -> LinearPattern:
    """Compile ``pattern`` with RE2 (a ``str`` pattern matches text, a ``bytes`` one wire bytes). ``bounded=False``
    is for patterns warden builds itself (the union of rules, the secrets registry's literals), which grow with the
    number of registered values; RE2's memory budget still bounds them.

    Raises:
        ValueError: RE2 cannot compile it (backreferences, lookaround, possessive quantifiers, bad syntax), or it
            is longer than 4096 characters; the message says which.
    """
    if bounded and len(pattern) > _MAX_PATTERN:
        raise ValueError(f"pattern longer than {_MAX_PATTERN} characters")
    try:
        return re2.compile(pattern, options=_options())
    except re2.error as exc:
        detail = exc.args[0] if exc.args else exc
        text = detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)
        raise ValueError(f"invalid regular expression for RE2, the linear-time engine: {text} (backreferences "
                         "and lookaround are not available)") from exc


def check_linear(pattern: str) -> str:
    """pydantic validator: ``pattern`` compiles with RE2; returned unchanged."""
    compile_linear(pattern)
    return pattern


def linear_fullmatch(pattern: str, text: str) -> bool:
    """Whether all of ``text`` matches ``pattern`` (already checked at load time)."""
    return compile_linear(pattern).fullmatch(text) is not None
