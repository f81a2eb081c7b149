"""An MCP server's tools as saga tools, served by ``sagacity worker --app sagacity.mcp.app``:
calls journaled, failures (the upstream's ``isError`` and a broken connection alike) FAILED, and
each effect undone through the policy's compensation tool on the real upstream."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from sagacity.mcp.upstream import RESULT_CHARS
from sagacity.settings import Settings
from sagacity.store import JournalStore
from sagacity.temporal.models import SagaResult, SagaSpec, SagaState, Step
from sagacity.temporal.workflow import STEPS_WORKFLOW
from tests.mcp.conftest import POLICY_TOOLS, Desk, mcp_worker, payload, run_steps
from tests.temporal.conftest import phases


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_failed_step_closes_each_ticket_newest_first(
    transport: str,
    desk: Desk,
    temporal_client: Client,
    worker_settings: Settings,
    journal: JournalStore,
) -> None:
    if transport == "http":
        desk.start()
    sid = new_id(f"mcp-{transport}")
    try:
        async with mcp_worker(worker_settings, desk.policy(transport)):
            result = await run_steps(
                temporal_client,
                worker_settings,
                sid,
                [
                    Step(tool="create_ticket", args={"title": "printer on fire"}),
                    Step(tool="create_ticket", args={"title": "coffee machine empty"}),
                    # the desk answers isError: FAILED, with no effect, and the saga compensates
                    Step(tool="create_ticket", args={"title": "fail"}),
                ],
            )
    finally:
        desk.kill()

    assert result.status is SagaState.COMPENSATED
    state = desk.state()
    first, second = (state["tickets"][t]["id"] for t in ("T-1", "T-2"))
    # the upstream's own record: each ticket closed, newest first, with the policy's constant
    assert desk.calls("close_ticket") == [
        {"ticket_id": second, "reason": "rolled back by a saga"},
        {"ticket_id": first, "reason": "rolled back by a saga"},
    ]
    assert {t["status"] for t in state["tickets"].values()} == {"closed"}
    assert len(state["tickets"]) == 2  # the refused ticket was never made

    rows = await journal.read(sid)
    assert [(r.tool_name, r.phase.value) for r in rows] == [
        ("create_ticket", "INTENT"),
        ("create_ticket", "EXECUTED"),
        ("create_ticket", "INTENT"),
        ("create_ticket", "EXECUTED"),
        ("create_ticket", "INTENT"),
        ("create_ticket", "FAILED"),
        ("create_ticket", "COMPENSATED"),
        ("create_ticket", "COMPENSATED"),
    ]
    # the journaled result is the upstream's, without isError (and without the text block
    # that only restates the structured content)
    assert payload(rows[1]) == {
        "content": [],
        "structuredContent": {"id": first, "title": "printer on fire", "status": "open"},
    }
    failed = payload(rows[5])
    assert failed["type"] == "UpstreamReported" and failed["effect"] == "none"
    assert "the desk refuses tickets titled 'fail'" in failed["message"]
    assert (await journal.verify(sid)).ok


async def test_a_tool_the_policy_does_not_name_is_no_saga_tool(
    desk: Desk, temporal_client: Client, worker_settings: Settings, journal: JournalStore
) -> None:
    sid = new_id("mcp-refused")
    async with mcp_worker(worker_settings, desk.policy()):
        with pytest.raises(WorkflowFailureError) as failed:
            await run_steps(
                temporal_client,
                worker_settings,
                sid,
                [
                    Step(tool="create_ticket", args={"title": "fine"}),
                    Step(tool="describe_ticket", args={"ticket_id": "T-1"}),
                    Step(tool="create_ticket", args={"title": 42}),
                ],
            )
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "StepsInvalid", cause
    problems = list(cause.details[0])
    assert any("describe_ticket" in p for p in problems), problems
    # the arguments are checked against the upstream's inputSchema, before anything runs
    assert any("title" in p and "string" in p for p in problems), problems
    assert await journal.read(sid) == []
    assert desk.calls("create_ticket") == []


async def test_results_that_are_not_json_are_journaled_as_content_blocks(
    desk: Desk, temporal_client: Client, worker_settings: Settings, journal: JournalStore
) -> None:
    sid = new_id("mcp-odd")
    async with mcp_worker(worker_settings, desk.policy()):
        result = await run_steps(
            temporal_client,
            worker_settings,
            sid,
            [
                Step(tool="create_ticket", args={"title": "badge me"}),
                Step(tool="ticket_badge", args={"ticket_id": "T-1"}),
                Step(tool="list_tickets", args={}),
            ],
        )
    assert result.status is SagaState.COMPLETED
    rows = await journal.read(sid)
    badge = payload(rows[3])
    assert badge == {
        "content": [{"type": "image", "data": badge["content"][0]["data"], "mimeType": "image/png"}]
    }
    listed = payload(rows[5])
    # no structured output: the text block as the upstream wrote it
    assert "structuredContent" not in listed
    assert json.loads(listed["content"][0]["text"])["tickets"][0]["title"] == "badge me"
    assert desk.calls("close_ticket") == []  # completed: nothing undone


async def test_an_upstream_that_dies_mid_call_fails_the_call_and_the_restarted_one_is_compensated(
    desk: Desk, temporal_client: Client, worker_settings: Settings, journal: JournalStore
) -> None:
    """The stdio upstream exits mid-call (``crash``): whether that call took effect is unknown,
    so it is FAILED and, its compensation needing a result it never got, flagged for a human;
    the earlier ticket is closed by the upstream the worker started again."""
    sid = new_id("mcp-crash")
    async with mcp_worker(worker_settings, desk.policy()):
        result = await run_steps(
            temporal_client,
            worker_settings,
            sid,
            [
                Step(tool="create_ticket", args={"title": "before the crash"}),
                Step(tool="create_ticket", args={"title": "crash"}),
            ],
            compensation_attempts=3,
        )

    assert result.status is SagaState.COMPENSATION_FAILED
    assert [e.call_seq for e in result.compensation_failed] == [3]
    assert result.needs_attention
    rows = await journal.read(sid)
    assert [(r.tool_name, r.phase.value) for r in rows][2:] == [
        ("create_ticket", "INTENT"),
        ("create_ticket", "FAILED"),
        ("create_ticket", "COMPENSATION_FAILED"),
        ("create_ticket", "COMPENSATED"),
    ]
    assert payload(rows[3])["effect"] == "unknown"
    flagged = payload(rows[4])
    assert flagged["type"] == "CompensationUnresolvable"
    assert "no result for result.id" in flagged["message"], flagged
    assert flagged["message"].startswith("cannot compensate create_ticket"), flagged
    closes = [c for c in desk.state()["calls"] if c["tool"] == "close_ticket"]
    creates = [c for c in desk.state()["calls"] if c["tool"] == "create_ticket"]
    assert [c["arguments"]["ticket_id"] for c in closes] == ["T-1"]
    assert closes[0]["pid"] != creates[0]["pid"]  # a new upstream process closed it
    assert (await journal.verify(sid)).ok


async def test_an_idempotent_call_whose_upstream_died_is_retried_on_the_new_one(
    desk: Desk, temporal_client: Client, worker_settings: Settings, journal: JournalStore
) -> None:
    tools = {
        "create_ticket": {
            "reversibility": "REVERSIBLE",
            "idempotent": True,
            "compensation": {"tool": "close_ticket", "arguments": {"ticket_id": "result.id"}},
        }
    }
    sid = new_id("mcp-retry")
    async with mcp_worker(worker_settings, desk.policy(tools=tools)):
        result = await run_steps(
            temporal_client,
            worker_settings,
            sid,
            [Step(tool="create_ticket", args={"title": "crash"})],
        )
    assert result.status is SagaState.COMPLETED
    assert await phases(journal, sid) == [
        ("create_ticket", "INTENT"),
        ("create_ticket", "EXECUTED"),
    ]
    assert desk.state()["crashed"] == 2  # the first attempt died with its upstream
    assert list(desk.state()["tickets"]) == ["T-1"]


async def test_an_http_upstream_killed_mid_call_is_reached_again_once_restarted(
    http_desk: Desk, temporal_client: Client, worker_settings: Settings, journal: JournalStore
) -> None:
    sid = new_id("mcp-http-kill")
    async with mcp_worker(worker_settings, http_desk.policy("http")):
        handle = await temporal_client.start_workflow(
            STEPS_WORKFLOW,
            SagaSpec(
                steps=[
                    Step(tool="create_ticket", args={"title": "before the kill"}),
                    Step(tool="create_ticket", args={"title": "hang"}),
                ]
            ),
            id=sid,
            task_queue=worker_settings.task_queue,
            result_type=SagaResult,
        )
        # the second call is in flight once its INTENT (seq 3) is journaled
        while len(await journal.read(sid)) < 3:
            await asyncio.sleep(0.05)
        http_desk.kill()
        http_desk.start()
        result = await handle.result()

    assert result.status is SagaState.COMPENSATION_FAILED
    rows = await journal.read(sid)
    assert [r.phase.value for r in rows][3:] == ["FAILED", "COMPENSATION_FAILED", "COMPENSATED"]
    assert payload(rows[3])["effect"] == "unknown"
    assert http_desk.calls("close_ticket") == [
        {"ticket_id": "T-1", "reason": "rolled back by a saga"}
    ]
    assert (await journal.verify(sid)).ok


async def test_a_result_too_big_for_the_journal_keeps_what_fits_and_says_what_it_left_out(
    desk: Desk, temporal_client: Client, worker_settings: Settings, journal: JournalStore
) -> None:
    """Temporal refuses a payload of a few megabytes, which would leave the saga waiting."""
    tools = {**POLICY_TOOLS, "ticket_history": {"read_only": True}}
    sid = new_id("mcp-big")
    async with mcp_worker(worker_settings, desk.policy(tools=tools)):
        result = await run_steps(
            temporal_client,
            worker_settings,
            sid,
            [Step(tool="ticket_history", args={"ticket_id": "T-9", "padding": 3_000_000})],
        )
    assert result.status is SagaState.COMPLETED
    rows = await journal.read(sid)
    assert len(rows[1].payload) < RESULT_CHARS
    assert payload(rows[1]) == {
        "content": [
            {
                "type": "text",
                "text": "[left out by Sagacity: a text block of 3000041 characters; a journaled "
                f"result is kept under {RESULT_CHARS} characters]",
            }
        ]
    }


async def test_sagas_at_once_share_the_workers_upstream_session(
    http_desk: Desk, temporal_client: Client, worker_settings: Settings, journal: JournalStore
) -> None:
    sids = [new_id("mcp-many") for _ in range(6)]
    async with mcp_worker(worker_settings, http_desk.policy("http")):
        results = await asyncio.gather(
            *(
                run_steps(
                    temporal_client,
                    worker_settings,
                    sid,
                    [Step(tool="create_ticket", args={"title": sid})],
                )
                for sid in sids
            )
        )
    assert {r.status for r in results} == {SagaState.COMPLETED}
    tickets = http_desk.state()["tickets"].values()
    assert sorted(t["title"] for t in tickets) == sorted(sids)
    for sid in sids:
        (_, executed) = await journal.read(sid)
        assert payload(executed)["structuredContent"]["title"] == sid
