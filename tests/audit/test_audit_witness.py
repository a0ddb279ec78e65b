"""Witnessed checkpoints (C2SP tlog-witness, tlog-cosignature): the protocol against the spec's examples and the
shared vectors, a real witness service on 127.0.0.1, rollback and fork refused, bad witnesses refused with a
reason while the checkpoint is kept, and ``audit verify --witness --quorum``."""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given
from hypothesis import strategies as st

from warden.audit import Event, Record
from warden.audit._checkpoint import Checkpoint, sign_checkpoint
from warden.audit._note import CosignatureVerifier, Ed25519Signer, NoteError, key_id, parse_vkey
from warden.audit._store import Store
from warden.audit._witness import (
    format_add_checkpoint,
    parse_add_checkpoint,
    read_witnessed,
)
from warden.cli import main

from .helpers import decision, load_json

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tlog_witness.py"
T0 = 1_800_000_000.0
RFC = load_json("rfc6962_vectors.json")

SPEC_REQUEST = "".join(line + "\n" for line in (  # the example request body of c2sp.org/tlog-witness
    "old 20852014",
    "PlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpkaw=",
    "jrJZDmY8Y7SyJE0MWLpLozkIVMSMZcD5kvuKxPC3swk=",
    "5+pKlUdi2LeF/BcMHBn+Ku6yhPGNCswZZD1X/6QgPd8=",
    "/6WVhPs2CwSsb5rYBH5cjHV/wSmA79abXAwhXw3Kj/0=",
    "",
    "example.com/behind-the-sofa",
    "20852163",
    "CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=",
    "",
    "— example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+"
    "zyWE+xeMcTOAYQ8=",
    "— example.com/behind-the-sofa opLqBQsREYCgu6xQkYQwJr9fo45a62DN9EdmHXnZdXNqlcVGlCum2Wks+49/V6267UEjw6QUXTS5R"
    "ovnzv++qbSzm9Q=",
))
SPEC_COSIGNATURE = ("— witness.example.com/w1 jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJs"
                    "X3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA==")


# -- the wire format, against the spec's examples -------------------------------------------------------------------


def test_the_specs_add_checkpoint_example_parses_and_formats_back_byte_for_byte() -> None:
    body = SPEC_REQUEST.encode()
    parsed = parse_add_checkpoint(body)
    assert parsed.old_size == 20852014
    assert len(parsed.proof) == 4
    assert parsed.checkpoint.startswith(b"example.com/behind-the-sofa\n20852163\n")
    assert format_add_checkpoint(parsed.old_size, parsed.proof, parsed.checkpoint) == body


def test_the_specs_cosignature_example_carries_its_timestamp() -> None:
    blob = base64.b64decode(SPEC_COSIGNATURE.split(" ")[2])
    assert CosignatureVerifier.timestamp(blob[4:]) == 1679315147  # the "time" line of the spec's signed message
    assert len(blob) == 4 + 8 + 64


@pytest.mark.parametrize("body", [
    b"old 01\n\ncp", b"old -1\n\ncp", b"old 5\nnotbase64!\n\ncp", b"old 5\n" + b"AAAA\n" + b"\ncp",
    b"old 0\n" + base64.b64encode(bytes(32)) + b"\n\ncp", b"old 5\ncp",
    b"old 3\n" + b"".join(base64.b64encode(bytes([i]) * 32) + b"\n" for i in range(64)) + b"\ncp",
])
def test_malformed_add_checkpoint_bodies_are_refused(body: bytes) -> None:
    with pytest.raises(NoteError):
        parse_add_checkpoint(body)


@given(st.integers(0, 2**62), st.lists(st.binary(min_size=32, max_size=32), max_size=63), st.binary(max_size=300))
def test_add_checkpoint_round_trips(old: int, proof: list[bytes], note: bytes) -> None:
    if old == 0:
        proof = []
    parsed = parse_add_checkpoint(format_add_checkpoint(old, proof, note))
    assert (parsed.old_size, list(parsed.proof)) == (old, proof)
    assert parsed.checkpoint == note


