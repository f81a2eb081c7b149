"""Parallel tool calls of one model reply wait for the saga's lock; once the saga compensates,
the ones still waiting never start (their effects would only be made to be undone)."""

from __future__ import annotations

import asyncio

from temporalio.client import Client

from sagacity.agents import AgentSagaRequest, Call, Say, Script
from sagacity.store import JournalStore
from sagacity.temporal.models import Abort, SagaState
from tests.agents.conftest import WorkerFactory, start_agent
from tests.temporal import sample_tools
from tests.temporal.conftest import intent_written, phases
from workflows.order.shop import Shop

#: three calls in one reply: a slow one that holds the lock, two queued behind it
QUEUED = Script(
    turns=[
        [
            [
                Call("slow_note", {"text": "a", "seconds": 2}),
                Call("set_flag", {"name": "b"}),
                Call("set_flag", {"name": "c"}),
            ],
            Say("done"),
        ]
    ]
)


async def test_parallel_calls_queued_behind_the_lock_do_not_start_once_the_saga_aborts(
    temporal_client: Client, agent_worker: WorkerFactory, shop: Shop, journal: JournalStore
) -> None:
    async with agent_worker({"queued": QUEUED}) as worker:
        handle = await start_agent(
            temporal_client, worker.task_queue, AgentSagaRequest(prompt="go", model="queued")
        )
        await intent_written(journal, handle.id, "slow_note")
        await handle.signal("abort", Abort(reason="stop", by="carol"))
        result = await asyncio.wait_for(handle.result(), 60)

    assert result.saga.status is SagaState.ABORTED
    # the slow call finished and was undone; the two waiting for the lock never ran
    assert sample_tools.EFFECTS == ["slow a", "unslow a"]
    assert [t for t, _ in await phases(journal, handle.id)] == ["slow_note"] * 3
    assert (await journal.verify(handle.id)).ok
