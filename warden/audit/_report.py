"""``warden audit report``: the audit log as one self-contained HTML file a responder reads.

What it holds, in order: the verification result (records, checkpoints, key, witnesses, what was and was not
proven; on failure exactly where it failed and which records can still be trusted), the highlights (rug pulls,
refusals, sandbox violations, recoveries), a timeline per server (launches, pin events, decisions, outcomes,
denials, consents), per-call evidence (tool, definition digest and a link to the pinned definition, argument
digest, the deciding rule with its file:line, who consented, the record's index and its RFC 6962 inclusion
proof under the verified checkpoint, itself checked before it is written), and the pinned definitions referred to.

Safety: every string that did not come from warden (names, descriptions, reasons, errors, the host's name) goes
through the secrets registry and then :func:`warden.escape.for_html`, once, where it is written. The page loads
nothing: no script, no font, no image; a Content-Security-Policy of ``default-src 'none'`` with the hash of the one
inline stylesheet says so to the browser too. Collapsing uses ``<details>``.

Scale: records are streamed, never all held: one pass verifies (O(1) hashes kept, see
:func:`~warden.audit.verify_log`), one counts what is in scope, one writes each server's rows to its own
temporary file, which are then copied into the report. Only the newest ``max_records`` records in scope are
listed (verification and the highlights' counts always cover the whole log), in collapsed pages of
``page_size`` rows, so a million-record log still gives a file a browser opens.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import tempfile
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

import msgspec

from warden import __version__
from warden.audit._checkpoint import SignedCheckpoint
from warden.audit._errors import ForkEvidence
from warden.audit._format import FRAME_RECORD, scan_frames
from warden.audit._merkle import leaf_hash, verify_inclusion
from warden.audit._note import CosignatureVerifier, Ed25519Verifier
from warden.audit._reader import LogReader
from warden.audit._records import Decision, Event, Record
from warden.audit._verify import CheckpointSource, VerifiedLog, VerifyTrail, verify_log
from warden.audit._witness import witness_verdict, witnessed_sources
from warden.errors import AuditError, VerificationError, WardenError
from warden.escape import for_html
from warden.secrets import Redactor

__all__ = ["ReportOptions", "ReportSummary", "write_report"]

MAX_HIGHLIGHTS: Final = 1000
MAX_SERVERS: Final = 64  # servers beyond these share one "other servers" timeline (one temporary file each)
MAX_DEFINITIONS: Final = 10_000
_WARDEN: Final = "(warden)"
_OTHER: Final = "(other servers)"

_STYLE: Final = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:16px;color:#1b1b1b}
h1{font-size:22px;margin:0 0 12px}h2{font-size:18px;margin:24px 0 8px}h3{font-size:15px}
.banner{padding:14px 18px;border-radius:6px;margin:0 0 16px;color:#fff}
.banner h2{margin:0 0 6px;font-size:20px}.ok{background:#1d6b32}.fail{background:#a3161b}
.banner ul{margin:6px 0 0;padding-left:20px}.banner code{color:#fff}
pre,code,.mono{font-family:ui-monospace,monospace;font-size:12px}
pre{white-space:pre-wrap;word-break:break-all;background:#f4f4f4;padding:8px;border-radius:4px;color:#1b1b1b}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;padding:3px 6px;text-align:left;
vertical-align:top;white-space:pre-wrap;word-break:break-word}th{background:#eee}
td:nth-child(-n+2){white-space:nowrap}
tr.rug td{background:#ffd6d6}tr.rug td:first-child{border-left:5px solid #c40000}
tr.deny td{background:#fff0d0}tr.deny td:first-child{border-left:5px solid #d97a00}
tr.viol td{background:#ffd6d6}tr.recov td{background:#fff7c2}tr.unver td{color:#777;font-style:italic}
.tag{display:inline-block;padding:0 6px;border-radius:3px;font-size:12px;color:#fff}
.t-rug{background:#c40000}.t-deny{background:#d97a00}.t-viol{background:#c40000}.t-recov{background:#8a7000}
details.page{margin:4px 0;border:1px solid #ddd;border-radius:4px;padding:2px 8px}
details.ev summary{cursor:pointer;color:#0b4f8a}dl{margin:4px 0;display:grid;grid-template-columns:max-content 1fr;
gap:2px 10px}dt{font-weight:600}dd{margin:0;word-break:break-all}
"""


