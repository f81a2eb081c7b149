"""``sagacity.McpSession`` driven directly (no gateway): calls in order, commit, rollback, the
lease, a failure, a late call; on an in-process worker with the saga tests' sample tools."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError, WorkflowUpdateStage
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from sagacity.evidence.checkpoints import CheckpointWriter
from sagacity.evidence.redaction import Redactor
from sagacity.mcp.session import (
    MCP_SESSION_WORKFLOW,
    McpCall,
    McpEnd,
    McpSessionRequest,
    McpSessionWorkflow,
)
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import SagaOptions, SagaState
from tests.temporal import sample_tools
from tests.temporal.conftest import approvals, journal, phases, pool, serving

__all__ = ["approvals", "journal", "pool"]


@pytest.fixture
async def session_worker(
    temporal_client: Client,
    task_queue: str,
    journal: JournalStore,
    approvals: ApprovalStore,
    checkpoint_writer: CheckpointWriter,
    redactor: Redactor,
) -> AsyncIterator[Worker]:
    sample_tools.EFFECTS.clear()
    async with serving(
        temporal_client,
        task_queue,
        journal=journal,
        approvals=approvals,
        tools=sample_tools.TOOLS,
        workflows=[McpSessionWorkflow],
        redactor=redactor,
        checkpoints=checkpoint_writer,
    ) as worker:
        yield worker


async def start(client: Client, worker: Worker, **request: Any) -> WorkflowHandle[Any, McpEnd]:
    return await client.start_workflow(
        MCP_SESSION_WORKFLOW,
        McpSessionRequest(
            server="samples", options=SagaOptions(compensation_backoff_s=0.2), **request
        ),
        id=f"mcp-samples-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
        result_type=McpEnd,
    )


async def call(handle: WorkflowHandle[Any, McpEnd], tool: str, **arguments: Any) -> Any:
    return await handle.execute_update("call", McpCall(tool=tool, arguments=arguments))


async def failure(
    handle: WorkflowHandle[Any, McpEnd], tool: str, **arguments: Any
) -> ApplicationError:
    with pytest.raises(WorkflowUpdateFailedError) as caught:
        await call(handle, tool, **arguments)
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError)
    return cause


async def test_rollback_undoes_each_call_newest_first(
    temporal_client: Client, session_worker: Worker, journal: JournalStore
) -> None:
    handle = await start(temporal_client, session_worker)
    assert await call(handle, "set_flag", name="a") == "a"
    assert (await call(handle, "send_note", text="hi"))["text"] == "hi"
    end = await handle.execute_update("rollback", result_type=McpEnd)
    assert end.state is SagaState.COMPENSATED
    assert "send_note (call 3), set_flag (call 1)" in end.message
    assert [e.tool_name for e in end.saga.compensated] == ["send_note", "set_flag"]
    assert (await handle.result()).state is SagaState.COMPENSATED
    assert ("send_note", "COMPENSATED") in await phases(journal, handle.id)
    assert (await journal.verify(handle.id)).ok
    # ended: the workflow takes no more calls
    with pytest.raises(RPCError, match="already completed") as gone:
        await call(handle, "set_flag", name="b")
    assert gone.value.status is RPCStatusCode.NOT_FOUND  # what the gateway looks for


async def test_commit_keeps_what_ran(
    temporal_client: Client, session_worker: Worker, journal: JournalStore
) -> None:
    handle = await start(temporal_client, session_worker, boundary="explicit")
    await call(handle, "set_flag", name="c")
    # sent together: the commit waits for the call before it, the call after it is refused
    first = await handle.start_update(
        "call",
        McpCall(tool="send_note", arguments={"text": "x"}),
        wait_for_stage=WorkflowUpdateStage.ACCEPTED,
    )
    end = await handle.execute_update("commit", result_type=McpEnd)
    assert end.state is SagaState.COMPLETED
    assert (await first.result())["text"] == "x"
    assert [p for p in await phases(journal, handle.id) if p[1] == "EXECUTED"] == [
        ("set_flag", "EXECUTED"),
        ("send_note", "EXECUTED"),
    ]


async def test_a_failed_call_compensates_and_names_what_it_undid(
    temporal_client: Client, session_worker: Worker, journal: JournalStore
) -> None:
    handle = await start(temporal_client, session_worker)
    await call(handle, "set_flag", name="e")
    failed = await failure(handle, "decline", reason="nope")
    assert failed.type == "McpCallFailed"
    assert handle.id in failed.message and "set_flag (call 1)" in failed.message
    end = await handle.result()
    assert end.state is SagaState.COMPENSATED
    assert ("decline", "FAILED") in await phases(journal, handle.id)


async def test_a_call_refused_before_it_ran_leaves_the_session_open(
    temporal_client: Client, session_worker: Worker
) -> None:
    handle = await start(temporal_client, session_worker)
    refused = await failure(handle, "launch_rocket")
    assert refused.type == "McpCallRefused"
    await call(handle, "set_flag", name="f")
    end = await handle.execute_update("commit", result_type=McpEnd)
    assert end.state is SagaState.COMPLETED


async def test_a_call_past_its_expiry_is_never_run(
    temporal_client: Client, session_worker: Worker, journal: JournalStore
) -> None:
    handle = await start(temporal_client, session_worker)
    late = McpCall(
        tool="set_flag",
        arguments={"name": "late"},
        expires_at=datetime.now(UTC) - timedelta(seconds=1),
    )
    with pytest.raises(WorkflowUpdateFailedError) as caught:
        await handle.execute_update("call", late)
    assert isinstance(caught.value.cause, ApplicationError)
    assert caught.value.cause.type == "McpCallExpired"
    await handle.signal("end", "test over")
    assert (await handle.result()).state is SagaState.COMPENSATED  # on_end; nothing to undo
    assert await phases(journal, handle.id) == []


@pytest.mark.parametrize(
    ("on_end", "state"), [("compensate", SagaState.COMPENSATED), ("commit", SagaState.COMPLETED)]
)
async def test_a_lost_session_ends_by_its_lease_as_the_policy_says(
    temporal_client: Client, session_worker: Worker, on_end: str, state: SagaState
) -> None:
    handle = await start(temporal_client, session_worker, lease_s=2, on_end=on_end)
    await call(handle, "set_flag", name="g")
    end = await handle.result()  # no keepalive comes
    assert end.state is state
    assert "said nothing for 2s" in end.message or state is SagaState.COMPLETED


@pytest.mark.parametrize(
    "payload",
    [
        {"tool": "set_flag", "arguments": {"name": "x"}, "surprise": 1},  # unknown field
        {"tool": "set_flag", "arguments": "name=x"},  # wrong type
        {"tool": "", "arguments": {}},  # empty tool
        {"tool": "set\x00flag", "arguments": {}},  # NUL
        {"arguments": {"name": "x"}},  # no tool
    ],
)
async def test_a_malformed_call_is_refused_and_the_session_goes_on(
    temporal_client: Client, session_worker: Worker, journal: JournalStore, payload: Any
) -> None:
    handle = await start(temporal_client, session_worker)
    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update("call", payload)
    # junk on the signals changes nothing either
    await handle.signal("end", {"reason": ["not", "text"]})
    await handle.signal("keepalive", "unexpected")
    assert await call(handle, "set_flag", name="after") == "after"
    end = await handle.execute_update("commit", result_type=McpEnd)
    assert end.state is SagaState.COMPLETED
    assert [p for p in await phases(journal, handle.id) if p[1] == "INTENT"] == [
        ("set_flag", "INTENT")
    ]


async def test_a_long_session_continues_as_new_and_rolls_back_across_runs(
    temporal_client: Client, session_worker: Worker, journal: JournalStore
) -> None:
    handle = await temporal_client.start_workflow(
        MCP_SESSION_WORKFLOW,
        McpSessionRequest(server="samples", options=SagaOptions(continue_as_new_events=50)),
        id=f"mcp-samples-{uuid.uuid4().hex[:8]}",
        task_queue=session_worker.task_queue,
        result_type=McpEnd,
    )
    names = [f"n{i}" for i in range(8)]
    for name in names:
        assert await call(handle, "set_flag", name=name) == name
    end = await handle.execute_update("rollback", result_type=McpEnd)
    assert end.state is SagaState.COMPENSATED
    assert end.saga.compensated_count == len(names)
    runs = {e.run_id async for e in temporal_client.list_workflows(f"WorkflowId = '{handle.id}'")}
    assert len(runs) > 1  # it did continue as new
    rows = await phases(journal, handle.id)
    assert [t for t, p in rows if p == "COMPENSATED"] == ["set_flag"] * len(names)
    assert (await journal.verify(handle.id)).ok
