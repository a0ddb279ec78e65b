"""Hypothesis: for trees up to a few hundred leaves every inclusion and consistency proof verifies, and any bit
flip, inserted or deleted element, index or size change makes it fail. Also the stored-hash layout against a
from-scratch MTH, and the subtree verifiers against the draft's own proof generation."""

from __future__ import annotations

from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warden.audit import _merkle as m

MAX = 300


def mth(leaves: list[bytes]) -> bytes:
    """RFC 6962 MTH, written out recursively exactly as the RFC states it (the oracle)."""
    if not leaves:
        return m.EMPTY_ROOT
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return m.node_hash(mth(leaves[:k]), mth(leaves[k:]))


@cache
def tree(n: int) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
    """Leaf hashes and the stored-hash layout of the tree of leaves 'leaf 0' .. 'leaf n-1'."""
    leaves = tuple(m.leaf_hash(b"leaf %d" % i) for i in range(n))
    frontier = m.Frontier()
    stored: list[bytes] = []
    for h in leaves:
        stored.extend(frontier.append(h))
    return leaves, tuple(stored)


def reader(n: int) -> m.HashReader:
    stored = tree(n)[1]
    return lambda positions: [stored[p] for p in positions]


def root(n: int) -> bytes:
    return m.tree_hash(n, reader(n))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, MAX))
def test_stored_layout_gives_mth(n: int) -> None:
    leaves, stored = tree(n)
    assert len(stored) == m.stored_hash_count(n)
    assert m.tree_hash(n, reader(n)) == mth(list(leaves)) == m.root_from_leaf_hashes(leaves)
    # a prefix of the layout is the layout of the prefix tree (append-only)
    half = n // 2
    assert stored[: m.stored_hash_count(half)] == tree(half)[1]


