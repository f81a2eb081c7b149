"""``sagacity mcp``: a real MCP client through the gateway (a subprocess) to the ticket server,
each call a journaled step on a worker process serving ``sagacity.mcp.app``.

Real Temporal, real Postgres, the real ticket server; what each test checks is what a user
sees: the client's results and errors, the journal, and the ticket server's own state.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter

import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from temporalio.client import Client as TemporalClient

from sagacity.mcp.policy import PolicyError, load_policy
from sagacity.mcp.session import McpEnd
from sagacity.store import JournalStore
from sagacity.temporal.models import SagaState
from sagacity.tools import Reversibility
from tests.approvals.conftest import Cli, cli
from tests.mcp.gateway_fixtures import (
    SAGACITY,
    Heard,
    McpStack,
    User,
    calls,
    http_gateway,
    mcp_stack,
    saga_named,
    stdio_gateway,
    text_of,
)
from tests.mcp.ticket_server import read_state
from tests.temporal.conftest import awaiting_approval, journal, phases, pool, wait_for

__all__ = ["cli", "journal", "mcp_stack", "pool"]


async def sagas_started(temporal_client: TemporalClient, since: set[str]) -> list[str]:
    found = [
        w.id
        async for w in temporal_client.list_workflows("WorkflowType = 'sagacity.McpSession'")
        if w.id not in since
    ]
    return found


async def test_two_tickets_rolled_back_close_newest_first(
    mcp_stack: McpStack, journal: JournalStore
) -> None:
    policy = mcp_stack.write_policy("rollback")
    async with stdio_gateway(mcp_stack, policy) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert names == {"create_ticket", "list_tickets", "send_email", "commit", "rollback"}
        first = await client.call_tool("create_ticket", {"title": "printer on fire"})
        second = await client.call_tool("create_ticket", {"title": "coffee machine"})
        assert not first.is_error and not second.is_error
        ids = [first.structured_content["id"], second.structured_content["id"]]
        rolled = await client.call_tool("rollback", {})
        assert not rolled.is_error, text_of(rolled)
        message = text_of(rolled)
        assert "COMPENSATED" in message.upper() and "create_ticket" in message
        saga_id = message.split()[1]
    closes = [c["ticket_id"] for c in calls(mcp_stack.state, "close_ticket")]
    assert closes[-2:] == [ids[1], ids[0]]  # newest first
    tickets = read_state(mcp_stack.state)["tickets"]
    assert [tickets[i]["status"] for i in ids] == ["closed", "closed"]
    rows = await phases(journal, saga_id)
    assert rows == [
        ("create_ticket", "INTENT"),
        ("create_ticket", "EXECUTED"),
        ("create_ticket", "INTENT"),
        ("create_ticket", "EXECUTED"),
        ("create_ticket", "COMPENSATED"),
        ("create_ticket", "COMPENSATED"),
    ]
    assert (await journal.verify(saga_id)).ok


async def test_irreversible_call_waits_then_runs_once_when_approved_through_the_cli(
    mcp_stack: McpStack, journal: JournalStore, cli: Cli
) -> None:
    """The README's story: two tickets, an approved email, a rollback."""
    policy = mcp_stack.write_policy("approve")
    heard = Heard()
    async with stdio_gateway(mcp_stack, policy, heard=heard) as client:
        made = [
            await client.call_tool("create_ticket", {"title": title})
            for title in ("printer on fire", "coffee machine")
        ]
        sending = asyncio.create_task(
            client.call_tool("send_email", {"to": "ops@example.com", "body": "approved one"})
        )
        command = await heard.approval_command()
        assert not sending.done()  # it waits for the human
        assert not [c for c in calls(mcp_stack.state, "send_email") if c["body"] == "approved one"]
        approved = await cli(*command, "--as", "alice", extra_env=mcp_stack.env())
        assert approved.code == 0, approved.stderr
        sent = await asyncio.wait_for(sending, 60)
        assert not sent.is_error, text_of(sent)
        assert sent.structured_content["message_id"].startswith("M-")
        rolled = await client.call_tool("rollback", {})
    said = text_of(rolled)
    assert "compensated, newest first: create_ticket (call 3), create_ticket (call 1)" in said
    assert "still in effect (no undo): send_email" in said
    saga_id = command[2]
    bodies = [c["body"] for c in calls(mcp_stack.state, "send_email")]
    assert bodies.count("approved one") == 1
    assert [m["body"] for m in read_state(mcp_stack.state)["outbox"]].count("approved one") == 1
    ids = [r.structured_content["id"] for r in made]
    assert [c["ticket_id"] for c in calls(mcp_stack.state, "close_ticket")][-2:] == ids[::-1]
    rows = await phases(journal, saga_id)
    counted = Counter(p for _, p in rows)
    assert counted["AWAITING_APPROVAL"] == counted["APPROVED"] == 1
    assert counted["INTENT"] == 3 and counted["COMPENSATED"] == 2
    assert (await journal.verify(saga_id)).ok


