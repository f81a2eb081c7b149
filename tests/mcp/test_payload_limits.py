"""Through the MCP gateway (stdio), a call whose argument is 1.9, 2.5, 3.9 or 5 MB never wedges
the session's saga: one that fits Temporal's limits runs (its result cut to fit the journal), a
larger one is refused with a JSON-RPC error before anything is sent or journaled, and the session
goes on: it takes the next call, and its rollback closes the ticket the first call opened."""

from __future__ import annotations

import asyncio
import uuid

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError
from temporalio.client import Client as TemporalClient
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from sagacity.errors import PayloadTooLarge
from sagacity.mcp.session import MCP_SESSION_WORKFLOW, McpCall, McpEnd, McpSessionRequest
from sagacity.settings import Settings
from sagacity.store import JournalStore
from sagacity.temporal.models import SagaState, SagaStatus
from sagacity.worker import connect_client
from tests.mcp.gateway_fixtures import (
    McpStack,
    calls,
    mcp_stack,
    saga_named,
    stdio_gateway,
    text_of,
)
from tests.mcp.ticket_server import read_state
from tests.temporal.conftest import journal, phases, pool

__all__ = ["journal", "mcp_stack", "pool"]

MB = 1_000_000


async def test_arguments_too_large_are_refused_before_anything_runs_and_rollback_still_works(
    mcp_stack: McpStack, journal: JournalStore, temporal_client: TemporalClient
) -> None:
    policy = mcp_stack.write_policy("big-refused")
    async with stdio_gateway(mcp_stack, policy) as client:
        first = await client.call_tool("create_ticket", {"title": "small first"})
        assert not first.is_error, text_of(first)
        ticket = first.structured_content["id"]
        for size in (int(2.5 * MB), int(3.9 * MB), 5 * MB):
            with pytest.raises(MCPError) as refused:
                await client.call_tool("create_ticket", {"title": "t" * size})
            assert refused.value.code == types.INVALID_PARAMS
            assert "PayloadTooLarge" not in refused.value.message  # said in words
            assert "the arguments of 'create_ticket': " in refused.value.message
            assert "the session goes on" in refused.value.message
        # the saga answers, and has journaled the first call only
        second = await client.call_tool("create_ticket", {"title": "small second"})
        assert not second.is_error, text_of(second)
        rolled = await client.call_tool("rollback", {})
        assert not rolled.is_error, text_of(rolled)
        saga_id = saga_named(text_of(rolled))
    status = await temporal_client.get_workflow_handle(saga_id).query(
        "status", result_type=SagaStatus
    )
    assert status.state is SagaState.COMPENSATED
    assert await phases(journal, saga_id) == [
        ("create_ticket", "INTENT"),
        ("create_ticket", "EXECUTED"),
        ("create_ticket", "INTENT"),
        ("create_ticket", "EXECUTED"),
        ("create_ticket", "COMPENSATED"),
        ("create_ticket", "COMPENSATED"),
    ]
    assert read_state(mcp_stack.state)["tickets"][ticket]["status"] == "closed"
    # the upstream never saw the refused calls
    titles = [c["title"] for c in calls(mcp_stack.state, "create_ticket")]
    assert all(len(t) < 100 for t in titles)


async def test_an_argument_that_fits_runs_and_the_session_still_rolls_back(
    mcp_stack: McpStack, journal: JournalStore
) -> None:
    policy = mcp_stack.write_policy("big-fits")
    size = int(1.9 * MB)
    async with stdio_gateway(mcp_stack, policy) as client:
        first = await client.call_tool("create_ticket", {"title": "small first"})
        assert not first.is_error, text_of(first)
        ticket = first.structured_content["id"]
        big = await client.call_tool("create_ticket", {"title": "t" * size})
        assert not big.is_error, text_of(big)[:500]
        # the ticket's title comes back cut to fit the journal, as any big result
        assert f"a string of {size} characters" in text_of(big)
        rolled = await client.call_tool("rollback", {})
        assert not rolled.is_error, text_of(rolled)
        saga_id = saga_named(text_of(rolled))
    assert read_state(mcp_stack.state)["tickets"][ticket]["status"] == "closed"
    rows = await phases(journal, saga_id)
    assert rows[:4] == [
        ("create_ticket", "INTENT"),
        ("create_ticket", "EXECUTED"),
        ("create_ticket", "INTENT"),
        ("create_ticket", "EXECUTED"),
    ]
    assert rows[4:] == [("create_ticket", "COMPENSATED")] * 2
    assert (await journal.verify(saga_id)).ok


async def test_an_update_too_large_from_any_sagacity_client_is_refused_before_it_is_sent(
    mcp_stack: McpStack, settings: Settings, temporal_client: TemporalClient
) -> None:
    """Temporal takes an update of any size, and the workflow task that would accept it fails
    for ever: every client with Sagacity's plugin refuses it first."""
    client = await connect_client(
        settings.model_copy(
            update={
                "temporal_address": mcp_stack.endpoints.temporal_address,
                "temporal_namespace": mcp_stack.endpoints.temporal_namespace,
            }
        )
    )
    sid = f"direct-{uuid.uuid4().hex[:8]}"
    handle = await client.start_workflow(
        MCP_SESSION_WORKFLOW,
        McpSessionRequest(server="tickets", lease_s=600),
        id=sid,
        task_queue=mcp_stack.task_queue,
    )
    first = McpCall(tool="create_ticket", arguments={"title": "direct first"})
    await handle.execute_update("call", first)
    with pytest.raises(PayloadTooLarge, match="the arguments of update 'call' to"):
        await handle.execute_update(
            "call", McpCall(tool="create_ticket", arguments={"title": "t" * int(2.5 * MB)})
        )
    # a client without the plugin gets its update in (it fits a payload, 2 MiB), but not the
    # call: the workflow refuses arguments over the limit before their INTENT
    bare = temporal_client.get_workflow_handle(sid)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await bare.execute_update(
            "call", McpCall(tool="create_ticket", arguments={"title": "t" * 2_050_000})
        )
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "McpCallRefused", cause
    assert "the arguments of tool 'create_ticket': 2,050,012 bytes" in cause.message
    # the session still answers and rolls back
    status = await asyncio.wait_for(handle.query("status", result_type=SagaStatus), 15)
    assert status.state is SagaState.RUNNING and status.head.seq == 2
    ended = McpEnd.model_validate(await handle.execute_update("rollback"))
    assert ended.state is SagaState.COMPENSATED, ended.message