def _mutations(proof: list[bytes]) -> list[list[bytes]]:
    out = []
    for i in range(len(proof)):
        for bit in (0, 7, 255):
            flipped = bytearray(proof[i])
            flipped[bit // 8] ^= 1 << (bit % 8)
            out.append([*proof[:i], bytes(flipped), *proof[i + 1 :]])
        out.append(proof[:i] + proof[i + 1 :])  # deletion
        out.append([*proof[:i], proof[i], *proof[i:]])  # duplication
    out.append([*proof, m.EMPTY_ROOT])  # trailing garbage
    out.append([m.EMPTY_ROOT, *proof])  # preceding garbage
    return out


@settings(max_examples=120, deadline=None)
@given(st.integers(1, MAX).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1))))
def test_inclusion_proofs(case: tuple[int, int]) -> None:
    n, i = case
    leaves, _ = tree(n)
    proof = m.inclusion_proof(i, n, reader(n))
    r = root(n)
    m.verify_inclusion(i, n, leaves[i], proof, r)
    for bad in _mutations(proof):
        with pytest.raises(m.ProofError):
            m.verify_inclusion(i, n, leaves[i], bad, r)
    # A changed index or size must fail, unless it walks the proof the very same way (then the statement differs
    # only in parts the proof does not commit to, e.g. index 0 of size 3 and of size 4 share one path shape).
    for j, size in {(i - 1, n), (i + 1, n), (i ^ 1, n), (i ^ 2, n), (i, n - 1), (i, n + 1), (i, 2 * n),
                    (i, n // 2)} - {(i, n)}:
        if 0 <= j < size and _inclusion_shape(j, size, len(proof)) != _inclusion_shape(i, n, len(proof)):
            with pytest.raises(m.ProofError):
                m.verify_inclusion(j, size, leaves[i], proof, r)
    with pytest.raises(m.ProofError):
        m.verify_inclusion(i, n, m.leaf_hash(b"another"), proof, r)
    wrong_root = bytearray(r)
    wrong_root[0] ^= 0x80
    with pytest.raises(m.ProofError):
        m.verify_inclusion(i, n, leaves[i], proof, bytes(wrong_root))


@settings(max_examples=120, deadline=None)
@given(st.integers(1, MAX).flatmap(lambda n: st.tuples(st.integers(1, n), st.just(n))))
def test_consistency_proofs(case: tuple[int, int]) -> None:
    n1, n2 = case
    proof = m.consistency_proof(n1, n2, reader(n2))
    r1, r2 = root(n1), root(n2)
    m.verify_consistency(n1, n2, proof, r1, r2)
    for bad in _mutations(proof):
        if bad == proof:
            continue
        with pytest.raises(m.ProofError):
            m.verify_consistency(n1, n2, bad, r1, r2)
    for s1, s2 in {(n1 - 1, n2), (n1 + 1, n2), (n1, n2 + 1), (n1, n2 - 1), (n1, 2 * n2)}:
        if 0 < s1 <= s2 and (s1, s2) != (n1, n2) and \
                _consistency_shape(s1, s2, len(proof)) != _consistency_shape(n1, n2, len(proof)):
            with pytest.raises(m.ProofError):
                m.verify_consistency(s1, s2, proof, r1, r2)
    if n1 != n2:
        with pytest.raises(m.ProofError):
            m.verify_consistency(n1, n2, proof, r2, r1)
    # a tree that changed one leaf before n1 is not consistent with the original
    changed = list(tree(n2)[0])
    changed[n1 - 1] = m.leaf_hash(b"rewritten")
    with pytest.raises(m.ProofError):
        m.verify_consistency(n1, n2, proof, r1, mth(changed))


def _inclusion_shape(index: int, size: int, length: int) -> tuple[str, ...] | None:
    """How RFC 9162's walk would combine a proof of ``length`` for (index, size); None if it would reject it."""
    fn, sn, ops = index, size - 1, []
    for _ in range(length):
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            ops.append("L")
            while not fn & 1 and fn:
                fn, sn = fn >> 1, sn >> 1
        else:
            ops.append("R")
        fn, sn = fn >> 1, sn >> 1
    return tuple(ops) if sn == 0 else None


def _consistency_shape(size1: int, size2: int, length: int) -> tuple[str, ...] | None:
    """The same for RFC 9162's consistency walk (which proof element goes where, and into which root)."""
    if size1 == size2:
        return () if length == 0 else None
    ops = ["seed-is-old-root"] if size1 & (size1 - 1) == 0 else ["seed-from-proof"]
    length += 1 if size1 & (size1 - 1) == 0 else 0
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    for _ in range(length - 1):
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            ops.append("both")
            while not fn & 1 and fn:
                fn, sn = fn >> 1, sn >> 1
        else:
            ops.append("second")
        fn, sn = fn >> 1, sn >> 1
    return tuple(ops) if sn == 0 else None


def test_edge_cases_are_refused() -> None:
    with pytest.raises(m.ProofError, match="empty tree"):
        m.verify_consistency(0, 5, [], m.EMPTY_ROOT, root(5))
    with pytest.raises(m.ProofError, match="not below"):
        m.verify_inclusion(5, 5, tree(5)[0][0], [], root(5))
    with pytest.raises(m.ProofError, match="equal size"):
        m.verify_consistency(5, 5, [root(5)], root(5), root(5))
    with pytest.raises(m.ProofError, match="different roots"):
        m.verify_consistency(5, 5, [], root(5), root(4))
    with pytest.raises(ValueError, match="no consistency proof"):
        m.consistency_proof(0, 3, reader(3))


def subtree_proof(start: int, end: int, n: int) -> list[bytes]:
    """SUBTREE_PROOF(start, end, D_n) exactly as draft-ietf-plants-merkle-tree-certs §4.3.1 defines it."""
    leaves = list(tree(n)[0])

    def sub(start: int, end: int, lo: int, hi: int, known: bool) -> list[bytes]:
        if start == lo and end == hi:
            return [] if known else [mth(leaves[lo:hi])]
        k = 1 << ((hi - lo - 1).bit_length() - 1)
        if end <= lo + k:
            return [*sub(start, end, lo, lo + k, known), mth(leaves[lo + k : hi])]
        if lo + k <= start:
            return [*sub(start, end, lo + k, hi, known), mth(leaves[lo : lo + k])]
        return [*sub(lo + k, end, lo + k, hi, False), mth(leaves[lo : lo + k])]

    return [] if start == end else sub(start, end, 0, n, True)


@st.composite
def subtrees(draw: st.DrawFn) -> tuple[int, int, int]:
    n = draw(st.integers(1, 130))
    width = draw(st.integers(1, n))
    align = 1 << (width - 1).bit_length()
    start = draw(st.integers(0, max(0, (n - width) // align))) * align
    return start, min(start + width, n), n


@settings(max_examples=150, deadline=None)
@given(subtrees())
def test_subtree_consistency_and_inclusion(case: tuple[int, int, int]) -> None:
    start, end, n = case
    assert m.is_valid_subtree(start, end)
    leaves = list(tree(n)[0])
    sub_root = mth(leaves[start:end])
    proof = subtree_proof(start, end, n)
    m.verify_subtree_consistency(start, end, n, proof, sub_root, root(n))
    for bad in _mutations(proof):
        if bad != proof:
            with pytest.raises(m.ProofError):
                m.verify_subtree_consistency(start, end, n, bad, sub_root, root(n))
    with pytest.raises(m.ProofError):
        m.verify_subtree_consistency(start, end, n, proof, m.leaf_hash(b"x"), root(n))
    # inclusion of each entry of the subtree in it
    for index in range(start, end, max(1, (end - start) // 4)):
        path = [mth(leaves[a:b]) for a, b in _path_ranges(index - start, end - start, start)]
        m.verify_subtree_inclusion(index, start, end, leaves[index], path, sub_root)
        with pytest.raises(m.ProofError):
            m.verify_subtree_inclusion(index, start, end, leaves[index], [*path, sub_root], sub_root)


def _path_ranges(i: int, size: int, offset: int) -> list[tuple[int, int]]:
    out = []
    lo, hi = 0, size
    while hi - lo > 1:
        k = 1 << ((hi - lo - 1).bit_length() - 1)
        if i < lo + k:
            out.append((offset + lo + k, offset + hi))
            hi = lo + k
        else:
            out.append((offset + lo, offset + lo + k))
            lo += k
    return list(reversed(out))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 1 << 20), st.integers(0, 1 << 20))
def test_is_valid_subtree_matches_definition(start: int, end: int) -> None:
    if start > end:
        assert not m.is_valid_subtree(start, end)
        return
    size = end - start
    bit_ceil = 1
    while bit_ceil < size:
        bit_ceil *= 2
    assert m.is_valid_subtree(start, end) == (start % bit_ceil == 0)
