"""A new saga whose first call a halt covers: the first call's activity claims the journal and
writes that call's INTENT in one statement, which the halt refuses whole; the saga is held with
its journal claimed and no row written, as when the claim and the INTENT were two writes, and
runs once the halt is lifted."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from temporalio.client import Client

from sagacity import CompensationContext, compensable
from sagacity.approvals.halts import HaltService
from sagacity.journal import Phase
from sagacity.store import ApprovalStore, JournalStore
from sagacity.store.halts import HaltScope
from sagacity.temporal.models import SagaResult, SagaSpec, SagaState, SagaStatus, Step
from sagacity.temporal.workflow import STEPS_WORKFLOW
from tests.temporal.conftest import serving, wait_for
from tests.temporal.test_halt_keep_compensation import halt_service

__all__ = ["halt_service"]  # the fixture, shared with test_halt_keep_compensation

PLACED: list[str] = []


async def unplace(ctx: CompensationContext) -> None:
    PLACED.remove(str(ctx.input["key"]))


@compensable(by=unplace)
async def place(key: str) -> str:
    """Place a thing."""
    PLACED.append(key)
    return key


async def test_a_halted_first_call_holds_a_claimed_saga_with_no_row_until_lifted(
    temporal_client: Client,
    task_queue: str,
    journal: JournalStore,
    approvals: ApprovalStore,
    halt_service: HaltService,
) -> None:
    PLACED.clear()
    result = await halt_service.halt(
        scope=HaltScope(tool="place", task_queue=task_queue),
        policy="keep",
        reason="hold new placements",
        operator="olivia",
        settle=timedelta(0),
    )
    async with serving(
        temporal_client, task_queue, journal=journal, approvals=approvals, tools=[place]
    ):
        handle = await temporal_client.start_workflow(
            STEPS_WORKFLOW,
            SagaSpec(steps=[Step(tool="place", args={"key": k}) for k in "ab"]),
            id=f"first-halted-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
            result_type=SagaResult,
        )

        def held(status: SagaStatus) -> bool:
            return status.state is SagaState.HALTED and status.halted is not None

        status = await wait_for(handle, held, timeout=30)
        assert status.halted is not None and status.halted.halt_id == result.halt_id
        assert PLACED == []
        assert await journal.read(handle.id) == []
        # the claim stands: the saga's id names this run chain's journal while it is held
        chains = await journal.chains([handle.id])
        assert chains[handle.id][0] == handle.id

        await halt_service.resume(result.halt_id, by="olivia", reason="go on")
        ended = await asyncio.wait_for(handle.result(), 60)
    assert ended.status is SagaState.COMPLETED
    assert PLACED == ["a", "b"]
    rows = await journal.read(handle.id)
    assert [r.phase for r in rows] == [Phase.INTENT, Phase.EXECUTED] * 2
    assert (await journal.verify(handle.id)).ok
