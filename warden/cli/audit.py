"""``warden audit``: verify, read, prove and export the audit log.

* ``verify``: full recompute of the tree from the records, every stored checkpoint (and any given with
  ``--checkpoint``) checked against it. Exit 0 when the log is intact, 7 with one specific message when not;
  on a fork it prints both signed notes and the consistency proof.
* ``show`` / ``tail``: records as a table, or ``--json`` (the stored bytes, one per line), with filters.
* ``prove INDEX``: a ``c2sp.org/tlog-proof@v1`` file for one record (the record itself rides in its ``extra``
  line), checkable by anyone with the verifier key: ``warden audit check-proof FILE --vkey KEY``.
* ``checkpoint``: the latest signed checkpoint, to hand to a witness or keep elsewhere (``--refresh`` publishes
  one covering everything committed now). ``key``: the verifier key.
* ``report``, ``export`` and ``witness`` live in :mod:`warden.cli.audit_forensics`.

Reading commands take no lock and see the committed prefix even while warden processes are appending.
"""

from __future__ import annotations

import argparse
import datetime
import io
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import msgspec

from warden.audit import (
    KEY_FILE,
    CheckpointSource,
    CosignatureVerifier,
    Ed25519Verifier,
    ForkEvidence,
    LogReader,
    NoteError,
    RawRecord,
    Record,
    Store,
    decode_record,
    format_time,
    open_checkpoint,
    parse_vkey,
    verify_log,
    verify_tlog_proof,
    witness_verdict,
    witnessed_sources,
)
from warden.cli._common import CommandContext
from warden.errors import AuditError, ConfigError, VerificationError
from warden.escape import for_terminal, json_for_terminal
from warden.secrets import Redactor, load_redactor

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("audit", help="verify, read, prove and export the audit log",
                            description="Verify, read, prove and export warden's tamper-evident audit log.")
    verbs = parser.add_subparsers(dest="audit_command", metavar="VERB", required=True)

    p = verbs.add_parser("verify", help="recompute the log and check every checkpoint",
                         description="Recompute the Merkle tree from every record and check every stored "
                                     "checkpoint, and any given with --checkpoint, against it.")
    p.add_argument("--vkey", metavar="KEY", help="the log's verifier key (text or @FILE); default: derived from the "
                   "signing key next to the log, which only proves integrity against someone without that key")
    p.add_argument("--checkpoint", metavar="FILE", action="append", default=[],
                   help="a signed checkpoint kept elsewhere (repeatable): catches rollback and truncation")
    p.add_argument("--witness", metavar="VKEY", action="append", default=[],
                   help="a witness cosigner key (text or @FILE) for --checkpoint files (repeatable)")
    p.add_argument("--quorum", type=int, default=None, metavar="N",
                   help="witness cosignatures each --checkpoint needs (default: all given witnesses)")
    p.add_argument("--deep", action="store_true",
                   help="also check every field's syntax and that each record is RFC 8785 canonical (slower)")
    p.set_defaults(func=_verify)

    for name, helptext in (("show", "list records (oldest first)"), ("tail", "list the newest records")):
        p = verbs.add_parser(name, help=helptext, description=helptext.capitalize() + ".")
        p.add_argument("--server", help="server name, or server identity digest (prefix)")
        p.add_argument("--tool", help="tool or prompt name, or resource URI")
        p.add_argument("--principal", help="who the HTTP face authenticated (token:NAME, token, oauth:SUB, "
                                           "anonymous), as `warden tokens list` and the records name it")
        p.add_argument("--decision", choices=["allow", "deny"])
        p.add_argument("--event", action="append", default=[],
                       help="event type, or a prefix such as 'call.' or 'pin.' (repeatable)")
        p.add_argument("--since", metavar="TIME", help="ISO 8601 time (UTC unless it says otherwise)")
        p.add_argument("--until", metavar="TIME", help="ISO 8601 time (UTC unless it says otherwise)")
        p.add_argument("--json", action="store_true", help="one stored record per line, byte for byte")
        if name == "tail":
            p.add_argument("-n", type=int, default=20, metavar="N", help="how many records (default 20)")
            p.add_argument("-f", "--follow", action="store_true", help="keep printing records as they arrive")
        else:
            p.add_argument("--limit", type=int, default=None, metavar="N", help="stop after N records")
        p.set_defaults(func=_show if name == "show" else _tail)

    p = verbs.add_parser("prove", help="write a c2sp.org/tlog-proof@v1 file for one record",
                         description="Write an offline-checkable inclusion proof for record INDEX under a signed "
                                     "checkpoint; the record itself travels in the proof's extra line.")
    p.add_argument("index", type=int, metavar="INDEX")
    p.add_argument("--size", type=int, metavar="N", help="prove under the stored checkpoint of this size "
                   "(default: the latest)")
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    p.set_defaults(func=_prove)

    p = verbs.add_parser("check-proof", help="check a tlog-proof file (no log needed)",
                         description="Check a tlog-proof file with the log's verifier key; print its record.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--vkey", metavar="KEY", required=True, help="the log's verifier key (text or @FILE)")
    p.add_argument("--witness", metavar="VKEY", action="append", default=[], help="a witness key (repeatable)")
    p.add_argument("--quorum", type=int, default=None, metavar="N", help="cosignatures needed (default: all)")
    p.set_defaults(func=_check_proof)

    p = verbs.add_parser("checkpoint", help="print the latest signed checkpoint",
                         description="Print the latest signed checkpoint, to give to a witness or keep elsewhere.")
    p.add_argument("--refresh", action="store_true",
                   help="first publish a checkpoint covering every committed record")
    p.set_defaults(func=_checkpoint)

    p = verbs.add_parser("key", help="print the log's verifier key (creating the log on first use)")
    p.set_defaults(func=_key)

    from warden.cli import audit_forensics  # it uses this module's helpers: imported once both exist

    audit_forensics.register(verbs)  # report, export, witness


