"""``sagacity log verify``: the whole transparency log against its heads and the journal.

Streams the published heads (:class:`~sagacity.evidence.tlog.HeadLog`), the leaf table and the
journal rows the log lacks, in flat memory, and names what it finds by saga and seq.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sagacity.evidence.attest import Attestor, unlogged
from sagacity.evidence.merkle import EMPTY_ROOT, Frontier, leaf_data, leaf_hash, verify_consistency
from sagacity.evidence.tlog import GRACE, HISTORY, HeadLog, Published
from sagacity.journal import format_timestamp
from sagacity.store.tlog import LeafRow, TlogStore

__all__ = ["LogFinding", "LogVerifier", "deleted", "in_leaf", "rewritten"]


@dataclass(frozen=True, slots=True)
class LogFinding:
    """One thing ``sagacity log verify`` found; ``fatal`` ones fail it.

    ``kind`` says what of a row: ``rewritten``, ``deleted``, ``leaf_edited``, ``backdated``,
    ``unattested``, ``withheld`` or ``pending``; empty for findings about the heads.
    """

    fatal: bool
    detail: str
    saga_id: str | None = None
    seq: int | None = None
    kind: str = ""

    def line(self) -> str:
        where = "" if self.saga_id is None else f"saga {self.saga_id!r} seq {self.seq}: "
        return f"{'FAILED ' if self.fatal else 'WARNING'} {where}{self.detail}"


@dataclass
class LogVerifier:
    """Checks the published heads against each other, the leaf table against them, and each
    leaf against the journal, streaming: memory stays flat whatever the log's size.

    A journal row the log lacks fails once past ``grace`` (:func:`sagacity.evidence.attest.unlogged`):
    as unattested when no checkpoint ``attestor`` trusts covers it, as withheld when one does;
    else it is pending. A logged row written more than ``grace`` before the head published
    before the one that first held it is backdated, unless a later row of its saga that is not
    backdated is first held by the same head (a call that outlasted the grace period: its
    INTENT is attested only by its outcome's checkpoint). A logged row gone from the journal is
    deleted, unless a trusted ``purged`` checkpoint says retention removed it.
    """

    store: TlogStore
    heads: HeadLog
    attestor: Attestor
    grace: timedelta = GRACE
    leaves: int = 0
    checked_heads: int = 0
    unlogged: int = 0
    latest: Published | None = None
    _origin: str | None = field(default=None, repr=False)
    #: the last head published before the leaves being read (the empty head counts)
    _before: Published | None = field(default=None, repr=False)
    #: backdated leaves first held by the next head, by saga, until a later row clears them
    _suspects: dict[str, list[LogFinding]] = field(default_factory=dict, repr=False)

    async def run(self) -> AsyncGenerator[LogFinding, None]:
        """Every finding, in log order; afterwards ``leaves``, ``checked_heads`` and ``latest``."""
        heads = self._heads()
        frontier = Frontier()
        pending: list[Published] = []
        broken = False
        for finding in self._next_head(heads, pending):
            yield finding
        async with aclosing(self.store.leaves()) as leaves:
            async for leaf in leaves:
                self.leaves += 1
                if leaf.index != frontier.size and not broken:
                    broken = True
                    yield LogFinding(
                        True,
                        f"leaves {frontier.size}..{leaf.index - 1} are missing from the leaf "
                        "table: the log was cut; later heads cannot be recomputed",
                    )
                digest = leaf_hash(leaf_data(leaf.saga_id, leaf.seq, leaf.row_hash))
                first = None if broken or not pending else pending[0]
                for finding in self._check_leaf(leaf, digest, first):
                    yield finding
                if broken:
                    continue
                frontier.append(digest)
                while pending and pending[0].head.size == frontier.size:
                    published = pending.pop(0)
                    for suspects in self._suspects.values():
                        for finding in suspects:
                            yield finding
                    self._suspects.clear()
                    self._before = published
                    if published.head.root != frontier.root() and not broken:
                        broken = True
                        yield LogFinding(
                            True,
                            f"the leaf table disagrees with tree head {published.head.size} "
                            f"(published {format_timestamp(published.at)}): leaves up to it "
                            "were changed, reordered or removed",
                        )
                    for finding in self._next_head(heads, pending):
                        yield finding
        for suspects in self._suspects.values():
            for finding in suspects:
                yield finding
        for published in pending:
            yield LogFinding(
                True,
                f"tree head {published.head.size} (published {format_timestamp(published.at)}) "
                f"has more leaves than the log holds ({frontier.size}): leaves were removed",
            )
        for leftover in heads:
            if isinstance(leftover, str):
                yield LogFinding(True, leftover)
            else:
                yield LogFinding(
                    True,
                    f"tree head {leftover.head.size} has more leaves than the log holds "
                    f"({frontier.size}): leaves were removed",
                )
        async for finding in self._unlogged():
            yield finding

    def _heads(self) -> Iterator[Published | str]:
        previous: Published | None = None
        for item in self.heads.history():
            if isinstance(item, str):
                yield item
                continue
            problem = self._extends(previous, item)
            if problem is not None:
                yield f"{HISTORY} line {item.line}: {problem}"
                continue
            self.checked_heads += 1
            self.latest = previous = item
            yield item

    def _extends(self, previous: Published | None, item: Published) -> str | None:
        head = item.head
        if self._origin is None:
            self._origin = head.origin
        elif head.origin != self._origin:
            return f"a head of log {head.origin!r}, not {self._origin!r}"
        if head.size == 0 and head.root != EMPTY_ROOT:
            return "tree head 0 does not have the empty tree's root"
        if previous is None:
            return None
        old = previous.head
        if head.size < old.size:
            return f"tree head {head.size} follows tree head {old.size}: the log shrank"
        if old.size == 0:  # every tree extends the empty one
            return None
        if not verify_consistency(old.size, head.size, old.root, head.root, item.consistency):
            return (
                f"tree head {head.size} is not consistent with tree head {old.size} "
                "before it: the log was forked or rewritten"
            )
        return None

    def _next_head(
        self, heads: Iterator[Published | str], pending: list[Published]
    ) -> Iterator[LogFinding]:
        # keep one head waiting to be compared; damaged lines become findings
        while not pending:
            item = next(heads, None)
            if item is None:
                return
            if isinstance(item, str):
                yield LogFinding(True, item)
            elif item.head.size:  # the empty head has nothing to compare
                pending.append(item)
            else:
                self._before = item

    def _check_leaf(
        self, leaf: LeafRow, digest: bytes, first: Published | None
    ) -> Iterator[LogFinding]:
        # digest: the leaf hash recomputed from the leaf table's row; first: the first head
        # that holds the leaf (None: none yet, or past a cut)
        if leaf.leaf_hash != digest:
            yield LogFinding(
                True,
                f"the leaf table and the stored tree disagree (leaf {leaf.index}): the leaf "
                "table was edited",
                leaf.saga_id,
                leaf.seq,
                "leaf_edited",
            )
        where = in_leaf(leaf.index, None if first is None else first.head.size)
        if leaf.journal_hash is None:
            if leaf.seq > self.attestor.purged(leaf.saga_id):
                yield LogFinding(True, deleted(where), leaf.saga_id, leaf.seq, "deleted")
        elif leaf.journal_hash != leaf.row_hash:
            detail = rewritten(leaf.seq, leaf.journal_hash, leaf.row_hash, where)
            yield LogFinding(True, detail, leaf.saga_id, leaf.seq, "rewritten")
        else:
            self._backdated(leaf, first)

    def _backdated(self, leaf: LeafRow, first: Published | None) -> None:
        """Hold ``leaf`` as a suspect when written before the head before ``first`` (less the
        grace); a later row of its saga that is not clears the saga's suspects."""
        before = self._before
        suspects = self._suspects.get(leaf.saga_id, [])
        if (
            first is None
            or before is None
            or leaf.timestamp is None
            or leaf.timestamp >= before.at - self.grace
        ):
            kept = [s for s in suspects if s.seq is not None and s.seq > leaf.seq]
            if kept:
                self._suspects[leaf.saga_id] = kept
            else:
                self._suspects.pop(leaf.saga_id, None)
            return
        detail = (
            f"backdated: written {format_timestamp(leaf.timestamp)} but first logged in tree "
            f"head {first.head.size}, published {format_timestamp(first.at)}; tree head "
            f"{before.head.size}, published {format_timestamp(before.at)}, did not hold it"
        )
        suspects.append(LogFinding(True, detail, leaf.saga_id, leaf.seq, "backdated"))
        self._suspects[leaf.saga_id] = suspects

    async def _unlogged(self) -> AsyncGenerator[LogFinding, None]:
        latest = None if self.latest is None else (self.latest.head.size, self.latest.at)
        now = datetime.now(UTC)
        self.attestor.begin()
        async with aclosing(self.store.pending()) as rows:
            async for row in rows:
                self.unlogged += 1
                attested = await self.attestor.covers(row.saga_id, row.seq, row.hash)
                verdict = unlogged(row.timestamp, attested, latest, now, self.grace)
                if verdict is not None:
                    kind, detail = verdict
                    yield LogFinding(True, detail, row.saga_id, row.seq, kind)
                else:
                    yield LogFinding(
                        False, pending_detail(attested), row.saga_id, row.seq, "pending"
                    )


def in_leaf(index: int, head: int | None) -> str:
    """``leaf i (logged in tree head K)``, K a head that holds the leaf (None: none yet)."""
    where = "in no published tree head yet" if head is None else f"logged in tree head {head}"
    return f"leaf {index} ({where})"


def rewritten(seq: int, journal_hash: str, logged_hash: str, leaf: str) -> str:
    """The finding for a logged row the journal now hashes otherwise (``leaf``: :func:`in_leaf`)."""
    return (
        f"row {seq} is hashed {journal_hash[:12]}… in the journal but {logged_hash[:12]}… in "
        f"{leaf}: rewritten after it was logged"
    )


def deleted(leaf: str) -> str:
    """The finding for a logged row gone from the journal (``leaf``: :func:`in_leaf`)."""
    return f"in {leaf} but gone from the journal: deleted"


def pending_detail(attested: bool) -> str:
    """The warning for a row the log lacks within the grace period."""
    if attested:
        return "not in the log yet (pending integration)"
    return "not in the log yet (pending integration): no signed checkpoint covers it yet"
