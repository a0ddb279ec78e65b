"""``warden audit report``, ``export`` and ``witness``: the log as a responder, a SIEM and a witness see it.

* ``report -o FILE``: one self-contained HTML file (verification first, a timeline per server, per-call evidence
  with inclusion proofs, rug pulls and refusals highlighted); see :mod:`warden.audit._report`.
* ``export --format jsonl|timesketch|ocsf [--since T] [--follow]``: one JSON object per line for a SIEM or a
  timeline tool (:mod:`warden.audit._export`); ``--follow`` keeps streaming records as they are committed.
  ``--tiles DIR`` writes the log as C2SP tlog-tiles. Every line passes the secrets registry on its way out.
* ``witness add|list|remove`` and ``witness cosign``: C2SP tlog-witness cosigning of the log's checkpoints
  (:mod:`warden.audit._witness`).

Registered by :func:`warden.cli.audit.register` under ``warden audit``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import msgspec

from warden.audit import (
    FORMATS,
    KEY_FILE,
    CheckpointSource,
    Cosigned,
    LogFollower,
    LogReader,
    RawRecord,
    Record,
    Witness,
    WitnessClient,
    cosign_latest,
    decode_record,
    export_line,
    load_witnesses,
    open_checkpoint,
    read_witnessed,
    rfc3339_utc,
    save_witnesses,
    summarize_witnesses,
)
from warden.cli._common import CommandContext, print_error
from warden.cli.audit import (
    _key_text,
    _log_key,
    _out,
    _progress,
    _read_file,
    _when,
    _witness_keys,
)
from warden.errors import AuditError, ConfigError, VerificationError
from warden.escape import json_for_terminal
from warden.secrets import Redactor, load_redactor

__all__ = ["register"]

#: How often ``export --follow`` looks at the head for new records (seconds).
FOLLOW_POLL = 0.2


def register(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = verbs.add_parser("report", help="write one self-contained HTML report of the log for a responder",
                         description="Verify the log and write one self-contained HTML file: the verification "
                                     "result first (what was and was not proven), rug pulls and refusals, a "
                                     "timeline per server, per-call evidence with inclusion proofs, and the "
                                     "pinned definitions. Written also when verification fails (it then says "
                                     "where, and what can be trusted up to there); exit 7 in that case.")
    p.add_argument("-o", "--output", metavar="FILE", required=True, help="the HTML file to write")
    p.add_argument("--since", metavar="TIME", help="list only records from this ISO 8601 time on (writer's clock)")
    p.add_argument("--server", metavar="NAME", help="list only this server's records")
    p.add_argument("--max-records", type=int, default=20_000, metavar="N",
                   help="list at most the newest N records in scope (default 20,000; all are verified)")
    p.add_argument("--vkey", metavar="KEY", help="the log's verifier key (text or @FILE); default: derived from "
                   "the signing key next to the log")
    p.add_argument("--checkpoint", metavar="FILE", action="append", default=[],
                   help="a signed checkpoint kept elsewhere (repeatable)")
    p.add_argument("--witness", metavar="VKEY", action="append", default=[], help="a witness key (repeatable)")
    p.add_argument("--quorum", type=int, default=None, metavar="N", help="witness cosignatures needed "
                   "(default: all given witnesses)")
    p.set_defaults(func=_report)

    p = verbs.add_parser("export", help="stream records as JSON lines, Timesketch JSONL or OCSF; or write tiles",
                         description="Write committed records one JSON object per line: the stored records "
                                     "(jsonl), Timesketch JSONL (message, datetime, timestamp_desc) or OCSF 1.6 "
                                     "events; or write the log up to its latest checkpoint as a C2SP tlog-tiles "
                                     "tree (--tiles DIR) for static serving.")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--format", choices=FORMATS, help="one JSON object per record, per line")
    how.add_argument("--jsonl", action="store_true", help="same as --format jsonl")
    how.add_argument("--tiles", metavar="DIR", help="write checkpoint, tile/<L>/<N> and tile/entries/<N> under DIR")
    p.add_argument("--since", metavar="TIME", help="only records from this ISO 8601 time on (writer's clock)")
    p.add_argument("--follow", action="store_true",
                   help="after the existing records, keep streaming each record as it is committed (until "
                        "interrupted): for a SIEM forwarder")
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    p.set_defaults(func=_export)

    p = verbs.add_parser("witness", help="have independent witnesses cosign the log's checkpoints (C2SP tlog-witness)",
                         description="Configure C2SP tlog-witness witnesses and have them cosign the log's latest "
                                     "checkpoint. A cosignature proves to anyone with the witness's key that the "
                                     "log was append-only up to that checkpoint, as of the witness's clock.")
    actions = p.add_subparsers(dest="witness_command", metavar="ACTION", required=True)
    w = actions.add_parser("add", help="add a witness (NAME URL VKEY) and ask it to cosign now")
    w.add_argument("name", metavar="NAME", help="a name for messages")
    w.add_argument("url", metavar="URL", help="the witness's submission prefix (add-checkpoint is posted under it)")
    w.add_argument("vkey", metavar="VKEY", help="the witness's cosignature/v1 verifier key (text or @FILE)")
    w.add_argument("--no-cosign", action="store_true", help="only record the witness")
    w.set_defaults(func=_witness_add)
    w = actions.add_parser("remove", help="stop using a witness (its cosignatures stay valid)")
    w.add_argument("name", metavar="NAME")
    w.set_defaults(func=_witness_remove)
    w = actions.add_parser("list", help="the witnesses and the latest checkpoint each cosigned")
    w.set_defaults(func=_witness_list)
    w = actions.add_parser("cosign", help="ask every witness to cosign the latest checkpoint now")
    w.add_argument("--timeout", type=float, default=10.0, metavar="S", help="per witness (default 10 s)")
    w.set_defaults(func=_witness_cosign)


# -- export --------------------------------------------------------------------------------------------------------


def _decode(raw: RawRecord) -> Record:
    try:
        return decode_record(raw.data, deep=False)
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError) as exc:
        raise VerificationError(f"record {raw.index} is not a valid audit record: {exc}",
                                hint="run `warden audit verify`") from exc


class _Lines:
    """Export lines on their way out: filtered by time, redacted, written."""

    def __init__(self, fmt: str, origin: str, since: str | None, redactor: Redactor, sink: BinaryIO) -> None:
        self.fmt, self.origin, self.since, self.redactor, self.sink = fmt, origin, since, redactor, sink
        # To a terminal, as `audit show --json` writes: the same JSON values, nothing a terminal would obey.
        self.shown = json_for_terminal if sink.isatty() else bytes

    def write(self, raws: Sequence[RawRecord]) -> None:
        chunk = bytearray()
        for raw in raws:
            record = _decode(raw)
            if self.since and record.untrusted_time < self.since:
                continue
            chunk += self.shown(self.redactor.wire(export_line(self.fmt, record, raw.data, self.origin)))
            chunk += b"\n"
        if chunk:
            self.sink.write(chunk)
            self.sink.flush()


def _export(ctx: CommandContext, args: argparse.Namespace) -> int:
    if args.tiles:
        if args.follow or args.since:
            raise ConfigError("--tiles writes the whole log up to its checkpoint; --since and --follow do not apply")
        return _export_tiles(ctx, Path(args.tiles))
    fmt = "jsonl" if args.jsonl else args.format
    since = _when(args.since, "--since")
    redactor = load_redactor(ctx.state_dir)
    out = open(args.output, "wb") if args.output else None  # noqa: SIM115 - closed below
    try:
        sink = out or sys.stdout.buffer
        with LogReader(ctx.state_dir) as reader:
            lines = _Lines(fmt, reader.origin, since, redactor, sink)
            update, done = _progress(reader.count(), "exporting")
            index, offset = 0, 0
            batch: list[RawRecord] = []
            try:
                for raw in reader.records():
                    batch.append(raw)
                    index, offset = raw.index + 1, raw.end
                    if len(batch) == 4096:
                        lines.write(batch)
                        batch.clear()
                        reader.release(offset)
                        if update is not None:
                            update(index)
                lines.write(batch)
            finally:
                done()
        if args.follow:
            _follow(ctx, lines, index, offset)
        if out is not None:
            out.flush()
            os.fsync(out.fileno())
    except BrokenPipeError:  # the reader went away (a forwarder stopped, `| head`): not an error of ours
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        if out is not None:
            out.close()
    return 0


def _follow(ctx: CommandContext, lines: _Lines, index: int, offset: int) -> None:
    """Stream records as they are committed until SIGINT or SIGTERM (a forwarder's service manager stops us)."""
    stop = False

    def stopping(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    previous = signal.signal(signal.SIGTERM, stopping)
    follower = LogFollower(ctx.state_dir, index=index, offset=offset)
    try:
        while not stop:
            fresh = follower.poll()
            if fresh:
                lines.write(fresh)
            else:
                time.sleep(FOLLOW_POLL)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


def _export_tiles(ctx: CommandContext, out_dir: Path) -> int:
    from warden.audit import HASH_SIZE, write_tiles

    with LogReader(ctx.state_dir) as reader:
        key = reader.local_verifier()
        note = reader.latest_note()
        if note is None:
            raise AuditError("no checkpoint has been published yet", hint="run `warden audit checkpoint --refresh`")
        checkpoint, _ = open_checkpoint(note, key)
        entries = [raw.data for raw in reader.records() if raw.index < checkpoint.size]
        hashes = reader.hashes
        if len(entries) < checkpoint.size or hashes is None:
            raise AuditError("the log is shorter than its latest checkpoint", hint="run `warden audit verify`")

        def read(positions: Sequence[int]) -> list[bytes]:
            assert hashes is not None
            return [bytes(hashes[p * HASH_SIZE : (p + 1) * HASH_SIZE]) for p in positions]

        count = write_tiles(out_dir, checkpoint.size, note, read, entries)
    _out(f"wrote {count} files for {checkpoint.size} records under {out_dir}\n")
    return 0


# -- witness ---------------------------------------------------------------------------------------------------------


def _witness_add(ctx: CommandContext, args: argparse.Namespace) -> int:
    witness = Witness.of(args.name, args.url, _key_text(args.vkey))
    state_dir = ctx.private_state_dir()
    current = load_witnesses(state_dir)
    if any(w.name == witness.name for w in current):
        raise ConfigError(f"a witness named {witness.name!r} is already configured",
                          hint=f"`warden audit witness remove {witness.name}` first to change it")
    save_witnesses(state_dir, [*current, witness])
    _out(f"witness {witness.name} added ({witness.url})\n")
    return 0 if args.no_cosign else _cosign(ctx, [witness], timeout=10.0)


def _witness_remove(ctx: CommandContext, args: argparse.Namespace) -> int:
    current = load_witnesses(ctx.state_dir)
    kept = [w for w in current if w.name != args.name]
    if len(kept) == len(current):
        raise ConfigError(f"no witness named {args.name!r}", hint="`warden audit witness list` shows them")
    save_witnesses(ctx.private_state_dir(), kept)
    _out(f"witness {args.name} removed; its cosignatures in the log's history stay valid\n")
    return 0


def _witness_list(ctx: CommandContext, args: argparse.Namespace) -> int:
    witnesses = load_witnesses(ctx.state_dir)
    if not witnesses:
        _out("no witnesses (add one: warden audit witness add NAME URL VKEY)\n")
        return 0
    with LogReader(ctx.state_dir) as reader:
        key = reader.local_verifier()
    summary = summarize_witnesses(read_witnessed(ctx.state_dir), key, [w.key for w in witnesses], 1)
    for w, view in zip(witnesses, summary.views, strict=True):
        seen = (f"cosigned size {view.size} at {rfc3339_utc(view.timestamp)}" if view.size is not None
                else "has cosigned nothing yet")
        _out(f"{w.name}  {w.url}\n  key: {w.vkey}\n  {seen}\n")
    return 0


def _witness_cosign(ctx: CommandContext, args: argparse.Namespace) -> int:
    witnesses = load_witnesses(ctx.state_dir)
    if not witnesses:
        raise ConfigError("no witness is configured", hint="add one: warden audit witness add NAME URL VKEY")
    return _cosign(ctx, witnesses, timeout=args.timeout)


def _cosign(ctx: CommandContext, witnesses: Sequence[Witness], *, timeout: float) -> int:
    """One cosigning round; exit 0 when every witness cosigned, 7 when one's answer is evidence against the log,
    1 when one could not be asked or answered nonsense. The log and its checkpoints are kept either way."""
    with WitnessClient(timeout=timeout) as client:
        latest, results = cosign_latest(ctx.state_dir, witnesses, client)
    code = 0
    for r in results:
        if isinstance(r, Cosigned):
            _out(f"{r.witness.name}: cosigned checkpoint size {latest.size} at {rfc3339_utc(r.timestamp)}\n")
            continue
        label = "SECURITY ERROR: " if r.evidence else ""
        print_error(f"{label}witness {r.witness.name} did not cosign checkpoint size {latest.size}: {r.reason}; "
                    f"the checkpoint is kept")
        code = max(code, VerificationError.exit_code if r.evidence else 1)
    return code


# -- report ----------------------------------------------------------------------------------------------------------


def _report(ctx: CommandContext, args: argparse.Namespace) -> int:
    from warden.audit import ReportOptions, write_report
    from warden.policy.pins import PinStore

    if args.max_records < 0:
        raise ConfigError("--max-records must be 0 or more")
    witnesses = _witness_keys(args.witness)
    options = ReportOptions(
        since=_when(args.since, "--since"), server=args.server, max_records=args.max_records,
        log_key=_log_key(args.vkey) if args.vkey else None,
        key_source="--vkey" if args.vkey else f"the local key {ctx.state_dir / KEY_FILE}",
        external=[CheckpointSource(f"--checkpoint {path}", _read_file(path, "checkpoint"), external=True)
                  for path in args.checkpoint],
        witnesses=witnesses, quorum=len(witnesses) if args.quorum is None else args.quorum,
        generated=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    redactor = load_redactor(ctx.state_dir)
    target = Path(args.output)
    tmp = target.with_name(f".{target.name}.tmp")
    with open(tmp, "wb") as out:
        summary = write_report(ctx.state_dir, out, options, redactor, pinned=lambda: PinStore(ctx.state_dir).entries())
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, target)
    head = "verified" if summary.verified else f"VERIFICATION FAILED: {summary.failure}"
    _out(f"wrote {target}: {summary.records} records read, {summary.listed} listed, {summary.highlights} "
         f"highlighted; {head}\n")
    return 0 if summary.verified else VerificationError.exit_code
