"""Every file of the shared vectors (copied into audit/vectors/) runs here, with strict length checks.

covers: the RFC 6962 hasher and CT reference tree, the 196 transparency-dev inclusion/consistency probes plus the
subtree probes (draft-ietf-plants-merkle-tree-certs), the derived Go-style tree, the signed-note, checkpoint and
cosignature vectors, and the tlog-tiles vectors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from warden.audit import _merkle as m
from warden.audit._checkpoint import Checkpoint, open_checkpoint
from warden.audit._note import (
    CosignatureVerifier,
    Ed25519Verifier,
    NoteError,
    open_note,
    parse_skey,
    parse_vkey,
    sign_note,
)
from warden.audit._tiles import entries_path, entry_bundle, tile_data, tile_index_path, tile_path

from .helpers import PROBES, b64, load_json

RFC = load_json("rfc6962_vectors.json")
NOTES = load_json("signed_notes.json")

# The probes that use 12-byte "hashes" and expect success: transparency-dev skips the length check in these
# shortcuts; warden's verifiers always require 32-byte hashes (see _merkle's module docstring). Each must fail here
# *because of the length*, which the test checks.
STRICT_DEVIATIONS = {
    "consistency/additional/sizes-are-equal-one-and-proof-is-empty.json": "first root is 12 bytes",
    "subtreeconsistency/additional/sizes-are-equal-one-and-proof-is-empty.json": "subtree hash is 12 bytes",
    "subtreeconsistency/additional/subtree-is-empty-sizes-are-equal-one-subtree-root-valid-tree-root-random-proof"
    "-is-empty.json": "root hash is 12 bytes",
    "subtreeconsistency/additional/subtree-is-empty-sizes-are-equal-zero-subtree-root-valid-tree-root-random-proof"
    "-is-empty.json": "root hash is 12 bytes",
}

PROBE_FILES = sorted(PROBES.rglob("*.json"))


def test_probe_corpus_is_complete() -> None:
    kinds: dict[str, int] = {}
    for f in PROBE_FILES:
        kinds[f.relative_to(PROBES).parts[0]] = kinds.get(f.relative_to(PROBES).parts[0], 0) + 1
    assert kinds == {"inclusion": 98, "consistency": 98, "subtreeinclusion": 204, "subtreeconsistency": 118}
    assert set(STRICT_DEVIATIONS) <= {str(f.relative_to(PROBES)) for f in PROBE_FILES}


def _run_probe(kind: str, d: dict[str, Any]) -> None:
    proof = [b64(x) for x in (d.get("proof") or [])]
    if kind == "inclusion":
        m.verify_inclusion(d["leafIdx"], d["treeSize"], b64(d["leafHash"]), proof, b64(d["root"]))
    elif kind == "consistency":
        m.verify_consistency(d["size1"], d["size2"], proof, b64(d["root1"]), b64(d["root2"]))
    elif kind == "subtreeinclusion":
        m.verify_subtree_inclusion(d["leafIdx"], d["start"], d["end"], b64(d["leafHash"]), proof, b64(d["root"]))
    else:
        m.verify_subtree_consistency(d["start"], d["end"], d["size"], proof, b64(d["root1"]), b64(d["root2"]))


@pytest.mark.parametrize("path", PROBE_FILES, ids=lambda p: str(p.relative_to(PROBES)))
def test_transparency_dev_probe(path: Path) -> None:
    rel = str(path.relative_to(PROBES))
    d = json.loads(path.read_text())
    kind = rel.split("/")[0]
    if rel in STRICT_DEVIATIONS:
        assert d["wantErr"] is False
        with pytest.raises(m.ProofError, match=STRICT_DEVIATIONS[rel]):
            _run_probe(kind, d)
    elif d["wantErr"]:
        with pytest.raises(m.ProofError):
            _run_probe(kind, d)
    else:
        _run_probe(kind, d)


def test_hasher_vectors() -> None:
    hasher = RFC["external"]["hasher"]
    assert m.EMPTY_ROOT.hex() == hasher[0]["expect"]
    assert m.leaf_hash(b"").hex() == hasher[1]["expect"]
    assert m.leaf_hash(bytes.fromhex(hasher[2]["input_hex"])).hex() == hasher[2]["expect"]
    assert m.node_hash(bytes.fromhex(hasher[3]["left_hex"]), bytes.fromhex(hasher[3]["right_hex"])).hex() == \
        hasher[3]["expect"]
    assert m.leaf_hash(bytes.fromhex(hasher[4]["input_hex"])) == b64(hasher[4]["expect_b64"])
    assert m.leaf_hash(b"hello world") == b64(NOTES["go_record_hash_hello_world_b64"])
    # domain separation: a leaf is never an interior node
    h1, h2 = m.leaf_hash(b"a"), m.leaf_hash(b"b")
    assert m.leaf_hash(h1 + h2) != m.node_hash(h1, h2)


def _stored(leaves: list[bytes]) -> tuple[list[bytes], m.HashReader]:
    stored: list[bytes] = []
    frontier = m.Frontier()
    for leaf in leaves:
        stored.extend(frontier.append(m.leaf_hash(leaf)))
    return stored, lambda positions: [stored[p] for p in positions]


@pytest.mark.parametrize("name", ["ct_8_leaf_tree", "go_style_leaf_n"])
def test_reference_trees(name: str) -> None:
    if name == "ct_8_leaf_tree":
        tree = RFC["external"][name]
        leaves = [bytes.fromhex(x) for x in tree["leaves_hex"]]
        assert [m.leaf_hash(x).hex() for x in leaves] == tree["leaf_hashes"]
    else:
        tree = RFC["derived"][name]
        leaves = [b"leaf %d" % i for i in range(100)]
    stored, read = _stored(leaves)
    assert len(stored) == m.stored_hash_count(len(leaves))
    for size, root in tree["roots_by_size"].items():
        n = int(size)
        assert m.root_from_leaf_hashes([m.leaf_hash(x) for x in leaves[:n]]).hex() == root
        assert m.tree_hash(n, read).hex() == root
    for case in tree["inclusion"]:
        path = m.inclusion_proof(case["index"], case["size"], read)
        assert [h.hex() for h in path] == case["path"]
        root = bytes.fromhex(tree["roots_by_size"].get(str(case["size"])) or m.tree_hash(case["size"], read).hex())
        m.verify_inclusion(case["index"], case["size"], m.leaf_hash(leaves[case["index"]]), path, root)
    for case in tree["consistency"]:
        proof = m.consistency_proof(case["size1"], case["size2"], read)
        assert [h.hex() for h in proof] == case["proof"]
        m.verify_consistency(case["size1"], case["size2"], proof, m.tree_hash(case["size1"], read),
                             m.tree_hash(case["size2"], read))


def test_stored_hash_layout_matches_go_tlog() -> None:
    assert [m.stored_hash_count(n) for n in range(1, 17)] == [1, 3, 4, 7, 8, 10, 11, 15, 16, 18, 19, 22, 23, 25,
                                                              26, 31]
    samples = {(0, 0): 0, (0, 1): 1, (1, 0): 2, (0, 2): 3, (0, 3): 4, (1, 1): 5, (2, 0): 6, (0, 4): 7, (3, 0): 14}
    for (level, n), want in samples.items():
        assert m.stored_hash_index(level, n) == want


def test_checkpoint_vector_is_byte_exact() -> None:
    cp = RFC["derived"]["checkpoint"]
    skey = next(v for k, v in cp.items() if k.startswith("signer_skey"))
    signer = parse_skey(skey)
    assert signer.verifier.vkey == cp["vkey"]
    leaves = [m.leaf_hash(x.encode()) for x in cp["leaves"]]
    checkpoint = Checkpoint("example.com/mcp-audit/demo", len(leaves), m.root_from_leaf_hashes(leaves))
    assert checkpoint.root.hex() == cp["root_hex"]
    assert sign_note(checkpoint.text(), [signer]).decode() == cp["signed_note"]
    signed, _ = open_checkpoint(cp["signed_note"].encode(), signer.verifier, origin="example.com/mcp-audit/demo")
    assert signed.checkpoint == checkpoint


def test_cosignature_vector() -> None:
    cp, cs = RFC["derived"]["checkpoint"], RFC["derived"]["cosignature_v1"]
    log_key = parse_vkey(cp["vkey"])
    assert isinstance(log_key, Ed25519Verifier)
    witness = CosignatureVerifier(cs["cosigner_name"], log_key.public_key)
    assert f"{witness.key_id:08x}" == cs["key_id_hex"]
    note = (cp["signed_note"] + cs["signature_line"] + "\n").encode()
    _, cosigs = open_checkpoint(note, log_key, origin="example.com/mcp-audit/demo", witnesses=[witness], quorum=1)
    assert len(cosigs) == 1
    assert CosignatureVerifier.timestamp(cosigs[0].signature) == cs["timestamp"]
    # the signed message is exactly the one in the vector
    assert witness.verify(cs["signed_message"].encode()[len(f"cosignature/v1\ntime {cs['timestamp']}\n"):],
                          cosigs[0].signature)
    forged = note.replace(b"NmQuc8J", b"NmQuc8K")
    with pytest.raises(NoteError):
        open_checkpoint(forged, log_key, origin="example.com/mcp-audit/demo", witnesses=[witness], quorum=1)


def test_signed_note_vectors() -> None:
    ex = NOTES["c2sp_example"]
    note, verified = open_note(ex["note"].encode(), [parse_vkey(ex["vkey"])])
    assert note.text == "This is an example message.\n"
    assert len(verified) == 1
    go = NOTES["go_testsign"]
    signer = parse_skey(go["skey"])
    assert signer.verifier.vkey == go["vkey"]
    signed = sign_note(go["text"], [signer]).decode()
    assert signed == go["text"] + "\n" + go["line"] + "\n"
    both = (go["text"] + "\n" + go["line"] + "\n" + go["second_line"] + "\n").encode()
    _, verified = open_note(both, [signer.verifier, parse_vkey(go["second_vkey"])])
    assert [s.name for s in verified] == ["PeterNeumann", "EnochRoot"]
    tessera = NOTES["tessera_fault_test"]
    assert parse_skey(tessera["skey"]).verifier.vkey == tessera["vkey"]


def test_tlog_tiles_vectors() -> None:
    tiles = RFC["derived"]["tlog_tiles"]
    entries = [e.encode() for e in tiles["entries"]]
    assert entries_path(0, len(entries)) == tiles["entry_bundle_path"]
    assert entry_bundle(entries).hex() == tiles["entry_bundle_hex"]
    _, read = _stored(entries)
    assert tile_path(0, 0, len(entries)) == tiles["level0_tile_path"]
    assert tile_data(0, 0, len(entries), read).hex() == tiles["level0_tile_hex"]
    examples = tiles["index_path_examples"]
    assert tile_index_path(1234067) == examples["1234067"]  # a tile index, as in the C2SP text
    assert tile_index_path(0) == examples["0"]
    assert tile_index_path(256 // 256) == examples["256"]  # the bundle holding entry 256
    assert tile_path(0, 1234067) == "tile/0/x001/x234/067"