@dataclass(frozen=True, slots=True)
class ReportOptions:
    """What to put in the report. ``log_key`` None: the key derived from the signing key next to the log."""

    since: str | None = None  # a format_time() string
    server: str | None = None
    max_records: int = 20_000
    page_size: int = 500
    log_key: Ed25519Verifier | None = None
    key_source: str = ""
    external: Sequence[CheckpointSource] = ()
    witnesses: Sequence[CosignatureVerifier] = ()
    quorum: int = 0
    generated: str = ""


@dataclass(frozen=True, slots=True)
class ReportSummary:
    """What the report says, for the command's own output."""

    verified: bool
    records: int
    listed: int
    highlights: int
    failure: str | None


@dataclass(slots=True)
class _Verdict:
    result: VerifiedLog | None
    failure: VerificationError | None
    trail: VerifyTrail
    witness_lines: list[str]
    trusted: SignedCheckpoint | None  # every record below its size is proven

    @property
    def trusted_size(self) -> int:
        return self.trusted.size if self.trusted is not None else 0


@dataclass(slots=True)
class _ServerStats:
    records: int = 0
    to_list: int = 0  # of those, how many the timelines list (the newest ``max_records`` in scope overall)
    listed: int = 0  # written so far
    first: str = ""
    last: str = ""
    events: Counter[str] = field(default_factory=Counter)


def _kind(r: Record) -> str:
    """The highlight class of a record ("" for an ordinary one)."""
    if r.event is Event.PIN_CHANGED:
        return "rug"
    if r.decision is Decision.DENY or r.event is Event.SERVER_REFUSED:
        return "deny"
    if r.event is Event.SANDBOX_VIOLATION:
        return "viol"
    if r.event in (Event.AUDIT_RECOVERED, Event.AUDIT_PAUSED):
        return "recov"
    return ""


_LABEL: Final = {"rug": "RUG PULL", "deny": "REFUSED", "viol": "SANDBOX VIOLATION", "recov": "LOG RECOVERED/PAUSED"}


class _Writer:
    """HTML out, with the one escaping rule: every outside string through redaction, then ``for_html``."""

    def __init__(self, sink: IO[bytes], redactor: Redactor) -> None:
        self.sink = sink
        self.redactor = redactor

    def esc(self, text: str) -> str:
        return for_html(self.redactor.text(text))

    def raw(self, html: str) -> None:
        self.sink.write(html.encode("utf-8"))


_DECODE: Final = msgspec.json.Decoder(Record).decode


def _records(reader: LogReader) -> Iterator[tuple[int, bytes, Record | None, int]]:
    """Every readable record and where its frame ends, decoded for display only (verification has its own,
    stricter pass): a frame that does not decode is yielded as None and shown as undecodable. Reading stops at
    the first frame that is torn or fails its CRC (nothing after it can be framed with confidence)."""
    for index, frame in enumerate(scan_frames(reader.committed, 0, FRAME_RECORD)):
        try:
            record: Record | None = _DECODE(frame.payload)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):  # nested too deeply: undecodable
            record = None
        yield index, frame.payload, record, frame.end
        if not index & 0xFFFF:
            reader.release(frame.end)  # keep this process's memory bounded on a large log


def _in_scope(r: Record | None, options: ReportOptions) -> bool:
    if r is None:
        return options.server is None and options.since is None
    if options.server is not None and r.server_name != options.server:
        return False
    return not (options.since is not None and r.untrusted_time < options.since)


