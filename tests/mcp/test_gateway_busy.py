"""The gateway sends again an update a saga turned away as busy (``SagaBusy``), within its accept
timeout, and says so when the saga stayed busy; the saga's own refusals pass through unchanged.

A session saga turns ``call``, ``commit`` and ``rollback`` away while it opens or seals its
journal (docs/versioning.md, "Updates beside a local activity"). The moment is short and hard to
hit on purpose, so a stand-in workflow here is busy until a signal says otherwise.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from sagacity.mcp.gateway import Gateway, SagaSession, _Refused
from sagacity.mcp.policy import parse_policy
from sagacity.temporal.names import SAGA_BUSY
from tests.mcp.gateway_fixtures import policy_text


@workflow.defn(sandboxed=False)
class BusyForAWhile:
    """Takes ``commit`` once ``ready`` is signalled; before, turns it away as busy."""

    def __init__(self) -> None:
        self.ready = False
        self.refuse = False

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal
    def set_ready(self) -> None:
        self.ready = True

    @workflow.signal
    def set_refuse(self) -> None:
        self.refuse = True

    @workflow.update
    async def commit(self) -> dict[str, Any]:
        return {"state": "COMPLETED", "message": "committed"}

    @commit.validator
    def _validate_commit(self) -> None:
        if self.refuse:
            raise ApplicationError("no", type="McpSessionEnded")
        if not self.ready:
            raise ApplicationError("opening", "busy", type=SAGA_BUSY)


@pytest.fixture
async def busy_saga(temporal_client: Client) -> AsyncIterator[WorkflowHandle[Any, Any]]:
    task_queue = f"busy-{uuid.uuid4().hex[:8]}"
    async with Worker(temporal_client, task_queue=task_queue, workflows=[BusyForAWhile]):
        handle = await temporal_client.start_workflow(
            BusyForAWhile.run, id=f"busy-{uuid.uuid4().hex[:8]}", task_queue=task_queue
        )
        yield handle
        await handle.terminate("test over")


def session(client: Client, tmp_path: Path, accept_timeout_s: float) -> SagaSession:
    policy = parse_policy(policy_text(tmp_path / "state.json"))
    gateway = Gateway(policy, [], client, "unused", accept_timeout_s=accept_timeout_s)
    return SagaSession(gateway)


async def test_an_update_turned_away_as_busy_is_sent_again_until_taken(
    temporal_client: Client, busy_saga: WorkflowHandle[Any, Any], tmp_path: Path
) -> None:
    sent = asyncio.create_task(
        session(temporal_client, tmp_path, 20.0)._update(busy_saga, "commit", None)
    )
    await asyncio.sleep(1.0)
    assert not sent.done()  # turned away, and sent again meanwhile
    await busy_saga.signal(BusyForAWhile.set_ready)
    assert await asyncio.wait_for(sent, 10) == {"state": "COMPLETED", "message": "committed"}


async def test_a_saga_busy_past_the_accept_timeout_is_reported_as_busy(
    temporal_client: Client, busy_saga: WorkflowHandle[Any, Any], tmp_path: Path
) -> None:
    with pytest.raises(_Refused, match=r"stayed busy opening or sealing its journal within 1\.5s"):
        await session(temporal_client, tmp_path, 1.5)._update(busy_saga, "commit", None)


async def test_another_refusal_is_not_sent_again(
    temporal_client: Client, busy_saga: WorkflowHandle[Any, Any], tmp_path: Path
) -> None:
    await busy_saga.signal(BusyForAWhile.set_refuse)
    with pytest.raises(_Refused, match=r"^no$"):
        await session(temporal_client, tmp_path, 20.0)._update(busy_saga, "commit", None)
