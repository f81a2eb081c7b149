"""A new declarative saga's worker killed inside its first call's activity while the call's
one statement, the journal's claim and the call's INTENT together, waits to write (the boundary
the open moved to when it was folded into the first call, and then into its INTENT's
statement): nothing of it is committed, not even the claim; the next worker's attempt claims the
journal, writes INTENT once, runs the tool once, and the saga completes with its chain whole.
The statement's connection lost alone (an outage, to the worker): the same attempt writes it
again once Postgres answers, with the same outcome. Killed after that commit, while the tool runs: the claim and the INTENT are both there, and the
retry takes the call for its own and holds it SUSPECT. Real Temporal, real Postgres, a worker
process killed with SIGKILL."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest
from temporalio.client import Client

from sagacity.store import JournalStore
from sagacity.store.placement import find_schema
from sagacity.temporal.models import Resolve, SagaResult, SagaSpec, SagaState, Step
from sagacity.temporal.workflow import STEPS_WORKFLOW
from tests.temporal.conftest import forget_killed_worker, phases, wait_for
from tests.temporal.test_crash import WorkerProcess, wait_journal, worker_process
from workflows.order.shop import Shop
from workflows.order.workflows import order_steps

__all__ = ["worker_process"]  # the fixture, shared with test_crash

#: a tool call's heartbeat timeout (30 s) and a retry's backoff, with room: far shorter than the
#: call's time limit (its tool's 5 minutes and the quarter of an hour left for an outage)
TAKEN_ON_WITHIN_S = 150


async def _count(
    conn: psycopg.AsyncConnection[tuple[object, ...]], query: str, *args: object
) -> int:
    row = await (await conn.execute(query, args)).fetchone()
    return 0 if row is None else int(str(row[0]))


@pytest.mark.parametrize("kill", [True, False], ids=["worker-killed", "connection-lost"])
async def test_a_worker_killed_between_the_claim_and_intent_leaves_one_call(
    kill: bool,
    temporal_client: Client,
    worker_process: WorkerProcess,
    owner_database_url: str,
    task_queue: str,
    shop: Shop,
    journal: JournalStore,
) -> None:
    sid = f"open-killed-{uuid.uuid4().hex[:8]}"
    spec = SagaSpec(
        steps=[Step(tool="reserve_inventory", args={"product_id": "p-1", "quantity": 2})]
    )
    async with await psycopg.AsyncConnection.connect(owner_database_url) as holder:
        schema = await find_schema(holder)
        prefix = f'"{schema}".' if schema else ""
        journal_table = f"{prefix}side_effect_journal"
        # the journal takes no writes while the test holds it: the first call's statement, its
        # claim (the owner table is not held) and its INTENT, waits on it, uncommitted
        async with holder.transaction():
            await holder.execute(f"LOCK TABLE {journal_table} IN EXCLUSIVE MODE")
            handle = await temporal_client.start_workflow(
                STEPS_WORKFLOW, spec, id=sid, task_queue=task_queue, result_type=SagaResult
            )
            async with await psycopg.AsyncConnection.connect(
                owner_database_url, autocommit=True
            ) as watcher:
                for _ in range(600):
                    waiting = await _count(
                        watcher,
                        "SELECT coalesce(max(pid), 0) FROM pg_catalog.pg_locks WHERE NOT granted "
                        "AND relation = pg_catalog.to_regclass(%s)",
                        journal_table,
                    )
                    if waiting:
                        break
                    await asyncio.sleep(0.1)
                else:
                    raise AssertionError("the first call never tried to write its INTENT")
                claimed = await _count(
                    watcher,
                    f"SELECT count(*) FROM {prefix}sagacity_saga_owner WHERE saga_id = %s",
                    sid,
                )
                assert claimed == 0, "the claim commits with the INTENT, not before it"
                if kill:
                    worker_process.kill()
                # the statement dies (with its worker, or alone: to its worker, an outage) (Postgres would otherwise run the orphaned statement
                # once the lock is free, and the call would be SUSPECT: INTENT with no outcome)
                await watcher.execute("SELECT pg_catalog.pg_terminate_backend(%s)", (waiting,))
                claimed = await _count(
                    watcher,
                    f"SELECT count(*) FROM {prefix}sagacity_saga_owner WHERE saga_id = %s",
                    sid,
                )
                assert claimed == 0, "nothing of the killed statement is committed"
    # the lock is released: nothing of the killed attempt's INTENT was written
    assert await phases(journal, sid) == []
    assert (await shop.snapshot()).available["p-1"] == 10
    if kill:
        await forget_killed_worker(temporal_client, sid)
        await worker_process.start()
    # else the same attempt writes its statement again once Postgres answers

    result = await asyncio.wait_for(handle.result(), timeout=TAKEN_ON_WITHIN_S)

    assert result.status is SagaState.COMPLETED
    # the retry claimed the journal for the saga's run chain and ran the call once
    assert await phases(journal, sid) == [
        ("reserve_inventory", "INTENT"),
        ("reserve_inventory", "EXECUTED"),
    ]
    assert (await journal.verify(sid)).ok
    assert (await journal.chains([sid]))[sid][0] == sid
    snap = await shop.snapshot()
    assert (snap.available["p-1"], snap.held_reservations) == (8, 1)


async def test_kill_during_a_new_sagas_first_call_leaves_it_claimed_and_suspect(
    temporal_client: Client,
    worker_process: WorkerProcess,
    task_queue: str,
    shop: Shop,
    journal: JournalStore,
) -> None:
    # the first call's activity claims the journal and writes INTENT in one commit: killed while
    # the tool hangs, both are durable, and the retry finds the call its own (not a saga id taken
    # by another run, not a call never started)
    await shop.arm_fault("reserve_inventory", "", delay_s=60)  # hangs before any effect
    sid = f"crash-{uuid.uuid4().hex[:8]}"
    # a declarative saga: its first call's activity opens the journal
    handle = await temporal_client.start_workflow(
        STEPS_WORKFLOW,
        order_steps(),  # no heartbeat of its own: its first call opens the journal
        id=sid,
        task_queue=task_queue,
        result_type=SagaResult,
    )
    await wait_journal(journal, sid, lambda p: p == [("reserve_inventory", "INTENT")])
    assert (await journal.chains([sid]))[sid][0] == sid
    worker_process.kill()
    await forget_killed_worker(temporal_client, sid)
    await worker_process.start()

    status = await wait_for(handle, lambda s: s.state is SagaState.SUSPECT, timeout=60)
    assert status.suspect is not None and status.suspect.tool_name == "reserve_inventory"
    assert status.suspect.call_seq == 1
    history = await handle.fetch_history()
    kinds = {
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    }
    assert "sagacity.open_and_call" in kinds
    await handle.signal("resolve", Resolve(call_seq=1, resolver="dave", happened=False))
    result = await handle.result()
    assert result.status is SagaState.COMPENSATED
    assert await phases(journal, sid) == [
        ("reserve_inventory", "INTENT"),
        ("reserve_inventory", "FAILED"),
    ]
    assert (await journal.verify(sid)).ok
    assert (await shop.snapshot()).available["p-1"] == 10
