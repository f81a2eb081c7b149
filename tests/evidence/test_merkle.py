"""RFC 9162 proofs from stored subtrees, checked by a verifier written from the RFC alone.

Trees of every size from 1 to 1,000 leaves: every proof for small trees, sampled leaves and
size pairs for large ones. Each proof must pass both the independent verifier
(``rfc9162_verifier``) and Sagacity's own, and fail both once a leaf is altered or removed or
the tree size is wrong.
"""

from __future__ import annotations

import functools
import random

import pytest

from sagacity.evidence.merkle import (
    EMPTY_ROOT,
    Frontier,
    Node,
    consistency_ranges,
    inclusion_ranges,
    leaf_data,
    leaf_hash,
    range_hash,
    subtrees,
    verify_consistency,
    verify_inclusion,
)
from tests.evidence import rfc9162_verifier as rfc

LARGEST = 1000
#: up to this size every leaf and every pair of sizes is proved
EXHAUSTIVE = 40


class MemoryTree:
    """Every complete subtree of the first leaves, as the store keeps them, in a dict."""

    def __init__(self, entries: list[bytes]) -> None:
        self.entries = entries
        self.nodes: dict[Node, bytes] = {}
        frontier = Frontier()
        self.roots = [EMPTY_ROOT]  # roots[n]: the root after n leaves
        for entry in entries:
            self.nodes.update(frontier.append(leaf_hash(entry)))
            self.roots.append(frontier.root())

    def inclusion(self, index: int, size: int) -> list[bytes]:
        return [range_hash(a, b, self.nodes) for a, b in inclusion_ranges(index, size)]

    def consistency(self, old: int, new: int) -> list[bytes]:
        return [range_hash(a, b, self.nodes) for a, b in consistency_ranges(old, new)]


