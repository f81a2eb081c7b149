"""The approval gate end to end: rejection, tampering, deadline, refused decisions, worker restart."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.worker import Worker

from sagacity.approvals import ApprovalService
from sagacity.errors import ApprovalConflict, ApproverNotAllowed, SagaUnavailable
from sagacity.journal import input_hash
from sagacity.store import ApprovalStore, JournalStore, Pool
from sagacity.temporal.models import Approve, Decision, SagaOptions, SagaState, SagaStatus
from tests.approvals.conftest import GATE_SEQ, START, StartOrder
from tests.temporal.conftest import phases
from workflows.order.shop import Shop

COMPENSATED_TAIL = [("create_order", "COMPENSATED"), ("reserve_inventory", "COMPENSATED")]


async def assert_shop_restored(shop: Shop) -> None:
    snap = await shop.snapshot()
    assert snap.available == START
    assert (snap.held_reservations, snap.placed_orders, snap.outbox) == (0, 0, 0)


async def test_rejection_compensates_in_reverse_and_restores_the_shop(
    start_order: StartOrder,
    service: ApprovalService,
    journal: JournalStore,
    approvals: ApprovalStore,
    shop: Shop,
) -> None:
    waiting = await start_order()
    decided = await service.reject(
        waiting.saga_id, waiting.seq, approver="bob", reason="customer cancelled"
    )
    assert (decided.decision, decided.tool_name) == ("rejected", "send_confirmation")

    result = await waiting.handle.result()
    assert result.status is SagaState.COMPENSATED
    assert [e.tool_name for e in result.compensated] == ["create_order", "reserve_inventory"]
    assert (await phases(journal, waiting.saga_id))[4:] == [
        ("send_confirmation", "AWAITING_APPROVAL"),
        ("approval-gate", "REJECTED"),
        *COMPENSATED_TAIL,
    ]
    rejected = (await journal.read(waiting.saga_id))[5]
    assert json.loads(rejected.payload) == {"by": "bob", "reason": "customer cancelled"}
    assert (await journal.verify(waiting.saga_id)).ok
    assert await approvals.get(waiting.saga_id, waiting.seq) is None
    await assert_shop_restored(shop)


@pytest.mark.parametrize("column", ["input", "input_hash", "both"])
async def test_a_request_altered_in_the_database_never_runs(
    column: str,
    start_order: StartOrder,
    service: ApprovalService,
    journal: JournalStore,
    pool: Pool,
    shop: Shop,
) -> None:
    waiting = await start_order()
    forged = '{"order_id":"ord-someone-else"}'
    # "both": a consistent forgery, input and its hash, which only the hash the saga recorded
    # when it asked gives away
    changes = {"input": forged, "input_hash": input_hash(forged)}
    columns = list(changes) if column == "both" else [column]
    async with pool.connection() as conn:
        for name in columns:
            await conn.execute(
                f"UPDATE sagacity_approval_request SET {name} = %s "
                "WHERE saga_id = %s AND journal_seq = %s",
                (changes[name], waiting.saga_id, waiting.seq),
            )
    shown = await service.get(waiting.saga_id, waiting.seq)
    assert shown.waiting
    if column != "both":
        assert not shown.intact  # the approver is warned before deciding

    await service.approve(waiting.saga_id, waiting.seq, approver="alice")
    result = await waiting.handle.result()

    assert result.status is SagaState.COMPENSATED
    assert (await phases(journal, waiting.saga_id))[4:] == [
        ("send_confirmation", "AWAITING_APPROVAL"),
        ("approval-gate", "APPROVED"),
        ("send_confirmation", "REJECTED"),
        *COMPENSATED_TAIL,
    ]
    refusal = json.loads((await journal.read(waiting.saga_id))[6].payload)["reason"]
    assert refusal.startswith("verification refused execution: ")
    assert (await journal.verify(waiting.saga_id)).ok
    await assert_shop_restored(shop)  # outbox empty: the email never went out


async def test_no_decision_before_the_deadline_rejects_as_timeout(
    start_order: StartOrder, journal: JournalStore, approvals: ApprovalStore, shop: Shop
) -> None:
    waiting = await start_order(SagaOptions(approval_deadline_s=1))
    result = await waiting.handle.result()

    assert result.status is SagaState.COMPENSATED
    assert (await phases(journal, waiting.saga_id))[5:] == [
        ("approval-gate", "REJECTED"),
        *COMPENSATED_TAIL,
    ]
    rejected = (await journal.read(waiting.saga_id))[5]
    assert json.loads(rejected.payload) == {"by": "sagacity", "reason": "timeout"}
    assert await approvals.get(waiting.saga_id, waiting.seq) is None
    await assert_shop_restored(shop)


async def test_refused_decide_updates_fail_at_once_and_change_nothing(
    start_order: StartOrder, journal: JournalStore, shop: Shop
) -> None:
    # a slow email keeps the saga running after the approval, to refuse "already decided" and
    # "not waiting" while it is still alive
    await shop.arm_fault("send_confirmation", "", delay_s=3)
    waiting = await start_order(SagaOptions(approvers={"send_confirmation": ["alice"]}))
    handle, seq = waiting.handle, waiting.seq
    pending = waiting.status.pending_approval
    assert pending is not None
    loop = asyncio.get_running_loop()

    async def refused(decision: Decision, reason: str) -> None:
        started = loop.time()
        with pytest.raises(WorkflowUpdateFailedError) as caught:
            await handle.execute_update("decide", decision, result_type=str)
        assert reason in str(getattr(caught.value.cause, "message", "")), caught.value.cause
        assert loop.time() - started < 5

    async def unchanged() -> None:
        status = await handle.query("status", result_type=SagaStatus)
        assert status.head == waiting.status.head and status.rows == waiting.status.rows
        assert status.pending_approval == pending and status.state is SagaState.AWAITING_APPROVAL
        assert len(await journal.read(waiting.saga_id)) == GATE_SEQ

    await refused(Decision(journal_seq=99, approver="alice", approve=True), "no request awaits")
    await refused(
        Decision(journal_seq=seq, approver="alice", approve=True, input_hash="0" * 64),
        "input_hash does not match",
    )
    await refused(Decision(journal_seq=seq, approver="bob", approve=True), "may not approve")
    await unchanged()

    good = Decision(journal_seq=seq, approver="alice", approve=True, input_hash=pending.input_hash)
    assert await handle.execute_update("decide", good, result_type=str) == "approved"
    await refused(Decision(journal_seq=seq, approver="alice", approve=False), "already decided")
    await refused(Decision(journal_seq=seq + 1, approver="alice", approve=True), "not waiting")

    result = await handle.result()
    assert result.status is SagaState.COMPLETED
    assert [p for _, p in await phases(journal, waiting.saga_id)].count("APPROVED") == 1
    assert (await journal.verify(waiting.saga_id)).ok
    assert (await shop.snapshot()).outbox == 1


async def test_the_service_names_each_refusal(
    start_order: StartOrder, service: ApprovalService, journal: JournalStore
) -> None:
    waiting = await start_order(SagaOptions(approvers={"*": ["carol"]}))
    sid, seq = waiting.saga_id, waiting.seq

    # the saga's own allow-list, which the service does not know, still speaks through it
    with pytest.raises(ApproverNotAllowed):
        await service.approve(sid, seq, approver="bob")
    for call, kind in [
        (service.approve(sid, seq + 1, approver="carol"), "unknown_seq"),
        (service.approve(sid, seq, approver="carol", input_hash="f" * 64), "input_hash_mismatch"),
        (service.reject(sid, 2, approver="carol", reason="x"), "unknown_seq"),
    ]:
        with pytest.raises(ApprovalConflict) as caught:
            await call
        assert caught.value.kind == kind
    assert len(await journal.read(sid)) == GATE_SEQ

    await service.approve(sid, seq, approver="carol")
    assert (await waiting.handle.result()).status is SagaState.COMPLETED


async def test_a_restarted_worker_takes_a_decision_sent_while_none_ran(
    start_order: StartOrder,
    worker: Worker,
    temporal_client: Client,
    approvals: ApprovalStore,
    journal: JournalStore,
    shop: Shop,
) -> None:
    waiting = await start_order()
    await worker.shutdown()

    # with no worker the saga cannot answer: the service says so instead of hanging
    impatient = ApprovalService(temporal_client, approvals, rpc_timeout=timedelta(seconds=1))
    shown = await impatient.get(waiting.saga_id, waiting.seq)
    assert (shown.workflow_status, shown.waiting) == ("no_answer", False)
    with pytest.raises(SagaUnavailable):
        await impatient.approve(waiting.saga_id, waiting.seq, approver="alice")

    # signals are durable: the decision waits in the saga's history for the next worker
    await waiting.handle.signal("approve", Approve(journal_seq=waiting.seq, approver="alice"))
    async with Worker(**worker.config()):
        result = await asyncio.wait_for(waiting.handle.result(), timeout=60)

    assert result.status is SagaState.COMPLETED
    assert (await phases(journal, waiting.saga_id))[-3:] == [
        ("approval-gate", "APPROVED"),
        ("send_confirmation", "INTENT"),
        ("send_confirmation", "EXECUTED"),
    ]
    assert (await journal.verify(waiting.saga_id)).ok
    assert (await shop.snapshot()).outbox == 1
