"""A worker process SIGKILLed mid-agent-run: a new one finishes it without repeating a call."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from temporalio.client import Client

from sagacity.agents import AgentSagaRequest
from sagacity.devstack import Endpoints
from sagacity.store import JournalStore
from sagacity.temporal.models import Approve, SagaState
from tests.agents.conftest import start_agent
from tests.temporal.conftest import awaiting_approval, forget_killed_worker, wait_for
from tests.temporal.test_crash import WorkerProcess
from workflows.agent_order.script import PROMPT
from workflows.order.shop import Shop


async def test_agent_run_survives_a_sigkilled_worker(
    temporal_client: Client,
    endpoints: Endpoints,
    database_url: str,
    task_queue: str,
    shop: Shop,
    journal: JournalStore,
    tmp_path: Path,
) -> None:
    worker = WorkerProcess(
        endpoints,
        database_url,
        task_queue,
        tmp_path / "worker.log",
        apps=("workflows.agent_order.app",),
    )
    await worker.start()
    try:
        handle = await start_agent(temporal_client, task_queue, AgentSagaRequest(prompt=PROMPT))
        waiting = await wait_for(handle, awaiting_approval, timeout=60)
        assert waiting.pending_approval is not None
        # two tool calls done, the third waits for a human: the worker dies here
        worker.kill()
        await forget_killed_worker(temporal_client, handle.id)
        await worker.start()
        await handle.signal(
            "approve", Approve(journal_seq=waiting.pending_approval.journal_seq, approver="alice")
        )
        result = await handle.result()
    finally:
        worker.stop()

    assert result.saga.status is SagaState.COMPLETED
    assert [(s.tool, s.status) for s in result.steps] == [
        ("reserve_inventory", "executed"),
        ("create_order", "executed"),
        ("send_confirmation", "executed"),
    ]
    calls = Counter(e.tool_name for e in await journal.read(handle.id) if e.phase.value == "INTENT")
    assert calls == {"reserve_inventory": 1, "create_order": 1, "send_confirmation": 1}
    assert (await journal.verify(handle.id)).ok
    snap = await shop.snapshot()
    assert snap.placed_orders == 1 and snap.outbox == 1 and snap.available["p-1"] == 8
