"""A Temporal cancel that arrives while a new Steps saga's open (check the steps, claim the
journal) is stuck mid-statement in Postgres: the open finishes once Postgres answers, and the saga
ends ABORTED (SagaCancelled) with its result. Opened in a local activity of its own (a saga with a
heartbeat of its own), no step ran; opened in its first call's activity, that call was in flight
when the cancel came: it finishes, journaled, and is compensated, as any call a cancel meets."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from sagacity.journal import Phase
from sagacity.store import JournalStore
from sagacity.temporal.models import SagaOptions, SagaResult, SagaSpec, SagaState, Step
from sagacity.temporal.workflow import STEPS_WORKFLOW
from tests.temporal import sample_tools
from workflows.order.shop import Shop

_OWNER_TABLES = (
    "SELECT pg_catalog.format('%I.%I', schemaname, tablename) FROM pg_catalog.pg_tables"
    " WHERE tablename = 'sagacity_saga_owner'"
)
_WAITING = (
    "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE wait_event_type = 'Lock'"
    " AND query ILIKE '%%sagacity_saga_owner%%' AND pid <> pg_catalog.pg_backend_pid()"
)


@pytest.mark.parametrize("in_first_call", [False, True], ids=["local-activity", "first-call"])
async def test_a_cancel_during_a_stuck_open_ends_the_saga_aborted_with_its_result(
    in_first_call: bool,
    temporal_client: Client,
    worker: Worker,
    shop: Shop,
    journal: JournalStore,
    owner_database_url: str,
) -> None:
    sid = f"open-cancel-{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(owner_database_url) as blocker:
        tables = [r[0] for r in await (await blocker.execute(_OWNER_TABLES)).fetchall()]
        assert tables
        for table in tables:  # the claim's INSERT waits behind this until it commits
            await blocker.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        # a heartbeat of the saga's own opens in a local activity before the first call
        options = SagaOptions() if in_first_call else SagaOptions(heartbeat_timeout_s=30.0)
        spec = SagaSpec(steps=[Step(tool="set_flag", args={"name": "never"})], options=options)
        handle = await temporal_client.start_workflow(
            STEPS_WORKFLOW, spec, id=sid, task_queue=worker.task_queue, result_type=SagaResult
        )
        async with await psycopg.AsyncConnection.connect(
            owner_database_url, autocommit=True
        ) as look:
            for _ in range(300):  # the open is stuck in its statement
                if (await (await look.execute(_WAITING)).fetchone() or [0])[0]:
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("the open never reached Postgres")
        await handle.cancel()
        # past the workflow task's heartbeat (80% of its 10 s timeout): the cancel reaches the
        # workflow in a task of its own while the open is still stuck
        await asyncio.sleep(10.0)
        await blocker.commit()
    result = await asyncio.wait_for(handle.result(), 90)

    assert result.status is SagaState.ABORTED, result
    assert result.error is not None and result.error.type == "SagaCancelled"
    rows = await journal.read(sid)
    if in_first_call:  # the call was under way: it finished, and was undone
        assert sample_tools.EFFECTS == ["set never", "unset never"], sample_tools.EFFECTS
        assert [r.phase for r in rows][-1] is Phase.COMPENSATED
    else:  # the abort came before step one
        assert sample_tools.EFFECTS == [], sample_tools.EFFECTS
        assert all(r.phase is not Phase.INTENT for r in rows)
    assert await journal.owners(saga_ids=[sid]) == [(sid, sid)]  # it opened: the id is its own