def _verify(reader: LogReader, key: Ed25519Verifier, options: ReportOptions, state_dir: Path) -> _Verdict:
    sources = [*reader.checkpoint_notes(), *witnessed_sources(state_dir), *options.external]
    # as `audit verify`: the unsigned head's "never published" excuses no checkpoint only for the local key
    never_published = (reader.head is not None and reader.head.notes_end == 0 and not options.external
                       and options.log_key is None)
    trail = VerifyTrail()
    try:
        result = verify_log(reader.committed, log_key=key, checkpoints=sources, hashes=reader.hashes,
                            witnesses=options.witnesses, quorum=options.quorum,
                            require_checkpoint=not never_published, trail=trail,
                            progress=lambda _n: reader.release(trail.offset))
    except VerificationError as exc:
        return _Verdict(None, exc, trail, [], trail.trusted)
    try:
        lines = witness_verdict(state_dir, key, options.witnesses, options.quorum, result,
                                [s.note for s in sources])
    except VerificationError as exc:
        return _Verdict(result, exc, trail, [], result.latest)
    return _Verdict(result, None, trail, lines, result.latest)


def write_report(state_dir: Path, out: IO[bytes], options: ReportOptions, redactor: Redactor,
                 pinned: Callable[[], Sequence[Any]] = lambda: ()) -> ReportSummary:
    """Verify the log of ``state_dir`` and write the report to ``out`` (see the module docstring).

    ``pinned`` returns the pin store's entries (for the definitions the evidence links to). The report is
    written whatever verification finds: a failed verification is its first section, not an exception.

    Raises:
        AuditError: there is no log to report on, or its key cannot be found.
    """
    with LogReader(state_dir) as reader:
        key = options.log_key or reader.local_verifier()
        if key.name != reader.origin:
            raise AuditError(f"the key is for log {key.name!r} but this log is {reader.origin!r}",
                             hint="pass the verifier key of this log")
        verdict = _verify(reader, key, options, state_dir)
        stats: dict[str, _ServerStats] = {}
        highlights: Counter[str] = Counter()
        in_scope = 0
        newest: deque[str] = deque(maxlen=options.max_records)  # whose the listed records are (bounded by it)
        readable = 0
        for _index, _data, record, end in _records(reader):
            readable = end
            if not _in_scope(record, options):
                continue
            in_scope += 1
            name = _server_of(record, stats)
            newest.append(name)
            s = stats.setdefault(name, _ServerStats())
            s.records += 1
            if record is not None:
                s.events[record.event.value] += 1
                s.first = s.first or record.untrusted_time
                s.last = record.untrusted_time
                if _kind(record):
                    highlights[_kind(record)] += 1
        first_listed = max(0, in_scope - options.max_records)
        for name in newest:
            stats[name].to_list += 1
        newest.clear()
        w = _Writer(out, redactor)
        _head(w, reader.origin, options)
        _banner(w, verdict, key, reader, options)
        _overview(w, stats, in_scope, first_listed, highlights, options)
        if readable < len(reader.committed):
            w.raw(f"<p><b>entries.log cannot be read past byte {readable}</b> (a torn or changed frame): the "
                  f"{len(reader.committed) - readable} bytes after it are not shown.</p>\n")
        digests = _timelines(w, reader, verdict, stats, first_listed, options)
        _highlights_note(w)
        _definitions(w, digests, pinned)
        w.raw("</main></body></html>\n")
        listed = in_scope - first_listed
    failure = verdict.failure.message if verdict.failure is not None else None
    return ReportSummary(verdict.failure is None, verdict.trail.records, listed, sum(highlights.values()), failure)


def _server_of(record: Record | None, stats: dict[str, _ServerStats]) -> str:
    name = record.server_name if record is not None and record.server_name else _WARDEN
    if name not in stats and len(stats) >= MAX_SERVERS:
        return _OTHER
    return name


def _head(w: _Writer, origin: str, options: ReportOptions) -> None:
    style_hash = base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()
    csp = f"default-src 'none'; style-src 'sha256-{style_hash}'; img-src 'none'; form-action 'none'; base-uri 'none'"
    w.raw("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
          f"<meta http-equiv=\"Content-Security-Policy\" content=\"{csp}\">"
          "<meta name=\"referrer\" content=\"no-referrer\">"
          f"<title>warden audit report: {w.esc(origin)}</title><style>{_STYLE}</style></head>\n<body><main>\n"
          f"<h1>warden audit report</h1><p class=\"mono\">log {w.esc(origin)} &middot; generated "
          f"{w.esc(options.generated)} by warden {__version__}</p>\n")


