"""Agent sagas on a real Temporal server and Postgres, with the real Agents SDK loop."""

from __future__ import annotations

from temporalio.client import Client

from sagacity.agents import AgentSagaRequest
from sagacity.store import JournalStore
from sagacity.temporal.models import SagaState
from tests.agents.conftest import WorkerFactory, start_agent
from tests.temporal.conftest import phases
from tests.temporal.test_order_saga import START, approve_when_waiting
from workflows.agent_order.script import PROMPT
from workflows.order.shop import Shop


async def test_swallowed_failure_still_compensates(
    temporal_client: Client, agent_worker: WorkerFactory, shop: Shop, journal: JournalStore
) -> None:
    await shop.arm_fault("send_confirmation", "mail relay refused the message")
    async with agent_worker() as worker:
        handle = await start_agent(
            temporal_client, worker.task_queue, AgentSagaRequest(prompt=PROMPT)
        )
        await approve_when_waiting(temporal_client, handle.id)
        result = await handle.result()
    print(result.model_dump_json(indent=2))
    assert result.saga.status is SagaState.COMPENSATED
    print(await phases(journal, handle.id))
    assert (await shop.snapshot()).available == START
