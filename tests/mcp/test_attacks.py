"""Adversarial tests of the MCP tools and gateway: a new user following the docs literally, a
prober sending bad input, an operator doing ordinary operations, an auditor reading the journal.

Each test states what a user should get. A test marked ``xfail(strict=True)`` is a finding: it
fails today, and its reason says what goes wrong; the rest show attacks that held.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import uuid
from typing import Any

import mcp_types as types
import pytest
from mcp.client import ClientRequestContext
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client as TemporalClient

from sagacity.mcp.policy import PolicyError, parse_policy
from sagacity.mcp.session import McpEnd
from sagacity.store import JournalStore
from tests.mcp.attack_fixtures import (
    gateway_policy,
    raw_stdio,
    tool_call,
    yaml_bomb_policy,
)
from tests.mcp.gateway_fixtures import (
    REPO,
    SAGACITY,
    Heard,
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


# -- the policy file -----------------------------------------------------------------------------


def test_a_yaml_bomb_policy_is_refused_at_once(tmp_path: Any) -> None:
    policy = yaml_bomb_policy(tmp_path)
    assert policy.stat().st_size < 1500
    try:
        done = subprocess.run(
            [SAGACITY, "mcp", "--policy", str(policy)],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=20,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("sagacity mcp was still reading a 1 KB policy after 20 s")
    assert done.returncode == 2 and "Traceback" not in done.stderr.decode()


BASE = """\
version: 1
reviewed: true
server: {{name: tickets, command: [python, ticket_server.py], timeout_s: {timeout}}}
session: {{lease_s: {lease}}}
tools:
  list_tickets: {{read_only: {read_only}}}
