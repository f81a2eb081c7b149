"""The gateway under the faults of docs/operations: a client that leaves mid-call, calls sent
at once, no worker to take a call, no Temporal at start."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections import Counter

import pytest
from temporalio.client import Client as TemporalClient

from sagacity.mcp.session import McpEnd
from sagacity.store import JournalStore
from sagacity.temporal.models import SagaState
from tests.mcp.gateway_fixtures import (
    REPO,
    SAGACITY,
    Heard,
    McpStack,
    calls,
    free_port,
    mcp_stack,
    saga_named,
    stdio_gateway,
    text_of,
)
from tests.mcp.ticket_server import read_state
from tests.temporal.conftest import journal, phases, pool
from tests.temporal.test_crash import WorkerProcess

__all__ = ["journal", "mcp_stack", "pool"]


async def test_a_client_gone_mid_call_aborts_the_saga_and_the_call_never_runs(
    mcp_stack: McpStack, temporal_client: TemporalClient, journal: JournalStore
) -> None:
    policy = mcp_stack.write_policy("gone")
    heard = Heard()
    async with stdio_gateway(mcp_stack, policy, heard=heard) as client:
        ticket = await client.call_tool("create_ticket", {"title": "before leaving"})
        sending = asyncio.create_task(
            client.call_tool("send_email", {"to": "x@example.com", "body": "never sent"})
        )
        command = await heard.approval_command()
        sending.cancel()  # the client leaves while its call waits for a human
    saga_id = command[2]
    handle = temporal_client.get_workflow_handle(saga_id, result_type=McpEnd)
    end = await asyncio.wait_for(handle.result(), 60)
    assert end.state is SagaState.ABORTED
    ticket_id = ticket.structured_content["id"]
    assert read_state(mcp_stack.state)["tickets"][ticket_id]["status"] == "closed"
    assert "never sent" not in [c["body"] for c in calls(mcp_stack.state, "send_email")]
    rows = await phases(journal, saga_id)
    assert ("send_email", "INTENT") not in rows and rows[-1] == ("create_ticket", "COMPENSATED")
    assert (await journal.verify(saga_id)).ok


async def test_calls_sent_at_once_run_one_at_a_time_each_once(
    mcp_stack: McpStack, journal: JournalStore
) -> None:
    policy = mcp_stack.write_policy("together")
    titles = [f"together {n}" for n in range(4)]
    async with stdio_gateway(mcp_stack, policy) as client:
        made = await asyncio.gather(
            *(client.call_tool("create_ticket", {"title": title}) for title in titles)
        )
        committed = await client.call_tool("commit", {})
    assert not any(r.is_error for r in made)
    assert len({r.structured_content["id"] for r in made}) == 4
    logged = Counter(c["title"] for c in calls(mcp_stack.state, "create_ticket"))
    assert all(logged[title] == 1 for title in titles)
    saga_id = text_of(committed).split()[1]
    rows = await phases(journal, saga_id)
    # serial: each INTENT followed by its outcome before the next call starts
    assert rows == [("create_ticket", "INTENT"), ("create_ticket", "EXECUTED")] * 4
    assert (await journal.verify(saga_id)).ok


async def test_with_no_worker_a_call_is_refused_in_time_and_never_runs_later(
    mcp_stack: McpStack, temporal_client: TemporalClient, database_url: str
) -> None:
    policy = mcp_stack.write_policy("no-worker")
    queue = f"nobody-polls-{uuid.uuid4().hex[:6]}"
    async with stdio_gateway(
        mcp_stack, policy, "--accept-timeout", "2", SAGACITY_TASK_QUEUE=queue
    ) as client:
        began = asyncio.get_running_loop().time()
        result = await client.call_tool("create_ticket", {"title": "no worker"})
        waited = asyncio.get_running_loop().time() - began
    assert result.is_error
    said = text_of(result)
    assert "no Sagacity worker took the call within 2s" in said and queue in said
    assert waited < 30
    saga_id = saga_named(said)
    # a worker that turns up later refuses the stale call: it never runs
    late = WorkerProcess(
        mcp_stack.endpoints,
        database_url,
        queue,
        mcp_stack.folder / "late-worker.log",
        apps=("sagacity.mcp.app",),
    )
    late.env["SAGACITY_MCP_POLICY"] = str(mcp_stack.policy)
    await late.start()
    try:
        handle = temporal_client.get_workflow_handle(saga_id, result_type=McpEnd)
        end = await asyncio.wait_for(handle.result(), 60)  # ended by the gateway's `end`
    finally:
        late.stop()
    assert end.saga.head.seq == 0  # nothing journaled
    assert "no worker" not in [c["title"] for c in calls(mcp_stack.state, "create_ticket")]


def test_a_gateway_without_temporal_says_so_at_start(mcp_stack: McpStack) -> None:
    policy = mcp_stack.write_policy("no-temporal")
    env = mcp_stack.env(TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}")
    done = subprocess.run(
        [SAGACITY, "mcp", "--policy", str(policy)],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "cannot reach Temporal at 127.0.0.1:" in done.stderr.decode()
    assert "Traceback" not in done.stderr.decode()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((), "give --policy FILE"),
        (("--observe",), "--write-policy"),
        (("--policy", "/nonexistent/policy.yaml"), "policy.yaml"),
    ],
)
def test_bad_invocations_exit_2_with_one_line(
    mcp_stack: McpStack, args: tuple[str, ...], says: str
) -> None:
    done = subprocess.run(
        [SAGACITY, "mcp", *args],
        cwd=REPO,
        env=mcp_stack.env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert says in done.stderr.decode() and "Traceback" not in done.stderr.decode()


def test_observe_mode_never_overwrites_a_reviewed_policy(mcp_stack: McpStack) -> None:
    before = mcp_stack.policy.read_text()
    done = subprocess.run(
        [
            SAGACITY,
            "mcp",
            "--observe",
            "--policy",
            str(mcp_stack.policy),
            "--write-policy",
            str(mcp_stack.policy),
        ],
        cwd=REPO,
        env=mcp_stack.env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2 and "refusing to overwrite" in done.stderr.decode()
    assert mcp_stack.policy.read_text() == before
