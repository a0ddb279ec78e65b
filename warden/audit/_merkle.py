"""RFC 6962 / RFC 9162 Merkle trees: hashing, the stored-hash layout, proof generation and strict verifiers.

Pure code: no I/O, no clock. Hashes are raw 32-byte SHA-256 digests.

* ``leaf_hash(d) = SHA-256(0x00 || d)``, ``node_hash(l, r) = SHA-256(0x01 || l || r)``, the empty tree hashes to
  ``SHA-256("")``. The 0x00/0x01 prefixes keep a leaf from ever being mistaken for an interior node.
* The log keeps every hash of the tree once, in the append-only order of Crosby & Wallach §3.3 (also Go's
  ``sumdb/tlog``): appending leaf ``m`` appends its leaf hash and then the hash of every perfect subtree it
  completes. So the hash file is itself append-only and any tree hash, inclusion or consistency proof needs
  O(log n) reads (:func:`stored_hash_index`, :func:`tree_hash`, :func:`inclusion_proof`, :func:`consistency_proof`).
* The verifiers follow RFC 9162 §2.1.3.2 and §2.1.4.2 and the subtree procedures of
  draft-ietf-plants-merkle-tree-certs §4 literally, and are strict: every hash must be exactly 32 bytes and the
  proof must be consumed exactly (a proof with a trailing or missing element is rejected, not tolerated).

Edge cases, decided explicitly (libraries disagree on them):

* A consistency proof *from the empty tree* is refused (``size1 == 0``): the empty tree is trivially a prefix of
  every tree, so there is nothing to prove and callers must handle it before asking.
* ``size1 == size2`` needs an empty proof and equal roots.

Every failure raises :class:`ProofError` with a message that says which check failed.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Sequence
from typing import Final

from warden.errors import VerificationError

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "Frontier",
    "HashReader",
    "ProofError",
    "consistency_proof",
    "fold_frontier",
    "inclusion_proof",
    "is_valid_subtree",
    "leaf_hash",
    "node_hash",
    "root_from_leaf_hashes",
    "stored_hash_count",
    "stored_hash_index",
    "subtree_hash",
    "tree_hash",
    "verify_consistency",
    "verify_inclusion",
    "verify_subtree_consistency",
    "verify_subtree_inclusion",
]

HASH_SIZE: Final = 32
EMPTY_ROOT: Final = hashlib.sha256(b"").digest()

#: Reads stored hashes by their position in the stored-hash sequence (see :func:`stored_hash_index`).
HashReader = Callable[[Sequence[int]], Sequence[bytes]]


class ProofError(VerificationError):
    """A Merkle proof, hash or tree size failed a check; the message names the check."""


def leaf_hash(data: bytes) -> bytes:
    """The RFC 6962 hash of one entry: ``SHA-256(0x00 || data)``."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """The RFC 6962 hash of an interior node: ``SHA-256(0x01 || left || right)``."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _largest_power_of_two_below(n: int) -> int:
    """The largest power of two strictly smaller than ``n`` (``n >= 2``): RFC 6962's split point ``k``."""
    return 1 << ((n - 1).bit_length() - 1)


def root_from_leaf_hashes(leaves: Sequence[bytes]) -> bytes:
    """``MTH`` of a list of leaf hashes, computed with a :class:`Frontier` (O(n) time, O(log n) space)."""
    frontier = Frontier()
    for h in leaves:
        frontier.append(h)
    return frontier.root()


def fold_frontier(nodes: Sequence[bytes]) -> bytes:
    """The root of a tree from its frontier: its perfect-subtree roots, largest first (``SHA-256("")`` if none)."""
    if not nodes:
        return EMPTY_ROOT
    h = nodes[-1]
    for left in reversed(nodes[:-1]):
        h = node_hash(left, h)
    return h


