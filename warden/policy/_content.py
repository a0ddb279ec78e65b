"""Content rules: credentials found in a tool's result or arguments are cut out (``redact``) or the message is
refused (``deny``), and what was cut is recorded by digest, never by value.

What is looked for: built-in detectors of provider key formats (AWS access key ids, GitHub tokens, Slack tokens,
OpenAI and Anthropic keys), PEM private key blocks, JWTs, every value of the secrets registry
(:mod:`warden.secrets`), and the policy's own ``[[defaults.content.rules]]`` patterns. Every pattern is RE2
(:mod:`warden.policy._regex`), so scanning is linear in the message, one pass for all detectors.

The cheap path: a result's wire bytes are searched once; when nothing matches and they hold no JSON escape that
could hide a match (``\\u``, ``\\/``), they pass byte for byte. Otherwise the result is decoded, every string (keys
too) is scanned and rewritten, and it is encoded again -- so the host always receives valid JSON. A redacted
``structuredContent`` is checked against the tool's ``outputSchema`` (jsonschema): if redaction broke a result
that was valid, the result is refused instead, and the refusal says so. A result larger than ``max_scan_bytes`` is
refused, never passed unscanned.

Layering (``[defaults.content]`` / ``[servers.NAME.content]``): ``results`` and ``arguments`` take the least
permissive action (deny < redact); ``max_scan_bytes`` the smallest; rules of both layers all apply.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, final

import msgspec

from warden.policy._glob import glob_match
from warden.policy._regex import LinearPattern, compile_linear

if TYPE_CHECKING:
    from warden.policy._effective import Setting, Source
    from warden.policy._model import ContentRule

__all__ = ["BUILTIN_DETECTORS", "ContentFinding", "ContentPolicy", "ContentScanner", "Screened", "screen_arguments",
           "screen_result"]

BUILTIN_DETECTORS: Final[Mapping[str, str]] = {
    "private_key": r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY-----(?:[\s\S]*?-----END[A-Z0-9 ]{0,40}PRIVATE KEY-----"
                   r"|[A-Za-z0-9+/=\s\\]*)",
    "aws_access_key": r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b",
    "github_token": r"\b(?:gh[pousr]_[A-Za-z0-9]{36,251}|github_pat_[A-Za-z0-9_]{22,255})\b",
    "slack_token": r"\bxox[abposr]-[A-Za-z0-9-]{10,250}",
    "anthropic_key": r"\bsk-ant-[A-Za-z0-9_-]{20,250}",
    "openai_key": r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,250}",
    "jwt": r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
}
"""Provider formats as their issuers document them. Order matters where formats overlap: at one position the
first alternative wins (an Anthropic ``sk-ant-`` key is named as such, not as an OpenAI ``sk-`` key)."""

REGISTRY_RULE: Final = "secrets_registry"
_ESCAPES: Final = (b"\\u", b"\\/")


def _digest(value: str) -> str:
    return "sha256:" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


@final
@dataclass(frozen=True, slots=True)
class ContentPolicy:
    """One server's effective content rules (built by :meth:`EffectivePolicy.server`)."""

    results: Setting[str]
    arguments: Setting[str]
    max_scan_bytes: Setting[int]
    rules: tuple[tuple[ContentRule, Source], ...]

    def to_json(self) -> dict[str, Any]:
        return {"results": self.results.value, "arguments": self.arguments.value,
                "max_scan_bytes": self.max_scan_bytes.value,
                "rules": [r.model_dump(mode="json") for r, _ in self.rules]}


@final
@dataclass(frozen=True, slots=True)
class ContentFinding:
    """A value a rule matched: the rule's name, where its action comes from, the action, the value's digest, and
    where in the message it was (a JSON path). ``value`` stays in memory only (to keep it out of the audit
    record's arguments); it is never written."""

    rule: str
    action: str
    source: Source
    digest: str
    where: str
    value: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class _Detector:
    name: str
    action: str
    source: Source


