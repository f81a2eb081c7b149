"""An Order tool's own statement is in flight when Postgres goes away: the order still completes.

Found by ``test_sagas_in_flight_ride_out_a_postgres_outage``: now and then one saga of twenty,
approved, ended COMPENSATED with ``create_order FAILED (AdminShutdown, effect unknown)``: the
statement the tool had sent died with the server. The Order tools now run their statements
through ``Shop.transact``, which waits the outage out and tries again, each try first looking
for the row an earlier one may have committed. Reproduced here deterministically: a lock holds
the tool's INSERT until Postgres is stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any
from uuid import uuid4

import psycopg
import pytest
from temporalio.client import Client, WorkflowHandle

from sagacity.devstack import DevStack, PostgresStopMode
from sagacity.journal import Phase
from sagacity.store import JournalStore
from sagacity.temporal.models import Approve, SagaResult, SagaState, SagaStatus
from tests.chaos.harness import APPROVER, WorkerProcess
from tests.chaos.scenario import prepare_shop
from workflows.order.workflows import OrderRequest

pytestmark = pytest.mark.chaos

#: the statement dies when the server stops; how long it stays away changes nothing here
OUTAGE_S = 3.0


async def until_statement_waits(database_url: str, table: str, timeout: float = 60.0) -> None:
    """Wait until a statement on ``table`` waits on a lock."""
    deadline = time.monotonic() + timeout
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        while True:
            row = await (
                await conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' AND query LIKE %s",
                    (f"% {table} %",),
                )
            ).fetchone()
            if row is not None and row[0] >= 1:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"no statement on {table!r} ever waited on the lock")
            await asyncio.sleep(0.2)


async def drive(handle: WorkflowHandle[Any, SagaResult], timeout: float = 120.0) -> SagaResult:
    """Approve the saga's confirmation when asked; its result."""
    result = asyncio.create_task(handle.result())
    decided: set[int] = set()
    try:
        async with asyncio.timeout(timeout):
            while not result.done():
                with contextlib.suppress(Exception):
                    status = await handle.query("status", result_type=SagaStatus)
                    pending = status.pending_approval
                    if pending is not None and pending.journal_seq not in decided:
                        seq = pending.journal_seq
                        await handle.signal("approve", Approve(journal_seq=seq, approver=APPROVER))
                        decided.add(seq)
                await asyncio.wait({result}, timeout=0.5)
        return result.result()
    finally:
        result.cancel()


@pytest.mark.parametrize(
    ("tool", "table", "mode"),
    [("create_order", "orders", "fast"), ("send_confirmation", "outbox", "immediate")],
)
async def test_an_order_whose_statement_dies_with_postgres_still_completes(
    tool: str,
    table: str,
    mode: PostgresStopMode,
    chaos_stack: DevStack,
    chaos_client: Client,
    chaos_database: str,
    chaos_dir: Path,
) -> None:
    await prepare_shop(chaos_database, failures=0, stall_s=0.0)
    worker = WorkerProcess(
        chaos_client,
        task_queue=f"stmt-{uuid4().hex[:8]}",
        database_url=chaos_database,
        log_path=chaos_dir / f"statement-{tool}.log",
    )
    await worker.start()
    try:
        locker = await psycopg.AsyncConnection.connect(chaos_database)
        await locker.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        handle = await chaos_client.start_workflow(
            "order.PlaceOrder",
            OrderRequest(),
            id=f"stmt-{tool}-{uuid4().hex[:8]}",
            task_queue=worker.task_queue,
            result_type=SagaResult,
        )
        driving = asyncio.create_task(drive(handle))
        await until_statement_waits(chaos_database, table)
        # the tool's INSERT is on the server, waiting; the server goes away under it
        await chaos_stack.stop_postgres(mode=mode)
        with contextlib.suppress(psycopg.Error):
            await locker.close()
        await asyncio.sleep(OUTAGE_S)
        await chaos_stack.start_postgres()
        result = await driving
    finally:
        worker.stop()

    async with await JournalStore.open(chaos_database) as journal:
        rows = await journal.read(handle.id)
    failed = [(r.tool_name, r.payload) for r in rows if r.phase is Phase.FAILED]
    # what the customer and the operator see: the approved order went through, nobody is paged
    ended = (result.status, result.needs_attention, failed)
    assert ended == (SagaState.COMPLETED, None, []), ended
