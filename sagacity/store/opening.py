"""A new saga's claim and its first call's INTENT, written in one statement (one commit)."""

from __future__ import annotations

from sagacity.journal import GENESIS_HASH, Entry
from sagacity.store.db import translate_errors
from sagacity.store.journal import INSERT_ROW, WRITER, JournalStore, halts_refuse, insert_params
from sagacity.store.owners import CLAIM_ROW, SagaOwner
from sagacity.store.placement import pool_schema, qualify

__all__ = ["claim_with_intent"]

# _CLAIM (owners.py) and _INSERT (journal.py) at seq 1 in one statement: the INTENT goes in only
# when this statement claimed the saga and found no rows; else only the claim's answer, as
# _CLAIM gives it. A claim found also reads the hash at seq 1: an earlier try of this very
# write may have committed both (its answer lost), and the row it sealed is this one.
_CLAIM_WITH_INTENT = (
    "WITH claim AS ("
    + CLAIM_ROW
    + """), had AS (
    SELECT EXISTS (SELECT FROM {side_effect_journal} WHERE saga_id = %(saga_id)s) AS rows
), writer AS (
    """
    + WRITER
    + """
), ins AS (
    """
    + INSERT_ROW
    + """
    FROM claim, had, writer WHERE NOT had.rows
    ON CONFLICT (saga_id, seq) DO NOTHING
    RETURNING seq
)
SELECT claim.workflow_id, claim.first_run_id, true, had.rows, EXISTS (SELECT FROM ins),
       NULL::text
FROM claim, had
UNION ALL
SELECT workflow_id, first_run_id, false, false, false,
       (SELECT hash::text FROM {side_effect_journal} WHERE saga_id = %(saga_id)s AND seq = 1)
FROM {sagacity_saga_owner} WHERE saga_id = %(saga_id)s AND NOT EXISTS (SELECT FROM claim)
"""
)


async def claim_with_intent(
    journal: JournalStore, intent: Entry, *, workflow_id: str, first_run_id: str, task_queue: str
) -> tuple[SagaOwner, Entry | None]:
    """Claim ``intent``'s saga for a run chain (:meth:`JournalStore.claim`) and, in the same
    statement and commit, write ``intent`` (sealed at seq 1 after the genesis hash) when this
    claim is new and the saga has no rows; ``(owner, intent)`` when it went in, else
    ``(owner, None)`` and nothing but the claim was written.

    Found claimed by this chain with ``intent`` itself at seq 1 (an earlier try committed both
    and its answer was lost): as if written now. An INTENT a halt covers raises :class:`Halted`
    and writes nothing, not even the claim. ``task_queue``: as for :meth:`JournalStore.append_at`.
    """
    assert intent.seq == 1, "a saga's first row"
    params = {
        **insert_params(intent, GENESIS_HASH, task_queue),
        "workflow": workflow_id,
        "run": first_run_id,
    }
    with translate_errors(f"claim saga {intent.saga_id!r}"), halts_refuse(intent):
        async with journal.pool.connection() as conn:
            statement = qualify(_CLAIM_WITH_INTENT, await pool_schema(journal.pool, conn))
            row = None
            while row is None:
                # nothing: the holder committed after this statement's snapshot was taken,
                # and the next statement sees it
                cur = await conn.execute(statement, params)
                row = await cur.fetchone()
    holder, run, claimed_now, had_rows, written, first_hash = row
    if not claimed_now and run == first_run_id and first_hash == intent.hash:
        return SagaOwner(intent.saga_id, holder, run, claimed_now=True), intent
    owner = SagaOwner(intent.saga_id, holder, run, claimed_now=claimed_now, had_rows=had_rows)
    return owner, intent if written else None
