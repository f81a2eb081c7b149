"""An RFC 9162 proof verifier written from the RFC's text alone, sharing no code with Sagacity.

§2.1.1 gives the hashes, §2.1.3.2 the inclusion check and §2.1.4.2 the consistency check; the
steps below follow their numbering. Standard library only: a check of Sagacity's prover that
does not lean on Sagacity's own reading of the RFC.
"""

from __future__ import annotations

from hashlib import sha256


def hash_leaf(entry: bytes) -> bytes:
    """MTH({d(0)}) = SHA-256(0x00 || d(0))."""
    return sha256(bytes([0]) + entry).digest()


def hash_children(left: bytes, right: bytes) -> bytes:
    """SHA-256(0x01 || MTH(D[0:k]) || MTH(D[k:n]))."""
    return sha256(bytes([1]) + left + right).digest()


def mth(entries: list[bytes]) -> bytes:
    """The Merkle Tree Hash of §2.1.1, by its recursive definition."""
    n = len(entries)
    if n == 0:
        return sha256(b"").digest()
    if n == 1:
        return hash_leaf(entries[0])
    k = 1
    while k * 2 < n:
        k *= 2
    return hash_children(mth(entries[:k]), mth(entries[k:]))


def _lsb(value: int) -> bool:
    return value % 2 == 1


def verify_inclusion(
    leaf_index: int, tree_size: int, leaf_hash: bytes, path: list[bytes], root_hash: bytes
) -> bool:
    """§2.1.3.2: verify an inclusion proof for the leaf ``leaf_index`` of a ``tree_size`` tree."""
    # 1. Compare leaf_index from the inclusion_proof input with tree_size; if leaf_index is
    #    greater than or equal to tree_size, then fail the proof verification.
    if leaf_index >= tree_size or leaf_index < 0:
        return False
    # 2. Set fn to leaf_index and sn to tree_size - 1.
    fn = leaf_index
    sn = tree_size - 1
    # 3. Set r to hash.
    r = leaf_hash
    # 4. For each value p in the inclusion_path array:
    for p in path:
        # a. If sn is 0, then stop the iteration and fail the proof verification.
        if sn == 0:
            return False
        # b. If LSB(fn) is set, or if fn is equal to sn, then:
        if _lsb(fn) or fn == sn:
            # 1. Set r to HASH(0x01 || p || r).
            r = hash_children(p, r)
            # 2. If LSB(fn) is not set, then right-shift both fn and sn equally until either
            #    LSB(fn) is set or fn is 0.
            if not _lsb(fn):
                while not (_lsb(fn) or fn == 0):
                    fn = fn // 2
                    sn = sn // 2
        # Otherwise: Set r to HASH(0x01 || r || p).
        else:
            r = hash_children(r, p)
        # c. Finally, right-shift both fn and sn one time.
        fn = fn // 2
        sn = sn // 2
    # 5. Compare sn to 0. Compare r against the root_hash. If sn is equal to 0 and r and the
    #    root_hash are equal, then the log has proven the inclusion of hash. Otherwise, fail.
    return sn == 0 and r == root_hash


def verify_consistency(
    first: int, second: int, first_hash: bytes, second_hash: bytes, path: list[bytes]
) -> bool:
    """§2.1.4.2: verify that the ``first``-leaf tree is a prefix of the ``second``-leaf tree.

    The RFC defines the proof for 0 < first < second; for equal sizes the proof is empty and
    the two roots must be equal (§2.1.4.1: SUBPROOF(n, D[n], true) = {}).
    """
    if first <= 0 or first > second:
        return False
    if first == second:
        return path == [] and first_hash == second_hash
    # 1. If consistency_path is an empty array, stop and fail the proof verification.
    if not path:
        return False
    # 2. If first is an exact power of 2, then prepend first_hash to the consistency_path array.
    power = 1
    while power < first:
        power *= 2
    if power == first:
        path = [first_hash, *path]
    # 3. Set fn to first - 1 and sn to second - 1.
    fn = first - 1
    sn = second - 1
    # 4. If LSB(fn) is set, then right-shift both fn and sn equally until LSB(fn) is not set.
    while _lsb(fn):
        fn = fn // 2
        sn = sn // 2
    # 5. Set both fr and sr to the first value in the consistency_path array.
    fr = path[0]
    sr = path[0]
    # 6. For each subsequent value c in the consistency_path array:
    for c in path[1:]:
        # a. If sn is 0, then stop the iteration and fail the proof verification.
        if sn == 0:
            return False
        # b. If LSB(fn) is set, or if fn is equal to sn, then:
        if _lsb(fn) or fn == sn:
            # 1. Set fr to HASH(0x01 || c || fr). Set sr to HASH(0x01 || c || sr).
            fr = hash_children(c, fr)
            sr = hash_children(c, sr)
            # 2. If LSB(fn) is not set, then right-shift both fn and sn equally until either
            #    LSB(fn) is set or fn is 0.
            if not _lsb(fn):
                while not (_lsb(fn) or fn == 0):
                    fn = fn // 2
                    sn = sn // 2
        # Otherwise: Set sr to HASH(0x01 || sr || c).
        else:
            sr = hash_children(sr, c)
        # c. Finally, right-shift both fn and sn one time.
        fn = fn // 2
        sn = sn // 2
    # 7. Verify that fr equals first_hash, sr equals second_hash and sn is 0.
    return fr == first_hash and sr == second_hash and sn == 0
