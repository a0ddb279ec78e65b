"""``warden audit report`` without a browser: what it says about intact, truncated, tampered, forked and
rolled-back logs, that every outside string is escaped, that its inclusion proofs verify, and its scoping.
(Rendering in Chromium: tests/e2e/test_audit_report_in_chromium.py.)"""

from __future__ import annotations

import base64
import html
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from warden.audit import Decision, Event, InvalidRecord, Record, digest
from warden.audit._merkle import leaf_hash, verify_inclusion
from warden.audit._report import ReportOptions, write_report
from warden.audit._store import Store
from warden.audit._verify import CheckpointSource
from warden.cli import main
from warden.secrets import Redactor

from .helpers import decision

T0 = 1_800_000_000.0
TAGS = {"html", "head", "meta", "title", "style", "body", "main", "h1", "h2", "h3", "p", "section", "ul", "li", "b",
        "code", "pre", "table", "tr", "th", "td", "a", "span", "details", "summary", "dl", "dt", "dd", "br", "i"}


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attrs: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs.extend(attrs)


def render(state_dir: Path, **options: object) -> str:
    out = state_dir.parent / "report.html"
    with open(out, "wb") as f:
        write_report(state_dir, f, ReportOptions(**options), Redactor())  # type: ignore[arg-type]
    return out.read_text()


def text_of(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def make(state_dir: Path) -> Store:
    store = Store.open(state_dir, clock=lambda: T0)
    store.commit([Record(event=Event.AUDIT_OPENED)])
    store.commit([decision(i, server_name="rug") for i in range(5)], publish=True)  # checkpoint at 6
    store.commit([Record(event=Event.PIN_CHANGED, server_name="rug", method="tool", target="add",
                         target_digest=digest(b"new"), previous_digest=digest(b"old"), reason="description changed"),
                  decision(9, server_name="rug", decision=Decision.DENY, consent=None, reason="changed")],
                 publish=True)  # checkpoint at 8
    store.commit([decision(10, server_name="fs")])  # not under a checkpoint
    return store


def test_an_intact_log_is_reported_verified_with_proofs_that_verify(state_dir: Path) -> None:
    make(state_dir).close()
    page = render(state_dir)
    text = text_of(page)
    assert "VERIFIED: 9 records, 4 signed checkpoints match them" in text
    assert "records 0..7 are exactly the records the log key signed in the checkpoint of size 8" in text
    assert "record 8: written after the last checkpoint" in text
    assert "RUG PULL: 1" in text
    assert "REFUSED: 1" in text
    assert text.index("VERIFIED") < text.index("Rug pulls, refusals") < text.index("Timeline per server")
    checkpoint = re.search(r"Checkpoint the proofs are under \(size 8\)</h2><pre>(.*?)</pre>", page, re.S)
    assert checkpoint is not None
    root = base64.b64decode(html.unescape(checkpoint.group(1)).split("\n")[2])
    entries = (state_dir / "audit" / "entries.log").read_bytes()
    for index in range(1, 6):  # each decision's evidence carries its inclusion proof under that checkpoint
        row = re.search(rf'id="r{index}">.*?RFC 6962 path, leaf first\):<br><span class="mono">(.*?)</span>', page)
        assert row is not None
        path = [base64.b64decode(h) for h in row.group(1).split("<br>")]
        record = next(line for line in re.findall(rb'\{"arguments".*?"v":"warden-audit/1"\}', entries)
                      if b'"index":%d,' % index in line)
        verify_inclusion(index, 8, leaf_hash(record), path, root)
    assert "no proof: no verified checkpoint covers this record" in page  # record 8


def test_a_truncated_log_says_where_it_ends_and_what_is_still_trusted(state_dir: Path) -> None:
    make(state_dir).close()
    entries = state_dir / "audit" / "entries.log"
    data = entries.read_bytes()
    entries.write_bytes(data[: len(data) - 30])  # the last record torn
    (state_dir / "audit" / "head").unlink()  # as after a crash: the reader takes the whole file
    page = render(state_dir)
    text = text_of(page)
    assert "VERIFICATION FAILED" in text
    assert "entries.log ends inside record 8" in text
    assert "records 0..7: they match the checkpoint of size 8 (below), verified before the failure; these can " \
           "be trusted" in text
    assert "everything from record 8 on: after the point of failure" in text


def test_a_changed_byte_is_named_and_the_records_before_the_last_good_checkpoint_are_trusted(
        state_dir: Path) -> None:
    make(state_dir).close()
    entries = state_dir / "audit" / "entries.log"
    data = bytearray(entries.read_bytes())
    data[data.index(b"description changed")] ^= 0x01
    entries.write_bytes(bytes(data))
    text = text_of(render(state_dir))
    assert "record 6 (byte" in text
    assert "fails its CRC: its bytes were changed" in text
    assert "records 0..5: they match the checkpoint of size 6" in text
    assert "Verification stopped after reading 6 records" in text
    assert "entries.log cannot be read past byte" in text  # the changed frame and what follows are not shown


def test_a_rewritten_record_with_a_fixed_crc_shows_the_fork_evidence(state_dir: Path) -> None:
    import zlib

    from warden.audit._format import FRAME_HEADER

    make(state_dir).close()
    entries = state_dir / "audit" / "entries.log"
    data = bytearray(entries.read_bytes())
    at = data.index(b"description changed")
    data[at : at + 11] = b"DESCRIPTION"  # same length; then the frame's CRC is recomputed, as a careful editor would
    start = data.rindex(b"\xff\x01", 0, at)
    _, _, length = FRAME_HEADER.unpack_from(data, start)
    end = start + 6 + length
    data[end : end + 4] = zlib.crc32(bytes(data[start + 1 : end])).to_bytes(4, "big")
    entries.write_bytes(bytes(data))
    page = render(state_dir)
    text = text_of(page)
    assert "VERIFICATION FAILED" in text
    assert "does not match the log's records" in text
    assert "Fork evidence" in text
    assert "SECURITY ERROR" in text
    assert "records 0..5: they match the checkpoint of size 6" in text


def test_a_rolled_back_log_is_caught_by_a_checkpoint_kept_elsewhere(state_dir: Path, tmp_path: Path) -> None:
    store = make(state_dir)
    kept = store.latest
    assert kept is not None
    store.close()
    data = (state_dir / "audit" / "entries.log").read_bytes()
    cut = [m.start() for m in re.finditer(rb"\xff\x01", data)][6]
    (state_dir / "audit" / "entries.log").write_bytes(data[:cut])  # back to 6 records: an "older copy"
    (state_dir / "audit" / "head").unlink()
    for name in ("checkpoints.log", "checkpoint", "hashes.bin"):
        (state_dir / "audit" / name).unlink()
    text = text_of(render(state_dir, external=[CheckpointSource("--checkpoint kept.txt", kept.note, external=True)]))
    assert "the log holds 6 records but --checkpoint kept.txt says 8: records were removed from the end" in text


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=80), st.text(max_size=80))
def test_every_outside_string_is_escaped(tmp_path_factory: pytest.TempPathFactory, name: str, reason: str) -> None:
    state_dir = tmp_path_factory.mktemp("state")
    state_dir.chmod(0o700)
    hostile = f"<script>{name}</script>\x1b]8;;http://x\x07\u202e<img src=x onerror=alert(1)>"
    store = Store.open(state_dir, clock=lambda: T0)
    try:
        store.commit([decision(1, target=hostile + name[:40], reason=reason + hostile, decision=Decision.DENY,
                               consent=None, client=hostile[:200], rule=hostile[:200]),
                      Record(event=Event.SERVER_EXITED, server_name="s", error=hostile + reason)], publish=True)
    except InvalidRecord:  # a value the log itself refuses (a lone surrogate) is not this test's
        store.close()
        return
    store.close()
    page = render(state_dir)
    parser = Tags()
    parser.feed(page)
    assert parser.tags <= TAGS
    assert all(k in {"charset", "http-equiv", "content", "name", "lang", "class", "id", "href", "open"}
               for k, _ in parser.attrs)
    assert all(v is None or not v.startswith(("http", "javascript", "data", "//")) for k, v in parser.attrs
               if k == "href")
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", page)


