"""An approved call goes SUSPECT: once resolved, its approval request must not stay pending.

Found by the worker-kill chaos test ("approval request at seq 5 left behind"), reproduced here: the
worker is SIGKILLed while the approved ``send_confirmation`` runs; the retry finds INTENT without
an outcome and stops the saga as SUSPECT; a human resolves it. The saga ends, but the request
stays in ``sagacity_approval_request``, so ``sagacity approvals list`` (and the HTTP API) go on
offering a decision on a call that already has its outcome.

Where: the activities (``sagacity/temporal/activities/calls.py``, through ``Approvals.consume``)
consumed the request only in ``call_tool`` (after the outcome row, or on resuming when it finds
one); a call that raises ``SuspectCall`` left it, and the workflow's ``Suspects.resolve``
(``sagacity/temporal/saga/suspect.py``), which journals the human's outcome through
``resolve_call``, never closed it.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any
from uuid import uuid4

import psycopg
import pytest
from temporalio.client import Client, WorkflowHandle

from sagacity.temporal.models import (
    Approve,
    Resolve,
    SagaOptions,
    SagaResult,
    SagaState,
    SagaStatus,
)
from tests.chaos.harness import APPROVER, HEARTBEAT_TIMEOUT_S, RESOLVER, WorkerProcess
from tests.chaos.scenario import prepare_shop
from tests.temporal.conftest import forget_killed_worker
from workflows.order.shop import Shop
from workflows.order.workflows import OrderRequest

pytestmark = pytest.mark.chaos


async def status_when(
    handle: WorkflowHandle[Any, SagaResult], state: SagaState, timeout: float = 60.0
) -> SagaStatus:
    deadline = time.monotonic() + timeout
    while True:
        try:
            status: SagaStatus = await handle.query("status", result_type=SagaStatus)
            if status.state is state:
                return status
        except Exception:
            pass  # no worker right now
        if time.monotonic() > deadline:
            raise TimeoutError(f"the saga never reached {state.value}")
        await asyncio.sleep(0.2)


async def test_a_resolved_suspect_approved_call_leaves_no_pending_request(
    chaos_client: Client, chaos_database: str, chaos_dir: Path
) -> None:
    happened = False  # the mail did not go out (True, the saga completes: the request stays too)
    await prepare_shop(chaos_database, failures=0, stall_s=0.0)
    shop = await Shop.open(chaos_database)
    try:  # the confirmation stalls before it sends: long enough to kill the worker mid-call
        await shop.arm_fault("send_confirmation", "", times=1, delay_s=60.0)
    finally:
        await shop.close()
    worker = WorkerProcess(
        chaos_client,
        task_queue=f"suspect-{uuid4().hex[:8]}",
        database_url=chaos_database,
        log_path=chaos_dir / "suspect-approval.log",
    )
    await worker.start()
    try:
        handle = await chaos_client.start_workflow(
            "order.PlaceOrder",
            OrderRequest(options=SagaOptions(heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S)),
            id=f"suspect-{uuid4().hex[:8]}",
            task_queue=worker.task_queue,
            result_type=SagaResult,
        )
        waiting = await status_when(handle, SagaState.AWAITING_APPROVAL)
        assert waiting.pending_approval is not None
        seq = waiting.pending_approval.journal_seq
        await handle.signal("approve", Approve(journal_seq=seq, approver=APPROVER))
        deadline = time.monotonic() + 30
        while (await handle.query("status", result_type=SagaStatus)).running is None:
            assert time.monotonic() < deadline, "send_confirmation never started"
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        worker.kill()  # mid-call: INTENT is written, the mail not sent
        await forget_killed_worker(chaos_client, handle.id)
        await worker.start()
        suspect = (await status_when(handle, SagaState.SUSPECT)).suspect
        assert suspect is not None and suspect.tool_name == "send_confirmation"
        result = {"message_id": 0, "order_id": "said by a human"} if happened else None
        await handle.signal(
            "resolve",
            Resolve(call_seq=suspect.call_seq, resolver=RESOLVER, happened=happened, result=result),
        )
        ended = await asyncio.wait_for(handle.result(), 60)
    finally:
        worker.stop()

    assert ended.status is (SagaState.COMPLETED if happened else SagaState.COMPENSATED)
    # what an operator sees in `sagacity approvals list`: nothing left to decide for this saga
    async with await psycopg.AsyncConnection.connect(chaos_database) as conn:
        left = await (
            await conn.execute(
                "SELECT journal_seq FROM sagacity_approval_request WHERE saga_id = %s",
                (handle.id,),
            )
        ).fetchall()
    assert left == [], f"approval request(s) still pending after the saga ended: {left}"