@final
class ContentScanner:
    """The detectors that apply to one tool on one side (``results`` or ``arguments``), compiled into one RE2
    pattern (text) plus the same pattern over wire bytes (the cheap path)."""

    def __init__(self, policy: ContentPolicy, side: str, tool: str, secrets: Sequence[str] = (), *,
                 builtin: Source) -> None:
        default = policy.results if side == "results" else policy.arguments
        self.source = default.source if default.source.file else builtin
        detectors: list[_Detector] = []
        patterns: list[str] = []
        wire: list[bytes] = []
        for name, pattern in BUILTIN_DETECTORS.items():
            detectors.append(_Detector(name, default.value, default.source if default.source.file else builtin))
            patterns.append(pattern)
            # Over wire bytes, a word boundary may hide behind an escape ("\\nAKIA..."): the wire form drops the
            # boundaries, so it finds a superset and the decoded text decides.
            wire.append(pattern.replace(r"\b", "").encode())
        literal = sorted({s for s in secrets if s}, key=lambda s: (-len(s), s))
        if literal:
            detectors.append(_Detector(REGISTRY_RULE, default.value, builtin))
            patterns.append("|".join(_re2_literal(s) for s in literal))
            wire.append(b"|".join(_re2_bytes(form) for s in literal for form in _wire_forms(s)))
        # A policy's own pattern may match a quote, a backslash or a control character that JSON escapes on the
        # wire, so with such rules every result is decoded and scanned string by string (never skipped).
        self._always_decode = False
        for rule, source in policy.rules:
            if rule.on not in (side, "both") or not any(glob_match(g, tool) for g in rule.tools):
                continue
            detectors.append(_Detector(rule.name, rule.action or default.value, source))
            patterns.append(rule.pattern)
            self._always_decode = True
        self._detectors = tuple(detectors)
        # Text is scanned as UTF-8 bytes with one capture-free pattern (RE2's fast DFA path; the binding's str path
        # costs ~10x more); which detector matched is asked of each one alone, on the few matches there are.
        self._text: LinearPattern = compile_linear("|".join(f"(?:{p})" for p in patterns).encode(), bounded=False)
        self._each: tuple[LinearPattern, ...] = tuple(compile_linear(p.encode(), bounded=False) for p in patterns)
        self._wire: LinearPattern = compile_linear(b"|".join(b"(?:%b)" % w for w in wire), bounded=False)

    def might_hold(self, raw: bytes) -> bool:
        """Whether the wire bytes may hold a match (false: they pass unchanged). Linear in ``raw``."""
        return self._always_decode or self._wire.search(raw) is not None or any(e in raw for e in _ESCAPES)

    def text(self, text: str, where: str, found: list[ContentFinding]) -> str:
        """``text`` with every match replaced by ``[REDACTED:<rule>]``; each match is appended to ``found``.

        Raises:
            ValueError: a match cut a string holding lone surrogates mid-character (the caller refuses it).
        """
        data = text.encode("utf-8", "surrogatepass")
        if self._text.search(data) is None:
            return text
        out: list[bytes] = []
        end = 0
        for m in self._text.finditer(data):
            start, stop = m.span()
            if start == stop:
                continue
            segment = data[start:stop]
            i = next((k for k, p in enumerate(self._each) if p.fullmatch(segment) is not None), 0)
            d = self._detectors[i]
            value = segment.decode("utf-8", "surrogatepass")
            found.append(ContentFinding(d.name, d.action, d.source, _digest(value), where, value))
            out.append(data[end:start])
            out.append(f"[REDACTED:{d.name}]".encode())
            end = stop
        out.append(data[end:])
        return b"".join(out).decode("utf-8", "surrogatepass")

    def value(self, value: Any, where: str, found: list[ContentFinding]) -> Any:
        """A copy of a decoded JSON value with every match cut out of its strings and keys."""
        if isinstance(value, str):
            return self.text(value, where, found)
        if isinstance(value, dict):
            # A finding's ``where`` is shown (a refusal's reason, the audit record): it names a key as redacted,
            # never as sent, or a credential written as a key would be echoed in clear by the finding itself.
            out: dict[str, Any] = {}
            for k, v in value.items():
                in_key: list[ContentFinding] = []
                key = self.text(k, where, in_key)
                here = f"{where}.{key}"
                found.extend(dataclasses.replace(f, where=here) for f in in_key)
                out[key] = self.value(v, here, found)
            return out
        if isinstance(value, list):
            return [self.value(v, f"{where}[{i}]", found) for i, v in enumerate(value)]
        return value


def _re2_literal(s: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else f"\\x{{{ord(c):x}}}" for c in s)


def _re2_bytes(b: bytes) -> bytes:
    """A literal over UTF-8 wire bytes: ASCII punctuation escaped (``\\x{hh}`` is that code point), other bytes as
    they are (RE2 reads the pattern as UTF-8, so a multi-byte character matches itself)."""
    return b"".join(bytes([c]) if c >= 0x80 or chr(c).isalnum() else b"\\x{%x}" % c for c in b)


def _wire_forms(value: str) -> set[bytes]:
    """Every way ``value`` can appear inside a JSON string on the wire (raw UTF-8, escaped, ``\\/``)."""
    escaped = json.dumps(value)[1:-1]
    return {value.encode("utf-8", "surrogatepass"), msgspec.json.encode(value)[1:-1], escaped.encode(),
            escaped.replace("/", "\\/").encode()}


