"""Retention in SQL: which sagas are past the retention period, and purging them.

Purges run as the role ``sagacity_retention`` (``schema/0002_retention_role.sql``), the only
role besides the tables' owner that may delete journal rows; the login that runs retention must
be a member of it. A saga is deleted whole, and only if its head is still the exported one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from psycopg import sql

from sagacity.journal import utc_micros
from sagacity.store.db import Pool, naive_utc, translate_errors
from sagacity.store.placement import JOURNAL, pool_schema, qualified, qualify

__all__ = ["RETENTION_ROLE", "ExpiredSaga", "RetentionStore"]

RETENTION_ROLE = "sagacity_retention"

# Statement templates: {table} is the table in the journal's schema (sagacity.store.placement).
# The sagas whose newest row is older than the cutoff.
_IDLE = """
    SELECT saga_id, count(*) AS rows, max(seq) AS head_seq, max(timestamp) AS last_at
    FROM {side_effect_journal}
    GROUP BY saga_id
    HAVING max(timestamp) < %(cutoff)s
"""

_EXPIRED = f"""
WITH s AS ({_IDLE})
SELECT s.saga_id, s.rows, s.head_seq, j.hash, s.last_at
FROM s JOIN {{side_effect_journal}} j ON j.saga_id = s.saga_id AND j.seq = s.head_seq
ORDER BY s.last_at, s.saga_id
"""

_EXPIRED_COUNT = f"SELECT count(*) FROM ({_IDLE}) s"

# Whether the retention role exists and holds DELETE on the journal (a migrator without
# CREATEROLE skips it, and nothing can purge then).
_ROLE_CAN_PURGE = """
SELECT EXISTS (
    SELECT FROM pg_roles
    WHERE rolname = %s AND has_table_privilege(oid, %s::regclass, 'DELETE')
)
"""

# Deletes the sagas whose current head is the given one; a saga that moved on is left alone.
_PURGE = """
WITH want AS (
    SELECT * FROM ROWS FROM (pg_catalog.unnest(%(ids)s::text[]),
        pg_catalog.unnest(%(seqs)s::bigint[]), pg_catalog.unnest(%(hashes)s::text[]))
        AS w(saga_id, seq, hash)
), heads AS (
    SELECT DISTINCT ON (j.saga_id) j.saga_id, j.seq, j.hash
    FROM {side_effect_journal} j JOIN want USING (saga_id)
    ORDER BY j.saga_id, j.seq DESC
), unchanged AS (
    SELECT w.saga_id FROM want w
    JOIN heads h ON h.saga_id = w.saga_id AND h.seq = w.seq AND h.hash = w.hash
), deleted AS (
    DELETE FROM {side_effect_journal} j USING unchanged u
    WHERE j.saga_id = u.saga_id
    RETURNING j.saga_id
)
SELECT saga_id, count(*) FROM deleted GROUP BY saga_id
"""

_LOCK = "LOCK TABLE {side_effect_journal} IN SHARE ROW EXCLUSIVE MODE"


@dataclass(frozen=True, slots=True)
class ExpiredSaga:
    """A saga whose newest row is older than the cutoff."""

    saga_id: str
    rows: int
    head_seq: int
    head_hash: str
    last_at: datetime


class RetentionStore:
    """Lists expired sagas and purges them as ``role``."""

    def __init__(self, pool: Pool, *, role: str = RETENTION_ROLE) -> None:
        self._pool = pool
        self._role = role

    async def expired(self, cutoff: datetime) -> list[ExpiredSaga]:
        """Sagas with no row at or after ``cutoff``, least recently active first."""
        with translate_errors("list sagas past the retention period"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(
                    qualify(_EXPIRED, await pool_schema(self._pool, conn)),
                    {"cutoff": naive_utc(cutoff)},
                )
                return [
                    ExpiredSaga(saga_id, rows, head_seq, head_hash, utc_micros(last_at))
                    for saga_id, rows, head_seq, head_hash, last_at in await cur.fetchall()
                ]

    async def count_expired(self, cutoff: datetime) -> int:
        """How many sagas have no row at or after ``cutoff``."""
        with translate_errors("count sagas past the retention period"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(
                    qualify(_EXPIRED_COUNT, await pool_schema(self._pool, conn)),
                    {"cutoff": naive_utc(cutoff)},
                )
                row = await cur.fetchone()
        assert row is not None  # count(*) always answers
        return int(row[0])

    async def role_can_purge(self) -> bool:
        """True when the purging role exists and may delete journal rows."""
        with translate_errors(f"look up the role {self._role}"):
            async with self._pool.connection() as conn:
                journal = qualified(await pool_schema(self._pool, conn), JOURNAL)
                cur = await conn.execute(_ROLE_CAN_PURGE, (self._role, journal))
                row = await cur.fetchone()
        return bool(row and row[0])

    async def purge(self, heads: Sequence[tuple[str, int, str]]) -> dict[str, int]:
        """Delete each ``(saga_id, head_seq, head_hash)`` saga whose head is still that one.

        Returns the rows deleted per saga; a saga missing from the answer was kept. Appends
        wait for the short table lock, so none can slip in between the check and the delete.
        """
        if not heads:
            return {}
        ids, seqs, hashes = (list(column) for column in zip(*heads, strict=True))
        with translate_errors(f"purge {len(heads)} sagas as {self._role}"):
            async with self._pool.connection() as conn, conn.transaction():
                schema = await pool_schema(self._pool, conn)
                await conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(self._role)))
                await conn.execute(qualify(_LOCK, schema))
                cur = await conn.execute(
                    qualify(_PURGE, schema), {"ids": ids, "seqs": seqs, "hashes": hashes}
                )
                return {saga_id: count for saga_id, count in await cur.fetchall()}