def _banner(w: _Writer, v: _Verdict, key: Ed25519Verifier, reader: LogReader, options: ReportOptions) -> None:
    proven: list[str] = []
    not_proven: list[str] = []
    trusted = v.trusted_size
    if v.failure is None and v.result is not None:
        r = v.result
        w.raw(f"<section id=\"verification\" class=\"banner ok\"><h2>VERIFIED: {r.size} records, "
              f"{r.checkpoints} signed checkpoints match them</h2>")
        if trusted:
            proven.append(f"{_span(0, trusted)} are exactly the records the log key signed in the checkpoint "
                          f"of size {trusted} (below), in this order, none added, removed or changed")
        if r.size > trusted:
            not_proven.append(f"{_span(trusted, r.size)}: written after the last checkpoint, so no signature "
                              f"covers them yet (`warden audit checkpoint --refresh`)")
    else:
        assert v.failure is not None
        t = v.trail
        w.raw(f"<section id=\"verification\" class=\"banner fail\"><h2>VERIFICATION FAILED</h2>"
              f"<p><b>{w.esc(v.failure.message)}</b></p>")
        if v.failure.hint:
            w.raw(f"<p>{w.esc(v.failure.hint)}</p>")
        w.raw(f"<p>Verification stopped after reading {t.records} records (at byte {t.offset} of "
              f"entries.log).</p>")
        if trusted:
            proven.append(f"{_span(0, trusted)}: they match the checkpoint of size {trusted} (below), "
                          f"verified before the failure; these can be trusted")
        else:
            not_proven.append("no record: no checkpoint was matched before verification failed")
        if t.records > trusted:
            not_proven.append(f"{_span(trusted, t.records)}: read before the failure, but no verified "
                              f"checkpoint covers them (shown, marked unverified)")
        not_proven.append(f"everything from record {t.records} on: after the point of failure (what could still "
                          f"be read is shown, marked unverified)")
    key_note = (f"{key.vkey} (from {options.key_source})" if options.key_source else key.vkey)
    if options.log_key is None:
        not_proven.append("that nobody with access to this machine rewrote and re-signed the whole log: the key "
                          "used is the one stored next to it (give --vkey and a checkpoint or witness kept "
                          "elsewhere)")
    if options.witnesses:
        proven.extend(line.strip() for line in v.witness_lines if line.strip().startswith("witnessed:"))
        not_proven.extend(line.strip() for line in v.witness_lines if line.strip().startswith("not witnessed:"))
    else:
        not_proven.append("that anyone off this machine saw these checkpoints (no witness was given: "
                          "--witness VKEY)")
    not_proven.append("the times: they are the writer's clock (untrusted); order is the record index")
    w.raw("<p><b>Proven:</b></p><ul>" + "".join(f"<li>{w.esc(p)}</li>" for p in proven or ["nothing"]) + "</ul>")
    w.raw("<p><b>Not proven:</b></p><ul>" + "".join(f"<li>{w.esc(p)}</li>" for p in not_proven) + "</ul>")
    w.raw(f"<p>Log key: <code>{w.esc(key_note)}</code></p>")
    for line in v.witness_lines:
        if line.startswith("    "):
            w.raw(f"<p class=\"mono\">witness {w.esc(line.strip())}</p>")
    w.raw("</section>\n")
    if isinstance(v.failure, ForkEvidence):
        w.raw(f"<h2>Fork evidence</h2><pre>{w.esc(v.failure.evidence)}</pre>\n")
    if v.trusted is not None:
        w.raw(f"<h2 id=\"checkpoint\">Checkpoint the proofs are under (size {v.trusted.size})</h2>"
              f"<pre>{w.esc(v.trusted.note.decode('utf-8', 'replace'))}</pre>\n")
    if reader.uncommitted:
        w.raw(f"<p>{reader.uncommitted} bytes past the committed end of entries.log (a batch being written, or "
              f"a torn tail the next start removes) are not shown.</p>\n")


