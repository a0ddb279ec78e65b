"""The audit record: what the gateway fills in, and its one canonical byte encoding.

A record is a flat, typed ``msgspec`` struct. Unset (``None``) fields are left out, keys are sorted, and nothing
in it is a float, an integer beyond ±2^53 or a non-ASCII key, so ``msgspec``'s sorted encoding *is* RFC 8785
(``tests/audit`` checks this against the ``rfc8785`` package). The only free-form JSON, the tool arguments, is
canonicalized separately (:func:`warden.canonical.canonical_json`) and embedded verbatim.

The log fills the envelope (``v``, ``index``, ``untrusted_time``, ``pid``) when the record is appended; the
gateway fills everything else. Time is marked untrusted in the field name itself: it is the writer's wall clock,
which an attacker on the host controls. Trustworthy time comes from witness cosignatures on checkpoints.

Size: a stored record is at most :data:`MAX_RECORD_BYTES` (65,535, so the log can be exported as C2SP tlog-tiles).
A record that would be larger is never truncated silently: first its argument values are dropped (their digest
stays, ``arguments.oversize`` is set), then any free-text field (``reason``, ``error``, ``violation``) is replaced by
a note giving its length and SHA-256, and ``oversize`` is set on the record.

Recurring records (a call's decision and outcome) can be written through a :class:`RecordTemplate`: checked and
encoded once, with only the fields that change spliced in per record, to the same bytes.
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal, NoReturn, final

import msgspec

from warden.canonical import MAX_SAFE_INTEGER, CanonicalizationError, canonical_json
from warden.errors import AuditError
from warden.secrets import REDACTED, Redactor, redactable

__all__ = [
    "DEFAULT_SECRET_KEY_PATTERN",
    "MAX_RECORD_BYTES",
    "RECORD_VERSION",
    "Arguments",
    "Consent",
    "Decision",
    "Detail",
    "Event",
    "FilledRecord",
    "Grant",
    "InvalidRecord",
    "Outcome",
    "Package",
    "PreparedRecord",
    "Record",
    "RecordTemplate",
    "Recovery",
    "bounded_text",
    "check_record",
    "decode_record",
    "digest",
    "encode_record",
    "fit_record",
    "prepare_filled",
    "prepare_record",
    "redact_secrets",
]

RECORD_VERSION: Final = "warden-audit/1"
MAX_RECORD_BYTES: Final = 65_535
#: Keys whose values are always redacted, whatever the detail level (matched case-insensitively, anywhere in the key).
DEFAULT_SECRET_KEY_PATTERN: Final = re.compile(
    r"pass(word|phrase)?|secret|token|api[-_]?key|auth|cookie|credential|private[-_]?key|session[-_]?id|bearer",
    re.IGNORECASE,
)
_NAME_MAX: Final = 256
_TARGET_MAX: Final = 2048
_FREE_TEXT_FIELDS: Final = ("reason", "error", "violation")
#: ``Arguments.value`` when only the digest is kept (msgspec cannot decode ``Raw | None``).
NO_VALUE: Final = msgspec.Raw(b"")


class InvalidRecord(AuditError, ValueError):
    """A record field is malformed (bad digest, too long, out of range). The action must be refused.

    Also a ``ValueError`` so that ``msgspec`` reports it as a validation error when decoding a stored record.
    """


class Event(enum.StrEnum):
    """What happened. ``call.*`` covers every audited request in either direction (see ``Record.method``)."""

    AUDIT_OPENED = "audit.opened"
    AUDIT_RECOVERED = "audit.recovered"
    AUDIT_CLOSED = "audit.closed"
    AUDIT_PAUSED = "audit.paused"  # the disk is full: every audited action is refused until there is room again
    AUDIT_RESUMED = "audit.resumed"
    SERVER_LAUNCHED = "server.launched"
    SERVER_EXITED = "server.exited"
    SERVER_REFUSED = "server.refused"
    POLICY_LOADED = "policy.loaded"
    CONFIG_RELOADED = "config.reloaded"  # `warden serve` re-read its config: what changed, or why it kept the old
    PIN_CREATED = "pin.created"
    PIN_APPROVED = "pin.approved"
    PIN_CHANGED = "pin.changed"
    PIN_REVOKED = "pin.revoked"
    CALL_DECIDED = "call.decided"
    CALL_OUTCOME = "call.outcome"
    SANDBOX_VIOLATION = "sandbox.violation"
    PACKAGE_INTAKE = "package.intake"
    PACKAGE_UPDATED = "package.updated"
    EGRESS_DECIDED = "egress.decided"  # the egress proxy allowed or refused a connection (before connecting)
    EGRESS_CLOSED = "egress.closed"  # an allowed connection ended: bytes each way
    AUTH_AUTHORIZED = "auth.authorized"  # warden obtained an OAuth token for a remote server (a user authorized)
    AUTH_REFRESHED = "auth.refreshed"  # ... or refreshed one


class Decision(enum.StrEnum):
    ALLOW = "allow"
    DENY = "deny"


class Consent(enum.StrEnum):
    """Where the approval for an allowed action came from."""

    TERMINAL = "terminal"  # a human answered warden's own prompt
    ELICITATION = "elicitation"  # a human answered an in-band elicitation sent to the host
    WEBHOOK = "webhook"  # a human answered through the signed approval webhook ([approvals])
    POLICY = "policy"  # a policy rule allowed it without asking
    TRUST_ON_FIRST_USE = "tofu"  # first sight of a definition, pinned automatically


class Outcome(enum.StrEnum):
    OK = "ok"  # a result came back
    ERROR = "error"  # a JSON-RPC error (or isError tool result) came back
    FAILED = "failed"  # the upstream went away or broke the protocol
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"


class Detail(enum.StrEnum):
    """How much of the arguments the policy lets the log keep. Secrets are redacted at every level."""

    HASH = "hash"  # only the SHA-256 of the canonical arguments
    REDACTED = "redacted"  # the structure, with every string replaced by "[REDACTED]"
    FULL = "full"  # the values, minus secrets


#: Digests made by :func:`digest` are well-formed by construction; remembering the recent ones spares the hot path
#: a regex per digest field (a pure validity memo, bounded, safe to share: dict operations are atomic).
_KNOWN_DIGESTS: dict[str, None] = {}
_KNOWN_METHODS: set[str] = set()
_MEMO_LIMIT: Final = 4096


def digest(data: bytes) -> str:
    """``sha256:<hex>`` of some bytes: the form every ``*_digest`` field takes. Use it to fill records."""
    value = "sha256:" + hashlib.sha256(data).hexdigest()
    if len(_KNOWN_DIGESTS) >= _MEMO_LIMIT:
        _KNOWN_DIGESTS.clear()
    _KNOWN_DIGESTS[value] = None
    return value


# Digest contents (lowercase hex) are checked by _check_rules(deep=True): a msgspec ``pattern`` costs ~1 µs per
# field on every decode, which would halve verification speed.
Digest = Annotated[str, msgspec.Meta(min_length=71, max_length=71)]
Name = Annotated[str, msgspec.Meta(max_length=_NAME_MAX)]
Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_SAFE_INTEGER)]


class Arguments(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """The request arguments as the policy's detail level allows. Build it with :meth:`capture`."""

    detail: Detail
    digest: Digest
    value: msgspec.Raw = NO_VALUE
    oversize: bool = False
    noncanonical: bool = False

    @property
    def has_value(self) -> bool:
        """False when only the digest was kept."""
        return len(self.value) > 0

    @classmethod
    def capture(cls, value: Any, detail: Detail, *, secret_values: Collection[str] = (),
                secret_keys: re.Pattern[str] = DEFAULT_SECRET_KEY_PATTERN) -> Arguments:
        """Record ``value`` (parsed JSON arguments) at ``detail``; secrets are redacted at every level.

        ``digest`` is the SHA-256 of the RFC 8785 form of the *unredacted* arguments, so a holder of the original
        request can prove which arguments were sent. Arguments that RFC 8785 cannot represent (integers beyond
        ±2^53, NaN) are hashed over msgspec's sorted encoding and kept at detail ``hash`` with ``noncanonical``.
        ``secret_values`` are cut out with :class:`warden.secrets.Redactor`; one too short for it to redact
        (:func:`warden.secrets.redactable`) keeps the arguments at detail ``hash``: they are never stored with it.
        """
        try:
            canon = canonical_json(value)
        except CanonicalizationError:
            try:
                raw = msgspec.json.encode(value, order="sorted")
            except (TypeError, ValueError) as exc:
                raise InvalidRecord(f"arguments are not JSON: {exc}") from exc
            return cls(detail=Detail.HASH, digest=digest(raw), noncanonical=True)
        if detail is Detail.HASH or not all(redactable(v) for v in secret_values if v):
            return cls(detail=Detail.HASH, digest=digest(canon))
        redactor = Redactor(secret_values) if secret_values else _NO_SECRETS
        kept = redact_secrets(value, redactor, secret_keys, strings=detail is Detail.REDACTED)
        return cls(detail=detail, digest=digest(canon), value=msgspec.Raw(canonical_json(kept)))