"""


@pytest.mark.parametrize(
    "values",
    [
        {"lease": "true", "timeout": 10, "read_only": "true"},
        {"lease": "'60'", "timeout": 10, "read_only": "true"},
        {"lease": 60, "timeout": "'10'", "read_only": "true"},
        {"lease": 60, "timeout": 10, "read_only": "'yes'"},
    ],
    ids=["bool-lease", "string-lease", "string-timeout", "string-bool"],
)
def test_a_policy_value_of_the_wrong_type_is_refused(values: dict[str, Any]) -> None:
    with pytest.raises(PolicyError):
        parse_policy(BASE.format(**values))


@pytest.mark.parametrize(
    "values",
    [
        {"lease": ".inf", "timeout": 10, "read_only": "true"},
        {"lease": 60, "timeout": ".inf", "read_only": "true"},
        {"lease": 60, "timeout": "1e300", "read_only": "true"},
        {"lease": "1e-9", "timeout": 10, "read_only": "true"},
    ],
    ids=["inf-lease", "inf-timeout", "huge-timeout", "lease-shorter-than-a-keepalive"],
)
def test_a_policy_duration_no_timer_can_hold_is_refused(values: dict[str, Any]) -> None:
    with pytest.raises(PolicyError):
        parse_policy(BASE.format(**values))


@pytest.mark.parametrize("path", ["input..x", "result.", "result", "output.id", "input.a..b"])
def test_a_malformed_mapping_path_is_refused(path: str) -> None:
    text = BASE.format(lease=60, timeout=10, read_only="true") + (
        "  create_ticket:\n"
        "    reversibility: REVERSIBLE\n"
        f"    compensation: {{tool: close_ticket, arguments: {{ticket_id: '{path}'}}}}\n"
    )
    with pytest.raises(PolicyError, match="must be input"):
        parse_policy(text)


# -- the gateway ---------------------------------------------------------------------------------


def test_a_gateway_with_an_infinite_lease_is_refused_at_start(mcp_stack: McpStack) -> None:
    policy = gateway_policy(mcp_stack, "inf-lease", lease_s=".inf")
    done = subprocess.run(
        [SAGACITY, "mcp", "--policy", str(policy)],
        cwd=REPO,
        env=mcp_stack.env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )
    said = done.stderr.decode()
    assert done.returncode == 2 and "lease_s" in said and "Traceback" not in said, said


async def test_the_shortest_lease_does_not_lose_a_connected_session(
    mcp_stack: McpStack, journal: JournalStore
) -> None:
    policy = gateway_policy(mcp_stack, "short-lease", lease_s=1)
    async with stdio_gateway(mcp_stack, policy) as client:
        first = await client.call_tool("create_ticket", {"title": "short lease 1"})
        await asyncio.sleep(2)
        second = await client.call_tool("create_ticket", {"title": "short lease 2"})
        await client.call_tool("rollback", {})
    assert not first.is_error, text_of(first)
    assert not second.is_error, text_of(second)


@pytest.mark.parametrize(
    "title",
    ["nul \x00 byte", "x" * 300_000, "\u202e\ufeff\U0001f600"],
    ids=["nul", "300k", "odd-unicode"],
)
async def test_odd_arguments_are_run_or_refused_and_the_session_goes_on(
    mcp_stack: McpStack, journal: JournalStore, title: str
) -> None:
    policy = mcp_stack.write_policy("odd-arguments")
    async with stdio_gateway(mcp_stack, policy) as client:
        odd = await asyncio.wait_for(client.call_tool("create_ticket", {"title": title}), 90)
        after = await asyncio.wait_for(
            client.call_tool("create_ticket", {"title": "after the odd one"}), 90
        )
        rolled = await client.call_tool("rollback", {})
    said = text_of(odd)
    assert not after.is_error, f"odd: {said[:300]} / after: {text_of(after)[:300]}"
    saga_id = saga_named(text_of(rolled))
    rows = await phases(journal, saga_id)
    assert rows[-1] == ("create_ticket", "COMPENSATED"), rows
    assert (await journal.verify(saga_id)).ok


async def test_rollback_while_a_call_waits_for_approval_rolls_back(
    mcp_stack: McpStack, journal: JournalStore
) -> None:
    policy = mcp_stack.write_policy("rollback-at-gate")
    heard = Heard()
    async with stdio_gateway(mcp_stack, policy, heard=heard) as client:
        ticket = await client.call_tool("create_ticket", {"title": "before the gate"})
        sending = asyncio.create_task(
            client.call_tool("send_email", {"to": "x@example.com", "body": "changed my mind"})
        )
        command = await heard.approval_command()
        try:
            rolled = await asyncio.wait_for(client.call_tool("rollback", {}), 30)
        except TimeoutError:
            pytest.fail("rollback was still waiting behind the approval after 30 s")
        finally:
            sending.cancel()
    assert "rolled back" in text_of(rolled)
    ticket_id = ticket.structured_content["id"]
    assert read_state(mcp_stack.state)["tickets"][ticket_id]["status"] == "closed"
    assert "changed my mind" not in [c["body"] for c in calls(mcp_stack.state, "send_email")]
    assert (await journal.verify(command[2])).ok


async def test_an_elicited_approval_shows_the_input_it_approves(
    mcp_stack: McpStack, journal: JournalStore
) -> None:
    policy = mcp_stack.write_policy("elicit-shows")
    asked: list[str] = []

    async def answer(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": False, "reason": "no"})

    async with stdio_gateway(
        mcp_stack,
        policy,
        "--elicit-approvals-as",
        "alice",
        client_options={"mode": "legacy", "elicitation_callback": answer},
    ) as client:
        await client.call_tool(
            "send_email", {"to": "ceo@example.com", "body": "wire 1M to account 42"}
        )
    assert len(asked) == 1
    assert "ceo@example.com" in asked[0] and "wire 1M to account 42" in asked[0], asked[0]


# -- a prober speaking JSON-RPC to the gateway, byte for byte ------------------------------------

DEEP = (
    b'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "create_ticket", '
    b'"arguments": {"title": ' + b"[" * 5000 + b"]" * 5000 + b"}}}"
)
LONE_SURROGATE = tool_call(2, "create_ticket", {"title": "lone \ud800 surrogate"})
TRUNCATED = b'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "create_t'
# two lines: a notification that cannot be read gets no answer, the request after it does
NOT_JSON_RPC = b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": [2]}\n{"id": 2}'
# JSON-RPC's answer (id, code) to each line the MCP library cannot read: a sound request whose
# params it cannot read is -32602, a message that is no request -32600, one that is not JSON (or
# too deep to find its id in) -32700 with id null
UNREADABLE = {
    LONE_SURROGATE: (2, -32602),
    DEEP: (None, -32700),
    TRUNCATED: (None, -32700),
    NOT_JSON_RPC: (2, -32600),
}


@pytest.mark.parametrize(
    "bad",
    [
        LONE_SURROGATE,
        tool_call(2, "create_ticket", [1, 2]),
        tool_call(2, "create_ticket", "title"),
        tool_call(2, "create_ticket", {"title": {"nested": ["x"]}}),
        DEEP,
        tool_call(2, "create_ticket", {"title": "x" * 5_000_000}),
        tool_call(2, "../create_ticket", {}),
        tool_call(2, "create_ticket\u0000", {"title": "x"}),
        tool_call(2, "close_ticket", {"ticket_id": "T-1"}),
        tool_call(2, "", {}),
        TRUNCATED,
        NOT_JSON_RPC,
    ],
    ids=[
        "lone-surrogate",
        "arguments-list",
        "arguments-string",
        "title-object",
        "nested-5000",
        "5MB-title",
        "path-name",
        "nul-in-name",
        "compensation-tool",
        "empty-name",
        "truncated-json",
        "not-json-rpc",
    ],
)
async def test_a_bad_call_is_refused_and_the_next_call_runs(
    mcp_stack: McpStack, journal: JournalStore, bad: bytes
) -> None:
    policy = mcp_stack.write_policy("prober")
    title = f"after a bad call {len(bad)}"
    answers = await raw_stdio(
        mcp_stack,
        policy,
        [bad, tool_call(3, "create_ticket", {"title": title})],
        then=[tool_call(4, "rollback", {})],
        timeout=8,  # the good calls take a few seconds; an unanswered one waits it out
    )
    refused, after, rolled, unread = answers
    assert "result" in after and not after["result"].get("isError"), json.dumps(after)[:500]
    if "missing" in refused:
        refused = unread  # a message with no readable id is answered with "id": null
    assert "missing" not in refused, "no answer to the bad call"
    said = json.dumps(refused)
    assert "Traceback" not in said and "Internal" not in said, said[:500]
    assert "error" in refused or refused["result"].get("isError"), said[:500]
    if bad in UNREADABLE:
        assert (refused["id"], refused["error"]["code"]) == UNREADABLE[bad], said[:500]
        assert refused["id"] is None or "missing" in unread, json.dumps(unread)[:500]
    assert "result" in after and not after["result"].get("isError"), json.dumps(after)[:500]
    assert after["result"]["structuredContent"]["title"] == title
    assert "rolled back" in json.dumps(rolled)
    assert [c["title"] for c in calls(mcp_stack.state, "create_ticket")][-1] == title
    saga_id = saga_named(json.dumps(rolled))
    rows = await phases(journal, saga_id)
    assert rows == [
        ("create_ticket", "INTENT"),
        ("create_ticket", "EXECUTED"),
        ("create_ticket", "COMPENSATED"),
    ]
    assert (await journal.verify(saga_id)).ok


# -- secrets in Temporal history -----------------------------------------------------------------


async def test_a_gateway_without_the_codec_keys_refuses_to_start(
    mcp_stack: McpStack, temporal_client: TemporalClient, tmp_path: Any
) -> None:
    """Started by an MCP client in a folder without the dev stack's codec keys, the gateway
    would put each call's arguments in clear into Temporal's history: it refuses, saying where
    keys are looked for and how to opt out, and nothing reaches Temporal."""
    queue = f"mcp-codec-{uuid.uuid4().hex[:6]}"
    env = mcp_stack.env(SAGACITY_TASK_QUEUE=queue)
    for name in ("SAGACITY_CODEC_KEYS", "SAGACITY_CODEC_KEYS_FILE"):
        env.pop(name, None)
    policy = mcp_stack.write_policy("codec")
    done = subprocess.run(
        [SAGACITY, "mcp", "--policy", str(policy)],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )
    said = done.stderr.decode()
    assert done.returncode == 2 and "Traceback" not in said, said
    assert str(tmp_path / ".sagacity" / "codec-keys") in said, said
    assert "SAGACITY_ALLOW_CLEAR_PAYLOADS" in said, said
    assert [w.id async for w in temporal_client.list_workflows(f"TaskQueue = '{queue}'")] == []


# -- operators -----------------------------------------------------------------------------------


async def test_a_terminated_saga_s_pending_call_is_not_sent_again(
    mcp_stack: McpStack, temporal_client: TemporalClient
) -> None:
    policy = mcp_stack.write_policy("terminated", boundary="explicit")
    heard = Heard()
    async with stdio_gateway(mcp_stack, policy, heard=heard) as client:
        sending = asyncio.create_task(
            client.call_tool("send_email", {"to": "x@example.com", "body": "terminated"})
        )
        command = await heard.approval_command()
        saga_id = command[2]
        await temporal_client.get_workflow_handle(saga_id).terminate("operator: stop it")
        await asyncio.sleep(5)
        started = [
            w.id
            async for w in temporal_client.list_workflows(f"WorkflowId STARTS_WITH '{saga_id}-'")
        ]
        done = sending.done()
        sending.cancel()
    assert started == [], f"the call was sent again in {started}"
    assert done, "the client was not told its saga was terminated"


async def test_a_session_reset_to_before_its_call_neither_repeats_nor_forgets_it(
    mcp_stack: McpStack, temporal_client: TemporalClient, journal: JournalStore
) -> None:
    policy = mcp_stack.write_policy("reset")
    title = f"reset {uuid.uuid4().hex[:6]}"
    async with stdio_gateway(mcp_stack, policy) as client:
        made = await client.call_tool("create_ticket", {"title": title})
        ticket_id = made.structured_content["id"]
        [saga_id] = [
            w.id
            async for w in temporal_client.list_workflows(
                "WorkflowType = 'sagacity.McpSession' AND ExecutionStatus = 'Running'"
            )
            if w.id.startswith("mcp-tickets-")
            and ("create_ticket", "EXECUTED") in await phases(journal, w.id)
            and title in json.dumps([r.payload for r in await journal.read(w.id)])
        ]
        handle = temporal_client.get_workflow_handle(saga_id)
        history = await handle.fetch_history()
        first_task = next(
            e.event_id
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
        )
        await temporal_client.workflow_service.reset_workflow_execution(
            ResetWorkflowExecutionRequest(
                namespace=temporal_client.namespace,
                workflow_execution=WorkflowExecution(workflow_id=saga_id),
                reason="operator: reset to the start",
                workflow_task_finish_event_id=first_task,
                request_id=str(uuid.uuid4()),
            )
        )
    # the client has gone: the reset run ends by `end` or by its lease, compensating
    end = await asyncio.wait_for(
        temporal_client.get_workflow_handle(saga_id, result_type=McpEnd).result(), 90
    )
    assert [c["title"] for c in calls(mcp_stack.state, "create_ticket")].count(title) == 1
    assert read_state(mcp_stack.state)["tickets"][ticket_id]["status"] == "closed", end.message
    assert (await journal.verify(saga_id)).ok


async def test_an_mcp_call_s_approval_deadline_is_the_configured_one(
    mcp_stack: McpStack,
) -> None:
    policy = mcp_stack.write_policy("deadline")
    async with stdio_gateway(mcp_stack, policy, SAGACITY_APPROVAL_DEADLINE="3") as client:
        try:
            sent = await asyncio.wait_for(
                client.call_tool("send_email", {"to": "x@example.com", "body": "deadline"}), 40
            )
        except TimeoutError:
            pytest.fail("the call still waited for approval 40 s after a 3 s deadline")
    assert sent.is_error and "timeout" in text_of(sent)
    assert "deadline" not in [c["body"] for c in calls(mcp_stack.state, "send_email")]


async def test_a_big_result_reaches_an_mcp_client(mcp_stack: McpStack) -> None:
    policy = mcp_stack.write_policy("big-result")
    async with stdio_gateway(mcp_stack, policy) as client:
        try:
            result = await client.call_tool("create_ticket", {"title": "x" * 600_000})
        except RuntimeError as exc:
            pytest.fail(f"the client could not take the gateway's answer: {exc}")
        finally:
            await client.call_tool("rollback", {})
    assert not result.is_error


async def test_a_call_with_a_big_result_is_still_compensated(mcp_stack: McpStack) -> None:
    policy = mcp_stack.write_policy("big-undo")
    title = f"big undo {uuid.uuid4().hex[:6]} " + "x" * 600_000
    async with stdio_gateway(mcp_stack, policy) as client:
        with contextlib.suppress(RuntimeError):  # the finding above
            await client.call_tool("create_ticket", {"title": title})
        rolled = await client.call_tool("rollback", {})
    [ticket] = [t for t in read_state(mcp_stack.state)["tickets"].values() if t["title"] == title]
    assert ticket["status"] == "closed", text_of(rolled)