@given(st.binary(max_size=400))
def test_add_checkpoint_parser_only_raises_note_error(data: bytes) -> None:
    with contextlib.suppress(NoteError):
        parse_add_checkpoint(data)


# -- the witness service ----------------------------------------------------------------------------------------------


@dataclass
class WitnessService:
    url: str
    vkey: str
    name: str
    state: Path
    proc: subprocess.Popen[str]


def skey_of(private: Ed25519PrivateKey, name: str) -> str:
    seed = private.private_bytes_raw()
    return f"PRIVATE+KEY+{name}+{0:08x}+" + base64.b64encode(b"\x01" + seed).decode()


def cosigner_vkey(private: Ed25519PrivateKey, name: str) -> str:
    public = private.public_key().public_bytes_raw()
    return f"{name}+{key_id(name, 0x04, public):08x}+" + base64.b64encode(b"\x04" + public).decode()


@pytest.fixture
def start_witness(tmp_path: Path) -> Iterator[object]:
    started: list[WitnessService] = []

    def start(logs: dict[str, str], *, name: str = "witness.test/w1", skey: str | None = None,
              time: int | None = None, misbehave: str | None = None, state: Path | None = None) -> WitnessService:
        private = Ed25519PrivateKey.generate()
        key_file = tmp_path / f"{name.replace('/', '_')}-{len(started)}.key"
        key_file.write_text(skey or skey_of(private, name))
        state = state or tmp_path / f"{name.replace('/', '_')}-state.json"
        argv = [sys.executable, str(FIXTURE), "--key", str(key_file), "--name", name, "--state", str(state)]
        argv += [a for origin, vkey in logs.items() for a in ("--log", f"{origin}={vkey}")]
        argv += ["--time", str(time)] if time is not None else []
        argv += ["--misbehave", misbehave] if misbehave else []
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        service = WitnessService(f"http://127.0.0.1:{port}", cosigner_vkey(private, name), name, state, proc)
        started.append(service)
        return service

    yield start
    for service in started:
        service.proc.kill()
        service.proc.wait()


def post(service: WitnessService, body: bytes) -> httpx.Response:
    return httpx.post(service.url + "/add-checkpoint", content=body, timeout=30)


def test_the_witness_service_reproduces_the_shared_cosignature_vector(start_witness: object) -> None:
    """The derived vector in shared/vectors: the Go test key as a cosigner named witness.example/w1 at time
    1700000000 cosigning the a,b,c checkpoint. Ed25519 is deterministic, so the line must match byte for byte."""
    cp, cs = RFC["derived"]["checkpoint"], RFC["derived"]["cosignature_v1"]
    signer_skey = next(v for k, v in cp.items() if k.startswith("signer_skey"))
    service = start_witness({"example.com/mcp-audit/demo": cp["vkey"]}, name=cs["cosigner_name"],  # type: ignore[operator]
                            skey=signer_skey, time=cs["timestamp"])
    answer = post(service, b"old 0\n\n" + cp["signed_note"].encode())
    assert answer.status_code == 200, answer.text
    assert answer.text == cs["signature_line"] + "\n"


def ct_checkpoint(size: int, signer: Ed25519Signer) -> bytes:
    """A checkpoint of the CT reference tree at ``size`` (its root from shared/vectors)."""
    root = bytes.fromhex(RFC["external"]["ct_8_leaf_tree"]["roots_by_size"][str(size)])
    return sign_checkpoint(Checkpoint(signer.name, size, root), signer).note


def ct_proof(size1: int, size2: int) -> list[bytes]:
    tree = RFC["external"]["ct_8_leaf_tree"]
    entry = next(c for c in tree["consistency"] if (c["size1"], c["size2"]) == (size1, size2))
    return [bytes.fromhex(h) for h in entry["proof"]]


