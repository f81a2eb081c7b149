"""A compensation whose COMPENSATED write loses its answer, or its connection, between the undo
and the write (the write rides the undo lock's connection, pipelined with the commit and the
unlock): the undo runs once, the row is written once, and an overlapping attempt that arrives
afterwards reports that row instead of undoing again.

The activity runs in Temporal's ActivityEnvironment; the undo itself arms the relay of
tests/temporal/test_lost_commit_ack.py, so the next statements sent are the claimed write's.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
from temporalio.testing import ActivityEnvironment

from sagacity import CompensationContext, compensable
from sagacity.journal import Phase
from sagacity.store import ApprovalStore, JournalStore, open_pool
from sagacity.temporal.activities import SagaActivities
from sagacity.tools import ToolRegistry
from tests.temporal.test_compensation_attempts import executed_call, undo_of
from tests.temporal.test_lost_commit_ack import AckLosingRelay, relayed

__all__ = ["relayed"]  # the fixture, used here

UNDONE: list[dict[str, Any]] = []
#: what the undo does once it has run: arm the relay (lose the write's answer) or cut the lock's
#: session (lose the write itself)
AFTER_UNDO: list[Any] = []


async def _undo(ctx: CompensationContext) -> None:
    UNDONE.append({"input": ctx.input, "result": ctx.result})
    for then in AFTER_UNDO:
        await then()


@compensable(by=_undo)
async def book(room: str) -> dict[str, str]:
    """Book a room."""
    return {"booking": f"b-{room}"}


async def test_a_lost_answer_to_the_claimed_write_undoes_once_and_writes_once(
    relayed: tuple[AckLosingRelay, str], journal: JournalStore, approvals: ApprovalStore
) -> None:
    relay, url = relayed
    UNDONE.clear()
    saga_id = f"undo-ack-{uuid.uuid4().hex[:8]}"
    head = await executed_call(journal, saga_id)
    request = undo_of(saga_id, head)

    async def arm() -> None:
        relay.arm()

    AFTER_UNDO[:] = [arm]
    pool = await open_pool(url, min_size=1, max_size=4)
    try:
        store = JournalStore(pool)
        acts = SagaActivities(store, approvals, ToolRegistry([book]))
        refs = await ActivityEnvironment().run(acts.compensate, request)
        AFTER_UNDO.clear()
        # a later attempt (the first taken for dead) finds the row, the lock free: no second undo
        again = await ActivityEnvironment().run(acts.compensate, request)
        await store.close()
    finally:
        AFTER_UNDO.clear()
        await pool.close()
    assert relay.lost == 1  # the pipelined BEGIN; INSERT; COMMIT; unlock lost its answer
    assert len(UNDONE) == 1
    assert refs == again
    rows = await journal.read(saga_id)
    assert [r.phase for r in rows] == [Phase.INTENT, Phase.EXECUTED, Phase.COMPENSATED]
    assert await journal.undoing(saga_id, [1]) == []  # nobody holds the lock


async def test_a_lock_session_cut_after_the_undo_still_writes_the_row_once(
    database_url: str, journal: JournalStore, approvals: ApprovalStore
) -> None:
    """The undo lock's own session dies after the undo (before its write is sent): the write
    falls back to the outage-waiting append, the undo is not run again, and the lock (gone with
    the session) is not left held."""
    UNDONE.clear()
    saga_id = f"undo-cut-{uuid.uuid4().hex[:8]}"
    head = await executed_call(journal, saga_id)
    request = undo_of(saga_id, head)
    pool = await open_pool(database_url, min_size=1, max_size=4)
    store = JournalStore(pool)

    async def cut() -> None:
        # the session holding this call's undo lock, ended from outside
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_locks"
                " WHERE locktype = 'advisory' AND granted AND pid <> pg_catalog.pg_backend_pid()"
                " AND pid IN (SELECT pid FROM pg_catalog.pg_stat_activity"
                " WHERE datname = pg_catalog.current_database())"
                " AND (classid::bigint << 32 | objid::bigint) ="
                " pg_catalog.hashtextextended(%s, 0)",
                (f"{0x5A6B}:{saga_id}:1",),  # the undo lock's key (store.undo_locks),
            )
            killed = [r[0] for r in await cur.fetchall()]
        assert killed == [True], killed
        await asyncio.sleep(0.2)

    AFTER_UNDO[:] = [cut]
    try:
        acts = SagaActivities(store, approvals, ToolRegistry([book]))
        refs = await ActivityEnvironment().run(acts.compensate, request)
        AFTER_UNDO.clear()
        again = await ActivityEnvironment().run(acts.compensate, request)
    finally:
        AFTER_UNDO.clear()
        await store.close()
        await pool.close()
    assert len(UNDONE) == 1
    assert refs == again
    rows = await journal.read(saga_id)
    assert [r.phase for r in rows] == [Phase.INTENT, Phase.EXECUTED, Phase.COMPENSATED]
    assert await journal.undoing(saga_id, [1]) == []
