"""The transparency log's tables: leaves in append order and the hashes of complete subtrees.

``sagacity_tlog_leaf`` maps leaf index to journal row (saga id, seq, the row's hash when it was
logged); ``sagacity_tlog_node`` holds the hash of every complete subtree by (level, index), level
0 being the leaf hashes. Both are insert-only. The Merkle arithmetic lives in
:mod:`sagacity.evidence.merkle`; this module only reads and writes rows.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Collection, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sagacity.errors import InvalidEntry
from sagacity.journal import utc_micros
from sagacity.store.db import Pool, translate_errors
from sagacity.store.placement import pool_schema, qualify

__all__ = ["LeafRow", "PendingRow", "SagaLogRow", "TlogStore"]

#: ``(level, index)`` of a complete subtree, as :mod:`sagacity.evidence.merkle` names it
Node = tuple[int, int]

# Key of the session advisory lock that makes one sequencer at a time (migrate's is 0x5A6AC171).
_SEQUENCER_LOCK = 0x5A6A7106

# Statement templates: {table} is the table in the journal's schema (sagacity.store.placement).

# Journal rows with no leaf yet, in the order the log appends them. The keys are found first,
# from the two (saga_id, seq) indexes alone (a merge anti-join of index-only scans, once
# autovacuum has marked the pages all-visible); only the rows found are then read from the
# journal. Asked for the row's columns at once, the planner walks the journal's rows themselves:
# 2.5x slower for a pass that finds nothing new in a million rows.
_PENDING = """
WITH missing AS MATERIALIZED (
    SELECT j.saga_id, j.seq
    FROM {side_effect_journal} j
    WHERE NOT EXISTS (
        SELECT FROM {sagacity_tlog_leaf} l WHERE l.saga_id = j.saga_id AND l.seq = j.seq
    )
)
SELECT j.saga_id, j.seq, j.hash, j.timestamp
FROM missing m
JOIN {side_effect_journal} j ON j.saga_id = m.saga_id AND j.seq = m.seq
ORDER BY j.timestamp, j.saga_id, j.seq
"""

# Every leaf in index order, beside the journal row it names (NULLs: the row is gone) and the
# stored leaf hash (NULL: missing).
_LEAVES = """
SELECT l.idx, l.saga_id, l.seq, l.row_hash, j.hash, n.hash, j.timestamp
FROM {sagacity_tlog_leaf} l
LEFT JOIN {side_effect_journal} j ON j.saga_id = l.saga_id AND j.seq = l.seq
LEFT JOIN {sagacity_tlog_node} n ON n.level = 0 AND n.idx = l.idx
ORDER BY l.idx
"""

# One saga's journal rows beside its leaves, by seq: a row the log lacks has no leaf, a leaf
# whose row is gone no row. Both sides are read through their (saga_id, seq) indexes.
_SAGA_LOG = """
SELECT coalesce(j.seq, l.seq), j.hash, j.timestamp, l.idx, l.row_hash
FROM (SELECT seq, hash, timestamp FROM {side_effect_journal} WHERE saga_id = %(saga)s) j
FULL JOIN (SELECT seq, idx, row_hash FROM {sagacity_tlog_leaf} WHERE saga_id = %(saga)s) l
    ON l.seq = j.seq