class Frontier:
    """The right edge of a growing tree: the roots of its perfect subtrees, largest first (a "compact range").

    ``append`` returns the hashes the stored-hash layout gains for that leaf (the leaf hash, then each perfect
    subtree it completes, lowest first), so a writer can extend the hash file without reading it. The root is
    remembered until the next append: a writer asks for it several times per batch (its head, its catch-up check).
    """

    __slots__ = ("_levels", "_nodes", "_root", "size")

    def __init__(self, size: int = 0, nodes: Sequence[bytes] = ()) -> None:
        levels = [lvl for lvl in range(size.bit_length() - 1, -1, -1) if size >> lvl & 1]
        if len(levels) != len(nodes):
            raise ValueError(f"a tree of size {size} has {len(levels)} frontier nodes, got {len(nodes)}")
        self.size = size
        self._levels = levels
        self._nodes = list(nodes)
        self._root: bytes | None = None

    @classmethod
    def load(cls, size: int, read: HashReader) -> Frontier:
        """The frontier of the tree of ``size`` leaves, read from the stored-hash layout."""
        positions = [stored_hash_index(lvl, (size >> lvl) - 1)
                     for lvl in range(size.bit_length() - 1, -1, -1) if size >> lvl & 1]
        return cls(size, list(read(positions)))

    @property
    def nodes(self) -> list[bytes]:
        """The perfect-subtree roots, largest (leftmost) first."""
        return list(self._nodes)

    def append(self, h: bytes) -> list[bytes]:
        """Add a leaf hash; return the stored hashes it adds (leaf first, then the subtrees it completes)."""
        added = [h]
        level = 0
        levels, nodes = self._levels, self._nodes
        while levels and levels[-1] == level:
            levels.pop()
            h = node_hash(nodes.pop(), h)
            added.append(h)
            level += 1
        levels.append(level)
        nodes.append(h)
        self.size += 1
        self._root = None
        return added

    def root(self) -> bytes:
        """The RFC 6962 root of the tree so far (``SHA-256("")`` when empty)."""
        if self._root is None:
            self._root = fold_frontier(self._nodes)
        return self._root

    def copy(self) -> Frontier:
        f = Frontier()
        f.size, f._levels, f._nodes, f._root = self.size, list(self._levels), list(self._nodes), self._root
        return f


# ----------------------------------------------------------------------------------------------------------------
# Stored-hash layout (Crosby & Wallach §3.3)


def stored_hash_count(size: int) -> int:
    """How many hashes the layout holds for a tree of ``size`` leaves: ``2*size - popcount(size)``."""
    if size < 0:
        raise ValueError("tree size must be >= 0")
    return 2 * size - size.bit_count()


def stored_hash_index(level: int, n: int) -> int:
    """Position of the hash of node ``(level, n)`` (the perfect subtree over leaves ``[n*2^level, (n+1)*2^level)``).

    That node is stored right after the leaf that completes it, leaf ``m = (n+1)*2^level - 1``: the hashes of all
    earlier leaves come first (``stored_hash_count(m)``), then the leaf's own hash, then one per level.
    """
    if level < 0 or n < 0:
        raise ValueError("level and index must be >= 0")
    m = ((n + 1) << level) - 1
    return stored_hash_count(m) + level


def subtree_hash(lo: int, hi: int, read: HashReader) -> bytes:
    """``MTH(D[lo:hi])`` for a range RFC 6962's recursion visits, with O(log n) stored-hash reads.

    The range is cut into maximal aligned perfect subtrees (each a stored hash), which are then folded the way
    RFC 6962 splits: the tree over ``[lo, hi)`` is the left-full tree over those pieces.
    """
    if not 0 <= lo < hi:
        raise ValueError(f"empty or invalid range [{lo}, {hi})")
    pieces: list[tuple[int, int]] = []
    start = lo
    while start < hi:
        level = (hi - start).bit_length() - 1
        while start & ((1 << level) - 1):
            level -= 1
        pieces.append((level, start >> level))
        start += 1 << level
    hashes = list(read([stored_hash_index(lvl, idx) for lvl, idx in pieces]))
    if not _is_left_full(lo, hi, pieces):
        raise ValueError(f"[{lo}, {hi}) is not a subtree of the RFC 6962 recursion")
    h = hashes[-1]
    for left in reversed(hashes[:-1]):
        h = node_hash(left, h)
    return h