def test_the_witness_service_checks_consistency_and_refuses_what_the_spec_refuses(start_witness: object) -> None:
    """The CT reference tree's roots and consistency proofs (shared/vectors) through the witness: the good proof
    is cosigned, a flipped bit is 422, a stale old size is 409 with the witness's size, an equal size with another
    root is 409, old > new is 400, an unknown log is 404, an untrusted key is 403."""
    origin = "example.com/mcp-audit/demo"
    skey = Ed25519Signer(origin, Ed25519PrivateKey.generate())
    service = start_witness({origin: skey.verifier.vkey})  # type: ignore[operator]
    assert post(service, b"old 0\n\n" + ct_checkpoint(6, skey)).status_code == 200
    bad = [bytearray(h) for h in ct_proof(6, 8)]
    bad[1][0] ^= 1
    refused = post(service, format_add_checkpoint(6, [bytes(h) for h in bad], ct_checkpoint(8, skey)))
    assert refused.status_code == 422
    good = post(service, format_add_checkpoint(6, ct_proof(6, 8), ct_checkpoint(8, skey)))
    assert good.status_code == 200
    assert good.text.startswith("— witness.test/w1 ")
    stale = post(service, format_add_checkpoint(6, ct_proof(6, 7), ct_checkpoint(7, skey)))
    assert stale.status_code == 409
    assert stale.headers["content-type"] == "text/x.tlog.size"
    assert stale.text == "8\n"
    other_root = ct_checkpoint(7, skey).replace(b"\n7\n", b"\n8\n")  # signature no longer matches: 403 first
    assert post(service, b"old 8\n\n" + other_root).status_code == 403
    fork = sign_checkpoint(Checkpoint(origin, 8, bytes(32)), skey).note
    assert post(service, b"old 8\n\n" + fork).status_code == 409
    assert post(service, b"old 9\n\n" + ct_checkpoint(8, skey)).status_code == 400
    other = Ed25519Signer("example.com/other", Ed25519PrivateKey.generate())
    assert post(service, b"old 0\n\n" + ct_checkpoint(2, other)).status_code == 404
    stranger = Ed25519Signer(origin, Ed25519PrivateKey.generate())
    assert post(service, b"old 8\n\n" + sign_checkpoint(Checkpoint(origin, 8, bytes(32)), stranger).note
                ).status_code == 403
    assert json.loads(service.state.read_text())[origin]["size"] == 8  # nothing refused changed its state


# -- warden as the witness's client ----------------------------------------------------------------------------------


