"""Signals and updates the operations chaos found mishandled, each reproduced on its own.

* A signal with no argument, or two (``temporal workflow signal --name approve`` without
  ``--input``), once raised in its handler and wedged the saga; it is refused and recorded.
* A ``decide`` update with no argument or two, or one that reaches a saga in its first workflow
  task, once got the SDK's untyped ``TypeError`` or "handler not found"; it is refused as
  ``ApprovalRefused`` (the saga's handlers are registered in the workflow's ``__init__``).
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.worker import Worker

from sagacity.devstack import find_temporal_executable
from sagacity.store import ApprovalStore, JournalStore, open_pool
from sagacity.temporal.models import Approve, SagaResult, SagaState, SagaStatus
from sagacity.temporal.plugin import SagacityPlugin
from tests.temporal.conftest import awaiting_approval, wait_for
from workflows.order import app as order_app
from workflows.order.shop import Shop, use
from workflows.order.workflows import OrderRequest

#: how long a saga gets to answer after a bad signal; it takes well under a second when it works
ANSWER_S = 20.0


@dataclass
class Stores:
    journal: JournalStore
    approvals: ApprovalStore
    shop: Shop


@pytest.fixture(scope="module")
async def stores(database_url: str) -> AsyncIterator[Stores]:
    """The session database's journal and approvals, and the Order example's shop in it."""
    pool = await open_pool(database_url, max_size=10)
    shop = await Shop.open(database_url)
    try:
        await shop.setup()
        use(shop)
        journal = JournalStore(pool)
        yield Stores(journal, ApprovalStore(pool), shop)
        await journal.close()
    finally:
        await shop.close()
        await pool.close()


@pytest.fixture(autouse=True)
async def full_stock(stores: Stores) -> None:
    """Seed stock for each test: sagas ended by terminate keep what they reserved."""
    await stores.shop.setup(reset=True)
    use(stores.shop)


def order_worker(client: Client, task_queue: str, stores: Stores) -> Worker:
    plugin = SagacityPlugin(
        journal=stores.journal,
        approvals=stores.approvals,
        tools=order_app.TOOLS,
        workflows=order_app.WORKFLOWS,
    )
    return Worker(
        client,
        task_queue=task_queue,
        plugins=[plugin],
        graceful_shutdown_timeout=timedelta(seconds=1),
    )


@pytest.fixture
async def order_queue(temporal_client: Client, stores: Stores) -> AsyncIterator[str]:
    task_queue = f"bad-{uuid.uuid4().hex[:8]}"
    async with order_worker(temporal_client, task_queue, stores):
        yield task_queue


async def start_order(client: Client, task_queue: str) -> WorkflowHandle[Any, SagaResult]:
    return await client.start_workflow(
        "order.PlaceOrder",
        OrderRequest(),
        id=f"bad-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
        result_type=SagaResult,
    )


async def cli_signal(client: Client, workflow_id: str, name: str, *inputs: str) -> None:
    """``temporal workflow signal`` as an operator types it: one ``--input`` per argument."""
    args = [
        str(find_temporal_executable()),
        "workflow",
        "signal",
        "--address",
        client.service_client.config.target_host,
        "--namespace",
        client.namespace,
        "--workflow-id",
        workflow_id,
        "--name",
        name,
    ]
    for value in inputs:
        args += ["--input", value]
    done = await asyncio.to_thread(subprocess.run, args, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


async def test_a_signal_with_no_argument_or_two_is_refused_and_the_saga_goes_on(
    temporal_client: Client, order_queue: str
) -> None:
    cases = {
        "approve": (),  # `temporal workflow signal --name approve`, --input forgotten
        "reject": ('{"journal_seq": 5, "approver": "eve"}', '"extra"'),
        "abort": ('{"reason": "x"}', "2"),
        # a compensating halt whose reason holds a NUL: refused, so the saga does not abort
        "halt": ('{"halt_id": 1, "policy": "compensate", "reason": "a\\u0000b"}',),
        "resume": ('{"halt_id": 1}', '"extra"'),
    }
    handles = {name: await start_order(temporal_client, order_queue) for name in cases}

    async def bad_then_approve(name: str, handle: WorkflowHandle[Any, SagaResult]) -> SagaStatus:
        status = await wait_for(handle, awaiting_approval)
        assert status.pending_approval is not None
        await cli_signal(temporal_client, handle.id, name, *cases[name])
        seq = status.pending_approval.journal_seq
        await handle.signal("approve", Approve(journal_seq=seq, approver="alice"))
        result = await asyncio.wait_for(handle.result(), ANSWER_S)
        assert result.status is SagaState.COMPLETED
        final: SagaStatus = await handle.query("status", result_type=SagaStatus)
        return final

    try:
        finals = await asyncio.gather(*(bad_then_approve(n, h) for n, h in handles.items()))
    finally:
        for handle in handles.values():  # a wedged saga would retry its task forever
            with contextlib.suppress(RPCError):  # it ended
                await handle.terminate("test over")
    # each bad signal is refused where it entered, and recorded
    assert [len(f.refused_decisions) for f in finals] == [1] * len(cases)


@pytest.mark.parametrize("case", ["no argument", "two arguments", "first workflow task"])
async def test_a_bad_decide_update_is_refused_typed(
    case: str, temporal_client: Client, stores: Stores
) -> None:
    task_queue = f"bad-{uuid.uuid4().hex[:8]}"
    handle = await start_order(temporal_client, task_queue)
    decision = {"journal_seq": 5, "approver": "eve", "approve": True}
    arguments: list[Any] = {"no argument": [], "two arguments": [decision, 2]}.get(case, [decision])
    update: asyncio.Task[Any] | None = None
    if case == "first workflow task":
        # sent before any worker polls: it reaches the saga with its first workflow task
        update = asyncio.create_task(
            handle.execute_update("decide", args=arguments, result_type=str)
        )
        await asyncio.sleep(1.0)
    async with order_worker(temporal_client, task_queue, stores):
        try:
            if update is None:
                await wait_for(handle, awaiting_approval)
                update = asyncio.create_task(
                    handle.execute_update("decide", args=arguments, result_type=str)
                )
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await asyncio.wait_for(update, ANSWER_S)
            cause = refused.value.cause
            # refused, and typed: the caller can tell a refusal from a crash
            assert isinstance(cause, ApplicationError) and cause.type == "ApprovalRefused", cause
            # and the saga goes on as before
            status = await wait_for(handle, awaiting_approval)
            assert status.pending_approval is not None
        finally:
            with contextlib.suppress(RPCError):
                await handle.terminate("test over")