def _span(start: int, end: int) -> str:
    """Records ``start`` up to (not including) ``end``, as a reader says it."""
    return f"record {start}" if end - start == 1 else f"records {start}..{end - 1}"


def _overview(w: _Writer, stats: dict[str, _ServerStats], in_scope: int, first_listed: int,
              highlights: Counter[str], options: ReportOptions) -> None:
    scope = []
    if options.server:
        scope.append(f"server {options.server}")
    if options.since:
        scope.append(f"since {options.since}")
    w.raw(f"<h2 id=\"overview\">Overview</h2><p>{in_scope} records in scope"
          + (f" ({w.esc(', '.join(scope))})" if scope else "") + ". ")
    if first_listed:
        w.raw(f"The timelines list the newest {in_scope - first_listed}; the {first_listed} before them are "
              f"verified and counted but not listed (narrow with --since or --server, or raise --max-records).")
    w.raw("</p><p>" + " ".join(f"<span class=\"tag t-{k}\">{_LABEL[k]}: {highlights[k]}</span>"
                                for k in _LABEL) + "</p>")
    w.raw("<table><tr><th>server</th><th>records</th><th>first (untrusted)</th><th>last</th><th>events</th></tr>")
    for n, (name, s) in enumerate(stats.items()):
        events = ", ".join(f"{k} {c}" for k, c in sorted(s.events.items()))
        w.raw(f"<tr><td><a href=\"#server-{n}\">{w.esc(name)}</a></td><td>{s.records}</td><td>{w.esc(s.first)}"
              f"</td><td>{w.esc(s.last)}</td><td>{w.esc(events)}</td></tr>")
    w.raw("</table>\n")


def _status(index: int, v: _Verdict) -> str:
    if index < v.trusted_size:
        return ""
    if v.failure is None:
        return "not yet under a checkpoint"
    return "UNVERIFIED (after the last checkpoint verified before the failure)"


def _timelines(w: _Writer, reader: LogReader, v: _Verdict, stats: dict[str, _ServerStats], first_listed: int,
               options: ReportOptions) -> set[str]:
    """Write every server's rows to its own temporary file, then copy them into the report in order."""
    digests: set[str] = set()
    files: dict[str, IO[bytes]] = {}
    writers: dict[str, _Writer] = {}
    highlights_out = tempfile.TemporaryFile()  # noqa: SIM115 - closed below
    shown_highlights = 0
    with contextlib.ExitStack() as stack:
        stack.callback(highlights_out.close)
        position = 0
        for index, data, record, _end in _records(reader):
            if not _in_scope(record, options):
                continue
            position += 1
            if position <= first_listed:
                continue
            name = _server_of(record, stats)
            f = files.get(name)
            if f is None:
                f = files[name] = stack.enter_context(tempfile.TemporaryFile())
                writers[name] = _Writer(f, w.redactor)
            s = stats[name]
            if s.listed % options.page_size == 0:
                if s.listed:
                    f.write(b"</table></details>\n")
                last_page = (s.to_list - 1) // options.page_size == s.listed // options.page_size
                f.write(f"<details class=\"page\"{' open' if last_page else ''}><summary>records "
                        f"{s.listed + 1}..{min(s.to_list, s.listed + options.page_size)} of {s.to_list} listed"
                        f"</summary><table><tr><th>#</th><th>time (untrusted)</th><th>event</th><th>what</th>"
                        f"<th>verdict</th><th>detail and evidence</th></tr>".encode())
            s.listed += 1
            _row(writers[name], index, data, record, v, reader, digests)
            if record is not None and _kind(record) and shown_highlights < MAX_HIGHLIGHTS:
                shown_highlights += 1
                highlights_out.write(_highlight(w, index, record, name).encode())
        w.raw("<h2 id=\"highlights\">Rug pulls, refusals, violations</h2>")
        if shown_highlights:
            w.raw("<table><tr><th>#</th><th>time (untrusted)</th><th>server</th><th>what</th><th>why</th></tr>")
            highlights_out.seek(0)
            _copy(highlights_out, w.sink)
            w.raw("</table>")
        else:
            w.raw("<p>None among the listed records.</p>")
        if shown_highlights >= MAX_HIGHLIGHTS:
            w.raw(f"<p>Only the first {MAX_HIGHLIGHTS} are listed here; the overview counts them all.</p>")
        w.raw("\n<h2 id=\"timelines\">Timeline per server</h2>\n")
        for n, (name, s) in enumerate(stats.items()):
            w.raw(f"<section id=\"server-{n}\"><h3>server {w.esc(name)}</h3><p>{s.records} records, "
                  f"{s.listed} listed</p>")
            f = files.get(name)
            if f is not None:
                f.write(b"</table></details>\n")
                f.seek(0)
                _copy(f, w.sink)
            w.raw("</section>\n")
    return digests


