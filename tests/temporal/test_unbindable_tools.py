"""A tool whose arguments cannot even be checked (an Agents SDK FunctionTool whose schema's
``$ref`` points nowhere) never holds its saga: the call is refused once, before its INTENT, and
what ran is compensated. Such a schema is refused when declared; these tools break theirs after
declaration, as a tool whose schema is built at run time might."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents import function_tool
from temporalio.client import Client
from temporalio.worker import Worker

from sagacity import CompensationContext, Reversibility
from sagacity.agents import compensable_function_tool
from sagacity.evidence.checkpoints import CheckpointWriter
from sagacity.evidence.redaction import Redactor
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import SagaResult, SagaState, Step
from tests.temporal import sample_tools
from tests.temporal.conftest import phases, serving
from tests.temporal.test_bad_input import run
from workflows.order.shop import Shop

#: what the broken tools did: nothing, ever
RAN: list[str] = []


@function_tool
def list_items(n: int) -> str:
    """List n items."""
    RAN.append(f"listed {n}")
    return "items"


@function_tool
def pay_out(amount: int) -> str:
    """Pay an amount out (irreversible: an approver is asked first)."""
    RAN.append(f"paid {amount}")
    return "paid"


def unlist(ctx: CompensationContext) -> None:
    RAN.append("unlisted")


def broken(tool: Any) -> Any:
    """``tool`` with its schema, after declaration, saying each argument is a ``$ref`` that
    points nowhere."""
    properties = tool.json_arguments.schema["properties"]
    for name in properties:
        properties[name] = {"$ref": "#/defs/missing"}
    return tool


BROKEN = [
    broken(compensable_function_tool(list_items, by=unlist)),
    broken(compensable_function_tool(pay_out, reversibility=Reversibility.IRREVERSIBLE)),
]


@pytest.fixture
async def broken_worker(
    temporal_client: Client,
    task_queue: str,
    journal: JournalStore,
    approvals: ApprovalStore,
    shop: Shop,
    checkpoint_writer: CheckpointWriter,
    redactor: Redactor,
) -> AsyncIterator[Worker]:
    RAN.clear()
    async with serving(
        temporal_client,
        task_queue,
        journal=journal,
        approvals=approvals,
        tools=[*sample_tools.TOOLS, *BROKEN],
        redactor=redactor,
        checkpoints=checkpoint_writer,
    ) as worker:
        yield worker


async def run_briefly(client: Client, worker: Worker, steps: list[Step]) -> tuple[str, SagaResult]:
    """Run the steps; a saga still running after 60 s is wedged, and the test fails."""
    return await asyncio.wait_for(run(client, worker, steps), timeout=60)


async def test_a_call_whose_arguments_cannot_be_checked_is_refused_and_the_saga_compensates(
    temporal_client: Client, broken_worker: Worker, journal: JournalStore
) -> None:
    sid, result = await run_briefly(
        temporal_client,
        broken_worker,
        [
            Step(tool="set_flag", args={"name": "a"}),
            # the steps check trips on the schema too: it leaves this step to the call's check
            Step(tool="list_items", args={"n": 3}),
        ],
    )
    assert result.status is SagaState.COMPENSATED
    assert result.error is not None
    assert "ToolArgumentsInvalid" in result.error.message
    assert "could not be checked (PointerToNowhere" in result.error.message
    # refused, not run: the error says so, and the journal holds no INTENT for it
    assert "was refused before it ran" in result.error.message
    assert "failed" not in result.error.message
    assert len(result.error.message) < 1000  # the schema the fault quotes is cut short
    assert RAN == []
    assert sample_tools.EFFECTS == ["set a", "unset a"]
    assert await phases(journal, sid) == [
        ("set_flag", "INTENT"),
        ("set_flag", "EXECUTED"),
        ("set_flag", "COMPENSATED"),
    ]
    assert (await journal.verify(sid)).ok


async def test_an_irreversible_call_whose_arguments_cannot_be_checked_asks_no_approver(
    temporal_client: Client,
    broken_worker: Worker,
    journal: JournalStore,
    approvals: ApprovalStore,
) -> None:
    sid, result = await run_briefly(
        temporal_client,
        broken_worker,
        [
            Step(tool="set_flag", args={"name": "b"}),
            Step(tool="pay_out", args={"amount": 10}),
        ],
    )
    assert result.status is SagaState.COMPENSATED
    assert result.error is not None and "could not be checked" in result.error.message
    assert await approvals.list(saga_id=sid) == []
    assert RAN == []
    assert await phases(journal, sid) == [
        ("set_flag", "INTENT"),
        ("set_flag", "EXECUTED"),
        ("set_flag", "COMPENSATED"),
    ]