class Recovery(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """What recovery found on open: the durable anchor it started from and what it kept or cut."""

    anchor_size: Count
    size: Count
    truncated_bytes: Count = 0
    reason: Name


class Package(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """A package taken into warden's store (``package.intake``) or moved to another version (``package.updated``):
    what was fetched, the registry's hash of it, the digests the launch manifest pins, and who approved."""

    ecosystem: Annotated[str, msgspec.Meta(max_length=16)]
    name: Name
    version: Name
    requested: Name
    integrity: Annotated[str, msgspec.Meta(max_length=_TARGET_MAX)]
    lock_digest: Digest
    tree_digest: Digest
    install_scripts: tuple[Name, ...] = ()
    previous_version: Name | None = None
    approved_by: Name | None = None


class Egress(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """One connection through the egress proxy (``egress.decided`` / ``egress.closed``): the destination as the
    server asked for it, the address the proxy resolved and checked, and the bytes carried each way."""

    host: Name
    port: Annotated[int, msgspec.Meta(ge=0, le=65535)]
    address: Annotated[str, msgspec.Meta(max_length=64)] | None = None
    sent: Count | None = None
    received: Count | None = None


class Redaction(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """One value a content rule cut out of a result or arguments: the rule's name and the SHA-256 of the value
    (never the value: the digest proves what was there to whoever holds it, and tells nobody else)."""

    rule: Name
    digest: Digest


MAX_REDACTIONS: Final = 64


class Grant(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """An OAuth token warden obtained (``auth.authorized``) or refreshed (``auth.refreshed``) for a remote server:
    what it is for and who issued it - never the token, only its digest."""

    resource: Annotated[str, msgspec.Meta(max_length=_TARGET_MAX)]
    issuer: Annotated[str, msgspec.Meta(max_length=_TARGET_MAX)]
    client_id: Annotated[str, msgspec.Meta(max_length=_TARGET_MAX)]
    scopes: tuple[Name, ...] = ()
    token_digest: Digest


class Record(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """One audit record. Fill what applies; leave the rest ``None``. The log fills ``v``, ``index``,
    ``untrusted_time`` and ``pid``.

    Field meanings (digests are ``sha256:<hex>``, see :func:`digest`):

    * ``server_name`` / ``server_id``: the configured name, and the digest of the server's launch manifest
      (command, args, env names, sandbox profile, network allowances), i.e. its pinned identity.
    * ``method``: the audited request (``tools/call``, ``prompts/get``, ``resources/read``, and the forwarded
      ``sampling/createMessage``, ``elicitation/create``, ``roots/list``).
    * ``target`` / ``target_digest``: the tool or prompt name, or resource URI, and its pinned definition digest.
      ``previous_digest``: the pin being replaced (``pin.changed``).
    * ``policy_digest`` / ``rule``: the effective policy and the rule that decided.
    * ``decision``, ``consent``, ``reason`` (why refused or denied).
    * ``request_digest``: SHA-256 of the exact JSON-RPC request bytes; ``arguments``: see :class:`Arguments`.
    * ``decision_index``: on ``call.outcome``, the index of the ``call.decided`` record it completes.
    * ``evidence_index``: on a ``call.decided`` that a flow rule decided, the index of the ``call.decided`` record
      of the source call whose content tainted the session.
    * ``redactions``: what content rules cut out of the result (``call.outcome``) or the arguments
      (``call.decided``), by rule and digest.
    * ``outcome``, ``result_digest`` (exact result bytes) and ``result_size`` (bytes).
    * ``sandbox_digest``: the sandbox profile in force. ``exit_code`` / ``signal``: ``server.exited``.
    * ``violation``: what the sandbox stopped (``sandbox.violation``). ``error``: what went wrong.
    * ``client``: the host as it named itself (self-reported, untrusted).
    * ``principal``: who the HTTP face authenticated for the request (a named token ``token:NAME``, the face's
      own token ``token``, an OAuth subject ``oauth:SUB``, or ``anonymous`` with ``--no-auth``); absent on stdio.
    * ``package``: ``package.intake`` / ``package.updated`` (see :class:`Package`); ``previous_digest`` there is the
      tree digest of the entry being replaced.
    * ``egress``: ``egress.decided`` / ``egress.closed`` (see :class:`Egress`); ``method`` there is the proxy
      request's (``CONNECT``, ``GET``...), ``decision_index`` on ``egress.closed`` the decision it completes.
    * ``grant``: ``auth.authorized`` / ``auth.refreshed`` (see :class:`Grant`).
    """

    event: Event
    server_name: Name | None = None
    server_id: Digest | None = None
    client: Name | None = None
    principal: Name | None = None
    method: Annotated[str, msgspec.Meta(min_length=1, max_length=64)] | None = None
    target: Annotated[str, msgspec.Meta(max_length=_TARGET_MAX)] | None = None
    target_digest: Digest | None = None
    previous_digest: Digest | None = None
    policy_digest: Digest | None = None
    rule: Name | None = None
    decision: Decision | None = None
    consent: Consent | None = None
    reason: str | None = None
    request_digest: Digest | None = None
    arguments: Arguments | None = None
    decision_index: Count | None = None
    evidence_index: Count | None = None
    redactions: Annotated[tuple[Redaction, ...], msgspec.Meta(max_length=MAX_REDACTIONS)] = ()
    outcome: Outcome | None = None
    result_digest: Digest | None = None
    result_size: Count | None = None
    sandbox_digest: Digest | None = None
    exit_code: Annotated[int, msgspec.Meta(ge=-(1 << 31), le=(1 << 31) - 1)] | None = None
    signal: Annotated[int, msgspec.Meta(ge=1, le=128)] | None = None
    violation: str | None = None
    error: str | None = None
    recovered: Recovery | None = None
    package: Package | None = None
    egress: Egress | None = None
    grant: Grant | None = None
    oversize: bool = False
    # Envelope, filled by the log.
    v: str = ""
    index: Annotated[int, msgspec.Meta(ge=-1, le=MAX_SAFE_INTEGER)] = -1
    untrusted_time: Annotated[str, msgspec.Meta(max_length=27)] = ""
    pid: Annotated[int, msgspec.Meta(ge=0, le=(1 << 31) - 1)] = 0


_ENCODER: Final = msgspec.json.Encoder(order="sorted")


_DECODER: Final = msgspec.json.Decoder(Record)


def encode_record(record: Record) -> bytes:
    """The record's canonical (RFC 8785) bytes: the exact bytes the log stores and hashes."""
    return _ENCODER.encode(record)


_INDEX_MARK: Final = b',"index":0,"'
_MAX_INDEX_GROWTH: Final = len(str(MAX_SAFE_INTEGER)) - 1


@dataclass(frozen=True, slots=True)
class PreparedRecord:
    """A checked, encoded record waiting for its index: ``prefix + str(index) + suffix`` is its canonical form.

    Why splicing is exact: keys are sorted, ``event`` (always present) sorts before ``index`` and ``v`` (always
    present) after it, so the top-level ``index`` is always written as ``,"index":<n>,"``. The only nested object
    that can hold arbitrary keys is ``arguments``, which sorts before ``index``; nothing after ``index`` can contain
    that byte sequence (strings escape their quotes), so the *last* occurrence is the top-level one.
    ``tests/audit`` checks ``at(i)`` against a fresh encoding for generated records.
    """

    prefix: bytes
    suffix: bytes

    def at(self, index: int) -> bytes:
        return b"%b%d%b" % (self.prefix, index, self.suffix)


def prepare_record(record: Record, *, untrusted_time: str, pid: int) -> PreparedRecord:
    """Fill the envelope, check every field, shrink if oversize (see :func:`fit_record`), and encode.

    Raises:
        InvalidRecord: a field is malformed.
    """
    filled = msgspec.structs.replace(record, v=RECORD_VERSION, index=0, untrusted_time=untrusted_time, pid=pid)
    own_time = not record.untrusted_time  # the log's clock wrote it: well-formed by construction
    data = _checked_encoding(filled, check_time=not own_time)
    if len(data) + _MAX_INDEX_GROWTH > MAX_RECORD_BYTES:
        data = _checked_encoding(fit_record(filled), check_time=not own_time)
    cut = data.rindex(_INDEX_MARK) + len(b',"index":')
    return PreparedRecord(data[:cut], data[cut + 1 :])


def _checked_encoding(record: Record, *, check_time: bool = True) -> bytes:
    try:
        data = _ENCODER.encode(record)
    except (TypeError, ValueError) as exc:  # e.g. a lone surrogate in a string, a non-JSON value
        raise InvalidRecord(f"audit record is not encodable: {exc}") from exc
    try:
        _check_rules(_DECODER.decode(data), check_time=check_time)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidRecord(f"invalid audit record: {exc}") from exc
    return data


def decode_record(data: bytes, *, deep: bool = True) -> Record:
    """Parse stored record bytes with the field constraints checked.

    ``deep=False`` skips the per-field content checks done in Python (digest hex, method and time syntax),
    keeping types, enums, lengths and ranges; the verifier uses it on its fast path.

    Raises:
        msgspec.ValidationError, msgspec.DecodeError: not JSON, or a field is of the wrong type or size.
        InvalidRecord: a rule spanning fields, or (deep) a field's content, is wrong; or the JSON is nested too
            deeply to parse (a stored record is read from a log that may be hostile: msgspec's ``RecursionError``
            would otherwise escape every caller that expects one of these).
    """
    try:
        record = _DECODER.decode(data)
    except RecursionError as exc:
        raise InvalidRecord("the record's JSON is nested too deeply") from exc
    _check_rules(record, deep=deep)
    return record


def check_record(record: Record) -> Record:
    """Validate a record built in code (construction does not validate): every field constraint, checked by
    round-tripping through the decoder, plus the rules across fields.

    Raises:
        InvalidRecord: with the field that is wrong.
    """
    return decode_record(_checked_encoding(record))


_DIGEST_RE: Final = re.compile(r"sha256:[0-9a-f]{64}")
_METHOD_RE: Final = re.compile(r"[A-Za-z][A-Za-z0-9_/.\-]{0,63}")
_TIME_RE: Final = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")


def _check_rules(record: Record, *, deep: bool = True, check_time: bool = True) -> None:
    if deep:
        r = record
        known = _KNOWN_DIGESTS
        for d in (r.server_id, r.target_digest, r.previous_digest, r.policy_digest, r.request_digest,
                  r.result_digest, r.sandbox_digest, r.arguments.digest if r.arguments is not None else None,
                  *((r.package.lock_digest, r.package.tree_digest) if r.package is not None else ()),
                  *(x.digest for x in r.redactions), r.grant.token_digest if r.grant is not None else None):
            if d is not None and d not in known and not _DIGEST_RE.fullmatch(d):
                _bad_digest(d)
        method = r.method
        if method is not None and method not in _KNOWN_METHODS:
            if not _METHOD_RE.fullmatch(method):
                raise InvalidRecord(f"method {method!r} is not an MCP method name")
            if len(_KNOWN_METHODS) < _MEMO_LIMIT:
                _KNOWN_METHODS.add(method)
        if check_time and r.untrusted_time and not _TIME_RE.fullmatch(r.untrusted_time):
            raise InvalidRecord("untrusted_time must be RFC 3339 UTC with microseconds")
    if record.v not in ("", RECORD_VERSION):
        raise InvalidRecord(f"unknown record version {record.v[:40]!r}")
    if record.arguments is not None:
        _check_arguments(record.arguments)


def _check_arguments(args: Arguments) -> None:
    if args.detail is Detail.HASH and args.has_value:
        raise InvalidRecord("arguments at detail 'hash' must not carry a value")
    if args.detail is not Detail.HASH and not args.has_value:
        raise InvalidRecord(f"arguments at detail {args.detail.value!r} must carry a value")


def _bad_digest(value: object) -> NoReturn:
    raise InvalidRecord(f"digest {str(value)[:80]!r} must look like sha256:<64 lowercase hex>")


def _length_and_digest(text: str) -> str:
    return f"{len(text)} characters, {digest(text.encode('utf-8', 'surrogatepass'))}"


def _oversize_note(text: str) -> str:
    return f"[oversize: {_length_and_digest(text)}]"


def bounded_text(text: str, limit: int) -> str:
    """``text`` if it fits ``limit`` characters, else its start and a note of its full length and SHA-256: a
    record stays small and never loses text silently (the digest proves what was there)."""
    if len(text) <= limit:
        return text
    note = f"…[{_length_and_digest(text)}]"
    return text[: limit - len(note)] + note


def fit_record(record: Record, limit: int = MAX_RECORD_BYTES) -> Record:
    """Return ``record``, or a smaller version of it that fits ``limit`` bytes once the envelope is filled.

    Measured with the largest possible envelope, so the stored record can never exceed the limit. First the
    argument values go (digest kept), then oversize free-text fields are replaced by their length and digest.
    Names are bounded at construction, so the result always fits.
    """
    probe = msgspec.structs.replace(record, v=RECORD_VERSION, index=MAX_SAFE_INTEGER,
                                    untrusted_time=record.untrusted_time or "0000-00-00T00:00:00.000000Z",
                                    pid=record.pid or (1 << 31) - 1)
    if len(encode_record(probe)) <= limit:
        return record
    if record.arguments is not None and record.arguments.has_value:
        args = msgspec.structs.replace(record.arguments, value=NO_VALUE, oversize=True, detail=Detail.HASH)
        record = msgspec.structs.replace(record, arguments=args)
        probe = msgspec.structs.replace(probe, arguments=args)
        if len(encode_record(probe)) <= limit:
            return record
    changes = {name: _oversize_note(getattr(record, name)) for name in _FREE_TEXT_FIELDS
               if getattr(record, name) is not None and len(getattr(record, name)) > 256}
    record = msgspec.structs.replace(record, oversize=True, **changes)
    probe = msgspec.structs.replace(probe, oversize=True, **changes)
    if len(encode_record(probe)) > limit:  # pragma: no cover - impossible with the construction-time limits
        raise InvalidRecord(f"record does not fit in {limit} bytes even without arguments and free text")
    return record


_NO_SECRETS: Final = Redactor()


def redact_secrets(value: Any, redactor: Redactor = _NO_SECRETS,
                   secret_keys: re.Pattern[str] = DEFAULT_SECRET_KEY_PATTERN, *, strings: bool = False) -> Any:
    """A copy of a JSON value with secrets redacted.

    Values under keys matching ``secret_keys`` become ``[REDACTED]``; ``redactor`` cuts its values out of every
    string (keys included, see :meth:`warden.secrets.Redactor.json_value`); with ``strings=True`` every string value
    is replaced (detail level ``redacted``).
    """
    if isinstance(value, dict):
        return {redactor.text(k): REDACTED if secret_keys.search(k)
                else redact_secrets(v, redactor, secret_keys, strings=strings) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_secrets(v, redactor, secret_keys, strings=strings) for v in value]
    if strings and isinstance(value, str):
        return REDACTED
    return redactor.json_value(value)


# ---------------------------------------------------------------------------------------------------------------
# Templates


_HoleKind = Literal["digest", "count", "arguments"]
#: The fields a template may leave open, and the rule each value is checked by.
_HOLES: Final[dict[str, _HoleKind]] = {"arguments": "arguments", "decision_index": "count",
                                       "request_digest": "digest", "result_digest": "digest", "result_size": "count"}
_PLACEHOLDERS: Final[dict[_HoleKind, Any]] = {"digest": digest(b""), "count": 0,
                                              "arguments": Arguments(detail=Detail.HASH, digest=digest(b""))}
_ARGUMENTS_DECODER: Final = msgspec.json.Decoder(Arguments)
_INDEX_SLOT: Final = -1  # in a compiled template's slot order: the record's index (where PreparedRecord splits)
_TIME_SLOT: Final = -2  # the writer's clock


@final
@dataclass(frozen=True, slots=True)
class _Compiled:
    """A template's bytes between its slots: ``order[i]`` says what goes between ``parts[i]`` and ``parts[i + 1]``,
    the hole at that position of :attr:`RecordTemplate.holes`, or the index, or the time."""

    parts: tuple[bytes, ...]
    order: tuple[int, ...]


@final
class RecordTemplate:
    """A record whose fields are all fixed except ``holes``, which :meth:`fill` gives record by record.

    A gateway writes the same few records over and over: for one tool, rule and host every ``call.decided`` differs
    only in its request digest and arguments, every ``call.outcome`` only in the decision it completes and the
    result's digest and size. Building, checking and encoding each whole record costs tens of µs on the
    write-ahead path; a template is checked and encoded once, with placeholders in its holes, and each record after
    that is its bytes with the holes' values spliced in, each value checked by the rule of its field (a digest is
    ``sha256:`` and 64 lowercase hex, a count an integer in 0..2^53, arguments decode as :class:`Arguments` and
    keep its rules).

    Why splicing gives exactly the bytes :func:`prepare_record` gives for :meth:`FilledRecord.record`
    (``tests/audit`` checks it for generated records): a record's canonical form is ``{``, then ``"key":value`` for
    each present field in sorted key order joined by ``,``, then ``}``, each value encoded on its own exactly as
    inside the record (msgspec, sorted keys). A hole is one such value, always filled, so the keys around it never
    move. Each compiled template is compared with the encoder's own output for its placeholder record before use.

    The log fills the envelope (``v``, ``index``, ``untrusted_time``, ``pid``) as for any record and compiles a
    template on first use, again when its secrets registry changes. Records take the full path (built whole and
    prepared like any other) when the template's fixed fields hold a registered secret (redaction rewrites them),
    when a record's arguments hold one, and when a record would exceed :data:`MAX_RECORD_BYTES` (:func:`fit_record`
    shrinks it): a template changes how fast a record is stored, never what is stored.
    """

    __slots__ = ("_compiled", "_compiled_for", "holes", "record")

    def __init__(self, record: Record, holes: Collection[str]) -> None:
        """Raises:
        ValueError: a hole a template cannot leave open or that the record sets, or an envelope field set.
        """
        for hole in holes:
            if hole not in _HOLES:
                raise ValueError(f"{hole!r} cannot be a template hole (only {', '.join(_HOLES)})")
            if getattr(record, hole) is not None:
                raise ValueError(f"the template's record sets {hole!r}, which is a hole")
        if record.v or record.index != -1 or record.untrusted_time or record.pid:
            raise ValueError("a template's envelope is the log's to fill")
        self.record = record
        self.holes = tuple(sorted(holes))
        self._compiled: _Compiled | None = None
        self._compiled_for: tuple[int, Redactor] | None = None

    def fill(self, **values: Any) -> FilledRecord:
        """This template's record with ``values`` in its holes. The values are checked when the log prepares it.

        Raises:
            ValueError: the names given are not exactly the template's holes.
        """
        if len(values) != len(self.holes) or not all(h in values for h in self.holes):
            raise ValueError(f"a template with holes {', '.join(self.holes)} was given {', '.join(sorted(values))}")
        return FilledRecord(self, tuple(values[h] for h in self.holes))


@final
@dataclass(frozen=True, slots=True)
class FilledRecord:
    """A :class:`RecordTemplate` and its holes' values (in the order of its ``holes``): what the log appends."""

    template: RecordTemplate
    values: tuple[Any, ...]

    def record(self) -> Record:
        """The whole record, as the full path builds it."""
        return msgspec.structs.replace(self.template.record,
                                       **dict(zip(self.template.holes, self.values, strict=True)))


def prepare_filled(filled: FilledRecord, *, untrusted_time: str, pid: int, redactor: Redactor) -> PreparedRecord | None:
    """What :func:`prepare_record` makes of ``filled.record()`` (``untrusted_time`` from the log's own clock, so
    well-formed), spliced from its template; None when the record must take the full path (see
    :class:`RecordTemplate`).

    Raises:
        InvalidRecord: a fixed field (found when the template is compiled) or a hole's value is malformed.
    """
    template = filled.template
    made_for = template._compiled_for
    if made_for is None or made_for[0] != pid or made_for[1] is not redactor:
        template._compiled = _compile(template, pid=pid, redactor=redactor, untrusted_time=untrusted_time)
        template._compiled_for = (pid, redactor)
    compiled = template._compiled
    if compiled is None:
        return None
    values = [_encode_hole(name, value) for name, value in zip(template.holes, filled.values, strict=True)]
    # "arguments" sorts first of the holes; digests and counts cannot hold a secret (hex and digits)
    if redactor and template.holes[0] == "arguments" and redactor.wire(values[0]) is not values[0]:
        return None  # the full path cuts the secret out of the arguments value
    return _assemble(compiled, values, b'"%b"' % untrusted_time.encode())


def _assemble(compiled: _Compiled, values: Sequence[bytes], time: bytes) -> PreparedRecord | None:
    """Splice ``values`` and ``time`` into the template; None when the record would be too large."""
    parts = compiled.parts
    pieces = [parts[0]]
    prefix = b""
    for i, slot in enumerate(compiled.order):
        if slot == _INDEX_SLOT:
            prefix = b"".join(pieces)
            pieces = [parts[i + 1]]
        else:
            pieces += (time if slot == _TIME_SLOT else values[slot], parts[i + 1])
    suffix = b"".join(pieces)
    if len(prefix) + 1 + len(suffix) + _MAX_INDEX_GROWTH > MAX_RECORD_BYTES:
        return None  # fit_record shrinks it on the full path
    return PreparedRecord(prefix, suffix)


def _encode_hole(name: str, value: Any) -> bytes:
    """A hole's value as encoded inside the record, checked as the full path checks that field."""
    kind = _HOLES[name]
    if kind == "digest":
        if type(value) is not str or len(value) != 71 or \
                (value not in _KNOWN_DIGESTS and not _DIGEST_RE.fullmatch(value)):
            _bad_digest(value)
        return b'"%b"' % value.encode()
    if kind == "count":
        if type(value) is not int or not 0 <= value <= MAX_SAFE_INTEGER:
            raise InvalidRecord(f"{name} must be an integer from 0 to 2^53 - 1, not {str(value)[:40]!r}")
        return b"%d" % value
    if not isinstance(value, Arguments):
        raise InvalidRecord(f"arguments must be an audit.Arguments, not {type(value).__name__}")
    try:
        data = _ENCODER.encode(value)
        checked = _ARGUMENTS_DECODER.decode(data)
    except (TypeError, ValueError) as exc:  # msgspec's EncodeError, DecodeError and ValidationError among them
        raise InvalidRecord(f"invalid audit record arguments: {exc}") from exc
    if checked.digest not in _KNOWN_DIGESTS and not _DIGEST_RE.fullmatch(checked.digest):
        _bad_digest(checked.digest)
    _check_arguments(checked)
    return data


def _compile(template: RecordTemplate, *, pid: int, redactor: Redactor, untrusted_time: str) -> _Compiled | None:
    """Check and encode the template's fixed fields once; None when its records must take the full path."""
    holes = template.holes
    probe = msgspec.structs.replace(template.record, v=RECORD_VERSION, index=0, untrusted_time=untrusted_time,
                                    pid=pid, **{h: _PLACEHOLDERS[_HOLES[h]] for h in holes})
    data = _checked_encoding(probe, check_time=False)  # InvalidRecord: a fixed field is malformed
    if len(data) + _MAX_INDEX_GROWTH > MAX_RECORD_BYTES or (redactor and redactor.wire(data) is not data):
        return None
    slots = {h: n for n, h in enumerate(holes)} | {"index": _INDEX_SLOT, "untrusted_time": _TIME_SLOT}
    parts: list[bytes] = []
    order: list[int] = []
    current = bytearray(b"{")
    for n, key in enumerate(msgspec.json.decode(data)):  # its keys, in the stored (sorted) order
        current += b'%b"%b":' % (b"," if n else b"", key.encode())
        if key in slots:
            parts.append(bytes(current))
            order.append(slots[key])
            current = bytearray()
        else:
            current += _ENCODER.encode(getattr(probe, key))
    parts.append(bytes(current + b"}"))
    compiled = _Compiled(tuple(parts), tuple(order))
    check = _assemble(compiled, [_ENCODER.encode(_PLACEHOLDERS[_HOLES[h]]) for h in holes],
                      b'"%b"' % untrusted_time.encode())
    if len(order) != len(slots) or check is None or check.at(0) != data:  # pragma: no cover - a msgspec change
        return None  # never a wrong byte: the full path encodes every record whole
    return compiled
