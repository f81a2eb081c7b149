"""Adversary: the stdio reader given bytes an MCP client should never send."""

from __future__ import annotations

import asyncio
import json

import pytest

from sagacity.store import JournalStore
from tests.mcp.attack_fixtures import raw_stdio, tool_call
from tests.mcp.gateway_fixtures import (
    Heard,
    McpStack,
    User,
    mcp_stack,
    saga_named,
    stdio_gateway,
)
from tests.mcp.ticket_server import read_state

__all__ = ["mcp_stack"]  # the fixture, imported for pytest

BAD_LINES = [
    b"\xff\xfe\x00 not utf-8 \xc3\x28",
    b'{"jsonrpc": "2.0", "id": 2.5, "method": "tools/call", "params": {}}',
    b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/call", "params": {}}',
    b'{"jsonrpc": "2.0", "id": [1, 2], "method": "tools/call", "params": {}}',
    b'{"jsonrpc": "2.0", "id": 1e400, "method": "ping"}',
    b"x" * (20 * 1024 * 1024),
]


async def test_a_burst_of_bad_lines_then_a_good_call(
    mcp_stack: McpStack, journal: JournalStore
) -> None:
    """Every bad line is answered (id null: none of them has an id an answer can carry) and the
    call after 300 of them runs; the answers to the bad ones are JSON-RPC errors, no traceback."""
    policy = mcp_stack.write_policy("adv-burst")
    burst = [BAD_LINES[n % len(BAD_LINES)] for n in range(300)]
    good = len(burst) + 2
    answers = await raw_stdio(
        mcp_stack,
        policy,
        [*burst, tool_call(good, "create_ticket", {"title": "after the burst"})],
        then=[tool_call(good + 1, "rollback", {})],
        timeout=60,
    )
    *unanswered, after, rolled, null = answers
    assert all("missing" in a for a in unanswered), "a bad line was answered with an id"
    assert "error" in null and null["id"] is None, json.dumps(null)[:300]
    assert "Traceback" not in json.dumps(null)
    assert after["result"]["structuredContent"]["title"] == "after the burst", str(after)[:500]
    assert "rolled back" in json.dumps(rolled)
    assert (await journal.verify(saga_named(json.dumps(rolled)))).ok


async def test_a_bad_line_between_initialize_and_initialized(mcp_stack: McpStack) -> None:
    """raw_stdio sends initialize and initialized back to back: the bad line goes first of
    ``lines``, straight after them; here it is the only request before the call."""
    policy = mcp_stack.write_policy("adv-early")
    answers = await raw_stdio(
        mcp_stack,
        policy,
        [b"{]", tool_call(3, "create_ticket", {"title": "early"})],
        then=[tool_call(4, "rollback", {})],
        timeout=30,
    )
    _, after, rolled, null = answers
    assert null["error"]["code"] == -32700, null
    assert after["result"]["structuredContent"]["title"] == "early", str(after)[:500]
    assert "rolled back" in json.dumps(rolled)


@pytest.mark.parametrize(
    "content",
    [
        {"approve": False, "reason": "no\x00way"},
        {"approve": False, "reason": "r" * 1_000_000},
        {"approve": "true"},
    ],
    ids=["nul-reason", "1MB-reason", "approve-string"],
)
async def test_an_elicited_answer_the_form_does_not_allow_is_told_and_decides_nothing(
    mcp_stack: McpStack, journal: JournalStore, content: dict[str, object]
) -> None:
    policy = mcp_stack.write_policy(f"adv-elicit-{len(json.dumps(content))}")
    user = User(content)
    heard = Heard()
    async with stdio_gateway(
        mcp_stack,
        policy,
        "--elicit-approvals-as",
        "alice",
        heard=heard,
        client_options={"mode": "legacy", "elicitation_callback": user.answer},
    ) as client:
        sending = asyncio.create_task(
            client.call_tool("send_email", {"to": "x@example.com", "body": "bad answer"})
        )
        try:
            told = await heard.said("was not taken", timeout=30)
            assert not sending.done()
        finally:
            sending.cancel()
    assert "Traceback" not in told and len(told) < 5000, told[:500]
    rows = await journal.read(saga_named(user.asked[0]))
    # the session's close aborts the waiting call (REJECTED by sagacity-mcp): alice decided nothing
    decided = [r.payload for r in rows if r.phase.value in ("APPROVED", "REJECTED")]
    assert not [p for p in decided if "alice" in p], (told, decided)
    assert "bad answer" not in [m["body"] for m in read_state(mcp_stack.state)["outbox"]]
