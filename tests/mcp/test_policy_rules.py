"""Approval rules, SLAs and M-of-N policies in the MCP policy file: parsed with the decorator's
own types and refusals (each a PolicyError naming the file, the tool's key and its line), and on
a real gateway a REVERSIBLE tool's rule sends a high-priority ticket to a human, saying why, while
a low one runs unasked."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from mcp.types import Tool

from sagacity.approval_policy import ApprovalPolicy
from sagacity.devstack import Endpoints
from sagacity.errors import PolicyError
from sagacity.mcp.gateway import waiting_message
from sagacity.mcp.policy import Policy, Seen, check_against, parse_policy, skeleton
from sagacity.mcp.tools import mcp_tools
from sagacity.mcp.upstream import Upstream
from sagacity.rules import ALWAYS, ApprovalRule
from sagacity.settings import Settings
from sagacity.store import JournalStore
from sagacity.temporal.models import PendingApproval, QuorumStatus
from tests.approvals.conftest import Cli, cli
from tests.mcp.conftest import ROOT
from tests.mcp.gateway_fixtures import Heard, McpStack, calls, started_stack, stdio_gateway
from tests.mcp.test_policy import GOOD, edited, listed
from tests.temporal.conftest import journal, pool

__all__ = ["cli", "journal", "listed", "pool"]

UNDO = "      constants: {reason: rolled back by a saga}\n"
RULE = '    needs_approval: {name: urgent ticket, field: priority, op: ">", value: 3}\n'


def with_keys(tool: str, lines: str) -> str:
    """GOOD with ``lines`` (YAML keys, indented as a tool's) added to ``tool``."""
    anchors = {
        "create_ticket": UNDO,
        "list_tickets": "    read_only: true\n",
        "send_email": "    reversibility: IRREVERSIBLE\n",
    }
    return edited(anchors[tool], anchors[tool] + lines)


def test_a_rule_an_sla_and_a_policy_reach_the_tool() -> None:
    policy = parse_policy(
        with_keys(
            "create_ticket",
            RULE
            + "    approval_sla: PT4H\n"
            + "    approval_policy: {required: 2, group: ops, starter_may_approve: false}\n",
        )
    )
    tool = policy.tools["create_ticket"]
    assert tool.needs_approval == ApprovalRule(
        name="urgent ticket", field="priority", op=">", value=3
    )
    assert tool.approval_sla == timedelta(hours=4)
    assert tool.approval_policy == ApprovalPolicy(
        required=2, group="ops", starter_may_approve=False
    )
    # true is every call; seconds are a duration as in the settings; an IRREVERSIBLE tool may
    # say true (it waits anyway) and take an SLA and a policy
    plain = parse_policy(
        with_keys("create_ticket", "    needs_approval: true\n    approval_sla: 90\n")
    )
    assert plain.tools["create_ticket"].needs_approval == ALWAYS
    assert plain.tools["create_ticket"].approval_sla == timedelta(seconds=90)
    wire = parse_policy(
        with_keys(
            "send_email",
            "    needs_approval: true\n    approval_sla: P1D\n    approval_policy: {required: 2}\n",
        )
    ).tools["send_email"]
    assert wire.approval_policy == ApprovalPolicy(required=2)
    assert parse_policy(GOOD).tools["create_ticket"].needs_approval is None


@pytest.mark.parametrize(
    ("tool", "lines", "expected"),
    [
        (
            "send_email",
            '    needs_approval: {field: to, op: "==", value: all@example.com}\n',
            "tools.send_email.needs_approval (line 17): tool 'send_email' is IRREVERSIBLE, so "
            "every call already waits for approval",
        ),
        (
            "create_ticket",
            "    approval_policy: {required: 2, group: ops}\n",
            "tools.create_ticket.approval_policy (line 13): tool 'create_ticket': "
            "approval_policy applies to calls that wait for approval, and none of this tool's do",
        ),
        (
            "create_ticket",
            "    approval_sla: PT4H\n",
            "tools.create_ticket.approval_sla (line 13): tool 'create_ticket': approval_sla "
            "applies to calls that wait for approval",
        ),
        (
            "list_tickets",
            "    needs_approval: true\n",
            "tools.list_tickets (line 14): a read_only tool has no effect for a human to approve",
        ),
        (
            "create_ticket",
            '    needs_approval: {field: priority, op: "~", value: 3}\n',
            "tools.create_ticket.needs_approval (line 13): tool 'create_ticket': needs_approval "
            "rule 'priority ~ 3' has unknown op '~'",
        ),
        (
            "create_ticket",
            '    needs_approval: {feild: priority, op: ">", value: 3}\n',
            "tools.create_ticket.needs_approval (line 13): unknown rule key feild",
        ),
        (
            "create_ticket",
            '    needs_approval: {any_of: [{field: a, op: ">", value: 1}, {field: b, vlaue: 1}]}\n',
            "unknown rule key vlaue",
        ),
        ("create_ticket", "    needs_approval: yes please\n", "give true (every call waits"),
        ("create_ticket", "    needs_approval: true\n    approval_sla: true\n", "not true or"),
        ("create_ticket", "    needs_approval: true\n    approval_sla: 0\n", "above 0 and at"),
        ("create_ticket", "    needs_approval: true\n    approval_sla: P2Y\n", "approval_sla"),
        (
            "create_ticket",
            '    needs_approval: true\n    approval_policy: {required: "2"}\n',
            "tools.create_ticket.approval_policy (line 14): required: Input should be a valid "
            "integer",
        ),
        (
            "create_ticket",
            "    needs_approval: true\n    approval_policy: {required: 2, grup: ops}\n",
            "grup: Extra inputs are not permitted",
        ),
    ],
)
def test_approval_keys_the_decorator_would_refuse_are_refused_naming_the_file(
    tool: str, lines: str, expected: str
) -> None:
    with pytest.raises(PolicyError) as refused:
        parse_policy(with_keys(tool, lines), source=ROOT / "tickets.policy.yaml")
    said = str(refused.value)
    assert said.startswith(f"{ROOT / 'tickets.policy.yaml'}: "), said
    assert expected in said, said


def test_a_policy_built_in_code_is_refused_as_the_decorator_refuses(
    listed: list[Tool],
) -> None:
    """mcp_tools declares each tool with compensable(): its refusal names the tool's key."""
    data = parse_policy(GOOD).model_dump(mode="json", exclude_none=True)
    data["tools"]["send_email"]["needs_approval"] = {"field": "to", "op": "==", "value": "x"}
    policy = Policy.model_validate(data)  # parse_policy's checks skipped
    upstream = Upstream(policy.server, folder=ROOT)  # declaring its tools does not call it
    with pytest.raises(PolicyError, match=re.escape("the policy: tools.send_email: tool 'send")):
        mcp_tools(policy, upstream, listed)


def test_the_keys_reach_the_declared_tool(listed: list[Tool]) -> None:
    """What the engine reads: the tool's options, as @compensable(...) would set them."""
    keys = RULE + "    approval_sla: 600\n    approval_policy: {required: 2, group: ops}\n"
    policy = parse_policy(with_keys("create_ticket", keys))
    upstream = Upstream(policy.server, folder=ROOT)
    tools = {t.name: t for t in mcp_tools(policy, upstream, listed)}
    options = tools["create_ticket"].options
    assert options.approval == policy.tools["create_ticket"].needs_approval
    assert options.approval_sla == timedelta(minutes=10)
    assert options.approval_policy == ApprovalPolicy(required=2, group="ops")
    assert tools["list_tickets"].options.approval is None


def test_the_waiting_message_says_why_and_who() -> None:
    pending = PendingApproval(
        journal_seq=5, tool_name="create_ticket", input_json="{}", input_hash="h", deadline_s=60
    )
    plain = waiting_message("send_email", "s-1", pending)
    assert plain.startswith("send_email is IRREVERSIBLE and waits for a human's approval (saga")
    ruled = pending.model_copy(
        update={
            "why": "rule 'urgent ticket': priority 5 > 3",
            "quorum": QuorumStatus(required=2, group="oncall", starter_may_approve=False),
        }
    )
    said = waiting_message("create_ticket", "s-1", ruled)
    assert said.startswith(
        "create_ticket waits for a human's approval under rule 'urgent ticket': priority 5 > 3 "
        "(saga s-1, request 5). It needs 2 of oncall, not the starter. Approve: sagacity "
        "approvals approve s-1 5"
    ), said
    assert "IRREVERSIBLE" not in said


def test_the_skeleton_shows_needs_approval_and_its_example_loads(listed: list[Tool]) -> None:
    server = parse_policy(GOOD).server
    seen = {"create_ticket": Seen(calls=1, argument_keys={"title", "priority"})}
    text = skeleton(server, seen, listed)
    assert "#   needs_approval: {field: amount" in text  # the header's example
    lines = text.replace("reviewed: false", "reviewed: true").splitlines()
    # the reviewer takes the guessed undo and the rule: uncommented, they load as a policy
    for i, line in enumerate(lines):
        if line.startswith("    # ") and ("needs_approval" in line or "close_ticket" in line):
            lines[i] = "    " + line.removeprefix("    # ")
    lines = [
        line
        for line in lines
        if line != "    reversibility: IRREVERSIBLE   # each call waits for a human's approval"
    ]
    policy = parse_policy("\n".join(lines))
    check_against(policy, listed)
    assert policy.tools["create_ticket"].needs_approval == ApprovalRule(
        field="priority", op=">", value=1000
    )


@pytest.fixture(scope="module")
async def rule_stack(
    endpoints: Endpoints,
    database_url: str,
    settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[McpStack]:
    """A worker serving the ticket desk with create_ticket gated by the rule priority > 3."""
    async with started_stack(
        endpoints, database_url, settings, tmp_path_factory, create_ticket=RULE
    ) as stack:
        yield stack


async def test_a_rule_sends_an_urgent_ticket_to_a_human_and_a_routine_one_runs_unasked(
    rule_stack: McpStack, journal: JournalStore, cli: Cli
) -> None:
    policy = rule_stack.write_policy("rules", create_ticket=RULE)
    heard = Heard()
    async with stdio_gateway(rule_stack, policy, heard=heard) as client:
        routine = await client.call_tool("create_ticket", {"title": "toner low", "priority": 1})
        assert not routine.is_error, routine
        urgent = asyncio.create_task(
            client.call_tool("create_ticket", {"title": "server room flooded", "priority": 5})
        )
        said = await heard.said("sagacity approvals approve ")
        # why it waits, in the rule's words: not "IRREVERSIBLE"
        assert "create_ticket waits for a human's approval under rule 'urgent ticket': " in said
        assert "priority 5 > 3" in said and "IRREVERSIBLE" not in said, said
        assert not urgent.done()
        assert [c["title"] for c in calls(rule_stack.state, "create_ticket")] == ["toner low"]
        command = await heard.approval_command()
        approved = await cli(*command, "--as", "alice", extra_env=rule_stack.env())
        assert approved.code == 0, approved.stderr
        made = await asyncio.wait_for(urgent, 60)
        assert not made.is_error, made
        assert made.structured_content["title"] == "server room flooded"
        committed = await client.call_tool("commit", {})
        assert not committed.is_error, committed
    saga_id = command[2]
    assert calls(rule_stack.state, "create_ticket") == [
        {"title": "toner low", "priority": 1},
        {"title": "server room flooded", "priority": 5},
    ]
    rows = await journal.read(saga_id)
    assert [(r.tool_name, r.phase.value) for r in rows] == [
        ("create_ticket", "INTENT"),  # priority 1: no request, no approval
        ("create_ticket", "EXECUTED"),
        ("create_ticket", "AWAITING_APPROVAL"),
        ("approval-gate", "APPROVED"),
        ("create_ticket", "INTENT"),
        ("create_ticket", "EXECUTED"),
    ]
    request = json.loads(rows[2].payload or "{}")
    assert request["rule"] == "urgent ticket"
    assert request["why"] == "rule 'urgent ticket': priority 5 > 3"
    assert "alice" in rows[3].payload  # the approver the CLI signed as
    assert (await journal.verify(saga_id)).ok