@final
@dataclass(frozen=True, slots=True)
class Screened:
    """What a result becomes: ``raw`` to deliver (the same object when nothing matched), or ``refused`` (why);
    ``findings`` in both cases (what to record by digest)."""

    raw: bytes | None
    refused: str | None = None
    findings: tuple[ContentFinding, ...] = ()


class _UncheckableSchema(Exception):
    """The outputSchema holds a pattern RE2 cannot run (jsonschema's own ``re`` would backtrack on hostile text)."""


def _linear(pattern: str) -> Any:
    try:
        return compile_linear(pattern)
    except ValueError as exc:
        raise _UncheckableSchema(pattern) from exc


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    import jsonschema

    if validator.is_type(instance, "string") and _linear(pattern).search(instance) is None:
        yield jsonschema.ValidationError(f"does not match {pattern!r}")


def _pattern_properties(validator: Any, properties: Mapping[str, Any], instance: Any, schema: Any) -> Any:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in properties.items():
        for key, value in instance.items():
            if _linear(pattern).search(key) is not None:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _schema_valid(schema: Mapping[str, Any], instance: Any) -> bool:
    """Whether ``instance`` fits ``schema``, every ``pattern`` run by RE2 (the schema is the server's to write).

    Raises:
        _UncheckableSchema: a pattern RE2 cannot run.
    """
    import jsonschema  # here, not at the top: only a result with structuredContent needs it (startup time)
    from referencing.exceptions import Unresolvable

    try:
        cls = jsonschema.validators.validator_for(schema)
        safe = jsonschema.validators.extend(cls, {"pattern": _pattern, "patternProperties": _pattern_properties})
        return bool(safe(schema).is_valid(instance))
    except (jsonschema.exceptions.SchemaError, Unresolvable, TypeError, ValueError, RecursionError):
        return False


def screen_result(scanner: ContentScanner, raw: bytes, *, max_scan_bytes: int,
                  output_schema: Mapping[str, Any] | None) -> Screened:
    """Screen one ``tools/call`` result (its JSON-RPC ``result`` object, as bytes). Pure."""
    if len(raw) > max_scan_bytes:
        return Screened(None, f"the result is {len(raw)} bytes, more than content.max_scan_bytes "
                              f"({max_scan_bytes}) warden scans; it is refused rather than passed unscanned")
    if not scanner.might_hold(raw):
        return Screened(raw)
    found: list[ContentFinding] = []
    try:
        decoded = msgspec.json.decode(raw)
        redacted = scanner.value(decoded, "result", found)
    except (msgspec.DecodeError, ValueError, RecursionError):
        return Screened(None, "the result is not valid JSON that warden can scan", tuple(found))
    if not found:
        return Screened(raw)
    findings = tuple(found)
    denied = sorted({f.rule for f in findings if f.action == "deny"})
    if denied:
        return Screened(None, f"the result holds {', '.join(denied)} (content rule action 'deny')", findings)
    rules = ", ".join(sorted({f.rule for f in findings}))
    try:
        broken = isinstance(decoded, dict) and isinstance(output_schema, Mapping) \
            and "structuredContent" in decoded and redacted.get("structuredContent") != decoded["structuredContent"] \
            and _schema_valid(output_schema, decoded["structuredContent"]) \
            and not _schema_valid(output_schema, redacted["structuredContent"])
    except _UncheckableSchema:
        return Screened(None, f"the result holds {rules}, and the tool's outputSchema has a pattern warden cannot "
                              "check in linear time, so it cannot tell whether redacting keeps it valid; refused",
                        findings)
    if broken:
        return Screened(None, f"the result holds {rules}, and redacting it would break the tool's outputSchema, "
                              "so it is refused instead", findings)
    return Screened(msgspec.json.encode(redacted), None, findings)


def screen_arguments(scanner: ContentScanner, arguments: Mapping[str, Any] | None
                     ) -> tuple[Mapping[str, Any] | None, tuple[ContentFinding, ...]]:
    """The arguments with every match cut out, and the findings (a ``deny`` finding refuses the call in
    :func:`warden.policy.decide`). Pure."""
    if not arguments:
        return arguments, ()
    found: list[ContentFinding] = []
    try:
        redacted = scanner.value(dict(arguments), "arguments", found)
    except (ValueError, RecursionError):  # what cannot be scanned is refused, never forwarded unscanned
        return arguments, (ContentFinding("unscannable", "deny", scanner.source, _digest(repr(arguments)[:4096]),
                                          "arguments", ""),)
    return (redacted if found else arguments), tuple(found)