# -- helpers ---------------------------------------------------------------------------------------------------


def _key_text(value: str) -> str:
    if value.startswith("@"):
        try:
            return Path(value[1:]).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read key file {value[1:]}: {exc.strerror}") from exc
    return value.strip()


def _log_key(value: str) -> Ed25519Verifier:
    try:
        key = parse_vkey(_key_text(value))
    except NoteError as exc:
        raise ConfigError(f"invalid --vkey: {exc}", hint="run `warden audit key` on the machine that wrote the log"
                          ) from exc
    if not isinstance(key, Ed25519Verifier):
        raise ConfigError("--vkey is a witness (cosignature) key, not a log key")
    return key


def _witness_keys(values: Sequence[str]) -> list[CosignatureVerifier]:
    out = []
    for value in values:
        try:
            key = parse_vkey(_key_text(value))
        except NoteError as exc:
            raise ConfigError(f"invalid --witness key: {exc}") from exc
        if not isinstance(key, CosignatureVerifier):
            raise ConfigError("--witness needs a cosignature/v1 key (type 0x04)")
        out.append(key)
    return out


def _read_file(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from exc


def _progress(total: int, label: str) -> tuple[Callable[[int], None] | None, Callable[[], None]]:
    """A rich progress bar on stderr for long runs on a terminal; nothing otherwise."""
    if total < 200_000 or not sys.stderr.isatty():
        return None, lambda: None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                   console=Console(stderr=True), transient=True)
    task = bar.add_task(label, total=total)
    bar.start()
    return (lambda n: bar.update(task, completed=n)), bar.stop


def _out(text: str) -> None:
    """The one way the audit commands write text to stdout: escaped for the terminal (line breaks kept), since
    what they print quotes the log, its origin, witnesses' names and URLs, and files a responder was handed.
    Machine-readable output (``show --json``, ``export``) is written as bytes by its own display point."""
    sys.stdout.write(for_terminal(text, keep_newlines=True))
    sys.stdout.flush()


# -- verify ----------------------------------------------------------------------------------------------------