async def test_a_rejected_call_compensates_the_session(
    mcp_stack: McpStack, journal: JournalStore, cli: Cli
) -> None:
    policy = mcp_stack.write_policy("reject")
    heard = Heard()
    async with stdio_gateway(mcp_stack, policy, heard=heard) as client:
        ticket = await client.call_tool("create_ticket", {"title": "before the email"})
        sending = asyncio.create_task(
            client.call_tool("send_email", {"to": "all@example.com", "body": "rejected one"})
        )
        command = await heard.approval_command()
        rejected = await cli(
            "approvals",
            "reject",
            command[2],
            command[3],
            "--reason",
            "not to everyone",
            "--as",
            "alice",
            extra_env=mcp_stack.env(),
        )
        assert rejected.code == 0, rejected.stderr
        result = await asyncio.wait_for(sending, 60)
        assert result.is_error
        said = text_of(result)
        assert "not to everyone" in said and "create_ticket" in said and command[2] in said
        # a session saga that ended takes no more calls, and says so
        after = await client.call_tool("list_tickets", {})
        assert after.is_error and "new" in text_of(after)
    ticket_id = ticket.structured_content["id"]
    assert read_state(mcp_stack.state)["tickets"][ticket_id]["status"] == "closed"
    assert "rejected one" not in [m["body"] for m in read_state(mcp_stack.state)["outbox"]]
    assert ("create_ticket", "COMPENSATED") in await phases(journal, command[2])
    assert (await journal.verify(command[2])).ok


async def test_an_is_error_result_is_failed_and_compensates_the_session(
    mcp_stack: McpStack, journal: JournalStore
) -> None:
    policy = mcp_stack.write_policy("fails")
    async with stdio_gateway(mcp_stack, policy) as client:
        ticket = await client.call_tool("create_ticket", {"title": "kept until the failure"})
        failed = await client.call_tool("create_ticket", {"title": "fail"})
        assert failed.is_error
        said = text_of(failed)
        assert "refuses tickets titled 'fail'" in said
        assert "create_ticket (call 1)" in said  # what was compensated
        saga_id = saga_named(text_of(failed))
    ticket_id = ticket.structured_content["id"]
    assert read_state(mcp_stack.state)["tickets"][ticket_id]["status"] == "closed"
    rows = await phases(journal, saga_id)
    assert ("create_ticket", "FAILED") in rows
    assert rows[-1] == ("create_ticket", "COMPENSATED")
    assert (await journal.verify(saga_id)).ok


async def test_a_tool_the_policy_does_not_name_is_refused(
    mcp_stack: McpStack, temporal_client: TemporalClient
) -> None:
    policy = mcp_stack.write_policy("refuse")
    before = set(await sagas_started(temporal_client, set()))
    logged = len(read_state(mcp_stack.state)["calls"])
    async with stdio_gateway(mcp_stack, policy) as client:
        listed = {tool.name for tool in (await client.list_tools()).tools}
        assert "describe_ticket" not in listed  # the upstream has it; the policy does not name it
        with pytest.raises(MCPError) as refused:
            await client.call_tool("describe_ticket", {"ticket_id": "T-1"})
        assert refused.value.code == types.INVALID_PARAMS
        assert "'describe_ticket' is refused" in refused.value.message
        assert "does not name it" in refused.value.message
    assert len(read_state(mcp_stack.state)["calls"]) == logged  # the upstream never heard of it
    assert await sagas_started(temporal_client, before) == []  # and no saga was started


