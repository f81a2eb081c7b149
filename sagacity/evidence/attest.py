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
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import chain

from sagacity.evidence.checkpoints import Checkpoint, CheckpointDir, CheckpointLog, Kind
from sagacity.journal import GENESIS_HASH, Entry, entry_hash, format_timestamp
from sagacity.store.journal import JournalStore, read_spans

__all__ = ["UNATTESTED", "Attestor", "Turns", "unlogged"]

#: What a row no trusted checkpoint covers is, past the grace period.
UNATTESTED = "unattested: no signed checkpoint covers it: forged, or written behind Sagacity's back"

# rows read at a time while walking a chain up to its checkpoint
_CHUNK = 1000
# prepare() reads ahead the rows of chains shorter than this up to their checkpoint (a longer
# one is read when asked, _CHUNK rows at a time), about _GROUP_ROWS rows a query, and holds at
# most about _AHEAD_ROWS rows or _AHEAD_BYTES of their input and payload for a batch
_SPAN = 256
_GROUP_ROWS = 128
_AHEAD_ROWS = 10_000
_AHEAD_BYTES = 16 * 1024 * 1024
# checkpoint logs kept parsed between passes (with their signature verdicts), by saga
_LOGS_KEPT = 4096
# checkpoint logs read in one thread hop (a hop a saga cost more than reading a small file)
_LOGS_A_HOP = 32


#: how long a transparency log pass runs (its own work, or waits) before it gives the event
#: loop a turn at the next chance (seconds)
TURN_S = 0.001


class Turns:
    """Gives the event loop a turn once :data:`TURN_S` has passed since the last: the
    sequencer runs in the worker's event loop, and the worker's tool calls must not wait on a
    pass's CPU-bound stretches (checking signatures, walking chains read ahead)."""

    def __init__(self) -> None:
        self._every_s = TURN_S
        self._last = time.monotonic()

    async def take(self) -> None:
        """Yield to the event loop if this stretch has run :data:`TURN_S` or longer."""
        if time.monotonic() - self._last >= self._every_s:
            await asyncio.sleep(0)
            self._last = time.monotonic()


@dataclass(slots=True)
class _Covered:
    """One saga's rows from ``start`` that a checkpoint attests: seq -> the attested hash. Each
    row's verdict is its own (:func:`_reach`), whichever row was asked first."""

    start: int
    hashes: dict[int, str] = field(default_factory=dict)