def _verify(ctx: CommandContext, args: argparse.Namespace) -> int:
    with LogReader(ctx.state_dir) as reader:
        if args.vkey:
            key, key_source = _log_key(args.vkey), "--vkey"
        else:
            key, key_source = reader.local_verifier(), f"the local key {ctx.state_dir / KEY_FILE}"
        if key.name != reader.origin:
            raise VerificationError(f"the key is for log {key.name!r} but this log is {reader.origin!r}",
                                    hint="pass the verifier key of this log")
        sources = reader.checkpoint_notes()
        sources += witnessed_sources(ctx.state_dir)
        for path in args.checkpoint:
            sources.append(CheckpointSource(f"--checkpoint {path}", _read_file(path, "checkpoint"), external=True))
        witnesses = _witness_keys(args.witness)
        quorum = len(witnesses) if args.quorum is None else args.quorum
        # A log whose head says nothing was ever published (a crash right after its first batch) has no
        # checkpoint yet, legitimately; any other log without one had its checkpoints removed. The head is not
        # signed, so this leniency is only for the local key: verifying against a --vkey asks whether the records
        # are bound to that key, and with no checkpoint nothing binds them (a forged log needs no key at all).
        never_published = (reader.head is not None and reader.head.notes_end == 0 and not args.checkpoint
                           and not args.vkey)
        update, done = _progress(reader.count(), "verifying")
        try:
            result = verify_log(reader.committed, log_key=key, checkpoints=sources, hashes=reader.hashes,
                                witnesses=witnesses, quorum=quorum, deep=args.deep, progress=update,
                                require_checkpoint=not never_published)
        except ForkEvidence as exc:
            done()
            _out(exc.evidence)
            raise
        finally:
            done()
        uncommitted = reader.uncommitted
    witnessed = witness_verdict(ctx.state_dir, key, witnesses, quorum, result, [s.note for s in sources])
    root = result.root.hex()
    lines = [f"audit log OK: {result.size} records, {result.checkpoints} signed checkpoints match them",
             f"  origin:  {result.origin}", f"  root:    {root}", *witnessed]
    if result.latest is not None:
        lines.append(f"  latest checkpoint: size {result.latest.size}")
        if result.latest.size < result.size:
            lines.append(f"  note:    the last {result.size - result.latest.size} records are not under a "
                         f"checkpoint yet (`warden audit checkpoint --refresh` publishes one)")
    elif result.size:
        lines.append("  note:    no checkpoint published yet: the records are not bound to the key "
                     "(`warden audit checkpoint --refresh`)")
    if result.first_time:
        lines.append(f"  records: {result.first_time} .. {result.last_time} (writer's clock, untrusted)")
    lines.append(f"  key:     {key.vkey} (from {key_source})")
    if not args.vkey:
        lines.append("  note:    verified with the key stored next to the log; pass --vkey and --checkpoint "
                     "kept elsewhere to rule out a rewrite by someone who had this machine")
    if uncommitted:
        lines.append(f"  note:    {uncommitted} bytes past the committed end (a batch being written, or a torn "
                     f"tail the next start removes)")
    _out("\n".join(lines) + "\n")
    return 0


# -- show / tail -----------------------------------------------------------------------------------------------


def _when(text: str | None, flag: str) -> str | None:
    if text is None:
        return None
    try:
        t = datetime.datetime.fromisoformat(text)
    except ValueError as exc:
        raise ConfigError(f"{flag} {text!r} is not an ISO 8601 time", hint="e.g. 2026-11-30T14:00:00Z") from exc
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.UTC)
    return format_time(t.timestamp())


def _matcher(args: argparse.Namespace) -> Callable[[Record], bool]:
    since, until = _when(args.since, "--since"), _when(args.until, "--until")

    def match(r: Record) -> bool:
        if args.server and not (r.server_name == args.server or (r.server_id or "").startswith(args.server)
                                or (r.server_id or "").removeprefix("sha256:").startswith(args.server)):
            return False
        if args.tool and r.target != args.tool:
            return False
        if args.principal and r.principal != args.principal:
            return False
        if args.decision and (r.decision is None or r.decision.value != args.decision):
            return False
        if args.event and not any(r.event.value == e or (e.endswith(".") and r.event.value.startswith(e))
                                  for e in args.event):
            return False
        if since and r.untrusted_time < since:
            return False
        return not (until and r.untrusted_time > until)

    return match


