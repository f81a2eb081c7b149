"""A worker that goes away mid-agent-run: a new one takes over without repeating anything.

And the agent saga's history replays against today's code: the Agents SDK loop, the model calls
and the saga's decisions are deterministic.
"""

from __future__ import annotations

from collections import Counter

from agents import Model, ModelProvider
from temporalio.client import Client
from temporalio.worker import Replayer

from sagacity.agents import (
    AgentSagaRequest,
    AgentSagaWorkflow,
    ScriptedModelProvider,
    openai_agents_plugins,
)
from sagacity.store import JournalStore
from sagacity.temporal.models import SagaState
from sagacity.temporal.plugin import SagacityPlugin
from tests.agents.conftest import WorkerFactory, start_agent
from tests.temporal.conftest import awaiting_approval, wait_for
from tests.temporal.test_order_saga import approve_when_waiting
from workflows.agent_order.script import PROMPT, SCRIPTS
from workflows.order.shop import Shop


class CountingProvider(ModelProvider):
    """The scripted model, counting the model calls this worker answered."""

    def __init__(self) -> None:
        self.inner = ScriptedModelProvider(SCRIPTS)
        self.calls = 0

    def get_model(self, model_name: str | None) -> Model:
        self.calls += 1
        return self.inner.get_model(model_name)


# When Temporal evicts a workflow from a worker's cache (here: after every task, and when the
# first worker stops), it drops the workflow's coroutines mid-flight; the Agents SDK's run loop
# leaves one it created but never awaited, and Python warns as it is collected (harmless;
# ignored suite-wide in pyproject.toml, since the GC may collect it during any later test).
async def test_new_worker_resumes_the_agent_without_repeating_calls(
    temporal_client: Client, agent_worker: WorkerFactory, shop: Shop, journal: JournalStore
) -> None:
    first, second = CountingProvider(), CountingProvider()
    async with agent_worker(provider=first) as worker:
        handle = await start_agent(
            temporal_client, worker.task_queue, AgentSagaRequest(prompt=PROMPT)
        )
        await wait_for(handle, awaiting_approval)
    # the first worker is gone, and with it the workflow's memory: the agent loop, its
    # conversation, the saga's head. It had asked the model three times (three tool calls).
    assert first.calls == 3

    # the second worker keeps no workflow in memory: every task rebuilds the run from history
    async with agent_worker(provider=second, max_cached_workflows=0):
        await approve_when_waiting(temporal_client, handle.id)
        result = await handle.result()

    assert result.saga.status is SagaState.COMPLETED
    # only the model call after the approved tool was new; the rest came from history
    assert second.calls == 1
    rows = await journal.read(handle.id)
    intents = Counter(r.tool_name for r in rows if r.phase.value == "INTENT")
    assert intents == {"reserve_inventory": 1, "create_order": 1, "send_confirmation": 1}
    assert [s.tool for s in result.steps] == [
        "reserve_inventory",
        "create_order",
        "send_confirmation",
    ]
    snap = await shop.snapshot()
    assert snap.held_reservations == 1 and snap.placed_orders == 1 and snap.outbox == 1
    assert (await journal.verify(handle.id)).ok


async def test_agent_saga_history_replays(
    temporal_client: Client, agent_worker: WorkerFactory, shop: Shop
) -> None:
    await shop.arm_fault("send_confirmation", "relay down")
    async with agent_worker() as worker:
        handle = await start_agent(
            temporal_client, worker.task_queue, AgentSagaRequest(prompt=PROMPT)
        )
        await approve_when_waiting(temporal_client, handle.id)
        assert (await handle.result()).saga.status is SagaState.COMPENSATED
    history = await handle.fetch_history()

    # what a replayer needs: the workflow, the converters, the Agents SDK's runner (no model:
    # the model calls' results come from the history)
    replayer = Replayer(
        workflows=[AgentSagaWorkflow],
        plugins=[SagacityPlugin(), *openai_agents_plugins(ScriptedModelProvider(SCRIPTS))],
    )
    await replayer.replay_workflow(history)
