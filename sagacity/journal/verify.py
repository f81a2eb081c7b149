"""Streaming chain verification: feed rows in seq order, learn the first bad one and why.

Along the way it notes each *dangling* INTENT: a call whose INTENT row is not followed by its
EXECUTED or FAILED. The chain is not broken by one, but the call's outcome is unknown: it is
still running, or it is SUSPECT (its worker died mid-call) until a human resolves it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from sagacity.journal.chain import GENESIS_HASH, entry_hash
from sagacity.journal.entry import Entry
from sagacity.journal.phases import Phase

#: the rows that end a call its INTENT started
_OUTCOMES = frozenset({Phase.EXECUTED, Phase.FAILED})


class Fault(StrEnum):
    """Why a row breaks its saga's chain."""

    WRONG_GENESIS = "wrong_genesis"  # the first row is not seq 1
    GAP = "gap"  # a seq is missing
    DUPLICATE = "duplicate"  # a seq appears twice
    OUT_OF_ORDER = "out_of_order"  # a seq went backwards
    HASH_MISMATCH = "hash_mismatch"  # the stored hash is not the recomputed one
    WRONG_SAGA = "wrong_saga"  # a row of another saga was fed in


@dataclass(frozen=True, slots=True)
class Problem:
    """The first row that breaks a chain."""

    saga_id: str
    seq: int
    fault: Fault
    detail: str


@dataclass(frozen=True, slots=True)
class Dangling:
    """An INTENT row with no EXECUTED or FAILED after it: the call's outcome is unknown."""

    seq: int
    tool_name: str


@dataclass(frozen=True, slots=True)
class Verdict:
    """What verifying one saga found. ``head_*`` is the last row that verified.

    ``dangling`` lists the INTENT rows (among those verified) that no outcome row follows: not
    a fault of the chain, a warning that those calls' outcomes are unknown.
    """

    saga_id: str
    rows: int
    head_seq: int
    head_hash: str
    problem: Problem | None
    dangling: tuple[Dangling, ...] = ()

    @property
    def ok(self) -> bool:
        return self.problem is None


class ChainVerifier:
    """Checks one saga's rows as they stream past; holds only the previous row's hash."""

    def __init__(self, saga_id: str) -> None:
        self.saga_id = saga_id
        self._rows = 0
        self._head_seq = 0
        self._head_hash = GENESIS_HASH
        self._problem: Problem | None = None
        self._dangling: list[Dangling] = []
        self._open: Dangling | None = None  # the previous row, when it was an INTENT

    def feed(self, entry: Entry) -> Problem | None:
        """Check the next row; after the first problem, later rows are ignored."""
        if self._problem is not None:
            return self._problem
        self._rows += 1
        fault = self._fault(entry)
        if fault is not None:
            self._problem = Problem(self.saga_id, entry.seq, fault[0], fault[1])
            return self._problem
        self._head_seq = entry.seq
        self._head_hash = entry.hash
        if self._open is not None and entry.phase not in _OUTCOMES:
            self._dangling.append(self._open)
        self._open = Dangling(entry.seq, entry.tool_name) if entry.phase == Phase.INTENT else None
        return None

    def _fault(self, entry: Entry) -> tuple[Fault, str] | None:
        if entry.saga_id != self.saga_id:
            return Fault.WRONG_SAGA, f"row belongs to saga {entry.saga_id!r}"
        expected = self._head_seq + 1
        if entry.seq != expected:
            if self._head_seq == 0:
                return Fault.WRONG_GENESIS, f"first row has seq {entry.seq}, expected 1"
            if entry.seq == self._head_seq:
                return Fault.DUPLICATE, f"seq {entry.seq} appears twice"
            if entry.seq < self._head_seq:
                return Fault.OUT_OF_ORDER, f"seq {entry.seq} follows seq {self._head_seq}"
            return Fault.GAP, f"seq {expected}..{entry.seq - 1} missing"
        recomputed = entry_hash(self._head_hash, entry)
        if recomputed != entry.hash:
            return (
                Fault.HASH_MISMATCH,
                f"stored hash {entry.hash[:12]}… but row content hashes to {recomputed[:12]}…",
            )
        return None

    def verdict(self) -> Verdict:
        dangling = list(self._dangling)
        if self._open is not None and self._problem is None:
            # the last row is an INTENT (when the chain breaks after one, the broken row may
            # be its outcome: say nothing of it)
            dangling.append(self._open)
        return Verdict(
            self.saga_id,
            self._rows,
            self._head_seq,
            self._head_hash,
            self._problem,
            tuple(dangling),
        )


def verify_rows(saga_id: str, rows: Iterable[Entry]) -> Verdict:
    """Verify a whole saga from an iterable of its rows in stored order."""
    verifier = ChainVerifier(saga_id)
    for row in rows:
        if verifier.feed(row) is not None:
            break
    return verifier.verdict()