def _decoded(raws: Iterator[RawRecord]) -> Iterator[tuple[RawRecord, Record]]:
    for raw in raws:
        try:
            yield raw, decode_record(raw.data, deep=False)
        except (msgspec.ValidationError, msgspec.DecodeError, ValueError) as exc:
            raise VerificationError(f"record {raw.index} is not a valid audit record: {exc}",
                                    hint="run `warden audit verify`") from exc


def _short(text: str, width: int) -> str:
    """A self-reported name cut for a table column (the full value is in ``--json``)."""
    return text if len(text) <= width else text[: width - 1] + "…"


def _print(rows: Sequence[tuple[RawRecord, Record]], as_json: bool, redactor: Redactor) -> None:
    """The one display point of ``audit show`` and ``audit tail``: every string a record holds came from outside
    (a server's tool name, a host's name, an error text), so each goes through the secrets registry — a record
    written before a value was registered may still hold it — and then :func:`for_terminal`, as one rich ``Text``
    (never markup: ``[link=…]`` in a tool name stays text). ``--json`` prints the stored records redacted, with
    every character :func:`char_class` flags written as a ``\\uXXXX`` escape: the same JSON values, and nothing a
    terminal would obey (JSON itself leaves DEL, C1 controls and U+202E raw). In the table, warden's own columns
    (index, time, event, decision, consent) never wrap and every outside value folds inside its cell, so no value's
    length (a target is whatever a host asked for) can make rich squeeze a verdict out of the table."""
    if as_json:
        sys.stdout.buffer.write(b"".join(json_for_terminal(redactor.wire(raw.data)) + b"\n" for raw, _ in rows))
        sys.stdout.flush()
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    def cell(text: str, width: int | None = None) -> Text:
        shown = for_terminal(redactor.text(text))
        return Text(shown if width is None else _short(shown, width))

    table = Table(box=None, pad_edge=False, header_style="bold")
    principals = any(r.principal is not None for _, r in rows)  # an HTTP face's records: who was authenticated
    for col in ("#", "time (untrusted)", "event", "server", "host", *(("principal",) if principals else ()),
                "method", "target", "decision", "by", "detail"):
        table.add_column(col, no_wrap=col in ("#", "time (untrusted)", "event", "decision", "by"), overflow="fold")
    for raw, r in rows:
        detail = r.rule or r.reason or r.error or r.violation or ""
        if r.outcome is not None:
            detail = f"{r.outcome.value}" + (f" (for #{r.decision_index})" if r.decision_index is not None else "")
        elif r.recovered is not None:
            detail = r.recovered.reason
        table.add_row(str(raw.index), cell(r.untrusted_time[:23].replace("T", " ")), r.event.value,
                      cell(r.server_name or ""), cell(r.client or "", 24),
                      *((cell(r.principal or "", 24),) if principals else ()), cell(r.method or ""),
                      cell(r.target or ""), r.decision.value if r.decision else "",
                      r.consent.value if r.consent else "", cell(detail))
    if sys.stdout.isatty():
        Console(soft_wrap=False).print(table)
        return
    # piped output: not squeezed into 80 columns, and wide enough that a value folds only past 1,000 characters
    # (a target may hold 2,048), so that grep finds it whole; no line padded out to the widest one
    rendered = io.StringIO()
    Console(soft_wrap=False, width=1000, file=rendered).print(table)
    sys.stdout.write("".join(line.rstrip(" ") + "\n" for line in rendered.getvalue().splitlines()))
    sys.stdout.flush()


def _show(ctx: CommandContext, args: argparse.Namespace) -> int:
    match = _matcher(args)
    rows = []
    with LogReader(ctx.state_dir) as reader:
        for raw, rec in _decoded(reader.records()):
            if match(rec):
                rows.append((raw, rec))
                if args.limit is not None and len(rows) >= args.limit:
                    break
    _print(rows, args.json, load_redactor(ctx.state_dir))
    return 0


