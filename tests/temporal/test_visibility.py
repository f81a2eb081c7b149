"""Temporal visibility: sagas show their state and the tool they wait on in search attributes.

The session's Temporal dev server is started as the dev stack starts it, with the attributes
registered; each test's sagas run on a task queue of their own, which every query names.
Visibility is eventually consistent: queries are polled until they answer, within a deadline.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from sagacity.temporal import visibility
from sagacity.temporal.models import Approve, Reject, SagaResult, SagaSpec, SagaState, Step
from sagacity.temporal.workflow import STEPS_WORKFLOW
from tests.temporal.conftest import awaiting_approval, wait_for

FLAG = Step(tool="set_flag", args={"name": "a"})


async def start(client: Client, worker: Worker, *steps: Step) -> WorkflowHandle[Any, SagaResult]:
    return await client.start_workflow(
        STEPS_WORKFLOW,
        SagaSpec(steps=list(steps)),
        id=f"vis-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )


async def listed(client: Client, worker: Worker, query: str, want: set[str]) -> None:
    """Wait until the sagas on the worker's queue that ``query`` matches are exactly ``want``."""
    full = f'TaskQueue="{worker.task_queue}" AND {query}'
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        found = {w.id async for w in client.list_workflows(full)}
        if found == want:
            return
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"{query}: listed {sorted(found)}, not {sorted(want)}")
        await asyncio.sleep(0.2)


async def upserts(handle: WorkflowHandle[Any, Any]) -> int:
    """The saga's upserts of its state (``workflow.patched`` upserts ``TemporalChangeVersion``)."""
    history = await handle.fetch_history()
    return sum(
        visibility.STATE.name
        in e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
        for e in history.events
    )


def waiting_on(tool: str) -> str:
    return f'SagacityState="awaiting_approval" AND SagacityWaitingTool="{tool}"'


async def test_sagas_waiting_at_a_gate_are_found_by_state_and_tool(
    temporal_client: Client, worker: Worker
) -> None:
    why = await visibility.why_hidden(temporal_client)
    if why is not None:  # a server of one's own (TEMPORAL_ADDRESS); the dev stack has them
        pytest.skip(f"{why}: register them (docs/operations.md, Temporal visibility)")
    wired = await start(
        temporal_client, worker, FLAG, Step(tool="wire", args={"amount": 5, "api_token": "t"})
    )
    granted = await start(
        temporal_client,
        worker,
        FLAG,
        Step(tool="grant_tokens", args={"token_amount": 3, "account": "x"}),
    )
    plain = await start(
        temporal_client,
        worker,
        FLAG,
        Step(tool="send_note", args={"text": "hi"}),
        Step(tool="set_flag", args={"name": "b"}),
    )
    assert (await plain.result()).status is SagaState.COMPLETED
    await listed(temporal_client, worker, waiting_on("wire"), {wired.id})
    await listed(temporal_client, worker, waiting_on("grant_tokens"), {granted.id})
    await listed(temporal_client, worker, 'SagacityState="completed"', {plain.id})

    for handle, decision in ((wired, Approve), (granted, Reject)):
        status = await wait_for(handle, awaiting_approval)
        assert status.pending_approval is not None
        await handle.signal(
            "approve" if decision is Approve else "reject",
            decision(journal_seq=status.pending_approval.journal_seq, approver="alice"),
        )
    assert (await wired.result()).status is SagaState.COMPLETED
    assert (await granted.result()).status is SagaState.COMPENSATED

    await listed(temporal_client, worker, waiting_on("wire"), set())
    await listed(temporal_client, worker, 'SagacityState="awaiting_approval"', set())
    await listed(temporal_client, worker, 'SagacityState="completed"', {plain.id, wired.id})
    await listed(temporal_client, worker, 'SagacityState="compensated"', {granted.id})
    # a saga shows no state until it waits or ends (none: running): one upsert as it ends; a
    # gate adds two (waiting, decided)
    assert await upserts(plain) == 1
    assert await upserts(wired) == 3


@pytest.fixture
async def hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers started from now on find the attributes missing, as on a namespace without them."""

    async def missing(client: Client) -> str:
        return "no Keyword search attribute SagacityState, SagacityWaitingTool"

    monkeypatch.setattr(visibility, "why_hidden", missing)


@pytest.fixture
def hidden_worker(hidden: None, worker: Worker) -> Worker:
    return worker


async def test_without_the_attributes_sagas_run_and_the_worker_says_how_to_register_them(
    temporal_client: Client, hidden_worker: Worker, caplog: pytest.LogCaptureFixture
) -> None:
    handle = await start(temporal_client, hidden_worker, FLAG)
    assert (await handle.result()).status is SagaState.COMPLETED
    assert await upserts(handle) == 0
    described = await handle.describe()
    assert described.typed_search_attributes.get(visibility.STATE) is None
    # the worker said so as it started, before any saga ran
    said = [
        r.getMessage() for r in caplog.get_records("setup") if r.name == "sagacity.temporal.plugin"
    ]
    commands = visibility.register_commands(temporal_client.namespace)
    assert any("do not show their state" in m and all(c in m for c in commands) for m in said), said
