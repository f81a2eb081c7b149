"""The Order saga on a real Temporal server and real Postgres: completion, failure, abort."""

from __future__ import annotations

import uuid

from temporalio.client import Client
from temporalio.worker import Worker

from sagacity.store import JournalStore
from sagacity.temporal.models import Abort, Approve, SagaOptions, SagaResult, SagaState, SagaStatus
from sagacity.temporal.workflow import STEPS_WORKFLOW
from tests.temporal.conftest import awaiting_approval, phases, wait_for
from workflows.order.shop import Shop
from workflows.order.workflows import OrderRequest, order_steps

START = {"p-1": 10, "p-2": 25}


def saga_id() -> str:
    return f"order-{uuid.uuid4().hex[:8]}"


async def approve_when_waiting(client: Client, sid: str, approver: str = "alice") -> SagaStatus:
    handle = client.get_workflow_handle(sid)
    status = await wait_for(handle, awaiting_approval)
    assert status.pending_approval is not None
    await handle.signal(
        "approve", Approve(journal_seq=status.pending_approval.journal_seq, approver=approver)
    )
    return status


async def test_order_completes_after_approval(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    sid = saga_id()
    handle = await temporal_client.start_workflow(
        "order.PlaceOrder",
        OrderRequest(),
        id=sid,
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )
    waiting = await approve_when_waiting(temporal_client, sid)
    assert waiting.pending_approval is not None
    assert waiting.pending_approval.tool_name == "send_confirmation"
    result = await handle.result()

    assert result.status is SagaState.COMPLETED
    assert result.value["order_id"].startswith("ord-")
    assert await phases(journal, sid) == [
        ("reserve_inventory", "INTENT"),
        ("reserve_inventory", "EXECUTED"),
        ("create_order", "INTENT"),
        ("create_order", "EXECUTED"),
        ("send_confirmation", "AWAITING_APPROVAL"),
        ("approval-gate", "APPROVED"),
        ("send_confirmation", "INTENT"),
        ("send_confirmation", "EXECUTED"),
    ]
    rows = await journal.read(sid)
    assert rows[5].payload == "approver=alice"
    verdict = await journal.verify(sid)
    assert verdict.ok and verdict.head_hash == result.head.hash and verdict.head_seq == 8
    snap = await shop.snapshot()
    assert snap.available["p-1"] == 8 and snap.placed_orders == 1 and snap.outbox == 1


async def test_third_step_failure_compensates_in_reverse(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    await shop.arm_fault("send_confirmation", "mail relay refused the message")
    sid = saga_id()
    handle = await temporal_client.start_workflow(
        "order.PlaceOrder",
        OrderRequest(),
        id=sid,
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )
    await approve_when_waiting(temporal_client, sid)
    result = await handle.result()

    assert result.status is SagaState.COMPENSATED
    assert result.error is not None and "mail relay refused" in result.error.message
    assert [e.tool_name for e in result.compensated] == ["create_order", "reserve_inventory"]
    assert await phases(journal, sid) == [
        ("reserve_inventory", "INTENT"),
        ("reserve_inventory", "EXECUTED"),
        ("create_order", "INTENT"),
        ("create_order", "EXECUTED"),
        ("send_confirmation", "AWAITING_APPROVAL"),
        ("approval-gate", "APPROVED"),
        ("send_confirmation", "INTENT"),
        ("send_confirmation", "FAILED"),
        ("create_order", "COMPENSATED"),
        ("reserve_inventory", "COMPENSATED"),
    ]
    assert (await journal.verify(sid)).ok
    snap = await shop.snapshot()
    assert snap.available == START
    assert snap.held_reservations == 0 and snap.placed_orders == 0 and snap.outbox == 0


async def test_generic_saga_workflow_with_refs_and_status_query(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    await shop.arm_fault("send_confirmation", "mailbox full")
    sid = saga_id()
    handle = await temporal_client.start_workflow(
        STEPS_WORKFLOW,
        order_steps("p-2", 3),
        id=sid,
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )
    status = await approve_when_waiting(temporal_client, sid, approver="bob")
    assert [r.phase.value for r in status.rows][-1] == "AWAITING_APPROVAL"
    assert [e.tool_name for e in status.executed] == ["reserve_inventory", "create_order"]
    result = await handle.result()
    assert result.status is SagaState.COMPENSATED
    rows = await journal.read(sid)
    # the order was created with the reservation id that step 1 returned
    reservation = rows[1].payload
    assert '"reservation_id"' in rows[2].input
    assert result.compensated[1].result["reservation_id"] in reservation
    final = await handle.query("status", result_type=SagaStatus)
    assert final.state is SagaState.COMPENSATED and final.head.seq == len(rows)
    assert (await shop.snapshot()).available == START


async def test_abort_while_step_two_runs(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    await shop.arm_fault("create_order", "", delay_s=1.5)  # slow, not failing
    sid = saga_id()
    handle = await temporal_client.start_workflow(
        "order.PlaceOrder",
        OrderRequest(),
        id=sid,
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )
    await wait_for(handle, lambda s: s.running == "create_order")
    await handle.signal("abort", Abort(reason="customer changed their mind", by="carol"))
    result = await handle.result()

    assert result.status is SagaState.ABORTED
    assert result.error is not None and "customer changed their mind" in result.error.message
    assert await phases(journal, sid) == [
        ("reserve_inventory", "INTENT"),
        ("reserve_inventory", "EXECUTED"),
        ("create_order", "INTENT"),
        ("create_order", "EXECUTED"),
        ("create_order", "COMPENSATED"),
        ("reserve_inventory", "COMPENSATED"),
    ]
    snap = await shop.snapshot()
    assert snap.available == START and snap.placed_orders == 0


async def test_compensation_that_keeps_failing_is_flagged_and_earlier_ones_still_run(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    await shop.arm_fault("send_confirmation", "relay down")
    await shop.arm_fault("cancel_order", "order service unavailable", times=-1)
    sid = saga_id()
    options = SagaOptions(compensation_attempts=2, compensation_backoff_s=0.1)
    handle = await temporal_client.start_workflow(
        "order.PlaceOrder",
        OrderRequest(options=options),
        id=sid,
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )
    await approve_when_waiting(temporal_client, sid)
    result = await handle.result()

    assert result.status is SagaState.COMPENSATION_FAILED
    assert result.needs_attention is not None and "create_order" in result.needs_attention
    assert [e.tool_name for e in result.compensation_failed] == ["create_order"]
    assert [e.tool_name for e in result.compensated] == ["reserve_inventory"]
    tail = (await phases(journal, sid))[-2:]
    assert tail == [("create_order", "COMPENSATION_FAILED"), ("reserve_inventory", "COMPENSATED")]
    rows = await journal.read(sid)
    assert "order service unavailable" in rows[-2].payload
    snap = await shop.snapshot()
    assert snap.available == START and snap.placed_orders == 1  # the order is still live
    assert (await journal.verify(sid)).ok
