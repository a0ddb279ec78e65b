"""Read a TOML file and know the line of every key, so a bad key is reported as ``file:line``.

``tomllib`` validates the syntax but keeps no positions. After it accepted a document, :func:`key_lines` walks the
same text once more with a small scanner that only needs to follow valid TOML (strings of all four kinds, comments,
arrays and inline tables over several lines, table and array-of-table headers) and records, for every key path, the
line where it is written. Paths use the same shape pydantic reports errors in: table keys as strings, array (and
array-of-tables) positions as ints.
"""

from __future__ import annotations

import bisect
import tomllib
from pathlib import Path
from typing import Any

from warden.errors import ConfigError

KeyPath = tuple[str | int, ...]
_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
MAX_POLICY_BYTES = 1 << 20


class _Scanner:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.lines: dict[KeyPath, int] = {}
        self._starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]

    def line(self, pos: int) -> int:
        return bisect.bisect_right(self._starts, pos)

    def peek(self, n: int = 1) -> str:
        return self.s[self.i:self.i + n]

    def skip_ws(self, newlines: bool) -> None:
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c in " \t" or (newlines and c in "\r\n"):
                self.i += 1
            elif c == "#":
                while self.i < len(s) and s[self.i] != "\n":
                    self.i += 1
            else:
                return

    def string(self) -> str:
        s = self.s
        for q in ('"""', "'''"):
            if s.startswith(q, self.i):
                end = s.index(q, self.i + 3)
                while s.startswith(q[0], end + 3):  # up to two quotes may close a multi-line string
                    end += 1
                raw = s[self.i:end + 3]
                self.i = end + 3
                return str(tomllib.loads(f"x = {raw}")["x"])
        q = s[self.i]
        j = self.i + 1
        while s[j] != q:
            j += 2 if (q == '"' and s[j] == "\\") else 1
        raw = s[self.i:j + 1]
        self.i = j + 1
        return str(tomllib.loads(f"x = {raw}")["x"])

    def key(self) -> list[tuple[str, int]]:
        parts: list[tuple[str, int]] = []
        while True:
            self.skip_ws(False)
            start = self.i
            if self.peek() in ('"', "'"):
                parts.append((self.string(), start))
            else:
                j = self.i
                while j < len(self.s) and self.s[j] in _BARE:
                    j += 1
                parts.append((self.s[self.i:j], start))
                self.i = j
            self.skip_ws(False)
            if self.peek() != ".":
                return parts
            self.i += 1

    def record(self, path: KeyPath, pos: int) -> None:
        self.lines.setdefault(path, self.line(pos))

    def keyval(self, table: KeyPath) -> None:
        parts = self.key()
        path = table
        for name, pos in parts:
            path = (*path, name)
            self.record(path, pos)
        self.skip_ws(False)
        self.i += 1  # '='
        self.skip_ws(False)
        self.value(path)

    def value(self, path: KeyPath) -> None:
        c = self.peek()
        if c in ('"', "'"):
            self.string()
        elif c == "[":
            self.i += 1
            n = 0
            while True:
                self.skip_ws(True)
                if self.peek() == "]":
                    self.i += 1
                    return
                self.record((*path, n), self.i)
                self.value((*path, n))
                n += 1
                self.skip_ws(True)
                if self.peek() == ",":
                    self.i += 1
        elif c == "{":
            self.i += 1
            while True:
                self.skip_ws(True)
                if self.peek() == "}":
                    self.i += 1
                    return
                self.keyval(path)
                self.skip_ws(True)
                if self.peek() == ",":
                    self.i += 1
        else:
            s = self.s
            while self.i < len(s) and s[self.i] not in ",]}\n#":
                self.i += 1

    def document(self) -> dict[KeyPath, int]:
        table: KeyPath = ()
        aot: dict[KeyPath, int] = {}
        s = self.s
        while True:
            self.skip_ws(True)
            if self.i >= len(s):
                return self.lines
            if s[self.i] == "[":
                start = self.i
                array = s.startswith("[[", self.i)
                self.i += 2 if array else 1
                parts = self.key()
                self.i += 2 if array else 1
                resolved: KeyPath = ()
                for k, (name, pos) in enumerate(parts):
                    resolved = (*resolved, name)
                    last = k == len(parts) - 1
                    if last and array:
                        count = aot.get(resolved, 0)
                        aot[resolved] = count + 1
                        self.record(resolved, pos)
                        resolved = (*resolved, count)
                        self.record(resolved, start)
                    else:
                        self.record(resolved, pos if not last else start)
                        if resolved in aot:
                            resolved = (*resolved, aot[resolved] - 1)
                table = resolved
            else:
                self.keyval(table)


def key_lines(text: str) -> dict[KeyPath, int]:
    """Map every key path of a valid TOML document to the (1-based) line it is written on."""
    return _Scanner(text).document()


def line_of(lines: dict[KeyPath, int], path: KeyPath) -> int | None:
    """The line of ``path``, or of its longest recorded prefix (a missing key is reported where its table is)."""
    p = tuple(path)
    while p:
        if p in lines:
            return lines[p]
        p = p[:-1]
    return None


def load_toml(path: Path) -> tuple[dict[str, Any], dict[KeyPath, int], bytes]:
    """Read and parse ``path``; return the document, its key lines and the raw bytes (for the policy digest).

    Raises:
        ConfigError: unreadable, too large, not UTF-8, or not valid TOML (with the line tomllib names).
    """
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_POLICY_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}",
                          hint="check the path and its permissions") from exc
    return parse_toml(raw, path)


def parse_toml(raw: bytes, path: Path) -> tuple[dict[str, Any], dict[KeyPath, int], bytes]:
    """:func:`load_toml` on bytes already read (``path`` names them in errors).

    Raises:
        ConfigError: too large, not UTF-8, or not valid TOML.
    """
    if len(raw) > MAX_POLICY_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_POLICY_BYTES} bytes", hint="a policy file is small text")
    try:
        text = raw.decode("utf-8")
        doc = tomllib.loads(text)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})",
                          hint="save the file as UTF-8") from exc
    except tomllib.TOMLDecodeError as exc:
        where = "at its last line (a value, quote or bracket left open)" if "at end of document" in str(exc) \
            else "at the line shown"
        raise ConfigError(f"{path}: invalid TOML: {exc}", hint=f"fix the syntax {where}") from exc
    return doc, key_lines(text), raw