def run(capsys: pytest.CaptureFixture[str], state_dir: Path, *args: str) -> tuple[int, str, str]:
    code = main(["--state-dir", str(state_dir), "audit", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def make_log(state_dir: Path, n: int = 3) -> Store:
    store = Store.open(state_dir, clock=lambda: T0)
    store.commit([Record(event=Event.AUDIT_OPENED)])
    store.commit([decision(i) for i in range(n)], publish=True)
    return store


def grow(state_dir: Path, n: int, start: int = 100) -> None:
    store = Store.open(state_dir, clock=lambda: T0)
    store.commit([decision(start + i) for i in range(n)], publish=True)
    store.close()


@pytest.fixture
def log(state_dir: Path) -> tuple[Path, str, str]:
    store = make_log(state_dir)
    origin, vkey = store.origin, store.signer.verifier.vkey
    store.close()
    return state_dir, origin, vkey


def test_a_checkpoint_is_cosigned_and_verify_checks_the_quorum(log: tuple[Path, str, str], start_witness: object,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    state_dir, origin, vkey = log
    w1 = start_witness({origin: vkey})  # type: ignore[operator]
    code, out, err = run(capsys, state_dir, "witness", "add", "w1", w1.url, w1.vkey)
    assert code == 0, err
    assert "w1: cosigned checkpoint size 4" in out
    [note] = read_witnessed(state_dir)
    assert note.count("— ".encode()) == 2  # the log's signature and the witness's cosignature
    code, out, err = run(capsys, state_dir, "verify", "--witness", w1.vkey, "--quorum", "1")
    assert code == 0, err
    assert "witnessed: records 0..3 are under a checkpoint cosigned by at least 1 of 1 witnesses" in out
    grow(state_dir, 5)  # a new checkpoint: the witness needs a consistency proof from size 4 to 9
    code, out, err = run(capsys, state_dir, "witness", "cosign")
    assert code == 0, err
    assert "cosigned checkpoint size 9" in out
    assert json.loads(w1.state.read_text())[origin]["size"] == 9
    code, out, _ = run(capsys, state_dir, "verify", "--witness", w1.vkey, "--quorum", "1")
    assert code == 0
    assert "records 0..8" in out


def test_a_missing_witness_makes_verify_say_what_was_not_proven(log: tuple[Path, str, str], start_witness: object,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    state_dir, origin, vkey = log
    w1 = start_witness({origin: vkey})  # type: ignore[operator]
    absent = start_witness({origin: vkey}, name="witness.test/w2")  # type: ignore[operator]
    assert run(capsys, state_dir, "witness", "add", "w1", w1.url, w1.vkey)[0] == 0
    grow(state_dir, 2)  # records 4..5: under a checkpoint the witness has not seen yet
    code, out, err = run(capsys, state_dir, "verify", "--witness", w1.vkey, "--witness", absent.vkey,
                         "--quorum", "2")
    assert code == 7
    assert "no checkpoint of this log carries cosignatures by 2 of the 2 given witnesses" in err
    assert "witness.test/w2: no cosignature of this log: nothing shows this witness saw it" in err
    assert "witness.test/w1: cosigned size 4" in err
    code, out, err = run(capsys, state_dir, "verify", "--witness", w1.vkey, "--witness", absent.vkey,
                         "--quorum", "1")
    assert code == 0, err
    assert "not witnessed: records 4..5" in out
    assert "witness.test/w2: no cosignature of this log" in out
    code, _, err = run(capsys, state_dir, "verify", "--witness", absent.vkey, "--quorum", "1")
    assert code == 7
    assert "not proven: that anyone off this machine saw any of its 6 records" in err


def test_a_rolled_back_log_is_refused_by_the_witness_and_by_verify(
        log: tuple[Path, str, str], start_witness: object, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    state_dir, origin, vkey = log
    w1 = start_witness({origin: vkey})  # type: ignore[operator]
    assert run(capsys, state_dir, "witness", "add", "w1", w1.url, w1.vkey)[0] == 0
    snapshot = tmp_path / "old-copy"
    shutil.copytree(state_dir, snapshot)
    grow(state_dir, 5)
    assert run(capsys, state_dir, "witness", "cosign")[0] == 0  # the witness now holds size 9
    shutil.rmtree(state_dir)
    shutil.copytree(snapshot, state_dir)  # the older copy restored wholesale: alone, perfectly consistent
    assert run(capsys, state_dir, "verify")[0] == 0
    kept = (state_dir / "audit" / "checkpoint").read_bytes()
    code, _, err = run(capsys, state_dir, "witness", "cosign")
    assert code == 7
    assert ("SECURITY ERROR: witness w1 did not cosign checkpoint size 4: it has cosigned size 9 for this log, "
            "but the log's latest checkpoint is size 4: records were removed or the log was rolled back") in err
    assert "the checkpoint is kept" in err
    assert (state_dir / "audit" / "checkpoint").read_bytes() == kept
    code, _, err = run(capsys, state_dir, "verify", "--witness", w1.vkey, "--quorum", "1")
    assert code == 7
    assert "witness w1 refused this log's checkpoint of size 4" in err
    assert "rolled back" in err


def forge_history(state_dir: Path) -> None:
    """Whoever holds the machine and the key rewrites the log from scratch (same origin, same key, other records)
    and re-signs checkpoints at sizes 4 and 8: a perfectly consistent log on its own. witnessed.log is left."""
    audit = state_dir / "audit"
    for name in ("entries.log", "hashes.bin", "head", "state", "checkpoints.log", "checkpoint"):
        (audit / name).unlink()
    store = Store.open(state_dir, clock=lambda: T0)
    store.commit([decision(1000 + i, target="exfiltrate") for i in range(4)], publish=True)
    store.commit([decision(2000 + i, target="exfiltrate") for i in range(4)], publish=True)
    store.close()


def test_a_forked_log_is_refused_by_the_witness_and_verify_prints_the_fork_evidence(
        log: tuple[Path, str, str], start_witness: object, capsys: pytest.CaptureFixture[str]) -> None:
    state_dir, origin, vkey = log
    w1 = start_witness({origin: vkey})  # type: ignore[operator]
    assert run(capsys, state_dir, "witness", "add", "w1", w1.url, w1.vkey)[0] == 0
    forge_history(state_dir)
    # warden itself notices first: the cosigned checkpoint it keeps is of another tree, so it sends nothing
    code, _, err = run(capsys, state_dir, "witness", "cosign")
    assert code == 7
    assert "no longer extends the checkpoint of size 4 the witness cosigned: the log was rewritten" in err
    code, out, err = run(capsys, state_dir, "verify", "--witness", w1.vkey, "--quorum", "1")
    assert code == 7
    assert "both signed by this log's key for size 4 but have different roots: the log forked" in err
    assert out.startswith("SECURITY ERROR")
    assert out.count("— witness.test/w1 ") == 1  # the cosigned checkpoint of the true tree is in the evidence
    # the forger removes what warden kept; now the witness itself refuses the forged tree
    (state_dir / "audit" / "witnessed.log").unlink()
    (state_dir / "audit" / "witness-refusals.log").unlink()
    code, _, err = run(capsys, state_dir, "witness", "cosign")
    assert code == 7
    assert "it refused the consistency proof from the size it holds" in err
    assert json.loads(w1.state.read_text())[origin]["size"] == 4  # the witness kept the true history
    code, _, err = run(capsys, state_dir, "verify", "--witness", w1.vkey, "--quorum", "1")
    assert code == 7
    assert "witness w1 refused this log's checkpoint of size 8" in err


@pytest.mark.parametrize(("misbehave", "reason"), [
    ("garbage", "its answer was refused: the answer is not note signature lines"),
    ("hang", "no answer within 1.0 s"),
    ("other", "its answer was refused: the cosignature by witness.test/w1 does not verify for this checkpoint "
              "(size 4): it is for another checkpoint, or forged"),
])
def test_a_bad_witness_is_refused_with_a_reason_and_the_checkpoint_kept(
        log: tuple[Path, str, str], start_witness: object, capsys: pytest.CaptureFixture[str],
        misbehave: str, reason: str) -> None:
    state_dir, origin, vkey = log
    bad = start_witness({origin: vkey}, misbehave=misbehave)  # type: ignore[operator]
    kept = (state_dir / "audit" / "checkpoint").read_bytes()
    assert run(capsys, state_dir, "witness", "add", "bad", bad.url, bad.vkey, "--no-cosign")[0] == 0
    code, _, err = run(capsys, state_dir, "witness", "cosign", "--timeout", "1")
    assert code == 1
    assert f"witness bad did not cosign checkpoint size 4: {reason}" in err
    assert "the checkpoint is kept" in err
    assert "SECURITY ERROR" not in err  # a broken witness is not evidence against the log
    assert (state_dir / "audit" / "checkpoint").read_bytes() == kept
    assert read_witnessed(state_dir) == []
    assert run(capsys, state_dir, "verify")[0] == 0


def test_an_unreachable_witness_is_refused_with_a_reason(log: tuple[Path, str, str],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    state_dir, _, _ = log
    key = Ed25519PrivateKey.generate()
    vkey = cosigner_vkey(key, "witness.test/gone")
    assert run(capsys, state_dir, "witness", "add", "gone", "http://127.0.0.1:9", vkey, "--no-cosign")[0] == 0
    code, _, err = run(capsys, state_dir, "witness", "cosign")
    assert code == 1
    assert "witness gone did not cosign checkpoint size 4: the request failed: ConnectError" in err


def test_witness_add_refuses_a_log_key_and_a_bad_url(log: tuple[Path, str, str],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    state_dir, _, vkey = log
    code, _, err = run(capsys, state_dir, "witness", "add", "w", "http://127.0.0.1:1", vkey)
    assert code == 2
    assert "a witness cosigns with a type 0x04 key" in err
    wkey = cosigner_vkey(Ed25519PrivateKey.generate(), "w.test/x")
    assert isinstance(parse_vkey(wkey), CosignatureVerifier)
    code, _, err = run(capsys, state_dir, "witness", "add", "w", "ftp://127.0.0.1/", wkey)
    assert code == 2
    assert "must be http:// or https://" in err


async def test_warden_run_has_each_new_checkpoint_cosigned(start_witness: object, tmp_path: Path) -> None:
    """covers the issue's "cosigning of each new checkpoint": a running warden sends its checkpoints to the
    configured witness without anyone asking, and the result verifies with --witness."""
    import os
    import time

    from tests.support import RAWSERVER, RawHost, through_warden, write_config

    state_dir = Path(os.environ["WARDEN_STATE_DIR"])
    write_config(tmp_path)
    assert main(["--state-dir", str(state_dir), "audit", "key"]) == 0  # creates the log, as enrolment would
    store = Store.open(state_dir)
    origin, vkey = store.origin, store.signer.verifier.vkey
    store.commit([Record(event=Event.AUDIT_OPENED)], publish=True)
    store.close()
    w1 = start_witness({origin: vkey})  # type: ignore[operator]
    assert main(["--state-dir", str(state_dir), "audit", "witness", "add", "w1", w1.url, w1.vkey,
                 "--no-cosign"]) == 0
    host = await RawHost.start(through_warden(RAWSERVER))
    await host.initialize()
    assert (await host.call(1, "echo", {"text": "hello"}))["result"]

    def witnessed_size() -> int:
        """The tree size the witness last cosigned (0 before any); the checkpoint that was already there when warden
        started is size 1, so only a size of 2 or more is a checkpoint of this run."""
        try:
            return int(json.loads(w1.state.read_text())[origin]["size"])
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            return 0

    deadline = time.monotonic() + 30
    while witnessed_size() < 2 and time.monotonic() < deadline:
        await trio.sleep(0.1)
    assert await host.close() == 0
    assert read_witnessed(state_dir), "the running warden did not have its checkpoint cosigned"
    assert witnessed_size() >= 2
    verified = subprocess.run([sys.executable, "-c", "import sys; from warden.cli import main; "
                               "sys.exit(main(sys.argv[1:]))", "--state-dir", str(state_dir), "audit", "verify",
                               "--witness", w1.vkey, "--quorum", "1"], capture_output=True, text=True, timeout=60)
    assert verified.returncode == 0, verified.stderr
    assert "witnessed: records 0.." in verified.stdout


def test_witness_lines_escape_a_hostile_name_and_url(log: tuple[Path, str, str], start_witness: object,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A witness's local name (C2SP key names allow C1 controls and bidi overrides) and its URL are shown escaped by
    ``witness add`` and ``witness list`` (before: written as given, so a pasted name's U+009B CSI or U+202E reached
    the terminal, and ``list`` printed whatever witnesses.json held)."""
    state_dir, origin, vkey = log
    w1 = start_witness({origin: vkey})  # type: ignore[operator]
    name = "w\u009b2J\u202e1"
    code, out, err = run(capsys, state_dir, "witness", "add", name, w1.url, w1.vkey, "--no-cosign")
    assert code == 0, err
    code, listed, err = run(capsys, state_dir, "witness", "list")
    assert code == 0, err
    for shown in (out, listed):
        assert "\u009b" not in shown
        assert "\u202e" not in shown
        assert "w\\x9b2J<U+202E>1" in shown
