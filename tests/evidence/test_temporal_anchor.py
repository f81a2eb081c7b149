"""The Temporal anchor: real sagas on a real Temporal server, their journals attacked in Postgres.

The workflow holds its own record of the chain head (the result once completed, the ``status``
query while running), out of reach of whoever can write the journal table.
"""

from __future__ import annotations

import uuid
from contextlib import aclosing
from datetime import timedelta

import psycopg
from temporalio.client import Client
from temporalio.worker import Worker

from sagacity.evidence.anchors import verify_journal
from sagacity.evidence.checkpoints import CheckpointDir, CheckpointWriter, Kind
from sagacity.evidence.report import Agreement, SagaReport, Source
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import Abort, SagaResult, SagaSpec, SagaState
from sagacity.temporal.plugin import SagacityPlugin
from sagacity.temporal.workflow import STEPS_WORKFLOW
from tests.evidence.conftest import anchored_saga
from tests.evidence.test_tamper_suite import rewrite
from tests.temporal.conftest import awaiting_approval, wait_for
from workflows.order import app as order_app
from workflows.order.shop import Shop
from workflows.order.workflows import OrderRequest, order_steps

# reserve stock, create the order: two REVERSIBLE calls, no approval, four rows
TWO_STEPS = SagaSpec(steps=order_steps().steps[:2])


async def completed_saga(client: Client, worker: Worker) -> SagaResult:
    result: SagaResult = await client.execute_workflow(
        STEPS_WORKFLOW,
        TWO_STEPS,
        id=f"ev-order-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )
    assert result.status is SagaState.COMPLETED and result.head.seq == 4
    return result


async def reports(
    journal: JournalStore, client: Client, saga_ids: list[str]
) -> dict[str, SagaReport]:
    async with aclosing(verify_journal(journal, saga_ids=saga_ids, temporal=client)) as found:
        return {r.saga_id: r async for r in found}


async def test_completed_and_running_sagas_agree_with_their_workflows(
    temporal_client: Client, worker: Worker, journal: JournalStore
) -> None:
    done = await completed_saga(temporal_client, worker)
    waiting = f"ev-order-{uuid.uuid4().hex[:8]}"
    handle = await temporal_client.start_workflow(
        "order.PlaceOrder", OrderRequest(), id=waiting, task_queue=worker.task_queue
    )
    await wait_for(handle, awaiting_approval)

    found = await reports(journal, temporal_client, [done.saga_id, waiting])

    await handle.signal("abort", Abort(reason="test over"))
    await handle.result()
    assert all(r.ok for r in found.values())
    (by_result,) = found[done.saga_id].checks
    (by_query,) = found[waiting].checks
    assert (by_result.source, by_result.agreement, by_result.seq) == (
        Source.TEMPORAL,
        Agreement.AGREES,
        4,
    )
    assert "workflow result" in by_result.detail
    assert (by_query.agreement, by_query.seq) == (Agreement.AGREES, 5)  # AWAITING_APPROVAL
    assert "status query" in by_query.detail


async def test_workflow_head_catches_a_recomputed_chain_and_a_truncated_tail(
    temporal_client: Client,
    worker: Worker,
    journal: JournalStore,
    owner: psycopg.AsyncConnection,
) -> None:
    rewritten = await completed_saga(temporal_client, worker)
    truncated = await completed_saga(temporal_client, worker)
    await rewrite(owner, journal, rewritten.saga_id, 2, '{"product_id": "p-1", "quantity": 200}')
    await owner.execute(
        "DELETE FROM side_effect_journal WHERE saga_id = %s AND seq > 2", (truncated.saga_id,)
    )

    found = await reports(journal, temporal_client, [rewritten.saga_id, truncated.saga_id])

    for saga, words in ((rewritten, "was rewritten"), (truncated, "rows were removed")):
        report = found[saga.saga_id]
        assert report.verdict.ok  # each chain holds on its own: only the workflow can tell
        (fault,) = report.faults()
        assert (fault.source, fault.agreement, fault.seq) == (
            Source.TEMPORAL,
            Agreement.DISAGREES,
            4,
        )
        assert words in fault.detail and saga.head.hash[:12] in fault.detail


async def test_a_saga_temporal_never_ran_is_reported_but_not_a_fault(
    temporal_client: Client, journal: JournalStore, saga_id: str
) -> None:
    await anchored_saga(journal, None, saga_id, calls=1)

    (report,) = (await reports(journal, temporal_client, [saga_id])).values()

    assert report.ok
    (check,) = report.checks
    assert (check.source, check.agreement, check.fatal) == (
        Source.TEMPORAL,
        Agreement.MISSING,
        False,
    )


async def test_a_checkpointing_worker_anchors_every_call_and_seals_the_end(
    temporal_client: Client,
    task_queue: str,
    journal: JournalStore,
    approvals: ApprovalStore,
    writer: CheckpointWriter,
    checkpoints: CheckpointDir,
    owner: psycopg.AsyncConnection,
    shop: Shop,
) -> None:
    plugin = SagacityPlugin(
        journal=journal, approvals=approvals, tools=order_app.TOOLS, checkpoints=writer
    )
    async with Worker(
        temporal_client,
        task_queue=task_queue,
        plugins=[plugin],
        graceful_shutdown_timeout=timedelta(seconds=1),
    ) as checkpointing:
        done = await completed_saga(temporal_client, checkpointing)
    log = checkpoints.load(done.saga_id)
    # one per call, at its outcome (INTENT is covered through the chain); the last one seals
    assert [(cp.seq, cp.kind) for cp in log.verified()] == [(2, Kind.HEAD), (4, Kind.SEALED)]
    await owner.execute(
        "DELETE FROM side_effect_journal WHERE saga_id = %s AND seq > 2", (done.saga_id,)
    )

    async with aclosing(
        verify_journal(journal, saga_ids=[done.saga_id], checkpoints=checkpoints)
    ) as found:
        (report,) = [r async for r in found]

    (fault,) = report.faults()
    assert (fault.source, fault.seq) == (Source.CHECKPOINT, 4)  # the removed end, sealed
