"""Fixtures for agent saga tests: a worker with Sagacity's and the Agents SDK's plugins.

The model is the scripted one (no API key): the real Agents SDK loop runs in the workflow, the
model calls are Temporal activities, the tool calls are the saga's journaled activities.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, cast

import pytest
from agents import ModelProvider
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from sagacity.agents import (
    AGENT_WORKFLOW,
    AgentSagaRequest,
    AgentSagaResult,
    Script,
    ScriptedModelProvider,
    agent_plugins,
    with_plugins,
)
from sagacity.evidence.checkpoints import CheckpointWriter
from sagacity.evidence.decisions import Keyring
from sagacity.evidence.redaction import Redactor
from sagacity.store import ApprovalStore, JournalStore
from sagacity.tools import CompensableTool
from tests.temporal import sample_tools
from tests.temporal.conftest import approvals, journal, pool, shop, shop_session
from workflows.agent_order.script import SCRIPTS
from workflows.order import app as order_app

# the saga fixtures live with the saga tests; agent tests use the same ones
__all__ = ["approvals", "journal", "pool", "shop", "shop_session"]

WorkerFactory = Callable[..., contextlib.AbstractAsyncContextManager[Worker]]


@pytest.fixture
def agent_worker(
    temporal_client: Client,
    task_queue: str,
    journal: JournalStore,
    approvals: ApprovalStore,
    checkpoint_writer: CheckpointWriter,
    redactor: Redactor,
) -> WorkerFactory:
    """Start a worker for agent sagas: ``async with agent_worker(scripts) as worker: ...``.

    The model is the scripted one over ``scripts`` (the Order example's by default), or
    ``provider``; the tools are the Order example's and the sample tools, or ``tools``; with
    ``keyring`` every decision must be signed by a key in it; other keywords go to the
    :class:`Worker`.
    """

    @contextlib.asynccontextmanager
    async def start(
        scripts: Mapping[str, Script] = SCRIPTS,
        *,
        provider: ModelProvider | None = None,
        tools: Sequence[CompensableTool[..., Any]] = (),
        keyring: Keyring | None = None,
        **worker_options: Any,
    ) -> AsyncIterator[Worker]:
        default = cast(list[CompensableTool[..., Any]], [*order_app.TOOLS, *sample_tools.TOOLS])
        plugins = agent_plugins(
            journal=journal,
            approvals=approvals,
            tools=tools or default,
            model_provider=provider or ScriptedModelProvider(scripts),
            model_attempts=2,
            checkpoints=checkpoint_writer,
            redactor=redactor,
            keyring=keyring,
        )
        worker = Worker(
            with_plugins(temporal_client, plugins),
            task_queue=task_queue,
            graceful_shutdown_timeout=timedelta(seconds=1),
            **worker_options,
        )
        async with worker:
            yield worker

    return start


async def start_agent(
    client: Client, task_queue: str, request: AgentSagaRequest
) -> WorkflowHandle[Any, AgentSagaResult]:
    return await client.start_workflow(
        AGENT_WORKFLOW,
        request,
        id=f"agent-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
        result_type=AgentSagaResult,
    )