def _copy(src: IO[bytes], dst: IO[bytes]) -> None:
    while chunk := src.read(1 << 20):
        dst.write(chunk)


def _highlight(w: _Writer, index: int, r: Record, server: str) -> str:
    kind = _kind(r)
    what = " ".join(p for p in (r.method or "", r.target or "") if p)
    why = r.reason or r.error or r.violation or (r.recovered.reason if r.recovered else "") or ""
    return (f"<tr class=\"{kind}\"><td><a href=\"#r{index}\">{index}</a></td><td>{w.esc(r.untrusted_time)}</td>"
            f"<td>{w.esc(server)}</td><td><span class=\"tag t-{kind}\">{_LABEL[kind]}</span> {w.esc(what)}</td>"
            f"<td>{w.esc(why)}</td></tr>")


def _row(w: _Writer, index: int, data: bytes, r: Record | None, v: _Verdict, reader: LogReader,
         digests: set[str]) -> None:
    status = _status(index, v)
    if r is None:
        w.raw(f"<tr class=\"unver\" id=\"r{index}\"><td>{index}</td><td></td><td>undecodable</td><td></td><td></td>"
              f"<td>{w.esc(data[:200].decode('utf-8', 'replace'))}</td></tr>")
        return
    kind = _kind(r)
    classes = " ".join(c for c in (kind, "unver" if status else "") if c)
    what = " ".join(p for p in (r.method or "", repr(r.target) if r.target else "") if p)
    verdict = ""
    if r.decision is not None:
        verdict = r.decision.value + (f" ({_consent(r)})" if r.consent else "")
    elif r.outcome is not None:
        verdict = f"{r.outcome.value}"
    elif r.consent is not None:
        verdict = _consent(r)
    detail_parts = [p for p in (r.rule and f"rule {r.rule}", r.reason, r.error, r.violation,
                                r.recovered.reason if r.recovered else None) if p]
    if r.decision_index is not None:
        detail_parts.append(f"outcome of #{r.decision_index}")
    tag = f"<span class=\"tag t-{kind}\">{_LABEL[kind]}</span> " if kind else ""
    w.raw(f"<tr{f' class={chr(34)}{classes}{chr(34)}' if classes else ''} id=\"r{index}\"><td>{index}</td>"
          f"<td>{w.esc(r.untrusted_time)}</td><td>{tag}{w.esc(r.event.value)}</td><td>{w.esc(what)}</td>"
          f"<td>{w.esc(verdict)}</td><td>{w.esc(' · '.join(detail_parts))}")
    if status:
        w.raw(f"<br><i>{w.esc(status)}</i>")
    for d in (r.target_digest, r.previous_digest):
        if d is not None and len(digests) < MAX_DEFINITIONS:
            digests.add(d)
    if r.event in (Event.CALL_DECIDED, Event.PIN_CHANGED, Event.PIN_APPROVED, Event.PIN_CREATED):
        _evidence(w, index, data, r, v, reader)
    w.raw("</td></tr>")


def _consent(r: Record) -> str:
    who = {"terminal": "a person at warden's terminal prompt", "elicitation": "a person in the host, in-band",
           "policy": "policy, nobody asked", "tofu": "trust on first use"}
    return f"consent: {who.get(r.consent.value, r.consent.value)}" if r.consent else ""