def entries(count: int) -> list[bytes]:
    return [leaf_data(f"saga-{n % 7}", n // 7 + 1, f"{n:064x}") for n in range(count)]


@pytest.fixture(scope="module")
def tree() -> MemoryTree:
    return MemoryTree(entries(LARGEST))


def sample_leaves(size: int, rng: random.Random) -> list[int]:
    if size <= EXHAUSTIVE:
        return list(range(size))
    return sorted({0, 1, size // 2, size - 2, size - 1, *rng.sample(range(size), 4)})


def sample_sizes(rng: random.Random) -> list[tuple[int, int]]:
    pairs = [(m, n) for n in range(1, EXHAUSTIVE + 1) for m in range(1, n + 1)]
    for n in range(EXHAUSTIVE + 1, LARGEST + 1):
        pairs += [(m, n) for m in {1, n - 1, n, n // 2, rng.randrange(1, n + 1)} if m >= 1]
    return pairs


def both_inclusion(leaf: bytes, index: int, size: int, proof: list[bytes], root: bytes) -> bool:
    independent = rfc.verify_inclusion(index, size, leaf, proof, root)
    assert verify_inclusion(leaf, index, size, proof, root) == independent
    return independent


def both_consistency(m: int, n: int, old: bytes, new: bytes, proof: list[bytes]) -> bool:
    independent = rfc.verify_consistency(m, n, old, new, proof)
    assert verify_consistency(m, n, old, new, proof) == independent
    return independent


def test_roots_match_the_rfc_definition_for_every_size(tree: MemoryTree) -> None:
    # MTH(D[a:b]) by the RFC's recursion, each subtree hashed once: the sizes share them
    @functools.cache
    def mth(start: int, end: int) -> bytes:
        if end - start == 1:
            return rfc.hash_leaf(tree.entries[start])
        k = 1
        while k * 2 < end - start:
            k *= 2
        return rfc.hash_children(mth(start, start + k), mth(start + k, end))

    assert rfc.mth(tree.entries[:100]) == mth(0, 100)
    for size in range(1, LARGEST + 1):
        assert tree.roots[size] == mth(0, size), size
        if size:
            assert range_hash(0, size, tree.nodes) == tree.roots[size]
    assert tree.roots[0] == EMPTY_ROOT


def test_inclusion_proofs_for_every_size(tree: MemoryTree) -> None:
    rng = random.Random(9162)
    checked = 0
    for size in range(1, LARGEST + 1):
        root = tree.roots[size]
        for index in sample_leaves(size, rng):
            leaf = leaf_hash(tree.entries[index])
            proof = tree.inclusion(index, size)
            assert both_inclusion(leaf, index, size, proof, root), (index, size)
            checked += 1
    assert checked > 4000


def test_inclusion_fails_for_an_altered_leaf_a_removed_leaf_or_a_wrong_size(
    tree: MemoryTree,
) -> None:
    rng = random.Random(6962)
    for size in [*range(1, EXHAUSTIVE + 1), *rng.sample(range(EXHAUSTIVE + 1, LARGEST), 12)]:
        root = tree.roots[size]
        for index in rng.sample(range(size), min(size, 3)):
            proof = tree.inclusion(index, size)
            altered = leaf_hash(tree.entries[index] + b"!")
            assert not both_inclusion(altered, index, size, proof, root)
            if size > 1:
                # the leaf removed: the tree of the other leaves does not hold it
                without = MemoryTree(tree.entries[:index] + tree.entries[index + 1 : size])
                other = min(index, size - 2)
                leaf = leaf_hash(tree.entries[index])
                assert not both_inclusion(leaf, other, size - 1, proof, without.roots[-1])
                assert not both_inclusion(
                    leaf, other, size - 1, without.inclusion(other, size - 1), without.roots[-1]
                )
            for wrong in (size - 1, size + 1):
                if wrong > index:
                    leaf = leaf_hash(tree.entries[index])
                    assert not both_inclusion(leaf, index, wrong, proof, tree.roots[wrong])


def test_consistency_proofs_between_sizes(tree: MemoryTree) -> None:
    pairs = sample_sizes(random.Random(1))
    for m, n in pairs:
        proof = tree.consistency(m, n)
        assert both_consistency(m, n, tree.roots[m], tree.roots[n], proof), (m, n)
    assert len(pairs) > 4000


def test_consistency_fails_for_an_altered_or_removed_leaf_or_a_wrong_size(
    tree: MemoryTree,
) -> None:
    rng = random.Random(2)
    for m, n in rng.sample([p for p in sample_sizes(rng) if p[0] < p[1]], 80):
        proof = tree.consistency(m, n)
        victim = rng.randrange(m)
        altered = list(tree.entries[:n])
        altered[victim] += b"!"
        forged = MemoryTree(altered)
        # the old head was of the genuine tree; the new tree has one old row changed
        assert not both_consistency(m, n, tree.roots[m], forged.roots[n], forged.consistency(m, n))
        assert not both_consistency(m, n, tree.roots[m], forged.roots[n], proof)
        removed = MemoryTree(tree.entries[:victim] + tree.entries[victim + 1 : n])
        assert not both_consistency(
            m, n - 1, tree.roots[m], removed.roots[-1], removed.consistency(m, n - 1)
        )
        if m + 1 <= n:
            assert not both_consistency(m + 1, n, tree.roots[m], tree.roots[n], proof)
        if n + 1 <= LARGEST:
            assert not both_consistency(m, n + 1, tree.roots[m], tree.roots[n + 1], proof)


def test_the_proofs_read_few_stored_subtrees(tree: MemoryTree) -> None:
    size = LARGEST
    for index in (0, 511, 512, 999):
        nodes = {node for a, b in inclusion_ranges(index, size) for node in subtrees(a, b)}
        assert len(nodes) <= 2 * size.bit_length()
    nodes = {node for a, b in consistency_ranges(333, size) for node in subtrees(a, b)}
    assert len(nodes) <= 2 * size.bit_length()


def test_ranges_that_are_no_subtree_and_a_wrong_frontier_are_refused() -> None:
    with pytest.raises(ValueError, match="not a subtree"):
        subtrees(3, 5)
    with pytest.raises(ValueError, match="no leaves"):
        subtrees(4, 4)
    with pytest.raises(ValueError, match="frontier nodes"):
        Frontier(3, [b"x"])
    with pytest.raises(ValueError, match="not in a tree"):
        inclusion_ranges(5, 5)
    with pytest.raises(ValueError, match="no consistency proof"):
        consistency_ranges(0, 5)
    assert consistency_ranges(7, 7) == []


def test_leaf_data_is_the_documented_bytes() -> None:
    data = leaf_data("order-7f3a", 12, "ab" * 32)
    assert data == b"sagacity-tlog-leaf-v1\n10:order-7f3a,2:12,64:" + b"ab" * 32 + b","
    assert leaf_data("Zoë", 1, "") == b"sagacity-tlog-leaf-v1\n4:Zo\xc3\xab,1:1,0:,"