async def test_explicit_boundary_starts_a_new_saga_after_a_commit(mcp_stack: McpStack) -> None:
    policy = mcp_stack.write_policy("explicit", boundary="explicit")
    async with stdio_gateway(mcp_stack, policy) as client:
        kept = await client.call_tool("create_ticket", {"title": "kept"})
        committed = await client.call_tool("commit", {})
        undone = await client.call_tool("create_ticket", {"title": "undone"})
        rolled = await client.call_tool("rollback", {})
        failed = await client.call_tool("create_ticket", {"title": "fail"})
        after = await client.call_tool("create_ticket", {"title": "after the failure"})
        await client.call_tool("commit", {})
    first, second = text_of(committed).split()[1], text_of(rolled).split()[1]
    assert first != second and second == f"{first}-2"
    # a failure ends its saga; the next call goes to a new one
    assert failed.is_error and saga_named(text_of(failed)) == f"{first}-3"
    assert "starts a new saga for the next call" in text_of(failed)
    assert not after.is_error
    tickets = read_state(mcp_stack.state)["tickets"]
    assert tickets[kept.structured_content["id"]]["status"] == "open"
    assert tickets[undone.structured_content["id"]]["status"] == "closed"


async def test_a_sigkilled_gateway_leaves_the_saga_to_compensate_on_the_workers(
    mcp_stack: McpStack, temporal_client: TemporalClient, journal: JournalStore
) -> None:
    policy = mcp_stack.write_policy("killed")
    before = set(await sagas_started(temporal_client, set()))
    with http_gateway(mcp_stack, policy, "--shared-saga") as gateway:  # its one client
        async with Client(gateway.url) as client:
            one = await client.call_tool("create_ticket", {"title": "orphan one"})
            two = await client.call_tool("create_ticket", {"title": "orphan two"})
            gateway.kill()
    (saga_id,) = await sagas_started(temporal_client, before)
    handle = temporal_client.get_workflow_handle(saga_id, result_type=McpEnd)
    end: McpEnd = await asyncio.wait_for(handle.result(), 60)  # the lease runs out
    assert end.state is SagaState.COMPENSATED
    assert "said nothing" in end.message
    tickets = read_state(mcp_stack.state)["tickets"]
    ids = [one.structured_content["id"], two.structured_content["id"]]
    assert [tickets[i]["status"] for i in ids] == ["closed", "closed"]
    closes = [c["ticket_id"] for c in calls(mcp_stack.state, "close_ticket")]
    assert closes[-2:] == [ids[1], ids[0]]
    assert (await journal.verify(saga_id)).ok


async def test_observe_mode_writes_a_skeleton_that_loads_once_reviewed(
    mcp_stack: McpStack,
) -> None:
    out = mcp_stack.folder / "observed.policy.yaml"
    policy = mcp_stack.write_policy("observe")
    async with stdio_gateway(mcp_stack, policy, "--observe", "--write-policy", str(out)) as client:
        listed = {tool.name for tool in (await client.list_tools()).tools}
        assert {"describe_ticket", "close_ticket"} <= listed  # everything, named or not
        made = await client.call_tool("create_ticket", {"title": "observed"})
        assert not made.is_error  # forwarded as is: no saga
        failed = await client.call_tool("create_ticket", {"title": "fail"})
        assert failed.is_error
        await client.call_tool("describe_ticket", {"ticket_id": made.structured_content["id"]})
    text = out.read_text()
    assert "reviewed: false" in text
    assert "close_ticket" in text  # the guessed undo of create_ticket, as a comment
    with pytest.raises(PolicyError, match="review"):
        load_policy(out)
    out.write_text(text.replace("reviewed: false", "reviewed: true"))
    reviewed = load_policy(out)
    assert set(reviewed.tools) == {"create_ticket", "describe_ticket"}
    assert all(t.reversibility is Reversibility.IRREVERSIBLE for t in reviewed.tools.values())
    assert reviewed.server.command == load_policy(policy).server.command


