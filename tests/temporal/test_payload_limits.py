"""No value can wedge a saga: a call's argument or result at 1.9, 2.5, 3.9 and 5 MB either works
or is refused with ``PayloadTooLarge`` before its INTENT, and the saga still answers its status,
takes an abort and compensates the call before it. A saga whose workflow task fails for ever is
named, with the reason, by ``saga status`` and ``certify``."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from sagacity.agents import AgentSagaRequest, Call, Say, Script
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal import limits
from sagacity.temporal.models import Abort, SagaResult, SagaState, SagaStatus
from sagacity.temporal.task_health import task_failure
from tests.agents.conftest import WorkerFactory, agent_worker, start_agent
from tests.ops.conftest import Cli, sagacity
from tests.temporal import sample_tools
from tests.temporal.conftest import phases, serving
from tests.temporal.payload_workflows import WORKFLOWS, BigCall, BigCallWorkflow, WedgedSaga
from workflows.order import app as order_app

__all__ = ["agent_worker", "sagacity"]  # fixtures

MB = 1_000_000
SIZES = [int(1.9 * MB), int(2.5 * MB), int(3.9 * MB), 5 * MB]
#: the JSON around ``upload``'s argument: ``{"blob":"..."}``
AROUND = len('{"blob":""}')


@pytest.fixture
async def big_worker(
    temporal_client: Client,
    task_queue: str,
    journal: JournalStore,
    approvals: ApprovalStore,
    shop: object,
) -> AsyncIterator[Worker]:
    async with serving(
        temporal_client,
        task_queue,
        journal=journal,
        approvals=approvals,
        tools=[*order_app.TOOLS, *sample_tools.TOOLS],
        workflows=WORKFLOWS,
    ) as worker:
        yield worker


async def reset_to_first_task(client: Client, saga_id: str) -> str:
    """Reset the saga to its first workflow task: the new run opens the journal from seq 0;
    its run id."""
    handle = client.get_workflow_handle(saga_id)
    first = None
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            first = event.event_id
            break
    assert first is not None
    response = await client.workflow_service.reset_workflow_execution(
        ResetWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=saga_id),
            reason="test: reset to the start",
            workflow_task_finish_event_id=first,
            request_id=str(uuid.uuid4()),
        )
    )
    return response.run_id


async def _status(handle: WorkflowHandle[Any, Any]) -> SagaStatus:
    status: SagaStatus = await asyncio.wait_for(handle.query("status", result_type=SagaStatus), 15)
    return status


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s / MB:g}MB")
async def test_a_big_argument_runs_or_is_refused_before_its_intent_and_the_saga_still_aborts(
    temporal_client: Client, big_worker: Worker, journal: JournalStore, size: int
) -> None:
    sid = f"bigarg-{uuid.uuid4().hex[:8]}"
    handle = await temporal_client.start_workflow(
        BigCallWorkflow.run,
        BigCall(flag=sid, size=size),
        id=sid,
        task_queue=big_worker.task_queue,
    )
    fits = size + AROUND <= limits.MAX_VALUE_BYTES
    want = [("set_flag", "INTENT"), ("set_flag", "EXECUTED")]
    if fits:
        want += [("upload", "INTENT"), ("upload", "EXECUTED")]
    deadline = asyncio.get_running_loop().time() + 30
    while (await _status(handle)).head.seq < len(want) or (
        not fits and await handle.query(BigCallWorkflow.refusal) is None
    ):
        assert asyncio.get_running_loop().time() < deadline, await phases(journal, sid)
        await asyncio.sleep(0.2)
    refusal = await handle.query(BigCallWorkflow.refusal)
    if fits:
        assert refusal is None
    else:
        assert refusal is not None
        assert refusal.startswith("PayloadTooLarge: the arguments of tool 'upload': ")
        assert f": {size + AROUND:,} bytes, more than" in refusal
    # nothing was journaled for a refused call, and the saga still answers
    assert await phases(journal, sid) == want
    assert (await _status(handle)).state is SagaState.RUNNING

    await handle.signal("abort", Abort(reason="payload test", by="tester"))
    result = SagaResult.model_validate(await asyncio.wait_for(handle.result(), 60))
    assert result.status is SagaState.ABORTED, result
    undone = [(e.tool_name, e.call_seq) for e in result.compensated]
    assert undone == ([("upload", 3)] if fits else []) + [("set_flag", 1)]
    assert f"unset {sid}" in sample_tools.EFFECTS
    if fits:  # the undo got the whole argument
        assert f"dropped blob-{size} ({size})" in sample_tools.EFFECTS
    assert (await journal.verify(sid)).ok


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s / MB:g}MB")
async def test_a_big_result_stays_in_the_journal_and_the_call_is_compensated_with_it(
    temporal_client: Client, big_worker: Worker, journal: JournalStore, size: int
) -> None:
    sid = f"bigres-{uuid.uuid4().hex[:8]}"
    handle = await temporal_client.start_workflow(
        BigCallWorkflow.run,
        BigCall(flag=sid, size=size, big="result"),
        id=sid,
        task_queue=big_worker.task_queue,
    )
    result = SagaResult.model_validate(await asyncio.wait_for(handle.result(), 60))
    assert result.status is SagaState.COMPENSATED, result
    assert result.error is not None and "ResultTooLarge" in result.error.message
    assert [(e.tool_name, e.call_seq) for e in result.compensated] == [
        ("big_report", 3),
        ("set_flag", 1),
    ]
    # the undo got the whole result, read from the journal
    assert f"shredded {size} with t0ken" in sample_tools.EFFECTS
    assert (await journal.verify(sid)).ok


async def test_status_and_certify_name_a_saga_whose_workflow_task_keeps_failing(
    temporal_client: Client, big_worker: Worker, journal: JournalStore, sagacity: Cli
) -> None:
    sid = f"wedged-{uuid.uuid4().hex[:8]}"
    await temporal_client.start_workflow(
        WedgedSaga.run, sid, id=sid, task_queue=big_worker.task_queue
    )
    deadline = asyncio.get_running_loop().time() + 30
    while (failing := await task_failure(temporal_client, sid)) is None:
        assert asyncio.get_running_loop().time() < deadline, "the task never failed"
        await asyncio.sleep(0.2)
    assert failing.cause == "WORKFLOW_WORKER_UNHANDLED_FAILURE"
    assert "this workflow task always fails" in failing.message
    # the journal alone looks fine: one call, executed
    assert await phases(journal, sid) == [("set_flag", "INTENT"), ("set_flag", "EXECUTED")]

    status = await sagacity("saga", "status", sid)
    assert status.code == 3, status
    assert "WORKFLOW_WORKER_UNHANDLED_FAILURE" in status.stderr
    assert "this workflow task always fails" in status.stderr

    certified = await sagacity("certify", "--saga", sid, "--json")
    assert certified.code == 1, certified
    [line] = [json.loads(text) for text in certified.stdout.splitlines()]
    [finding] = line["findings"]
    assert finding["kind"] == "workflow_task_failing"
    assert f"the workflow task of {sid} (tests.WedgedSaga) keeps failing" in finding["detail"]
    assert "this workflow task always fails" in finding["detail"]


@pytest.mark.parametrize("size", SIZES[:2], ids=lambda s: f"{s / MB:g}MB")
async def test_a_return_value_too_large_for_the_result_is_left_out_and_said(
    temporal_client: Client, big_worker: Worker, journal: JournalStore, size: int
) -> None:
    sid = f"bigval-{uuid.uuid4().hex[:8]}"
    handle = await temporal_client.start_workflow(
        BigCallWorkflow.run,
        BigCall(flag=sid, size=size, big="value"),
        id=sid,
        task_queue=big_worker.task_queue,
    )
    result = SagaResult.model_validate(await asyncio.wait_for(handle.result(), 60))
    assert result.status is SagaState.COMPLETED, result
    if size <= limits.MAX_VALUE_BYTES:
        assert result.value == "v" * size and result.needs_attention is None
    else:
        assert result.value is None
        assert result.needs_attention is not None
        assert "its body's return value" in result.needs_attention
    assert await phases(journal, sid) == [("set_flag", "INTENT"), ("set_flag", "EXECUTED")]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s / MB:g}MB")
async def test_an_agent_tool_call_with_a_big_argument_runs_or_is_refused_before_its_intent(
    temporal_client: Client,
    agent_worker: WorkerFactory,
    journal: JournalStore,
    shop: object,
    size: int,
) -> None:
    script = Script(
        turns=[
            [Call("set_flag", {"name": "agent"}), Call("upload", {"blob": "b" * size}), Say("done")]
        ]
    )
    async with agent_worker({"big": script}) as worker:
        handle = await start_agent(
            temporal_client,
            worker.task_queue,
            AgentSagaRequest(prompt="go", model="big", feed_compensation_summary=False),
        )
        result = await asyncio.wait_for(handle.result(), 120)
    rows = await phases(journal, handle.id)
    if size + AROUND <= limits.MAX_VALUE_BYTES:
        assert result.saga.status is SagaState.COMPLETED, result.saga
        assert f"uploaded {size}" in sample_tools.EFFECTS
        assert rows == [
            ("set_flag", "INTENT"),
            ("set_flag", "EXECUTED"),
            ("upload", "INTENT"),
            ("upload", "EXECUTED"),
        ]
        return
    # the model's reply asking for the call is refused, typed, and the run compensates
    assert result.saga.status is SagaState.COMPENSATED, result.saga
    assert result.saga.error is not None
    assert "PayloadTooLarge" in result.saga.error.message, result.saga.error
    assert "the model's reply: " in result.saga.error.message
    assert rows == [("set_flag", "INTENT"), ("set_flag", "EXECUTED"), ("set_flag", "COMPENSATED")]
    assert sample_tools.EFFECTS == ["set agent", "unset agent"]


async def test_a_saga_reset_after_a_big_call_reads_its_journal_back_in_pages_that_fit(
    temporal_client: Client, big_worker: Worker, journal: JournalStore
) -> None:
    """The rows of a call with a 1.9 MB argument (in its INTENT and its EXECUTED row) do not fit
    one answer together: a run that reads them back (reset to its start) gets them in pages."""
    sid = f"bigreset-{uuid.uuid4().hex[:8]}"
    size = int(1.9 * MB)
    handle = await temporal_client.start_workflow(
        BigCallWorkflow.run, BigCall(flag=sid, size=size), id=sid, task_queue=big_worker.task_queue
    )
    deadline = asyncio.get_running_loop().time() + 30
    while (await _status(handle)).head.seq < 4:
        assert asyncio.get_running_loop().time() < deadline, await phases(journal, sid)
        await asyncio.sleep(0.2)
    await reset_to_first_task(temporal_client, sid)
    handle = temporal_client.get_workflow_handle(sid)  # the reset run
    # the reset run reads the whole journal back, and adopts both calls when it asks again
    deadline = asyncio.get_running_loop().time() + 30
    while (failing := await task_failure(temporal_client, sid)) is not None or (
        await _status(handle)
    ).head.seq < 4:
        assert asyncio.get_running_loop().time() < deadline, failing
        await asyncio.sleep(0.5)
    await handle.signal("abort", Abort(reason="payload test", by="tester"))
    result = SagaResult.model_validate(await asyncio.wait_for(handle.result(), 60))
    assert result.status is SagaState.ABORTED, result
    assert [(e.tool_name, e.call_seq) for e in result.compensated] == [
        ("upload", 3),
        ("set_flag", 1),
    ]
    assert sample_tools.EFFECTS.count(f"uploaded {size}") == 1  # not made twice
    assert f"dropped blob-{size} ({size})" in sample_tools.EFFECTS
    assert (await journal.verify(sid)).ok
