"""Compensation locks: one attempt at a time at each call's undo, and which attempts run now."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import psycopg

from sagacity.store.db import Pool, new_pool, translate_errors

# First key space of the advisory locks that make one compensation attempt at a time.
_UNDO_LOCK_SPACE = 0x5A6B

_LOCK = "SELECT pg_catalog.pg_try_advisory_lock(pg_catalog.hashtextextended(%s, 0))"
_UNLOCK = "SELECT pg_catalog.pg_advisory_unlock(pg_catalog.hashtextextended(%s, 0))"


@functools.cache
def _unlock_if(query: str) -> str:
    """The unlock, when ``query`` finds a row (built once per query text)."""
    return f"{_UNLOCK} WHERE EXISTS ({query})"


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


class HeldLock:
    """An undo lock as :meth:`UndoLocks.claim` tried it: its connection, whether it is held,
    and the rows the claim read."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], key: str) -> None:
        self.conn = conn
        self.key = key
        self.locked = True  # until the server said
        self.rows: list[tuple[Any, ...] | None] = []
        #: a write over the connection failed: the lock goes with the session, not by unlocking
        self.spoiled = False

    async def write_then_release(
        self,
        write: tuple[str, Sequence[object] | Mapping[str, object]],
        done: tuple[str, Sequence[object]],
    ) -> tuple[Any, ...] | None:
        """Run ``write`` (a statement answering one row) in a transaction of its own and, once
        that committed, release the lock if ``done`` (a query) finds a row: one round trip, the
        commit before the release. ``write``'s row."""
        try:
            async with self.conn.pipeline():
                await self.conn.execute("BEGIN")
                cur = await self.conn.execute(*write)
                await self.conn.execute("COMMIT")
                released = await self.conn.execute(_unlock_if(done[0]), (self.key, *done[1]))
            row = await cur.fetchone()
            if await released.fetchone() is not None:
                self.locked = False
        except BaseException:
            self.spoiled = True
            raise
        return row


class UndoLocks:
    """Session advisory locks on (saga, seq), each held on a connection of its own.

    :meth:`exclusive` holds a connection for as long as its body runs, and the body uses the
    journal meanwhile: on the journal's pool, many at once would take every connection and wait
    for one forever. They get a small pool of their own, made like ``pool`` on first use, that
    keeps one connection once made: compensations come rarely, and a pool left to shrink to
    none would open a new session (about 25 ms here, more with TLS) for each of them.
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
                    min_size=1,
                    max_size=self._connections,
                    timeout=self._pool.timeout,
                )
                # not waiting for its first connection here: claims made meanwhile would queue
                # on this lock, each waiting a whole connect timeout in an outage, one by one
                await pool.open()
                self._lock_pool = pool
            return self._lock_pool

    @contextlib.asynccontextmanager
    async def exclusive(self, saga_id: str, seq: int) -> AsyncIterator[bool]:
        """Hold a lock on (saga, seq) while the body runs; yields False if another holder has it.

        A session advisory lock on a pooled connection kept for the body: released when the body
        ends, or by the server when the holder's connection dies with its process.
        """
        async with self.claim(saga_id, seq) as held:
            yield held.locked

    @contextlib.asynccontextmanager
    async def claim(
        self, saga_id: str, seq: int, reads: Sequence[tuple[str, Sequence[object]]] = ()
    ) -> AsyncIterator[HeldLock]:
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
        held = HeldLock(conn, key)
        try:
            with translate_errors(where):
                async with conn.pipeline():
                    lock = await conn.execute(_LOCK, (key,))
                    cursors = [await conn.execute(sql, params) for sql, params in reads]
                row = await lock.fetchone()
                held.rows = [await cur.fetchone() for cur in cursors]
            held.locked = bool(row and row[0])
            yield held
            if held.locked and not held.spoiled:
                with translate_errors(where):
                    await conn.execute(_UNLOCK, (key,))
                held.locked = False
        finally:
            if held.locked:
                # the body raised while holding the lock, or a write over its connection failed:
                # closing the session releases it, rather than handing a locked session to the
                # pool's next user
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
