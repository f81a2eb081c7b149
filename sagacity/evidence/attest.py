"""Attestation: whether a signed checkpoint covers a journal row, through the saga's hash chain.

A checkpoint at seq ``S`` hashed ``H``, signed by a trusted key, attests row ``seq <= S`` of its
saga when the journal's row ``S`` is hashed ``H`` and the chain from row ``seq`` to row ``S``
verifies (each row's hash recomputed from its fields and the row before it, by the journal
core). The transparency log admits only attested rows: a row inserted behind Sagacity's back has
no checkpoint a worker signed for it.
"""

from __future__ import annotations

import asyncio
import stat
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import chain

from sagacity.evidence.checkpoints import Checkpoint, CheckpointDir, CheckpointLog, Kind
from sagacity.journal import GENESIS_HASH, Entry, entry_hash, format_timestamp
from sagacity.store.journal import JournalStore

__all__ = ["UNATTESTED", "Attestor", "unlogged"]

#: What a row no trusted checkpoint covers is, past the grace period.
UNATTESTED = "unattested: no signed checkpoint covers it: forged, or written behind Sagacity's back"

# rows read at a time while walking a chain up to its checkpoint
_CHUNK = 1000
# chains shorter than this up to their checkpoint are read with other sagas' (at most _ROWS rows
# a query); a longer one on its own, _CHUNK rows at a time
_SPAN = 256
_ROWS = 5000
# checkpoint logs kept parsed between passes (with their signature verdicts), by saga
_LOGS_KEPT = 4096


@dataclass(slots=True)
class _Covered:
    """One saga's rows from ``start`` that a checkpoint attests: seq -> the attested hash."""

    start: int
    hashes: dict[int, str] = field(default_factory=dict)


class Attestor:
    """Answers "does a trusted checkpoint cover row (saga, seq) hashed h?" for one pass, the
    checkpoints read from ``checkpoints`` and trusted as it trusts them (its keys).

    Per saga and pass: one read of its checkpoint log (kept parsed while the file's size and
    modification time stay the same), one signature check in the usual case (the highest
    checkpoint), and one read of the rows from the first asked-about seq to that checkpoint.
    The attested hashes are kept for the pass, at most ``max_hashes`` in all (the sagas used
    least recently are dropped, and read again if asked about again), so memory stays bounded.
    """

    def __init__(
        self, journal: JournalStore, checkpoints: CheckpointDir, *, max_hashes: int = 200_000
    ) -> None:
        self._journal = journal
        self._checkpoints = checkpoints
        self._max_hashes = max_hashes
        self._logs: OrderedDict[str, tuple[tuple[int, int, int], CheckpointLog]] = OrderedDict()
        self._covered: OrderedDict[str, _Covered] = OrderedDict()
        self._held = 0
        self._before: str | None = None

    def begin(self, *, signed_before: datetime | None = None) -> None:
        """Start a pass: forget what the last one attested. ``signed_before``: ignore
        checkpoints signed at or after it (a pass counts only checkpoints signed before it began,
        so a row it reads is attested with the checkpoint signed for it)."""
        self._covered.clear()
        self._held = 0
        self._before = None if signed_before is None else format_timestamp(signed_before)

    async def covers(self, saga_id: str, seq: int, row_hash: str) -> bool:
        """Whether a trusted checkpoint attests row ``seq`` of ``saga_id`` hashed ``row_hash``."""
        covered = self._covered.get(saga_id)
        if covered is None or seq < covered.start:
            covered = await self._attest(saga_id, seq)
            self._keep(saga_id, covered)
        else:
            self._covered.move_to_end(saga_id)
        return covered.hashes.get(seq) == row_hash

    def _keep(self, saga_id: str, covered: _Covered) -> None:
        old = self._covered.pop(saga_id, None)
        self._held -= 0 if old is None else len(old.hashes)
        self._covered[saga_id] = covered
        self._held += len(covered.hashes)
        while self._held > self._max_hashes and len(self._covered) > 1:
            _, dropped = self._covered.popitem(last=False)
            self._held -= len(dropped.hashes)

    def log(self, saga_id: str) -> CheckpointLog:
        """``saga_id``'s checkpoint log, parsed again only when its file changed."""
        file = self._checkpoints.log_path(saga_id)
        try:
            found = file.stat()
        except OSError:
            return CheckpointLog(saga_id)
        if not stat.S_ISREG(found.st_mode):
            # a pipe or device would block the reader (and the worker running the sequencer)
            return CheckpointLog(saga_id, problems=[f"{file.name}: not a regular file"])
        mark = (found.st_size, found.st_mtime_ns, found.st_ino)
        kept = self._logs.get(saga_id)
        if kept is not None and kept[0] == mark:
            self._logs.move_to_end(saga_id)
            return kept[1]
        log = self._checkpoints.load(saga_id)
        self._logs[saga_id] = (mark, log)
        if len(self._logs) > _LOGS_KEPT:
            self._logs.popitem(last=False)
        return log

    def purged(self, saga_id: str) -> int:
        """The seq retention purged ``saga_id`` through, by its latest trusted checkpoint, a
        ``purged`` one (0: not purged): rows up to it left the journal lawfully."""
        latest = self.log(saga_id).latest()
        return latest.seq if latest is not None and latest.kind is Kind.PURGED else 0

    async def prepare(self, asked: Iterable[tuple[str, int]]) -> None:
        """Attest together the sagas of ``asked`` (saga id, seq) that :meth:`covers` would read
        one by one: their checkpoint logs in one thread hop, and the rows up to the checkpoint of
        the short chains a few thousand at a time. :meth:`covers` then answers as it would have
        alone."""
        firsts: dict[str, int] = {}
        for saga_id, seq in asked:
            covered = self._covered.get(saga_id)
            if (covered is None or seq < covered.start) and seq < firsts.get(saga_id, seq + 1):
                firsts[saga_id] = seq
        if not firsts:
            return
        # one hop for the batch: a thread per saga cost more than reading its small file
        tops = await asyncio.to_thread(
            lambda: {s: self._signed(s, seq) for s, seq in firsts.items()}
        )
        spans: list[tuple[str, int, int]] = []
        for saga_id, (top, rest) in tops.items():
            first = firsts[saga_id]
            if top is None:
                self._keep(saga_id, _Covered(first))
            elif top.seq - first >= _SPAN:
                hashes = await self._chain(saga_id, first, top.seq)
                self._keep(saga_id, _covered_by(first, chain([top], rest), hashes))
            else:
                spans.append((saga_id, _Walk(first).after, top.seq))
        # the short chains' rows, read in groups of at most _ROWS rows: memory stays bounded
        while spans:
            group: list[tuple[str, int, int]] = []
            rows = 0
            while spans and (not group or rows + spans[-1][2] - spans[-1][1] <= _ROWS):
                group.append(spans.pop())
                rows += group[-1][2] - group[-1][1]
            found = await self._journal.spans(group)
            for saga_id, _, _ in group:
                top, rest = tops[saga_id]
                assert top is not None  # only sagas with a checkpoint have a span
                walk = _Walk(firsts[saga_id])
                walk.take(found.get(saga_id, []))
                self._keep(saga_id, _covered_by(walk.first, chain([top], rest), walk.hashes))

    async def _attest(self, saga_id: str, seq: int) -> _Covered:
        """The rows from ``seq`` up to the highest checkpoint that attests them."""
        # read in a thread: the worker running the sequencer keeps serving its tool calls while a
        # long saga's file is parsed
        top, rest = await asyncio.to_thread(self._signed, saga_id, seq)
        if top is None:
            return _Covered(seq)
        return _covered_by(seq, chain([top], rest), await self._chain(saga_id, seq, top.seq))

    def _signed(self, saga_id: str, seq: int) -> tuple[Checkpoint | None, Iterator[Checkpoint]]:
        """The highest checkpoint at ``seq`` or above that verifies (signed before the pass
        began), and the rest of them, highest first, checked as they are reached."""
        signed = (
            cp
            for cp in self.log(saga_id).signed(lowest=seq)
            if self._before is None or cp.at < self._before
        )
        return next(signed, None), signed

    async def _chain(self, saga_id: str, first: int, last: int) -> dict[int, str]:
        """The hashes of rows ``first..last`` as far as the chain verifies from ``first``: each
        row present, and hashed as its fields and the row before it say."""
        walk = _Walk(first)
        while walk.after < last and not walk.broken:
            rows = await self._journal.after(
                saga_id, walk.after, limit=min(_CHUNK, last - walk.after)
            )
            if not rows:
                break
            walk.take(rows)
        return walk.hashes


