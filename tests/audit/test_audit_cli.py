"""`warden audit` show, tail, prove, check-proof, checkpoint, key and export, on a real log."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import select
import subprocess
from pathlib import Path

import pytest

from tests.support import WARDEN
from warden.audit import Decision, Event, Outcome, Record
from warden.audit._checkpoint import parse_tlog_proof
from warden.audit._merkle import leaf_hash, verify_inclusion
from warden.audit._note import parse_vkey
from warden.audit._store import Store, format_time
from warden.cli import main

from .helpers import decision

T0 = 1_800_000_000.0


def run(capsys: pytest.CaptureFixture[str], state_dir: Path, *args: str) -> tuple[int, str, str]:
    code = main(["--state-dir", str(state_dir), "audit", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def log(state_dir: Path) -> Path:
    store = Store.open(state_dir, clock=lambda: T0)  # a fixed clock: no checkpoint falls due on its own
    first = store.commit([Record(event=Event.AUDIT_OPENED)])  # the first batch always gets a checkpoint
    decided = store.commit([decision(1, untrusted_time=at(1)),
                            decision(2, target="write_file", decision=Decision.DENY, rule="deny.write",
                                     server_name="git", untrusted_time=at(2))])
    store.commit([Record(event=Event.CALL_OUTCOME, method="tools/call", decision_index=decided,
                         outcome=Outcome.OK, server_name="fs", untrusted_time=at(2.5))], publish=True)
    store.commit([decision(3, untrusted_time=at(4))])  # committed, not yet under a checkpoint
    store.close()
    assert first == 0
    return state_dir


def at(seconds: float) -> str:
    return format_time(T0 + seconds)


def lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines()]


def test_show_filters_and_json(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, log, "show", "--json")
    assert code == 0
    records = lines(out)
    assert [r["index"] for r in records] == [0, 1, 2, 3, 4]
    stored = (log / "audit" / "entries.log").read_bytes()
    assert all(line.encode() in stored for line in out.splitlines())  # byte for byte
    _, out, _ = run(capsys, log, "show", "--json", "--decision", "deny")
    assert [r["target"] for r in lines(out)] == ["write_file"]
    _, out, _ = run(capsys, log, "show", "--json", "--server", "git")
    assert [r["index"] for r in lines(out)] == [2]
    _, out, _ = run(capsys, log, "show", "--json", "--tool", "read_file")
    assert [r["index"] for r in lines(out)] == [1, 4]
    _, out, _ = run(capsys, log, "show", "--json", "--event", "call.")
    assert [r["index"] for r in lines(out)] == [1, 2, 3, 4]
    _, out, _ = run(capsys, log, "show", "--json", "--event", "call.outcome")
    assert lines(out)[0]["decision_index"] == 1
    _, out, _ = run(capsys, log, "show", "--json", "--since", "2027-01-15T08:00:01Z", "--until",
                    "2027-01-15T08:00:02.5Z")
    assert [r["index"] for r in lines(out)] == [1, 2, 3]
    _, out, _ = run(capsys, log, "show", "--limit", "2")
    assert "audit.opened" in out
    assert "read_file" in out
    assert "write_file" not in out
    code, _, err = run(capsys, log, "show", "--since", "yesterday")
    assert code == 2
    assert "not an ISO 8601 time" in err


def test_tail(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, log, "tail", "-n", "2", "--json")
    assert [r["index"] for r in lines(out)] == [3, 4]
    _, out, _ = run(capsys, log, "tail", "-n", "1")
    assert "call.decided" in out


def test_prove_and_check_proof(log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, vkey, _ = run(capsys, log, "key")
    assert code == 0
    proof_file = tmp_path / "record2.tlog-proof"
    code, _, _ = run(capsys, log, "prove", "2", "-o", str(proof_file))
    assert code == 0
    proof = parse_tlog_proof(proof_file.read_bytes())
    assert proof.index == 2
    assert proof.extra is not None
    assert json.loads(proof.extra)["target"] == "write_file"
    # a third party checks it with the verifier key only
    code, out, _ = run(capsys, tmp_path / "nowhere", "check-proof", str(proof_file), "--vkey", vkey.strip())
    assert code == 0
    assert out.startswith("proof OK: record 2 is in log ")
    key = parse_vkey(vkey)
    from warden.audit._note import parse_note

    text = parse_note(proof.checkpoint_note).text.split("\n")
    import base64

    verify_inclusion(2, int(text[1]), leaf_hash(proof.extra), proof.path, base64.b64decode(text[2]))
    assert key.name == text[0]
    # a record not yet covered by a checkpoint
    code, _, err = run(capsys, log, "prove", "4")
    assert code == 6
    assert "not covered by the checkpoint of size 4" in err
    tampered = proof_file.read_bytes().replace(b"index 2", b"index 1")
    proof_file.write_bytes(tampered)
    code, _, err = run(capsys, tmp_path / "nowhere", "check-proof", str(proof_file), "--vkey", vkey.strip())
    assert code == 7
    assert "does not lead to the root" in err


def test_checkpoint_refresh_and_key(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, log, "checkpoint")
    assert code == 0
    assert out.split("\n")[1] == "4"
    code, out, _ = run(capsys, log, "checkpoint", "--refresh")
    assert code == 0
    assert out.split("\n")[1] == "5"
    code, out, _ = run(capsys, log, "verify", "--vkey", run(capsys, log, "key")[1].strip())
    assert code == 0
    assert "5 records" in out


def test_key_creates_the_log_on_first_use(state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, state_dir, "key")
    assert code == 0
    assert parse_vkey(out.strip()).name.startswith("warden.invalid/audit/")
    assert (state_dir / "keys" / "audit-signing.key").stat().st_mode & 0o777 == 0o600


def test_export_jsonl_and_tiles(log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "export.jsonl"
    code, _, _ = run(capsys, log, "export", "--jsonl", "-o", str(out_file))
    assert code == 0
    assert [r["index"] for r in lines(out_file.read_text())] == [0, 1, 2, 3, 4]
    code, _, _ = run(capsys, log, "export", "--tiles", str(tmp_path / "tiles"))
    assert code == 0
    assert (tmp_path / "tiles" / "tile" / "0" / "000.p" / "4").stat().st_size == 4 * 32
    assert (tmp_path / "tiles" / "checkpoint").read_bytes() == (log / "audit" / "checkpoint").read_bytes()


def test_no_log_yet(state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, state_dir, "verify")
    assert code == 6
    assert "no audit log in" in err


def test_verify_reports_uncommitted_bytes(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with open(log / "audit" / "entries.log", "ab") as f:
        f.write(b"\xff\x01\x00\x00")  # a batch being written right now
    code, out, _ = run(capsys, log, "verify")
    assert code == 0
    assert "4 bytes past the committed end" in out


def test_verify_a_log_that_never_published(state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A crash right after the first batch leaves records and no checkpoint: not tampering, but said plainly."""
    store = Store.open(state_dir, clock=lambda: 0.0)  # at time 0 no checkpoint is ever due
    store.commit([decision(1), decision(2)])
    store.close()
    code, out, _ = run(capsys, state_dir, "verify")
    assert code == 0
    assert "no checkpoint published yet" in out


