"""``sagacity saga rollback`` when the worker running the rollback is killed while it journals:
the next worker takes the rollback on within a heartbeat timeout, not after the quarter of an
hour each journal write's time limit leaves to wait out a database outage. Real Temporal, real
Postgres, a worker process killed with SIGKILL, the installed command."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import psycopg
from temporalio.client import Client

from sagacity.devstack import Endpoints
from sagacity.journal import APPROVAL_GATE, ROLLBACK, Phase
from sagacity.store import JournalStore
from sagacity.store.placement import find_schema
from sagacity.temporal.models import SagaResult
from sagacity.temporal.rollback import RollbackResult, rollback_id
from tests.approvals.conftest import Cli
from tests.temporal.conftest import awaiting_approval, forget_killed_worker, wait_for
from tests.temporal.test_crash import OPTIONS, WorkerProcess
from workflows.order.shop import Shop
from workflows.order.workflows import OrderRequest

#: longer than a journal activity's heartbeat timeout (30 s) and a retry, far shorter than its
#: time limit (15 minutes): a rollback that waits on the time limit fails here
TAKEN_ON_WITHIN_S = 150


async def _blocked(conn: psycopg.AsyncConnection[Any], table: str) -> bool:
    """Whether some session waits for a lock on ``table`` (the journal held by the test)."""
    cur = await conn.execute(
        "SELECT count(*) FROM pg_catalog.pg_locks WHERE NOT granted "
        "AND relation = pg_catalog.to_regclass(%s)",
        (table,),
    )
    row = await cur.fetchone()
    return row is not None and int(str(row[0])) > 0


async def test_a_worker_killed_while_the_rollback_journals_is_replaced_within_a_heartbeat(
    temporal_client: Client,
    endpoints: Endpoints,
    database_url: str,
    owner_database_url: str,
    task_queue: str,
    shop: Shop,
    journal: JournalStore,
    cli: Cli,
    tmp_path: Path,
) -> None:
    process = WorkerProcess(endpoints, database_url, task_queue, tmp_path / "worker.log")
    await process.start()
    try:
        saga_id = f"killed-rb-{uuid.uuid4().hex[:8]}"
        handle = await temporal_client.start_workflow(
            "order.PlaceOrder",
            OrderRequest(quantity=2, options=OPTIONS),
            id=saga_id,
            task_queue=task_queue,
            result_type=SagaResult,
        )
        waiting = await wait_for(handle, awaiting_approval)
        assert waiting.pending_approval is not None
        await handle.terminate(reason="test: an operator's terminate")

        # the journal takes no writes while the test holds it (reads go on): the rollback reads
        # its plan, then its first row (who rolled it back) waits, and its worker is killed there
        # (as the tables' owner: the workers' role may not lock them)
        async with await psycopg.AsyncConnection.connect(owner_database_url) as holder:
            schema = await find_schema(holder)
            table = f'"{schema}".side_effect_journal' if schema else "side_effect_journal"
            async with holder.transaction():
                await holder.execute(f"LOCK TABLE {table} IN EXCLUSIVE MODE")
                started = await cli("saga", "rollback", saga_id, "--by", "ops-ann")
                assert started.code == 0, started.stderr
                async with await psycopg.AsyncConnection.connect(
                    owner_database_url, autocommit=True
                ) as watcher:
                    for _ in range(600):
                        if await _blocked(watcher, table):
                            break
                        await asyncio.sleep(0.1)
                    else:
                        raise AssertionError("the rollback never tried to journal")
                process.kill()
        await forget_killed_worker(temporal_client, rollback_id(saga_id))
        await process.start()

        rollback = temporal_client.get_workflow_handle(
            rollback_id(saga_id), result_type=RollbackResult
        )
        result = await asyncio.wait_for(rollback.result(), timeout=TAKEN_ON_WITHIN_S)
    finally:
        process.stop()

    assert result.ok
    assert [(u.tool_name, u.call_seq) for u in result.compensated] == [
        ("create_order", 3),
        ("reserve_inventory", 1),
    ]
    snap = await shop.snapshot()
    assert (snap.available["p-1"], snap.held_reservations, snap.placed_orders) == (10, 0, 0)
    # journaled once each, in order, the chain whole: the killed attempt left no second row
    rows = (await journal.read(saga_id))[waiting.pending_approval.journal_seq :]
    assert [(r.tool_name, r.phase) for r in rows] == [
        (APPROVAL_GATE, Phase.REJECTED),
        (ROLLBACK, Phase.REJECTED),
        ("create_order", Phase.COMPENSATED),
        ("reserve_inventory", Phase.COMPENSATED),
    ]
    assert (await journal.verify(saga_id)).ok
    assert (await cli("certify", "--saga", saga_id)).code == 0