class Attestor:
    """Answers "does a trusted checkpoint cover row (saga, seq) hashed h?" for one pass, the
    checkpoints read from ``checkpoints`` and trusted as it trusts them (its keys).

    Per saga and pass: one read of its checkpoint log (kept parsed while the file's size and
    modification time stay the same), one signature check in the usual case (the highest
    checkpoint; below a broken link, each lower one once), and one read of the rows from the
    first asked-about seq to that checkpoint; :meth:`prepare` does these for a batch of sagas
    together (the files 32 to a thread hop, the short chains' rows about 128 to a query). The
    attested hashes are kept for the pass, at most ``max_hashes`` in all (the sagas used least
    recently are dropped, and read again if asked about again), so memory stays bounded.
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
        # what prepare() read ahead for the batch being asked about
        self._loaded: dict[str, CheckpointLog] = {}
        self._ahead: dict[str, _Ahead] = {}

    def begin(self, *, signed_before: datetime | None = None) -> None:
        """Start a pass: forget what the last one attested. ``signed_before``: ignore
        checkpoints signed at or after it (a pass counts only checkpoints signed before it began,
        so a row it reads is attested with the checkpoint signed for it)."""
        self._covered.clear()
        self._held = 0
        self._before = None if signed_before is None else format_timestamp(signed_before)
        self._loaded = {}
        self._ahead = {}

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
        """Read ahead what :meth:`covers` will read for ``asked`` (saga id, seq), so that most
        of its answers need no round trip of their own: the sagas' checkpoint logs (a few to a
        thread hop), and the rows of the short chains, from the lowest seq asked up to the highest
        trusted checkpoint, many sagas a query. What a batch reads ahead is held until the next
        (about ``_AHEAD_ROWS`` rows or ``_AHEAD_BYTES`` of their input and payload at most;
        past that a saga's rows are read when asked). :meth:`covers` answers as it would
        without."""
        self._loaded = {}
        self._ahead = {}
        firsts: dict[str, int] = {}
        for saga_id, seq in asked:
            covered = self._covered.get(saga_id)
            if (covered is None or seq < covered.start) and seq < firsts.get(saga_id, seq + 1):
                firsts[saga_id] = seq
        if not firsts:
            return
        spans: dict[str, tuple[int, int]] = {}
        turns = Turns()
        names = list(firsts)
        for at in range(0, len(names), _LOGS_A_HOP):
            # files are read in a thread: a slow disk, or a file swapped for a pipe by someone
            # who can write the folder, holds that thread, never the worker's event loop
            hop = names[at : at + _LOGS_A_HOP]
            for saga_id, log in zip(
                hop, await asyncio.to_thread(self._read_logs, hop), strict=True
            ):
                await turns.take()
                self._loaded[saga_id] = log
                first = firsts[saga_id]
                top, _ = self._signed(log, first)
                if top is not None and top.seq - first < _SPAN:
                    spans[saga_id] = (_read_after(first), top.seq)
        # a query reads about _GROUP_ROWS rows (at most one saga's span more): turning its rows
        # into entries holds the event loop; the batch holds at most about _AHEAD_ROWS rows or
        # _AHEAD_BYTES of input and payload
        held = size = grouped = 0
        group: dict[str, tuple[int, int]] = {}
        for n, (saga_id, (after, last)) in enumerate(spans.items(), start=1):
            group[saga_id] = (after, last)
            grouped += last - after
            if grouped < _GROUP_ROWS and n < len(spans):
                continue
            found = await read_spans(self._journal.pool, group)
            for name, (start, stop) in group.items():
                ahead = self._ahead[name] = _Ahead(start, stop, found.get(name, []))
                size += sum(len(e.input) + len(e.payload) for e in ahead.rows)
            held += grouped
            group, grouped = {}, 0
            if held >= _AHEAD_ROWS or size >= _AHEAD_BYTES:
                return

    async def _attest(self, saga_id: str, seq: int) -> _Covered:
        """The rows from ``seq`` up to the highest checkpoint that attests them."""
        log = self._loaded.get(saga_id)
        if log is None:
            # read in a thread: the worker running the sequencer keeps serving its tool calls
            # while a long saga's file is parsed
            log = await asyncio.to_thread(self.log, saga_id)
        top, rest = self._signed(log, seq)
        if top is None:
            return _Covered(seq)
        links = await self._links(saga_id, seq, top.seq)
        return _Covered(seq, _reach(links, chain([top], rest), seq, top.seq))

    def _read_logs(self, names: list[str]) -> list[CheckpointLog]:
        return [self.log(saga_id) for saga_id in names]

    def _signed(
        self, log: CheckpointLog, seq: int
    ) -> tuple[Checkpoint | None, Iterator[Checkpoint]]:
        """``log``'s highest checkpoint at ``seq`` or above that verifies (signed before the
        pass began), and the rest of them, highest first, checked as they are reached."""
        signed = (
            cp for cp in log.signed(lowest=seq) if self._before is None or cp.at < self._before
        )
        return next(signed, None), signed

    async def _links(self, saga_id: str, first: int, last: int) -> dict[int, str]:
        """The rows of ``first..last`` that hash as their fields and the stored hash of the row
        before them say (that row present; genesis before row 1): seq -> stored hash. All of
        the range is read once, whatever breaks in it."""
        links = _Links(first)
        ahead = self._ahead.get(saga_id)
        if ahead is not None and ahead.after <= links.after and last <= ahead.last:
            links.take(e for e in ahead.rows if links.after < e.seq <= last)
            return links.hashes
        after = links.after
        while after < last:
            rows = await self._journal.after(saga_id, after, limit=min(_CHUNK, last - after))
            if not rows:
                break
            links.take(rows)
            after = rows[-1].seq
        return links.hashes


@dataclass(frozen=True, slots=True)
class _Ahead:
    """A saga's rows after seq ``after`` through ``last`` (those present), read ahead."""

    after: int
    last: int
    rows: list[Entry]


class _Links:
    """A saga's rows from ``first`` checked one by one against the row before each: the hashes
    of those whose link holds."""

    def __init__(self, first: int) -> None:
        self.first = first
        #: row ``first - 1`` gives row ``first``'s prev hash, so the check reads from it
        self.after = _read_after(first)
        self.hashes: dict[int, str] = {}
        self._prev: tuple[int, str] | None = (0, GENESIS_HASH) if first == 1 else None

    def take(self, rows: Iterable[Entry]) -> None:
        """Check ``rows`` (after those taken before, in seq order; some may be missing)."""
        for row in rows:
            prev = self._prev
            if (
                row.seq >= self.first
                and prev is not None
                and prev[0] == row.seq - 1
                and entry_hash(prev[1], row) == row.hash
            ):
                self.hashes[row.seq] = row.hash
            self._prev = (row.seq, row.hash)


def _read_after(first: int) -> int:
    """The seq after which a check of rows from ``first`` reads: row ``first - 1`` gives row
    ``first``'s prev hash (none is read before row 1)."""
    return first - 2 if first > 1 else 0


def _reach(
    links: dict[int, str], signed: Iterator[Checkpoint], first: int, top: int
) -> dict[int, str]:
    """The rows of ``first..top`` a checkpoint attests: those from which every link holds up to
    a row some checkpoint of ``signed`` (highest first, checked as reached) names with its
    hash. One sweep down from ``top``: a checkpoint is looked at only below a broken link."""
    attested: dict[int, str] = {}
    cp = next(signed, None)
    reaching = False
    for seq in range(top, first - 1, -1):
        row_hash = links.get(seq)
        if row_hash is None:
            reaching = False  # missing, or not hashed as its fields and the row before it say
            continue
        while not reaching and cp is not None and cp.seq >= seq:
            if cp.seq == seq and cp.hash == row_hash:
                reaching = True  # kept: the next is checked (its signature) only if needed
            else:
                cp = next(signed, None)
        if reaching:
            attested[seq] = row_hash
    return attested


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
