"""Compensation locks: one attempt at a time at each call's undo, and which attempts run now."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from sagacity.store.db import Pool, new_pool, translate_errors

# First key space of the advisory locks that make one compensation attempt at a time.
_UNDO_LOCK_SPACE = 0x5A6B

_LOCK = "SELECT pg_catalog.pg_try_advisory_lock(pg_catalog.hashtextextended(%s, 0))"
_UNLOCK = "SELECT pg_catalog.pg_advisory_unlock(pg_catalog.hashtextextended(%s, 0))"

# Which of the given calls' compensation locks (:meth:`UndoLocks.exclusive`) a session holds:
# a session advisory lock on one bigint key shows in pg_locks as its high and low halves.
_UNDOING = """
SELECT k.seq
FROM ROWS FROM (pg_catalog.unnest(%s::bigint[]), pg_catalog.unnest(%s::text[])) AS k(seq, key)
WHERE EXISTS (
    SELECT FROM pg_catalog.pg_locks AS l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_catalog.pg_database
                        WHERE datname = pg_catalog.current_database())
      AND ((l.classid::bigint << 32) | l.objid::bigint)
          = pg_catalog.hashtextextended(k.key, 0)
)
ORDER BY k.seq
"""


class UndoLocks:
    """Session advisory locks on (saga, seq), each held on a connection of its own.

    :meth:`exclusive` holds a connection for as long as its body runs, and the body uses the
    journal meanwhile: on the journal's pool, many at once would take every connection and wait
    for one forever. They get a small pool of their own, made like ``pool`` on first use.
    """

    def __init__(self, pool: Pool, *, connections: int) -> None:
        self._pool = pool
        self._connections = connections
        self._lock_pool: Pool | None = None
        self._opening = asyncio.Lock()

    async def close(self) -> None:
        """Close the connections :meth:`exclusive` used (the journal's pool is not this one's)."""
        if self._lock_pool is not None:
            await self._lock_pool.close()
            self._lock_pool = None

    async def _locks(self) -> Pool:
        async with self._opening:
            if self._lock_pool is None:
                conninfo, kwargs = self._pool.conninfo, self._pool.kwargs
                if not isinstance(conninfo, str) or not isinstance(kwargs, dict | None):
                    raise TypeError("exclusive() needs a pool made from a connection string")
                pool = new_pool(
                    conninfo,
                    kwargs=kwargs,
                    min_size=0,
                    max_size=self._connections,
                    timeout=self._pool.timeout,
                )
                await pool.open()
                self._lock_pool = pool
            return self._lock_pool

    @contextlib.asynccontextmanager
    async def exclusive(self, saga_id: str, seq: int) -> AsyncIterator[bool]:
        """Hold a lock on (saga, seq) while the body runs; yields False if another holder has it.

        A session advisory lock on a pooled connection kept for the body: released when the body
        ends, or by the server when the holder's connection dies with its process.
        """
        async with self.claim(saga_id, seq) as (locked, _):
            yield locked

    @contextlib.asynccontextmanager
    async def claim(
        self, saga_id: str, seq: int, reads: Sequence[tuple[str, Sequence[object]]] = ()
    ) -> AsyncIterator[tuple[bool, list[tuple[Any, ...] | None]]]:
        """:meth:`exclusive`, and ``reads`` (statements, each answering one row or none) run
        after the lock is tried, in the same round trip (a pipeline): whether the lock is held,
        and each read's row. Each read sees what was committed before the lock was taken
        (READ COMMITTED: a statement's snapshot is taken when it starts, after the one before
        it ended), so a holder that wrote before it unlocked is seen."""
        where = f"lock saga {saga_id!r} seq {seq}"
        key = _undo_key(saga_id, seq)
        with translate_errors(where):
            locks = await self._locks()
            conn = await locks.getconn()
        # until the answer is read, the lock may be held: a failure closes the session
        locked = True
        try:
            with translate_errors(where):
                async with conn.pipeline():
                    lock = await conn.execute(_LOCK, (key,))
                    cursors = [await conn.execute(sql, params) for sql, params in reads]
                row = await lock.fetchone()
                rows = [await cur.fetchone() for cur in cursors]
            locked = bool(row and row[0])
            yield locked, rows
            if locked:
                with translate_errors(where):
                    await conn.execute(_UNLOCK, (key,))
                locked = False
        finally:
            if locked:
                # the body raised while holding the lock: closing the session releases it,
                # rather than handing a locked session to the pool's next user
                await conn.close()
            await locks.putconn(conn)

    async def undoing(self, saga_id: str, seqs: Sequence[int]) -> list[int]:
        """Those of the calls at ``seqs`` whose compensation is running now: an attempt holds
        its :meth:`exclusive` lock (from just before it checks the halts until its row is
        written, or its worker's connection is gone)."""
        if not seqs:
            return []
        with translate_errors(f"read the compensations running in saga {saga_id!r}"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(
                    _UNDOING, (list(seqs), [_undo_key(saga_id, seq) for seq in seqs])
                )
                return [int(row[0]) for row in await cur.fetchall()]


def _undo_key(saga_id: str, seq: int) -> str:
    """What the compensation lock of the call at ``seq`` is keyed by (hashed to a bigint)."""
    return f"{_UNDO_LOCK_SPACE}:{saga_id}:{seq}"