def test_scope_and_paging(state_dir: Path) -> None:
    store = Store.open(state_dir, clock=lambda: T0)
    store.commit([decision(i, server_name="a" if i % 2 else "b") for i in range(30)], publish=True)
    store.close()
    text = text_of(render(state_dir, server="a", max_records=10, page_size=4))
    assert "15 records in scope (server a)" in text
    assert "The timelines list the newest 10; the 5 before them are verified and counted but not listed" in text
    assert "records 9..10 of 10 listed" in text  # pages of 4: 1..4, 5..8, 9..10
    assert "server a15 records, 10 listed" in text
    assert "server b" not in text


def test_report_cli_exit_codes(state_dir: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    make(state_dir).close()
    out = tmp_path / "r.html"
    assert main(["--state-dir", str(state_dir), "audit", "report", "-o", str(out)]) == 0
    assert "9 records read, 9 listed, 2 highlighted; verified" in capsys.readouterr().out
    entries = state_dir / "audit" / "entries.log"
    entries.write_bytes(entries.read_bytes()[:-3])
    (state_dir / "audit" / "head").unlink()
    assert main(["--state-dir", str(state_dir), "audit", "report", "-o", str(out)]) == 7
    assert "VERIFICATION FAILED" in capsys.readouterr().out
    assert "VERIFICATION FAILED" in out.read_text()