def _definition_link(w: _Writer, digest: str | None) -> str:
    if digest is None:
        return "none"
    return f"<a href=\"#def-{w.esc(digest.removeprefix('sha256:'))}\">{w.esc(digest)}</a>"


def _evidence(w: _Writer, index: int, data: bytes, r: Record, v: _Verdict, reader: LogReader) -> None:
    items: list[tuple[str, str]] = []
    if r.target is not None:
        items.append(("target", w.esc(r.target)))
    items.append(("definition", _definition_link(w, r.target_digest)))
    if r.previous_digest:
        items.append(("replaces", _definition_link(w, r.previous_digest)))
    if r.arguments is not None:
        args = w.esc(r.arguments.digest) + f" (detail {w.esc(r.arguments.detail.value)})"
        if r.arguments.has_value:
            args += "<br>" + w.esc(bytes(r.arguments.value).decode("utf-8", "replace"))
        items.append(("arguments", args))
    for label, value in (("request", r.request_digest), ("rule", r.rule), ("policy", r.policy_digest),
                         ("sandbox", r.sandbox_digest), ("host", r.client), ("principal", r.principal),
                         ("server id", r.server_id)):
        if value:
            items.append((label, w.esc(value)))
    if r.consent is not None:
        items.append(("consent", w.esc(_consent(r))))
    items.append(("record", f"index {index}, leaf hash {leaf_hash(data).hex()}"))
    items.append(("inclusion", _proof(w, index, data, v, reader)))
    w.raw("<details class=\"ev\"><summary>evidence</summary><dl>"
          + "".join(f"<dt>{k}</dt><dd>{val}</dd>" for k, val in items) + "</dl></details>")


def _proof(w: _Writer, index: int, data: bytes, v: _Verdict, reader: LogReader) -> str:
    cp = v.trusted
    if cp is None or index >= cp.size:
        return "no proof: no verified checkpoint covers this record"
    try:
        path = reader.inclusion_path(index, cp.size)
        verify_inclusion(index, cp.size, leaf_hash(data), path, cp.root)
    except (WardenError, ValueError) as exc:
        return f"no proof: {w.esc(str(exc))} (hashes.bin is damaged; `warden audit verify`)"
    hashes = "<br>".join(base64.b64encode(h).decode("ascii") for h in path) or "(empty: the tree has one record)"
    return (f"verified under the <a href=\"#checkpoint\">checkpoint of size {cp.size}</a> "
            f"(RFC 6962 path, leaf first):<br><span class=\"mono\">{hashes}</span><br>"
            f"<span class=\"mono\">warden audit prove {index}</span> writes it as a tlog-proof file")


def _highlights_note(w: _Writer) -> None:
    w.raw("<p>Times are the writer's clock and untrusted; the record index is the order.</p>\n")


def _definitions(w: _Writer, digests: set[str], pinned: Callable[[], Sequence[Any]]) -> None:
    if not digests:
        return
    w.raw("<h2 id=\"definitions\">Pinned definitions referred to</h2>")
    found: dict[str, tuple[Any, str]] = {}
    try:
        entries = pinned()
    except WardenError as exc:
        w.raw(f"<p>The pin store could not be read: {w.esc(exc.message)}</p>")
        entries = ()
    for e in entries:
        if e.digest in digests:
            found.setdefault(e.digest, (e.definition, f"current definition of {e.server} {e.label} ({e.state})"))
        if e.approved_digest in digests:
            found.setdefault(e.approved_digest, (e.approved_definition, f"approved definition of {e.server} "
                                                                        f"{e.label}"))
    for d in sorted(digests):
        anchor = w.esc(d.removeprefix("sha256:"))
        if d in found:
            definition, label = found[d]
            text = json.dumps(definition, indent=2, ensure_ascii=False, sort_keys=True)
            w.raw(f"<section id=\"def-{anchor}\"><h3>{w.esc(d)}</h3><p>{w.esc(label)}</p>"
                  f"<pre>{w.esc(text)}</pre></section>")
        else:
            w.raw(f"<section id=\"def-{anchor}\"><h3>{w.esc(d)}</h3><p>not in the pin store any more (replaced "
                  f"since): only its digest is known</p></section>")