def _tail(ctx: CommandContext, args: argparse.Namespace) -> int:
    match = _matcher(args)
    with LogReader(ctx.state_dir) as reader:
        rows = [(raw, rec) for raw, rec in _decoded(reader.records()) if match(rec)]
        seen = reader.count()
    redactor = load_redactor(ctx.state_dir)
    _print(rows[-args.n:] if args.n > 0 else [], args.json, redactor)
    while args.follow:
        time.sleep(0.5)
        with LogReader(ctx.state_dir) as reader:
            fresh = [(raw, rec) for raw, rec in _decoded(reader.records(seen)) if match(rec)]
            seen = max(seen, reader.count())
        if fresh:
            _print(fresh, args.json, redactor)
    return 0


# -- prove / check-proof ---------------------------------------------------------------------------------------


def _prove(ctx: CommandContext, args: argparse.Namespace) -> int:
    from warden.audit import format_tlog_proof

    with LogReader(ctx.state_dir) as reader:
        key = reader.local_verifier()
        notes = [s.note for s in reader.checkpoint_notes()]
        if not notes:
            raise AuditError("no checkpoint has been published yet", hint="run `warden audit checkpoint --refresh`")
        opened = [open_checkpoint(n, key)[0] for n in notes]
        if args.size is not None:
            chosen = next((cp for cp in opened if cp.size == args.size), None)
            if chosen is None:
                raise AuditError(f"no stored checkpoint has size {args.size}",
                                 hint="omit --size to use the latest checkpoint")
        else:
            chosen = max(opened, key=lambda cp: cp.size)
        if not 0 <= args.index < chosen.size:
            raise AuditError(f"record {args.index} is not covered by the checkpoint of size {chosen.size}",
                             hint="run `warden audit checkpoint --refresh` to publish a newer checkpoint")
        record = reader.record_at(args.index)
        path = reader.inclusion_path(args.index, chosen.size)
    proof = format_tlog_proof(args.index, path, chosen, extra=record)
    try:
        verify_tlog_proof(proof, key)
    except VerificationError as exc:
        raise VerificationError(f"the proof built from this log does not verify: {exc.message}",
                                hint="the hash cache or the record was changed: run `warden audit verify`") from exc
    if args.output:
        Path(args.output).write_bytes(proof)
    else:
        sys.stdout.buffer.write(proof)
        sys.stdout.flush()
    return 0


def _check_proof(ctx: CommandContext, args: argparse.Namespace) -> int:
    key = _log_key(args.vkey)
    witnesses = _witness_keys(args.witness)
    quorum = len(witnesses) if args.quorum is None else args.quorum
    proof, checkpoint = verify_tlog_proof(_read_file(args.file, "proof"), key, witnesses=witnesses, quorum=quorum)
    if proof.extra is not None:  # signed is not the same as well-formed: only a warden record is shown
        try:
            decode_record(proof.extra, deep=False)
        except (msgspec.ValidationError, msgspec.DecodeError, ValueError) as exc:
            raise VerificationError(f"the proof's record {proof.index} is not a valid audit record: {exc}") from exc
    _out(f"proof OK: record {proof.index} is in log {checkpoint.origin} at size {checkpoint.size}\n")
    if proof.extra is not None:  # the record, shown as `audit show --json` shows it: redacted, controls escaped
        sys.stdout.buffer.write(json_for_terminal(load_redactor(ctx.state_dir).wire(proof.extra)) + b"\n")
        sys.stdout.flush()
    return 0


# -- checkpoint / key / export ---------------------------------------------------------------------------------


def _checkpoint(ctx: CommandContext, args: argparse.Namespace) -> int:
    if args.refresh:
        store = Store.open(ctx.private_state_dir())
        try:
            note = store.publish().note
        finally:
            store.close()
    else:
        with LogReader(ctx.state_dir) as reader:
            latest = reader.latest_note()
        if latest is None:
            raise AuditError("no checkpoint has been published yet", hint="run `warden audit checkpoint --refresh`")
        note = latest
    sys.stdout.buffer.write(note)
    sys.stdout.flush()
    return 0


def _key(ctx: CommandContext, args: argparse.Namespace) -> int:
    key_path = ctx.state_dir / KEY_FILE
    if not key_path.exists():
        Store.open(ctx.private_state_dir()).close()
    with LogReader(ctx.state_dir) as reader:
        _out(reader.local_verifier().vkey + "\n")
    return 0