def _is_left_full(lo: int, hi: int, pieces: Sequence[tuple[int, int]]) -> bool:
    """True when the pieces' sizes strictly decrease, i.e. folding them right-to-left gives ``MTH(D[lo:hi])``."""
    sizes = [1 << lvl for lvl, _ in pieces]
    return all(a > b for a, b in itertools.pairwise(sizes)) and sum(sizes) == hi - lo


def tree_hash(size: int, read: HashReader) -> bytes:
    """The root of the tree of ``size`` leaves, from the stored-hash layout."""
    if size == 0:
        return EMPTY_ROOT
    return subtree_hash(0, size, read)


def inclusion_proof(index: int, size: int, read: HashReader) -> list[bytes]:
    """RFC 6962 ``PATH(index, D[size])``: sibling hashes from the leaf up to the root's child."""
    if not 0 <= index < size:
        raise ValueError(f"index {index} is not in a tree of size {size}")
    ranges: list[tuple[int, int]] = []
    lo, hi = 0, size
    while hi - lo > 1:
        k = _largest_power_of_two_below(hi - lo)
        if index < lo + k:
            ranges.append((lo + k, hi))
            hi = lo + k
        else:
            ranges.append((lo, lo + k))
            lo = lo + k
    return [subtree_hash(a, b, read) for a, b in reversed(ranges)]


def consistency_proof(size1: int, size2: int, read: HashReader) -> list[bytes]:
    """RFC 6962 ``PROOF(size1, D[size2])`` for ``0 < size1 <= size2``."""
    if not 0 < size1 <= size2:
        raise ValueError(f"no consistency proof from size {size1} to size {size2}")
    ranges: list[tuple[int, int]] = []
    lo, hi, m, known = 0, size2, size1, True
    while True:
        n = hi - lo
        if m == n:
            if not known:
                ranges.append((lo, hi))
            break
        k = _largest_power_of_two_below(n)
        if m <= k:
            ranges.append((lo + k, hi))
            hi = lo + k
        else:
            ranges.append((lo, lo + k))
            lo, m, known = lo + k, m - k, False
    return [subtree_hash(a, b, read) for a, b in reversed(ranges)]


# ----------------------------------------------------------------------------------------------------------------
# Verifiers


def _check_hash(what: str, h: bytes) -> None:
    if len(h) != HASH_SIZE:
        raise ProofError(f"{what} is {len(h)} bytes, not {HASH_SIZE}")


def _check_proof(proof: Sequence[bytes]) -> None:
    for i, p in enumerate(proof):
        _check_hash(f"proof element {i}", p)


def _root_from_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
    """RFC 9162 §2.1.3.2 steps 1-5, returning the computed root."""
    if index >= size:
        raise ProofError(f"leaf index {index} is not below tree size {size}")
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise ProofError("inclusion proof is longer than the path to the root")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("inclusion proof is shorter than the path to the root")
    return r


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> None:
    """Check that ``leaf`` is entry ``index`` of the tree of ``size`` with ``root`` (RFC 9162 §2.1.3.2)."""
    if index < 0 or size < 0:
        raise ProofError("index and size must be >= 0")
    _check_hash("leaf hash", leaf)
    _check_hash("root hash", root)
    _check_proof(proof)
    if _root_from_inclusion(index, size, leaf, proof) != root:
        raise ProofError(f"inclusion proof for index {index} does not lead to the root of size {size}")


def verify_consistency(size1: int, size2: int, proof: Sequence[bytes], root1: bytes, root2: bytes) -> None:
    """Check that the tree of ``size2`` with ``root2`` extends the one of ``size1`` with ``root1`` (RFC 9162 §2.1.4.2).

    ``size1 == 0`` is refused: see the module docstring.
    """
    _check_hash("first root", root1)
    _check_hash("second root", root2)
    _check_proof(proof)
    if size1 < 0 or size2 < 0:
        raise ProofError("tree sizes must be >= 0")
    if size1 > size2:
        raise ProofError(f"first tree size {size1} is larger than second tree size {size2}")
    if size1 == 0:
        raise ProofError("a consistency proof from the empty tree proves nothing")
    if size1 == size2:
        if proof:
            raise ProofError("trees of equal size need an empty consistency proof")
        if root1 != root2:
            raise ProofError(f"two different roots for the same tree size {size1}")
        return
    if not proof:
        raise ProofError("consistency proof is empty")
    path = list(proof)
    if size1 & (size1 - 1) == 0:  # a power of two: the first node is the old root itself
        path.insert(0, root1)
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("consistency proof is longer than needed")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("consistency proof is shorter than needed")
    if fr != root1:
        raise ProofError(f"consistency proof does not lead to the first root (size {size1})")
    if sr != root2:
        raise ProofError(f"consistency proof does not lead to the second root (size {size2})")