async def test_over_http_each_handshake_session_gets_a_saga_of_its_own(
    mcp_stack: McpStack,
) -> None:
    policy = mcp_stack.write_policy("http-sessions", boundary="explicit")
    with http_gateway(mcp_stack, policy) as gateway:
        async with (
            Client(gateway.url, mode="legacy") as one,
            Client(gateway.url, mode="legacy") as two,
        ):
            kept = await one.call_tool("create_ticket", {"title": "one's ticket"})
            undone = await two.call_tool("create_ticket", {"title": "two's ticket"})
            committed = await one.call_tool("commit", {})
            rolled = await two.call_tool("rollback", {})
        async with Client(gateway.url, mode="legacy") as three:
            left = await three.call_tool("create_ticket", {"title": "three's ticket"})
        # three ended its session (DELETE) without a commit: on_end compensates, gateway or not
        left_id = left.structured_content["id"]
        for _ in range(300):
            if read_state(mcp_stack.state)["tickets"][left_id]["status"] == "closed":
                break
            await asyncio.sleep(0.1)
        assert read_state(mcp_stack.state)["tickets"][left_id]["status"] == "closed"
        assert gateway.proc.poll() is None  # ended by the client, not by the gateway stopping
        # a client with no session (protocol 2026-07-28) would share a saga: refused, nothing runs
        async with Client(gateway.url) as sessionless:
            with pytest.raises(MCPError, match="one saga per MCP session") as refused:
                await sessionless.call_tool("create_ticket", {"title": "no session"})
        assert "--shared-saga" in str(refused.value)
        assert "no session" not in [c["title"] for c in calls(mcp_stack.state, "create_ticket")]
    assert saga_named(text_of(committed)) != saga_named(text_of(rolled))
    tickets = read_state(mcp_stack.state)["tickets"]
    assert tickets[kept.structured_content["id"]]["status"] == "open"
    assert tickets[undone.structured_content["id"]]["status"] == "closed"


@pytest.mark.parametrize("approve", [True, False])
async def test_the_client_s_user_decides_through_elicitation_when_the_gateway_asks(
    mcp_stack: McpStack, journal: JournalStore, approve: bool
) -> None:
    policy = mcp_stack.write_policy(f"elicit-{approve}")
    user = User({"approve": approve, "reason": "not today"})
    asked = user.asked

    body = f"elicited {approve}"
    async with stdio_gateway(
        mcp_stack,
        policy,
        "--elicit-approvals-as",
        "alice",
        client_options={"mode": "legacy", "elicitation_callback": user.answer},
    ) as client:
        sent = await client.call_tool("send_email", {"to": "x@example.com", "body": body})
    assert len(asked) == 1 and "alice" in asked[0] and "sagacity approvals approve" in asked[0]
    saga_id = saga_named(asked[0])
    outbox = [m["body"] for m in read_state(mcp_stack.state)["outbox"]]
    rows = await journal.read(saga_id)
    decided = [r for r in rows if r.phase.value in ("APPROVED", "REJECTED")]
    assert len(decided) == 1 and "alice" in decided[0].payload
    if approve:
        assert not sent.is_error and outbox.count(body) == 1
        assert decided[0].phase.value == "APPROVED"
    else:
        assert sent.is_error and "not today" in text_of(sent) and body not in outbox
        assert decided[0].phase.value == "REJECTED"
    assert (await journal.verify(saga_id)).ok