ORDER BY 1
"""

_SIZE = "SELECT max(idx) FROM {sagacity_tlog_leaf}"
_NODES = (
    "SELECT n.level, n.idx, n.hash FROM {sagacity_tlog_node} n"
    " JOIN ROWS FROM (pg_catalog.unnest(%s::smallint[]), pg_catalog.unnest(%s::bigint[]))"
    " AS w(level, idx)"
    " ON n.level = w.level AND n.idx = w.idx"
)
_COPY_LEAVES = "COPY {sagacity_tlog_leaf} (idx, saga_id, seq, row_hash) FROM STDIN"
_COPY_NODES = "COPY {sagacity_tlog_node} (level, idx, hash) FROM STDIN"
_SAGA_LEAVES = "SELECT seq, idx, row_hash FROM {sagacity_tlog_leaf} WHERE saga_id = %s"


@dataclass(frozen=True, slots=True)
class PendingRow:
    """A journal row the log does not hold yet."""

    saga_id: str
    seq: int
    hash: str
    timestamp: datetime


@dataclass(frozen=True, slots=True)
class LeafRow:
    """One leaf as stored, with what the journal holds for it now."""

    index: int
    saga_id: str
    seq: int
    #: the row's hash when it was logged
    row_hash: str
    #: the row's hash in the journal now; None: the row is gone
    journal_hash: str | None
    #: the stored level-0 node; None: missing
    leaf_hash: bytes | None
    #: the journal row's timestamp now; None: the row is gone
    timestamp: datetime | None = None


@dataclass(frozen=True, slots=True)
class SagaLogRow:
    """One seq of a saga: its journal row now (hash, timestamp) and its leaf, either may be
    missing (None)."""

    seq: int
    hash: str | None
    timestamp: datetime | None
    #: the leaf's index; None: the log does not hold this row
    index: int | None
    #: the row's hash when it was logged
    row_hash: str | None


class TlogStore:
    """Reads and appends the log's tables over a connection pool (autocommit or not)."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    @property
    def pool(self) -> Pool:
        """The pool it reads and writes through (the journal's, for the rows it logs)."""
        return self._pool

    @contextlib.asynccontextmanager
    async def sequencer(self) -> AsyncIterator[None]:
        """Hold the sequencer lock while the body runs, waiting for another holder to finish.

        A session advisory lock on a connection kept for the body: released at its end, or by
        the server when the holder's process dies. It spares work, not safety: :meth:`append`
        refuses leaves at an index someone else filled.
        """
        with translate_errors("take the transparency log's sequencer lock"):
            async with self._pool.connection() as conn:
                await conn.execute("SELECT pg_catalog.pg_advisory_lock(%s)", (_SEQUENCER_LOCK,))
                try:
                    yield
                finally:
                    await conn.execute(
                        "SELECT pg_catalog.pg_advisory_unlock(%s)", (_SEQUENCER_LOCK,)
                    )

    async def database(self) -> str:
        """The name of the database the log lives in."""
        with translate_errors("read the database's name"):
            async with self._pool.connection() as conn:
                cur = await conn.execute("SELECT current_database()")
                row = await cur.fetchone()
        assert row is not None  # the function always returns a row
        return str(row[0])

    async def size(self) -> int:
        """How many leaves the log holds: one more than the highest index (0 when empty)."""
        with translate_errors("read the transparency log's size"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(qualify(_SIZE, await pool_schema(self._pool, conn)))
                row = await cur.fetchone()
        return 0 if row is None or row[0] is None else int(row[0]) + 1

    async def nodes(self, wanted: Collection[Node]) -> dict[Node, bytes]:
        """The stored hashes of the ``wanted`` subtrees; absent ones are left out."""
        if not wanted:
            return {}
        levels = [level for level, _ in wanted]
        indexes = [index for _, index in wanted]
        with translate_errors("read the transparency log's subtree hashes"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(
                    qualify(_NODES, await pool_schema(self._pool, conn)), (levels, indexes)
                )
                return {
                    (level, index): bytes(digest) for level, index, digest in await cur.fetchall()
                }

    async def append(
        self,
        start: int,
        leaves: Sequence[tuple[str, int, str]],
        nodes: Sequence[tuple[Node, bytes]],
    ) -> None:
        """Store ``leaves`` (saga id, seq, row hash) at ``start``, ``start + 1``, … and the
        subtree hashes they complete, all or none; :class:`InvalidEntry` if the log no longer
        ends at ``start`` or a row is logged already."""
        with translate_errors(f"append {len(leaves)} leaves to the transparency log at {start}"):
            async with self._pool.connection() as conn, conn.transaction():
                schema = await pool_schema(self._pool, conn)
                cur = await conn.execute(qualify(_SIZE, schema))
                row = await cur.fetchone()
                end = 0 if row is None or row[0] is None else int(row[0]) + 1
                if end != start:
                    raise InvalidEntry(f"the log ends at {end}, not at {start}: another sequencer?")
                async with conn.cursor().copy(qualify(_COPY_LEAVES, schema)) as copy:
                    for offset, (saga_id, seq, row_hash) in enumerate(leaves):
                        await copy.write_row((start + offset, saga_id, seq, row_hash))
                async with conn.cursor().copy(qualify(_COPY_NODES, schema)) as copy:
                    for (level, index), digest in nodes:
                        await copy.write_row((level, index, digest))

    async def saga_leaves(self, saga_id: str) -> dict[int, tuple[int, str]]:
        """``seq -> (leaf index, row hash when logged)`` for the saga's logged rows."""
        with translate_errors(f"read the leaves of saga {saga_id!r}"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(
                    qualify(_SAGA_LEAVES, await pool_schema(self._pool, conn)), (saga_id,)
                )
                return {seq: (index, row_hash) for seq, index, row_hash in await cur.fetchall()}

    async def pending(self, *, batch: int = 5000) -> AsyncGenerator[PendingRow, None]:
        """Journal rows with no leaf, by (timestamp, saga id, seq), fetched ``batch`` at a time.

        One scan of the journal against the leaves; the cursor's snapshot is taken when it
        opens, so rows committed later wait for the next pass.
        """
        with translate_errors("read the journal rows the transparency log lacks"):
            async with aclosing(self._rows(_PENDING, batch)) as rows:
                async for saga_id, seq, row_hash, timestamp in rows:
                    yield PendingRow(saga_id, seq, row_hash, utc_micros(timestamp))

    async def leaves(self, *, batch: int = 5000) -> AsyncGenerator[LeafRow, None]:
        """Every leaf in index order, with the journal's row hash and the stored leaf hash."""
        with translate_errors("read the transparency log's leaves"):
            async with aclosing(self._rows(_LEAVES, batch)) as rows:
                async for index, saga_id, seq, row_hash, journal_hash, node, at in rows:
                    yield LeafRow(
                        index,
                        saga_id,
                        seq,
                        row_hash,
                        journal_hash,
                        None if node is None else bytes(node),
                        None if at is None else utc_micros(at),
                    )

    async def saga_log(
        self, saga_id: str, *, batch: int = 5000
    ) -> AsyncGenerator[SagaLogRow, None]:
        """``saga_id``'s journal rows and leaves side by side, by seq, ``batch`` at a time."""
        with translate_errors(f"read saga {saga_id!r} beside its leaves"):
            async with aclosing(self._rows(_SAGA_LOG, batch, {"saga": saga_id})) as rows:
                async for seq, row_hash, at, index, logged in rows:
                    yield SagaLogRow(
                        seq, row_hash, None if at is None else utc_micros(at), index, logged
                    )

    async def _rows(
        self, template: str, batch: int, params: dict[str, object] | None = None
    ) -> AsyncGenerator[tuple[Any, ...], None]:
        # a server-side cursor: rows arrive `batch` at a time, memory stays flat
        async with (
            self._pool.connection() as conn,
            conn.transaction(),
            conn.cursor(name="sagacity_tlog_rows") as cur,
        ):
            cur.itersize = batch
            await cur.execute(qualify(template, await pool_schema(self._pool, conn)), params)
            async for row in cur:
                yield row
