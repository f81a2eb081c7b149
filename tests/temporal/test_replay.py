"""Determinism: saga histories replay against today's workflow code without a divergence.

Histories recorded from earlier versions live in ``histories/`` and must keep replaying; set
``SAGACITY_RECORD_HISTORIES=1`` to (re)record them from this run.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer, Worker

from sagacity.temporal.models import Approve, SagaResult, SagaSpec, SagaState, Step
from sagacity.temporal.plugin import SagacityPlugin
from sagacity.temporal.workflow import WORKFLOW_NAME, SagaWorkflow
from tests.temporal.conftest import awaiting_approval, wait_for
from workflows.order.app import WORKFLOWS
from workflows.order.shop import Shop
from workflows.order.workflows import OrderRequest

HISTORIES = Path(__file__).with_name("histories")


def replayer() -> Replayer:
    # a client-only plugin brings the data converter; the workflows are today's code
    return Replayer(workflows=[SagaWorkflow, *WORKFLOWS], plugins=[SagacityPlugin()])


async def record(client: Client, worker: Worker, shop: Shop) -> list[WorkflowHistory]:
    await shop.arm_fault("send_confirmation", "relay down")
    order_id = f"replay-order-{uuid.uuid4().hex[:6]}"
    order = await client.start_workflow(
        "order.PlaceOrder",
        OrderRequest(),
        id=order_id,
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )
    status = await wait_for(order, awaiting_approval)
    assert status.pending_approval is not None
    await order.signal(
        "approve", Approve(journal_seq=status.pending_approval.journal_seq, approver="eve")
    )
    assert (await order.result()).status is SagaState.COMPENSATED

    generic = await client.start_workflow(
        WORKFLOW_NAME,
        SagaSpec(
            steps=[
                Step(tool="set_flag", args={"name": "r"}),
                Step(tool="send_note", args={"text": {"$ref": "set_flag"}}),
            ]
        ),
        id=f"replay-generic-{uuid.uuid4().hex[:6]}",
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )
    assert (await generic.result()).status is SagaState.COMPLETED
    return [await order.fetch_history(), await generic.fetch_history()]


async def test_fresh_histories_replay(temporal_client: Client, worker: Worker, shop: Shop) -> None:
    histories = await record(temporal_client, worker, shop)
    if os.environ.get("SAGACITY_RECORD_HISTORIES") == "1":
        HISTORIES.mkdir(exist_ok=True)
        for name, history in zip(
            ("place_order_compensated", "generic_completed"), histories, strict=True
        ):
            (HISTORIES / f"{name}.json").write_text(history.to_json())
    for history in histories:
        await replayer().replay_workflow(history)


@pytest.mark.parametrize("path", sorted(HISTORIES.glob("*.json")), ids=lambda p: p.stem)
async def test_recorded_histories_replay(path: Path) -> None:
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    await replayer().replay_workflow(history)