def test_check_proof_shows_the_record_escaped_and_refuses_one_that_is_not_a_record(
        state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Terminal injection through `audit check-proof`, the one command a third party runs on a proof handed to them:
    it printed the record inside the proof as stored, so a server's error text or name put a raw C1 CSI (U+009B), a
    bidi override (U+202E), a line separator or a zero-width space on the responder's terminal (JSON escapes only
    C0). Now the record is shown as `audit show --json` shows it (every flagged character as a \\uXXXX escape, the
    same JSON values), and a proof whose signed leaf is not a warden record (a hostile key's) is refused, not
    printed."""
    from warden.audit._checkpoint import Checkpoint, format_tlog_proof, sign_checkpoint
    from warden.audit._note import Ed25519Signer

    store = Store.open(state_dir, clock=lambda: T0)
    store.commit([Record(event=Event.AUDIT_OPENED)])
    store.commit([decision(1, server_name="fs\u202eevil", error="boom\u009b2J\u2028forged\u200b")], publish=True)
    store.close()
    _, vkey, _ = run(capsys, state_dir, "key")
    proof_file = tmp_path / "record1.tlog-proof"
    assert run(capsys, state_dir, "prove", "1", "-o", str(proof_file))[0] == 0
    code, out, _ = run(capsys, tmp_path / "nowhere", "check-proof", str(proof_file), "--vkey", vkey.strip())
    assert code == 0
    record = out.splitlines()[1]
    assert json.loads(record)["error"] == "boom\u009b2J\u2028forged\u200b"  # the same values
    for ch in "\u009b\u202e\u2028\u200b":
        assert ch not in out
    assert "\\u202e" in record
    # a leaf signed by some key but not a warden record (invalid UTF-8 and a raw ESC) is refused, never printed
    signer = Ed25519Signer.generate("hostile.example/log")
    leaf = b"\xff\x1b[2J not a record"
    note = sign_checkpoint(Checkpoint(signer.name, 1, leaf_hash(leaf)), signer)
    proof_file.write_bytes(format_tlog_proof(0, [], note, extra=leaf))
    code, out, err = run(capsys, tmp_path / "nowhere", "check-proof", str(proof_file), "--vkey",
                         signer.verifier.vkey)
    assert code == 7
    assert "not a valid audit record" in err
    assert "\x1b" not in out + err


def test_a_log_whose_origin_does_not_read_as_itself_is_refused(log: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A hostile log handed to a responder comes with its own log.json and key, and the origin (the key's name) is
    printed by verify, key, checkpoint and check-proof: C2SP key names only exclude spaces and '+', so an origin
    holding a C1 CSI (U+009B), a bidi override or a zero-width space passed, and `audit verify` printed it raw
    after "audit log OK" (a fresh log could also carry an origin that reads exactly like the real one). Now every
    reading command and the writer refuse such a log.json, naming the characters escaped."""
    from warden.audit._checkpoint import Checkpoint, sign_checkpoint
    from warden.audit._errors import AuditUnavailable
    from warden.audit._format import FRAME_NOTE, FRAME_RECORD, encode_frame, scan_frames
    from warden.audit._merkle import Frontier
    from warden.audit._note import Ed25519Signer

    hostile = "warden.invalid/audit/\u009b2J\u202eKO\u200b"
    signer = Ed25519Signer.generate(hostile)
    audit_dir = log / "audit"
    (audit_dir / "log.json").write_text(json.dumps({"format": "warden-audit/1", "origin": hostile}))
    (log / "keys" / "audit-signing.key").write_text(signer.skey + "\n")
    # the same records, re-signed under the new key, as the log's owner could
    data = (audit_dir / "entries.log").read_bytes()
    frontier = Frontier()
    for frame in scan_frames(data, 0, FRAME_RECORD):
        frontier.append(leaf_hash(frame.payload))
    note = sign_checkpoint(Checkpoint(hostile, frontier.size, frontier.root()), signer).note
    (audit_dir / "checkpoints.log").write_bytes(encode_frame(FRAME_NOTE, note))
    (audit_dir / "checkpoint").write_bytes(note)
    for args in (("verify",), ("key",), ("checkpoint",), ("show",), ("report", "-o", str(tmp_path / "r.html"))):
        code, out, err = run(capsys, log, *args)
        assert code == 6, (args, out, err)
        assert "is not a log warden wrote" in err
        assert "<U+202E>" in err
        for ch in "\u009b\u202e\u200b":
            assert ch not in out + err
    with pytest.raises(AuditUnavailable, match="is not a log warden wrote"):
        Store.open(log)


def test_verify_with_vkey_refuses_a_log_that_no_checkpoint_binds_to_the_key(
        state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A forged log handed to a responder who holds the real verifier key: any records, the real origin, no
    checkpoint, and a head (CRC only, not signed) saying nothing was ever published. Before, `audit verify --vkey
    REAL` exited 0 with "audit log OK" and `audit report --vkey REAL` showed a green VERIFIED banner, though no
    signature of that key covers any record. Now both fail with --vkey: the crash leniency stays for the local
    key only."""
    store = Store.open(state_dir, clock=lambda: 0.0)  # at time 0 no checkpoint is ever due
    store.commit([decision(1), decision(2)])
    store.close()
    _, vkey, _ = run(capsys, state_dir, "key")
    (state_dir / "keys" / "audit-signing.key").unlink()  # the forger never had it
    code, out, err = run(capsys, state_dir, "verify", "--vkey", vkey.strip())
    assert code == 7, out
    assert "no signed checkpoint" in err
    report = tmp_path / "r.html"
    code, out, _ = run(capsys, state_dir, "report", "--vkey", vkey.strip(), "-o", str(report))
    assert code == 7, out
    assert "VERIFICATION FAILED" in report.read_text()


def _show_table(state_dir: Path, columns: int | None) -> str:
    """``warden audit show`` in a real process: piped (``columns`` None), or on a terminal that many columns wide."""
    command = [WARDEN, "--state-dir", str(state_dir), "audit", "show"]
    if columns is None:
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout
    main_fd, tty_fd = pty.openpty()
    with subprocess.Popen(command, stdout=tty_fd, stderr=subprocess.DEVNULL,
                          env={**os.environ, "COLUMNS": str(columns), "TERM": "dumb"}) as child:
        os.close(tty_fd)
        out = b""
        with contextlib.suppress(OSError):  # EIO: the child closed the terminal
            # read as it writes (a full terminal buffer would block it); 60 s of silence is a hang
            while select.select([main_fd], [], [], 60)[0] and (chunk := os.read(main_fd, 65536)):
                out += chunk
        os.close(main_fd)
        assert child.wait(timeout=60) == 0
    return re.sub(r"\x1b\[[0-9;]*m", "", out.decode().replace("\r\n", "\n"))


def test_piped_show_pads_no_line_out_to_the_widest(state_dir: Path) -> None:
    """Piped, the table is 1,000 columns wide so that no value folds: before, every line was padded with spaces out
    to the widest row (334 characters for a short log in a new user's trial)."""
    store = Store.open(state_dir, clock=lambda: T0)
    store.commit([Record(event=Event.AUDIT_OPENED), decision(1, target="file:///" + "a" * 300)])
    store.close()
    lines = _show_table(state_dir, None).split("\n")
    assert lines[-1] == ""
    assert all(line == line.rstrip(" ") for line in lines)
    assert len(lines[1]) < 150  # audit.opened's row: nothing after its own columns


@pytest.mark.parametrize("columns", [None, 80, 120])
def test_a_long_target_cannot_push_the_verdicts_out_of_the_table(state_dir: Path, columns: int | None) -> None:
    """A target is what a host asked for (a tool name a model made up, a server's resource URI): any length. Before,
    one long target made rich squeeze every other column of every row to nothing (``#``, ``decision``, ``detail``
    vanished, ``event`` showed as ``c…``), so a deny read like an allow. Now the outside values wrap in their cells
    and warden's own columns keep their width."""
    store = Store.open(state_dir, clock=lambda: T0)
    store.commit([Record(event=Event.AUDIT_OPENED),
                  decision(1, target="file:///" + "a" * 400, decision=Decision.DENY, consent=None, rule="deny.read"),
                  decision(2, server_name="git", target="write_file", rule="allow.write")])
    store.close()
    text = _show_table(state_dir, columns)
    assert "…" not in text
    rows = [line for line in text.split("\n") if line[:1].isdigit()]
    assert [row.split()[:4] for row in rows] == [["0", "2027-01-15", "08:00:00.000", "audit.opened"],
                                                  ["1", "2027-01-15", "08:00:00.000", "call.decided"],
                                                  ["2", "2027-01-15", "08:00:00.000", "call.decided"]]
    assert " deny " in rows[1]
    assert " allow " in rows[2]
