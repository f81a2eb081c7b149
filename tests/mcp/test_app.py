"""The MCP tools in worker apps: the ready-made ``sagacity.mcp.app`` refusing to start without a
reachable upstream or a fitting policy, an app of one's own mixing MCP and Python tools for an
agent saga, a Python compensation, and redaction of MCP arguments."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest
from temporalio.client import Client

from sagacity.agents import AGENT_WORKFLOW, AgentSagaRequest, AgentSagaResult
from sagacity.errors import PolicyError, SettingsError, UpstreamReported, UpstreamUnavailable
from sagacity.evidence.redaction import parse_rules
from sagacity.mcp.app import mcp_app, open_mcp_tools
from sagacity.settings import Settings
from sagacity.store import JournalStore
from sagacity.temporal.models import SagaState, Step
from sagacity.tools import Reversibility
from tests.mcp import agent_app
from tests.mcp.conftest import POLICY_TOOLS, Desk, mcp_worker, payload, run_steps
from tests.temporal.conftest import phases


async def test_a_worker_does_not_start_without_its_upstream(
    desk: Desk, worker_settings: Settings
) -> None:
    started = time.monotonic()
    with pytest.raises(UpstreamUnavailable, match=r"cannot reach MCP upstream 'tickets' \(http"):
        async with mcp_worker(
            worker_settings, desk.policy("http", server_url="http://127.0.0.1:9/mcp")
        ):
            pass
    assert time.monotonic() - started < 15  # a clear error, not a hang


async def test_a_worker_does_not_start_with_a_policy_that_does_not_fit(
    desk: Desk, worker_settings: Settings
) -> None:
    tools = {**POLICY_TOOLS, "delete_everything": {"reversibility": "IRREVERSIBLE"}}
    with pytest.raises(PolicyError, match=r"tools\.delete_everything: the upstream has no tool"):
        async with mcp_worker(worker_settings, desk.policy(tools=tools)):
            pass


async def test_the_ready_made_app_needs_its_policy_setting(worker_settings: Settings) -> None:
    with pytest.raises(SettingsError, match="set SAGACITY_MCP_POLICY"):
        async with mcp_worker(worker_settings, None):  # type: ignore[arg-type]
            pass


async def test_mcp_app_mixes_mcp_and_python_tools(desk: Desk) -> None:
    TOOLS, lifespan = mcp_app(desk.policy(), tools=[agent_app.pin_ticket])
    async with lifespan() as opened:
        tools = TOOLS(opened)
        assert [t.name for t in tools] == [*POLICY_TOOLS, "pin_ticket"]
        create = tools[0]
        assert create.description == "Open a ticket; returns it with its new id."
        assert create.json_arguments is not None
        assert create.json_arguments.problems({"title": 3}) == ["title: 3 is not of type 'string'"]
        # the tool calls the upstream, and answers in the result convention
        result = await create.fn(title="direct")
    assert result["structuredContent"]["title"] == "direct"


async def test_an_agent_saga_uses_mcp_tools_beside_python_ones_and_is_compensated(
    desk: Desk, temporal_client: Client, worker_settings: Settings, journal: JournalStore
) -> None:
    agent_app.NOTES.clear()
    async with mcp_worker(worker_settings, desk.policy(), apps=("tests.mcp.agent_app",)):
        result = await asyncio.wait_for(
            temporal_client.execute_workflow(
                AGENT_WORKFLOW,
                AgentSagaRequest(prompt="open the tickets", model="tickets"),
                id=f"mcp-agent-{uuid.uuid4().hex[:8]}",
                task_queue=worker_settings.task_queue,
                result_type=AgentSagaResult,
            ),
            120,
        )
    saga = result.saga
    assert saga.status is SagaState.COMPENSATED
    assert [s.status for s in result.steps] == ["executed", "executed", "failed"]
    assert "the desk refuses tickets titled 'fail'" in str(result.steps[2].output)
    assert result.turns[0].startswith("I stopped: create_ticket did not go through")
    # newest first: the Python tool's effect, then the ticket, closed on the desk
    assert [e.tool_name for e in saga.compensated] == ["pin_ticket", "create_ticket"]
    assert agent_app.NOTES == ["pinned T-1", "unpinned T-1"]
    assert desk.calls("close_ticket") == [{"ticket_id": "T-1", "reason": "rolled back by a saga"}]
    assert await phases(journal, saga.saga_id) == [
        ("create_ticket", "INTENT"),
        ("create_ticket", "EXECUTED"),
        ("pin_ticket", "INTENT"),
        ("pin_ticket", "EXECUTED"),
        ("create_ticket", "INTENT"),
        ("create_ticket", "FAILED"),
        ("pin_ticket", "COMPENSATED"),
        ("create_ticket", "COMPENSATED"),
    ]
    assert (await journal.verify(saga.saga_id)).ok


async def test_a_python_compensation_of_an_mcp_tool_gets_the_real_call_while_the_journal_is_redacted(
    desk: Desk, temporal_client: Client, worker_settings: Settings, journal: JournalStore
) -> None:
    agent_app.NOTES.clear()
    tools = {
        "create_ticket": {
            "reversibility": "COMPENSATABLE",
            "compensation": {"function": "tests.mcp.agent_app:close_by_hand"},
        }
    }
    settings = worker_settings.model_copy(
        update={"redact": parse_rules("title:hash@create_ticket")}
    )
    sid = f"mcp-fn-{uuid.uuid4().hex[:8]}"
    async with mcp_worker(settings, desk.policy(tools=tools)):
        result = await run_steps(
            temporal_client,
            settings,
            sid,
            [
                Step(tool="create_ticket", args={"title": "the patient's diagnosis"}),
                Step(tool="create_ticket", args={"title": "fail"}),
            ],
        )
    assert result.status is SagaState.COMPENSATED
    # the upstream got the real title; the journal keeps a fingerprint of it
    assert desk.calls("create_ticket")[0] == {"title": "the patient's diagnosis"}
    rows = await journal.read(sid)
    assert "diagnosis" not in json.dumps([r.input for r in rows] + [r.payload for r in rows])
    fingerprint = json.loads(rows[0].input)["title"]
    assert set(fingerprint) == {"$redacted"}
    assert payload(rows[1])["structuredContent"]["title"] == fingerprint
    (closed,) = agent_app.NOTES
    # the compensation works with the call's real input, not the journal's fingerprint
    assert closed == "closed T-1 by hand, input {'title': \"the patient's diagnosis\"}"
    assert desk.calls("close_ticket") == []  # the function, not a tool, undid it


async def test_the_policy_becomes_each_tools_options(desk: Desk) -> None:
    tools = {
        **POLICY_TOOLS,
        "create_ticket": {**POLICY_TOOLS["create_ticket"], "error_may_have_effect": True},
    }
    async with open_mcp_tools(desk.policy(tools=tools)) as opened:
        by_name = {t.name: t for t in opened}
    create, listing, email = (by_name[n] for n in ("create_ticket", "list_tickets", "send_email"))
    # an error answer may have had an effect: it is compensated like an unknown outcome
    assert UpstreamReported not in create.options.no_effect_on
    assert UpstreamUnavailable in create.options.no_effect_on
    assert not create.options.idempotent
    # a read-only tool: nothing to undo, safe to repeat, and its error answers had no effect
    assert listing.reversibility is Reversibility.REVERSIBLE and listing.options.idempotent
    assert UpstreamReported in listing.options.no_effect_on
    assert listing.declared_compensation is not None
    assert email.reversibility is Reversibility.IRREVERSIBLE
    assert email.declared_compensation is None


async def test_a_compensation_function_that_cannot_be_imported_stops_the_start(
    desk: Desk,
) -> None:
    for function, expected in [
        ("tests.mcp.nowhere:undo", r"cannot import 'tests\.mcp\.nowhere'"),
        ("tests.mcp.agent_app:nothing", r"tests\.mcp\.agent_app has no function 'nothing'"),
    ]:
        tools = {
            "create_ticket": {
                "reversibility": "REVERSIBLE",
                "compensation": {"function": function},
            }
        }
        with pytest.raises(PolicyError, match=expected):
            async with open_mcp_tools(desk.policy(tools=tools)):
                pass