class _Walk:
    """A saga's chain walked up from row ``first``: the hashes that verify so far."""

    def __init__(self, first: int) -> None:
        self.first = first
        #: row ``first - 1`` gives row ``first``'s prev hash, so the walk reads from it
        self.after = first - 2 if first > 1 else 0
        self.hashes: dict[int, str] = {}
        self.broken = False
        self._prev: str | None = GENESIS_HASH if first == 1 else None

    def take(self, rows: Iterable[Entry]) -> None:
        """Walk on through ``rows`` (those after :attr:`after`, in seq order) until a row is
        missing or does not hash as its fields and the row before it say."""
        for row in rows:
            if self.broken or row.seq != self.after + 1:
                self.broken = True
                return
            if row.seq >= self.first:
                if self._prev is None or entry_hash(self._prev, row) != row.hash:
                    self.broken = True
                    return
                self.hashes[row.seq] = row.hash
            self._prev = row.hash
            self.after = row.seq


def _covered_by(first: int, signed: Iterable[Checkpoint], hashes: dict[int, str]) -> _Covered:
    """The rows from ``first`` that the highest of ``signed`` whose row is hashed as it says
    attests (none when no such checkpoint is found)."""
    for cp in signed:
        if hashes.get(cp.seq) == cp.hash:
            return _Covered(first, {k: h for k, h in hashes.items() if k <= cp.seq})
    return _Covered(first)


def unlogged(
    timestamp: datetime,
    attested: bool,
    latest: tuple[int, datetime] | None,
    now: datetime,
    grace: timedelta,
) -> tuple[str, str] | None:
    """How a journal row the log lacks counts, as ``(kind, detail)``; None while it may still be
    pending integration.

    A row no trusted checkpoint covers is ``unattested`` once dated more than ``grace`` from
    ``now`` (before or after: no checkpoint will come for it). A covered row is ``withheld``
    when written more than ``grace`` before the latest tree head (``latest``: its size and
    publication time; None: none yet): the sequencer should have logged it.
    """
    written = format_timestamp(timestamp)
    if not attested:
        if abs(timestamp - now) > grace:
            return "unattested", f"{UNATTESTED} (written {written})"
        return None
    if latest is not None and timestamp < latest[1] - grace:
        size, at = latest
        return "withheld", (
            f"not in the log, though written {written} and tree head {size} was published "
            f"{format_timestamp(at)}: withheld from the log (a signed checkpoint covers it)"
        )
    return None
