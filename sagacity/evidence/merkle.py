"""RFC 9162 Merkle trees over journal rows: leaf encoding, hashes, proofs and their checks. Pure.

A leaf hashes as SHA-256(0x00 || data), a node as SHA-256(0x01 || left || right) (RFC 9162
§2.1.1). The tree is kept as the hashes of its *complete* subtrees: node ``(level, index)``
covers leaves ``[index << level, (index + 1) << level)``, exists once all of them do and never
changes after. Every subtree a proof names (RFC 9162 §2.1.3.1, §2.1.4.1) is a run of at most
``log2(n)`` complete ones (:func:`subtrees`), so a prover reads O(log n) stored hashes per proof
and appends through a :class:`Frontier` that holds O(log n) hashes, whatever the tree's size.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence

__all__ = [
    "EMPTY_ROOT",
    "LEAF_DOMAIN",
    "Frontier",
    "Node",
    "Range",
    "consistency_ranges",
    "inclusion_ranges",
    "leaf_data",
    "leaf_hash",
    "node_hash",
    "range_hash",
    "subtrees",
    "verify_consistency",
    "verify_inclusion",
]

#: ``(level, index)`` of a complete subtree
Node = tuple[int, int]
#: leaves ``[start, end)``
Range = tuple[int, int]

#: First bytes of every leaf's data; changes only with the leaf encoding.
LEAF_DOMAIN = b"sagacity-tlog-leaf-v1\n"
#: MTH of the empty tree: SHA-256 of no bytes (RFC 9162 §2.1.1).
EMPTY_ROOT = hashlib.sha256(b"").digest()


def _netstring(text: str) -> bytes:
    raw = text.encode("utf-8")
    return b"%d:%s," % (len(raw), raw)


def leaf_data(saga_id: str, seq: int, row_hash: str) -> bytes:
    """A journal row's leaf: :data:`LEAF_DOMAIN`, then saga id, decimal seq and the row's
    stored ``hash`` text, each a netstring (as in the journal's hash rules)."""
    return LEAF_DOMAIN + _netstring(saga_id) + _netstring(str(seq)) + _netstring(row_hash)


def leaf_hash(data: bytes) -> bytes:
    """RFC 9162 leaf hash: SHA-256(0x00 || data)."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 9162 interior node hash: SHA-256(0x01 || left || right)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (``n`` > 1): RFC 9162's ``k``."""
    return 1 << ((n - 1).bit_length() - 1)


def subtrees(start: int, end: int) -> list[Node]:
    """The complete subtrees that make up leaves ``[start, end)``, largest first.

    Only ranges a proof names qualify: ``start`` a multiple of the largest power of two not
    above ``end - start`` (so each piece is aligned); ``ValueError`` otherwise.
    """
    if not 0 <= start < end:
        raise ValueError(f"no leaves in [{start}, {end})")
    nodes = []
    while start < end:
        level = (end - start).bit_length() - 1
        if start & ((1 << level) - 1):
            raise ValueError(f"[{start}, {end}) is not a subtree of a Merkle tree")
        nodes.append((level, start >> level))
        start += 1 << level
    return nodes


def range_hash(start: int, end: int, nodes: Mapping[Node, bytes]) -> bytes:
    """MTH of leaves ``[start, end)`` from the stored hashes of its :func:`subtrees`."""
    pieces = [nodes[node] for node in subtrees(start, end)]
    digest = pieces[-1]
    for piece in reversed(pieces[:-1]):
        digest = node_hash(piece, digest)
    return digest


def inclusion_ranges(index: int, size: int) -> list[Range]:
    """The subtrees whose hashes are the inclusion proof of leaf ``index`` in a tree of ``size``
    leaves (RFC 9162 §2.1.3.1 PATH), from the leaf's sibling up to the root's child."""
    if not 0 <= index < size:
        raise ValueError(f"leaf {index} is not in a tree of {size} leaves")
    ranges = []
    lo, hi = 0, size
    while hi - lo > 1:
        k = _split(hi - lo)
        if index < lo + k:
            ranges.append((lo + k, hi))
            hi = lo + k
        else:
            ranges.append((lo, lo + k))
            lo += k
    ranges.reverse()
    return ranges


def consistency_ranges(old: int, new: int) -> list[Range]:
    """The subtrees whose hashes prove a tree of ``old`` leaves is a prefix of one of ``new``
    (RFC 9162 §2.1.4.1 SUBPROOF), in proof order; empty when the sizes are equal."""
    if not 0 < old <= new:
        raise ValueError(f"no consistency proof from {old} to {new} leaves")
    ranges = []
    lo, hi, m, whole = 0, new, old, True  # m counts old leaves from lo; whole: SUBPROOF's b
    while hi - lo != m:
        k = _split(hi - lo)
        if m <= k:
            ranges.append((lo + k, hi))
            hi = lo + k
        else:
            ranges.append((lo, lo + k))
            lo += k
            m -= k
            whole = False
    if not whole:
        ranges.append((lo, hi))
    ranges.reverse()
    return ranges


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> bool:
    """RFC 9162 §2.1.3.2: does ``proof`` place the leaf hash ``leaf`` at ``index`` under ``root``?"""
    if not 0 <= index < size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(
    old: int, new: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """RFC 9162 §2.1.4.2: does ``proof`` show the tree of ``old`` leaves (``old_root``) is a
    prefix of the tree of ``new`` leaves (``new_root``)? Equal sizes need an empty proof."""
    if not 0 < old <= new:
        return False
    if old == new:
        return not proof and old_root == new_root
    if not proof:
        return False
    path = list(proof)
    if old & (old - 1) == 0:  # an exact power of two: the old root is the first subtree
        path.insert(0, old_root)
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
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
    return fr == old_root and sr == new_root and sn == 0


class Frontier:
    """The complete subtrees of a tree of ``size`` leaves, largest first (one per set bit).

    Enough to append leaves and to compute the root; build it from stored hashes of
    :meth:`nodes` ``(size)``, or from nothing for the empty tree.
    """

    def __init__(self, size: int = 0, hashes: Iterable[bytes] = ()) -> None:
        self.size = size
        self._hashes = list(hashes)
        if len(self._hashes) != size.bit_count():
            raise ValueError(f"a tree of {size} leaves has {size.bit_count()} frontier nodes")

    @staticmethod
    def nodes(size: int) -> list[Node]:
        """The frontier of a tree of ``size`` leaves, largest first."""
        return subtrees(0, size) if size else []

    def append(self, leaf: bytes) -> list[tuple[Node, bytes]]:
        """Add the leaf hash ``leaf``; return every complete subtree this makes, leaf first."""
        made = [((0, self.size), leaf)]
        digest, level, index = leaf, 0, self.size
        while index & 1:  # a right child: it completes its parent with the left sibling
            digest = node_hash(self._hashes.pop(), digest)
            level += 1
            index >>= 1
            made.append(((level, index), digest))
        self._hashes.append(digest)
        self.size += 1
        return made

    def root(self) -> bytes:
        """MTH of the tree (:data:`EMPTY_ROOT` when it has no leaves)."""
        if not self._hashes:
            return EMPTY_ROOT
        digest = self._hashes[-1]
        for piece in reversed(self._hashes[:-1]):
            digest = node_hash(piece, digest)
        return digest
