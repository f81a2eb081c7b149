"""A tool whose result is too big for a Temporal payload: the call fails with a clear error and
the saga compensates it (with the whole result, read from the journal) instead of wedging."""

from __future__ import annotations

import asyncio
import uuid

from temporalio.client import Client
from temporalio.worker import Worker

from sagacity.store import JournalStore
from sagacity.temporal.models import SagaOptions, SagaResult, SagaSpec, SagaState, Step
from sagacity.temporal.workflow import STEPS_WORKFLOW
from tests.temporal import sample_tools
from tests.temporal.conftest import phases


async def test_a_result_too_big_for_temporal_fails_the_call_and_the_saga_compensates_it(
    temporal_client: Client, worker: Worker, journal: JournalStore
) -> None:
    sid = f"big-{uuid.uuid4().hex[:8]}"
    token = f"tok-{sid}"
    handle = await temporal_client.start_workflow(
        STEPS_WORKFLOW,
        SagaSpec(
            steps=[
                Step(tool="set_flag", args={"name": sid}),
                Step(tool="big_report", args={"size": 3_000_000, "api_token": token}),
                Step(tool="set_flag", args={"name": "never"}),
            ],
            options=SagaOptions(compensation_backoff_s=0.1),
        ),
        id=sid,
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status is SagaState.COMPENSATED, result
    assert result.error is not None
    assert "ResultTooLarge: big_report returned 3,000,002 bytes" in result.error.message
    assert [(p.tool_name, p.call_seq) for p in result.compensated] == [
        ("big_report", 3),
        ("set_flag", 1),
    ]
    assert await phases(journal, sid) == [
        ("set_flag", "INTENT"),
        ("set_flag", "EXECUTED"),
        ("big_report", "INTENT"),
        ("big_report", "EXECUTED"),
        ("big_report", "COMPENSATED"),
        ("set_flag", "COMPENSATED"),
    ]
    # the undo got the whole result (from the journal) and the input it was called with
    assert f"shredded 3000000 with {token}" in sample_tools.EFFECTS
    assert (await journal.verify(sid)).ok