def is_valid_subtree(start: int, end: int) -> bool:
    """``[start, end)`` is a subtree: ``start <= end`` and ``start`` is a multiple of ``BIT_CEIL(end - start)``."""
    if not 0 <= start <= end:
        return False
    size = end - start
    bit_ceil = 1 if size <= 1 else 1 << (size - 1).bit_length()
    return start % bit_ceil == 0


def verify_subtree_inclusion(index: int, start: int, end: int, leaf: bytes, proof: Sequence[bytes],
                             root: bytes) -> None:
    """Check that ``leaf`` is entry ``index`` of subtree ``[start, end)`` whose hash is ``root``.

    draft-ietf-plants-merkle-tree-certs §4.2: a subtree inclusion proof is the inclusion proof of ``index - start``
    in the tree over ``D[start:end]``.
    """
    if not is_valid_subtree(start, end) or start == end:
        raise ProofError(f"[{start}, {end}) is not a valid non-empty subtree")
    if not start <= index < end:
        raise ProofError(f"index {index} is outside subtree [{start}, {end})")
    _check_hash("leaf hash", leaf)
    _check_hash("subtree hash", root)
    _check_proof(proof)
    if _root_from_inclusion(index - start, end - start, leaf, proof) != root:
        raise ProofError(f"inclusion proof for index {index} does not lead to subtree [{start}, {end})")


def verify_subtree_consistency(start: int, end: int, size: int, proof: Sequence[bytes], subtree_root: bytes,
                               root: bytes) -> None:
    """Check that subtree ``[start, end)`` with hash ``subtree_root`` is part of the tree of ``size`` with ``root``.

    draft-ietf-plants-merkle-tree-certs §4.3.3, step by step.
    """
    _check_hash("subtree hash", subtree_root)
    _check_hash("root hash", root)
    _check_proof(proof)
    # 1. valid subtree inside the tree
    if not is_valid_subtree(start, end) or end > size:
        raise ProofError(f"[{start}, {end}) is not a valid subtree of a tree of size {size}")
    # 2. the empty subtree
    if start == end:
        if proof:
            raise ProofError("an empty subtree needs an empty proof")
        if subtree_root != EMPTY_ROOT:
            raise ProofError("an empty subtree must hash to SHA-256 of the empty string")
        return
    # 3-5. walk fn/sn/tn up to where the subtree's rightmost part starts in the tree
    fn, sn, tn = start, end - 1, size - 1
    if sn == tn:
        while fn != sn:
            fn, sn, tn = fn >> 1, sn >> 1, tn >> 1
    else:
        while fn != sn and sn & 1:
            fn, sn, tn = fn >> 1, sn >> 1, tn >> 1
    # 6-7. the starting hash
    path = list(proof)
    if fn == sn:
        fr = sr = subtree_root
    else:
        if not path:
            raise ProofError("subtree consistency proof is empty")
        fr = sr = path.pop(0)
    # 8. fold the proof
    for c in path:
        if tn == 0:
            raise ProofError("subtree consistency proof is longer than needed")
        if sn & 1 or sn == tn:
            if fn < sn:
                fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not sn & 1:
                fn, sn, tn = fn >> 1, sn >> 1, tn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn, tn = fn >> 1, sn >> 1, tn >> 1
    # 9. everything consumed and both hashes reproduced
    if tn != 0:
        raise ProofError("subtree consistency proof is shorter than needed")
    if fr != subtree_root:
        raise ProofError(f"subtree consistency proof does not lead to the hash of [{start}, {end})")
    if sr != root:
        raise ProofError(f"subtree consistency proof does not lead to the root of size {size}")
