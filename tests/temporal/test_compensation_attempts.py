"""Two attempts of one compensation overlap (a worker taken for dead that is still running): the
undo runs once, both attempts report the one COMPENSATED row. And an effect carried by reference
(continue-as-new) is undone with the input and result the journal holds.

The activity runs in Temporal's ActivityEnvironment against the real journal in Postgres.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from temporalio.testing import ActivityEnvironment

from sagacity import CompensationContext, compensable
from sagacity.journal import Draft, Phase, to_json
from sagacity.store import ApprovalStore, JournalStore, open_pool
from sagacity.temporal.activities import SagaActivities
from sagacity.temporal.models import CompensateRequest, RowRef
from sagacity.tools import ToolRegistry

UNDONE: list[dict[str, Any]] = []


async def _slow_undo(ctx: CompensationContext) -> None:
    await asyncio.sleep(0.5)  # long enough for the other attempt to arrive meanwhile
    UNDONE.append({"input": ctx.input, "result": ctx.result})


@compensable(by=_slow_undo)
async def book(room: str) -> dict[str, str]:
    """Book a room."""
    return {"booking": f"b-{room}"}


async def executed_call(journal: JournalStore, saga_id: str) -> str:
    """Journal one executed call of ``book`` at seq 1-2; returns the head hash."""
    rows = await journal.append_batch_at(
        [
            Draft(saga_id, "book", Phase.INTENT, to_json({"room": "12"})),
            Draft(
                saga_id,
                "book",
                Phase.EXECUTED,
                to_json({"room": "12"}),
                to_json({"booking": "b-12"}),
            ),
        ],
        seq=1,
    )
    return rows[-1].hash


def undo_of(saga_id: str, head: str) -> CompensateRequest:
    """The compensation of the call :func:`executed_call` journaled, at seq 3."""
    return CompensateRequest(
        saga_id=saga_id,
        seq=3,
        prev_hash=head,
        tool_name="book",
        call_seq=1,
        input_json=to_json({"room": "12"}),
        result={"booking": "b-12"},
    )


async def test_overlapping_compensation_attempts_undo_once(
    journal: JournalStore, approvals: ApprovalStore
) -> None:
    UNDONE.clear()
    acts = SagaActivities(journal, approvals, ToolRegistry([book]))
    saga_id = f"undo-{uuid.uuid4().hex[:8]}"
    head = await executed_call(journal, saga_id)
    request = undo_of(saga_id, head)

    first, second = await asyncio.gather(
        ActivityEnvironment().run(acts.compensate, request),
        ActivityEnvironment().run(acts.compensate, request),
    )

    assert len(UNDONE) == 1
    assert first == second and isinstance(first[0], RowRef)
    rows = await journal.read(saga_id)
    assert [r.phase for r in rows] == [Phase.INTENT, Phase.EXECUTED, Phase.COMPENSATED]


async def test_an_effect_carried_by_reference_is_undone_from_the_journal(
    journal: JournalStore, approvals: ApprovalStore
) -> None:
    UNDONE.clear()
    acts = SagaActivities(journal, approvals, ToolRegistry([book]))
    saga_id = f"undo-{uuid.uuid4().hex[:8]}"
    head = await executed_call(journal, saga_id)
    request = undo_of(saga_id, head).model_copy(
        update={"input_json": "", "result": None, "by_ref": True}
    )

    await ActivityEnvironment().run(acts.compensate, request)

    assert UNDONE == [{"input": {"room": "12"}, "result": {"booking": "b-12"}}]
    compensated = (await journal.read(saga_id))[-1]
    assert compensated.phase is Phase.COMPENSATED and compensated.input == to_json({"room": "12"})


async def test_many_compensations_at_once_do_not_starve_the_journal_pool(
    database_url: str, approvals: ApprovalStore
) -> None:
    """Each undo holds its lock's connection while it uses the journal: with the locks on the
    journal's own pool, as many undos as connections took them all and waited for one forever
    (seen in bench.saga_overhead: compensations stuck for the 10-minute outage window)."""
    UNDONE.clear()
    pool = await open_pool(database_url, max_size=2)
    journal = JournalStore(pool)
    try:
        acts = SagaActivities(journal, approvals, ToolRegistry([book]))
        requests = []
        for _ in range(8):
            saga_id = f"undo-{uuid.uuid4().hex[:8]}"
            head = await executed_call(journal, saga_id)
            requests.append(undo_of(saga_id, head))
        await asyncio.wait_for(
            asyncio.gather(*(ActivityEnvironment().run(acts.compensate, r) for r in requests)),
            30,
        )
    finally:
        await journal.close()
        await pool.close()
    assert len(UNDONE) == 8
