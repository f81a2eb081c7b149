"""``sagacity certify`` judges a saga by its workflow run chain, not by its rows alone: one test per
Temporal operation (complete, fail, cancel, terminate, time out, reset then complete,
continue-as-new, workflow-id reuse) pins what it says, against real Temporal and Postgres.

A saga whose workflow closed without finishing leaves its effects live, and certify names each
(tool, call seq, saga); a run a reset superseded does not make the run that completed a rollback.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.worker import Worker

from sagacity.store import JournalStore
from sagacity.temporal.models import Approve, SagaResult, SagaState, Step
from tests.approvals.conftest import Cli
from tests.temporal.conftest import awaiting_approval, wait_for
from tests.temporal.test_operations import (
    new_id,
    reset_after_first_call,
    run_long,
    start_order,
    start_steps,
)
from workflows.order.shop import Shop
from workflows.order.workflows import OrderRequest


async def certify(cli: Cli, saga_id: str) -> tuple[int, list[tuple[str, str, int | None]]]:
    """certify --saga: its exit code and its findings as (kind, tool named, seq)."""
    done = await cli("certify", "--json", "--saga", saga_id)
    assert done.code in (0, 1), done.stderr
    [line] = [json.loads(text) for text in done.stdout.splitlines()]
    found = [(f["kind"], f["detail"].split(" ", 1)[0], f["seq"]) for f in line["findings"]]
    return done.code, found


async def approve(handle: WorkflowHandle[Any, SagaResult]) -> None:
    status = await wait_for(handle, awaiting_approval)
    assert status.pending_approval is not None
    await handle.signal(
        "approve", Approve(journal_seq=status.pending_approval.journal_seq, approver="alice")
    )


async def waiting_order(
    client: Client, worker: Worker, **options: Any
) -> WorkflowHandle[Any, SagaResult]:
    """An Order saga after two effects (reserve_inventory, create_order), waiting for approval."""
    handle = await client.start_workflow(
        "order.PlaceOrder",
        OrderRequest(),
        id=new_id("order"),
        task_queue=worker.task_queue,
        result_type=SagaResult,
        **options,
    )
    await wait_for(handle, awaiting_approval)
    return handle


#: what an Order saga stopped at its approval gate left live: reserve_inventory's INTENT at
#: seq 1, create_order's at seq 3
LEFT_LIVE = [("live_effect", "reserve_inventory", 1), ("live_effect", "create_order", 3)]


async def test_complete_certifies(
    temporal_client: Client, worker: Worker, shop: Shop, cli: Cli
) -> None:
    handle = await start_order(temporal_client, worker)
    await approve(handle)
    assert (await handle.result()).status is SagaState.COMPLETED
    assert await certify(cli, handle.id) == (0, [])


async def test_a_failed_saga_the_engine_rolled_back_certifies(
    temporal_client: Client, worker: Worker, shop: Shop, cli: Cli
) -> None:
    handle = await start_steps(
        temporal_client,
        worker,
        [Step(tool="set_flag", args={"name": "a"}), Step(tool="decline", args={"reason": "no"})],
    )
    assert (await handle.result()).status is SagaState.COMPENSATED
    assert await certify(cli, handle.id) == (0, [])


async def test_cancel_is_an_abort_and_certifies(
    temporal_client: Client, worker: Worker, shop: Shop, cli: Cli
) -> None:
    handle = await waiting_order(temporal_client, worker)
    await handle.cancel()
    assert (await handle.result()).status is SagaState.ABORTED
    assert await certify(cli, handle.id) == (0, [])


async def test_terminate_leaves_both_effects_live_and_certify_names_them(
    temporal_client: Client, worker: Worker, shop: Shop, cli: Cli
) -> None:
    handle = await waiting_order(temporal_client, worker)
    await handle.terminate(reason="test: an operator's terminate")

    code, found = await certify(cli, handle.id)
    assert (code, found) == (1, LEFT_LIVE)
    snap = await shop.snapshot()
    assert (snap.held_reservations, snap.placed_orders) == (1, 1)  # live indeed


async def test_a_timed_out_saga_leaves_its_effects_live(
    temporal_client: Client, worker: Worker, shop: Shop, cli: Cli
) -> None:
    handle = await waiting_order(temporal_client, worker, execution_timeout=timedelta(seconds=3))
    with pytest.raises(WorkflowFailureError):
        await asyncio.wait_for(handle.result(), 30)
    assert await certify(cli, handle.id) == (1, LEFT_LIVE)


async def test_reset_while_waiting_then_completed_certifies(
    temporal_client: Client, worker: Worker, shop: Shop, cli: Cli, journal: JournalStore
) -> None:
    handle = await waiting_order(temporal_client, worker)
    run_id = await reset_after_first_call(temporal_client, handle)
    again = temporal_client.get_workflow_handle(handle.id, run_id=run_id, result_type=SagaResult)
    await approve(again)
    assert (await asyncio.wait_for(again.result(), 60)).status is SagaState.COMPLETED
    # the new run closed the request the superseded run had opened: a REJECTED row, no rollback
    rows = await journal.read(handle.id)
    assert [r.phase.value for r in rows].count("REJECTED") == 1
    assert await certify(cli, handle.id) == (0, [])


async def test_continue_as_new_then_compensated_certifies(
    temporal_client: Client, worker: Worker, shop: Shop, cli: Cli
) -> None:
    handle, result = await run_long(
        temporal_client, worker, [Step(tool="set_flag", args={"name": f"f{i}"}) for i in range(12)]
    )
    assert result.status is SagaState.COMPENSATED
    assert await certify(cli, handle.id) == (0, [])


async def test_a_reused_id_is_judged_by_the_chain_that_owns_the_journal(
    temporal_client: Client, worker: Worker, shop: Shop, cli: Cli
) -> None:
    done = await start_order(temporal_client, worker)
    await approve(done)
    await done.result()
    terminated = await waiting_order(temporal_client, worker)
    await terminated.terminate(reason="test")
    for first in (done, terminated):
        # the id used again: the new run is refused, and fails; the saga is still the first's
        again = await start_steps(
            temporal_client, worker, [Step(tool="set_flag", args={"name": "x"})], sid=first.id
        )
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(again.result(), 30)
    assert await certify(cli, done.id) == (0, [])
    assert await certify(cli, terminated.id) == (1, LEFT_LIVE)
