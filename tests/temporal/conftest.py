"""Fixtures for saga tests: the Order example's shop, the journal, an in-process worker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import ResetStickyTaskQueueRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from sagacity.evidence.checkpoints import CheckpointWriter
from sagacity.evidence.redaction import Redactor
from sagacity.store import ApprovalStore, JournalStore, Pool, open_pool
from sagacity.temporal.models import SagaState, SagaStatus
from sagacity.temporal.plugin import SagacityPlugin
from tests.temporal import sample_tools
from workflows.order import app as order_app
from workflows.order import quotes
from workflows.order.shop import Shop, use


@pytest.fixture(scope="session")
async def pool(database_url: str) -> AsyncIterator[Pool]:
    pool = await open_pool(database_url, max_size=20)
    yield pool
    await pool.close()


@pytest.fixture(scope="session")
async def journal(pool: Pool) -> AsyncIterator[JournalStore]:
    store = JournalStore(pool)
    yield store
    await store.close()  # the connections its compensation locks used


@pytest.fixture(scope="session")
def approvals(pool: Pool) -> ApprovalStore:
    return ApprovalStore(pool)


@pytest.fixture(scope="session")
async def shop_session(database_url: str) -> AsyncIterator[Shop]:
    shop = await Shop.open(database_url)
    await shop.setup()
    use(shop)
    yield shop
    await shop.close()


@pytest.fixture
async def shop(shop_session: Shop) -> Shop:
    """The shop with seed stock and no armed faults, fresh for each test."""
    await shop_session.setup(reset=True)
    use(shop_session)
    sample_tools.EFFECTS.clear()
    sample_tools.FLAKY_CALLS.clear()
    sample_tools.RECEIVED.clear()
    return shop_session


@pytest.fixture
async def worker(
    temporal_client: Client,
    task_queue: str,
    journal: JournalStore,
    approvals: ApprovalStore,
    shop: Shop,
    checkpoint_writer: CheckpointWriter,
    redactor: Redactor,
) -> AsyncIterator[Worker]:
    async with serving(
        temporal_client,
        task_queue,
        journal=journal,
        approvals=approvals,
        tools=[*order_app.TOOLS, *quotes.TOOLS, *sample_tools.TOOLS],
        workflows=order_app.WORKFLOWS,
        redactor=redactor,
        checkpoints=checkpoint_writer,
    ) as worker:
        yield worker


@asynccontextmanager
async def serving(client: Client, task_queue: str, **plugin: Any) -> AsyncIterator[Worker]:
    """A worker on ``task_queue`` with a :class:`SagacityPlugin` of ``plugin``'s arguments."""
    async with Worker(
        client,
        task_queue=task_queue,
        plugins=[SagacityPlugin(**plugin)],
        graceful_shutdown_timeout=timedelta(seconds=1),
    ) as worker:
        yield worker


async def wait_for(
    handle: WorkflowHandle[Any, Any],
    predicate: Callable[[SagaStatus], bool],
    *,
    timeout: float = 30.0,
) -> SagaStatus:
    """Poll the saga's ``status`` query until ``predicate`` holds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            status: SagaStatus = await handle.query("status", result_type=SagaStatus)
            if predicate(status):
                return status
        except Exception:
            # the workflow may not have run its first task yet
            pass
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("saga never reached the expected state")
        await asyncio.sleep(0.1)


def awaiting_approval(status: SagaStatus) -> bool:
    return status.state is SagaState.AWAITING_APPROVAL


async def phases(journal: JournalStore, saga_id: str) -> list[tuple[str, str]]:
    return [(e.tool_name, e.phase.value) for e in await journal.read(saga_id)]


async def intent_written(
    journal: JournalStore, saga_id: str, tool: str, *, timeout: float = 30.0
) -> None:
    """Wait until ``tool``'s INTENT row is in the saga's journal: the call has started."""
    deadline = asyncio.get_running_loop().time() + timeout
    while (tool, "INTENT") not in await phases(journal, saga_id):
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"{saga_id} never started {tool}")
        await asyncio.sleep(0.1)


async def forget_killed_worker(client: Client, *saga_ids: str) -> None:
    """Send the sagas' next workflow tasks to their task queue, not to a SIGKILLed worker's cache.

    A killed worker never tells Temporal that its sticky queue is gone, so the server keeps
    offering each saga's next workflow task there until that queue's poller has been silent for
    10 s (a fixed window of its matching service), and only then to the task queue, where the
    new worker replays the history. ResetStickyTaskQueue takes that fallback at once: the new
    worker gets the same task with the same history, some 8 s sooner per kill.
    """
    for saga_id in saga_ids:
        await client.workflow_service.reset_sticky_task_queue(
            ResetStickyTaskQueueRequest(
                namespace=client.namespace, execution=WorkflowExecution(workflow_id=saga_id)
            )
        )


__all__ = [
    "Awaitable",
    "awaiting_approval",
    "forget_killed_worker",
    "intent_written",
    "phases",
    "wait_for",
]
