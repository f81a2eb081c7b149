"""Which workflow run chain each saga's journal belongs to: claims, and who holds what."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sagacity.store.db import Pool, translate_errors
from sagacity.store.placement import pool_schema, qualify

#: The claim itself, as a CTE's body: the saga's run chain, unless one holds it already.
CLAIM_ROW = """
    INSERT INTO {sagacity_saga_owner} (saga_id, workflow_id, first_run_id)
    VALUES (%(saga_id)s, %(workflow)s, %(run)s)
    ON CONFLICT (saga_id) DO NOTHING
    RETURNING workflow_id, first_run_id
"""

# Claim a saga for a run chain (first_run_id), or read who holds it: (workflow_id, first_run_id,
# claimed now, rows existed). Nothing when the holder committed after the statement began.
_CLAIM = (
    "WITH ins AS ("
    + CLAIM_ROW
    + """)
SELECT workflow_id, first_run_id, true,
       EXISTS (SELECT FROM {side_effect_journal} WHERE saga_id = %(saga_id)s)
FROM ins
UNION ALL
SELECT workflow_id, first_run_id, false, false
FROM {sagacity_saga_owner} WHERE saga_id = %(saga_id)s AND NOT EXISTS (SELECT FROM ins)
"""
)

_CHAINS = (
    "SELECT saga_id, workflow_id, first_run_id FROM {sagacity_saga_owner} WHERE saga_id = ANY(%s)"
)
_OWNERS = (
    "SELECT saga_id, workflow_id FROM {sagacity_saga_owner}"
    " WHERE saga_id = ANY(%s) OR workflow_id = ANY(%s) ORDER BY saga_id"
)


@dataclass(frozen=True, slots=True)
class SagaOwner:
    """The workflow run chain a saga's journal belongs to, and whether this claim made it."""

    saga_id: str
    workflow_id: str
    first_run_id: str
    claimed_now: bool
    #: with ``claimed_now``: whether the saga already had rows (written before owners existed)
    had_rows: bool = False


class SagaOwners:
    """The ``sagacity_saga_owner`` table: each saga claimed once, by the run chain starting it."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    async def claim(self, saga_id: str, *, workflow_id: str, first_run_id: str) -> SagaOwner:
        """Claim ``saga_id`` for a workflow run chain, or return the chain that holds it.

        One round trip on the way every saga starts: the claim also says whether rows exist.
        """
        params = {"saga_id": saga_id, "workflow": workflow_id, "run": first_run_id}
        with translate_errors(f"claim saga {saga_id!r}"):
            async with self._pool.connection() as conn:
                row = None
                while row is None:
                    # nothing: the holder committed after this statement's snapshot was taken,
                    # and the next statement sees it
                    cur = await conn.execute(
                        qualify(_CLAIM, await pool_schema(self._pool, conn)), params
                    )
                    row = await cur.fetchone()
                return SagaOwner(saga_id, row[0], row[1], claimed_now=row[2], had_rows=row[3])

    async def owners(
        self, *, saga_ids: Sequence[str] = (), workflow_ids: Sequence[str] = ()
    ) -> list[tuple[str, str]]:
        """``(saga_id, workflow_id)`` of the claimed sagas among ``saga_ids``, and of those the
        workflows ``workflow_ids`` claimed, ordered by saga id."""
        with translate_errors("read saga owners"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(
                    qualify(_OWNERS, await pool_schema(self._pool, conn)),
                    (list(saga_ids), list(workflow_ids)),
                )
                return [(str(r[0]), str(r[1])) for r in await cur.fetchall()]

    async def chains(self, saga_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        """The run chain that owns each claimed saga among ``saga_ids``: ``(workflow_id,
        first_run_id)`` by saga id (sagas journaled by no workflow are absent)."""
        with translate_errors("read saga owners"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(
                    qualify(_CHAINS, await pool_schema(self._pool, conn)), (list(saga_ids),)
                )
                return {str(r[0]): (str(r[1]), str(r[2])) for r in await cur.fetchall()}