async def test_a_gateway_whose_key_cannot_sign_for_the_elicited_approver_refuses_to_start(
    mcp_stack: McpStack,
) -> None:
    """Every answer would be refused by the keyring and the call left waiting: said at once."""
    policy = mcp_stack.write_policy("elicit-unsigned")
    started = await asyncio.create_subprocess_exec(
        SAGACITY,
        "mcp",
        "--policy",
        str(policy),
        "--elicit-approvals-as",
        "carol",
        env=mcp_stack.env(),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(started.communicate(), 60)
    said = err.decode()
    assert started.returncode == 2, said
    assert "--elicit-approvals-as carol" in said and "may not sign for 'carol'" in said, said
    assert "this key signs for alice" in said and "Traceback" not in said, said


async def test_a_decision_the_gateway_cannot_take_is_told_and_another_route_decides(
    mcp_stack: McpStack, journal: JournalStore, cli: Cli
) -> None:
    # the gateway's approvers policy lets only bob decide: alice's answer is refused there
    policy = mcp_stack.write_policy("elicit-refused")
    user = User({"approve": True})
    asked = user.asked

    heard = Heard()
    async with stdio_gateway(
        mcp_stack,
        policy,
        "--elicit-approvals-as",
        "alice",
        heard=heard,
        client_options={"mode": "legacy", "elicitation_callback": user.answer},
        SAGACITY_APPROVERS="send_email=bob",
    ) as client:
        sending = asyncio.create_task(
            client.call_tool("send_email", {"to": "x@example.com", "body": "second route"})
        )
        refusal = await heard.said("was not taken")
        assert not sending.done()
        assert "'alice' may not decide 'send_email' calls" in refusal, refusal
        assert "waits for a decision by another route" in refusal, refusal
        approved = await cli(
            *await heard.approval_command(), "--as", "alice", extra_env=mcp_stack.env()
        )
        assert approved.code == 0, approved.stderr
        sent = await asyncio.wait_for(sending, 60)
    assert len(asked) == 1 and not sent.is_error, text_of(sent)
    assert [m["body"] for m in read_state(mcp_stack.state)["outbox"]].count("second route") == 1
    rows = await journal.read(saga_named(asked[0]))
    decided = [r for r in rows if r.phase.value in ("APPROVED", "REJECTED")]
    assert [r.phase.value for r in decided] == ["APPROVED"]


async def test_a_session_closed_without_commit_follows_on_end_commit(
    mcp_stack: McpStack, temporal_client: TemporalClient
) -> None:
    # a lease longer than the wait below: only the gateway's `end` can end the saga in time
    policy = mcp_stack.write_policy("on-end-commit", on_end="commit", lease_s=300)
    before = set(await sagas_started(temporal_client, set()))
    async with stdio_gateway(mcp_stack, policy) as client:
        made = await client.call_tool("create_ticket", {"title": "kept by on_end"})
    (saga_id,) = await sagas_started(temporal_client, before)
    handle = temporal_client.get_workflow_handle(saga_id, result_type=McpEnd)
    end = await asyncio.wait_for(handle.result(), 30)
    assert end.state is SagaState.COMPLETED  # the clean close sent `end`; on_end says commit
    assert read_state(mcp_stack.state)["tickets"][made.structured_content["id"]]["status"] == "open"


async def test_a_gateway_killed_while_a_call_waits_for_approval_aborts_the_saga(
    mcp_stack: McpStack, temporal_client: TemporalClient, journal: JournalStore
) -> None:
    policy = mcp_stack.write_policy("killed-at-gate")
    before = set(await sagas_started(temporal_client, set()))
    with http_gateway(mcp_stack, policy, "--shared-saga") as gateway:  # its one client
        async with Client(gateway.url) as client:
            made = await client.call_tool("create_ticket", {"title": "before the gate"})
            sending = asyncio.create_task(
                client.call_tool("send_email", {"to": "x@example.com", "body": "orphaned"})
            )
            (saga_id,) = await sagas_started(temporal_client, before)
            handle = temporal_client.get_workflow_handle(saga_id, result_type=McpEnd)
            await wait_for(handle, awaiting_approval)
            sending.cancel()  # the client gives up on it (the saga is not told) ...
            with contextlib.suppress(asyncio.CancelledError):
                await sending
            gateway.kill()  # ... and the gateway dies: no end, no abort, no keepalive
    end = await asyncio.wait_for(handle.result(), 60)  # the lease runs out at the gate
    assert end.state is SagaState.ABORTED and "session lost" in end.message
    assert read_state(mcp_stack.state)["tickets"][made.structured_content["id"]]["status"] == (
        "closed"
    )
    assert "orphaned" not in [c["body"] for c in calls(mcp_stack.state, "send_email")]
    rows = await phases(journal, saga_id)
    assert ("send_email", "INTENT") not in rows
    assert (await journal.verify(saga_id)).ok
