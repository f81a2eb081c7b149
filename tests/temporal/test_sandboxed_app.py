"""An app laid out as a package whose ``__init__`` imports its tools (which import the Agents
SDK, which the workflow sandbox refuses) and its sandboxed workflow: the worker passes the tools
module through the sandbox, so the workflow runs."""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from sagacity.evidence.redaction import Redactor
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.plugin import SagacityPlugin
from sagacity.workflow import SagaResult, SagaState

TOOLS = '''
from agents import function_tool

from sagacity import CompensationContext, compensable
from sagacity.agents import compensable_function_tool

UNDONE: list[str] = []


@compensable(by="unbook")
def book(city: str) -> str:
    return f"room in {city}"


def unbook(ctx: CompensationContext) -> None:
    UNDONE.append(ctx.result)


@function_tool
def fail_now(city: str) -> str:
    """Always fails."""
    raise RuntimeError(f"no taxis in {city}")


def nothing(ctx: CompensationContext) -> None: ...


taxi = compensable_function_tool(fail_now, by=nothing, name="taxi")
'''

WORKFLOWS = """
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from sagacity.workflow import Saga, SagaResult
    from PKG.tools import book, taxi


@workflow.defn(name="PKG.Trip")
class Trip:
    @workflow.init
    def __init__(self, city: str) -> None:
        self.saga = Saga()

    @workflow.run
    async def run(self, city: str) -> SagaResult:
        async def body() -> str:
            room = await self.saga.call(book, city=city)
            await self.saga.call("taxi", city=city)
            return room

        return await self.saga.run(body)
"""


@pytest.fixture
def package(tmp_path: Path) -> Iterator[str]:
    name = f"sandboxed_app_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / name
    folder.mkdir()
    (folder / "__init__.py").write_text(
        f"from {name}.tools import book, taxi\nfrom {name}.workflows import Trip\n"
        "TOOLS = [book, taxi]\nWORKFLOWS = [Trip]\n"
    )
    (folder / "tools.py").write_text(textwrap.dedent(TOOLS))
    (folder / "workflows.py").write_text(WORKFLOWS.replace("PKG", name))
    sys.path.insert(0, str(tmp_path))
    try:
        yield name
    finally:
        sys.path.remove(str(tmp_path))


async def test_a_sandboxed_workflow_whose_package_imports_the_agents_sdk_runs(
    package: str,
    temporal_client: Client,
    task_queue: str,
    journal: JournalStore,
    approvals: ApprovalStore,
    redactor: Redactor,
) -> None:
    app = __import__(package)
    plugin = SagacityPlugin(
        journal=journal,
        approvals=approvals,
        tools=app.TOOLS,
        workflows=app.WORKFLOWS,
        redactor=redactor,
    )
    async with Worker(
        temporal_client,
        task_queue=task_queue,
        plugins=[plugin],
        graceful_shutdown_timeout=timedelta(seconds=1),
    ):
        result = await temporal_client.execute_workflow(
            f"{package}.Trip",
            "Porto",
            id=f"sandboxed-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
            result_type=SagaResult,
            execution_timeout=timedelta(seconds=60),
        )

    assert result.status is SagaState.COMPENSATED, result.error
    assert "no taxis in Porto" in str(result.error)
    assert sys.modules[f"{package}.tools"].UNDONE == ["room in Porto"]
