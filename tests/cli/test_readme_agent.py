"""The README's Agents SDK app (``rentals.py``), run as the README says: its tools and script
served by a real worker, the agent started with the README's own ``saga start`` command, and
what the README says ``saga status`` prints about the corrected quote."""

from __future__ import annotations

import json
import re
import shlex
import sys
import types
from typing import Any

from temporalio.client import Client

from sagacity.agents import AgentSagaResult
from sagacity.tools import Reversibility, ToolRegistry
from tests.agents.conftest import WorkerFactory
from tests.approvals.conftest import Cli
from tests.docs.test_documented_commands import REPO

SECTION = "### An Agents SDK agent as a saga"


def _section() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    start = readme.index(SECTION)
    return readme[start : readme.index("\n### ", start + len(SECTION))]


def _rentals() -> types.ModuleType:
    """The README's ``rentals.py``, as a module of that name."""
    (code,) = re.findall(r"```python\n(.*?)```", _section(), flags=re.DOTALL)
    module = types.ModuleType("rentals")
    sys.modules["rentals"] = module  # the tools' compensations are looked up by module
    exec(compile(code, "README.md (rentals.py)", "exec"), module.__dict__)
    return module


def test_the_readme_agent_app_declares_its_tools() -> None:
    rentals = _rentals()
    registry = ToolRegistry(rentals.TOOLS)
    assert registry.get("send_quote").tool.reversibility is Reversibility.COMPENSATABLE
    assert registry.get("book_car").tool.reversibility is Reversibility.REVERSIBLE
    assert all(registry.get(name).compensation is not None for name in ("send_quote", "book_car"))
    assert [w.__name__ for w in rentals.WORKFLOWS] == ["AgentSagaWorkflow"]


async def test_the_readme_agent_saga_runs_and_its_quote_is_corrected(
    cli: Cli, agent_worker: WorkerFactory, temporal_client: Client
) -> None:
    rentals = _rentals()
    section = _section()
    (start,) = re.findall(r"`(sagacity saga start --workflow sagacity\.AgentSaga [^`]+)`", section)
    (said,) = re.findall(r"`(corrected, not restored: [^`]+)`", section)
    async with agent_worker({"rentals": rentals.SCRIPT}, tools=rentals.TOOLS) as worker:
        ran = await cli(
            *shlex.split(start)[1:], extra_env={"SAGACITY_TASK_QUEUE": worker.task_queue}
        )
        assert ran.code == 1, ran.stderr  # the saga did not complete: book_car failed
        saga = ran.stdout.strip()
        status = await cli("saga", "status", saga)
        handle = temporal_client.get_workflow_handle(saga, result_type=AgentSagaResult)
        result = await handle.result()
    assert status.code == 1 and f"saga {saga}: compensated" in status.stdout
    assert f"  {said}" in status.stdout.splitlines()
    shown: Any = json.loads(said.split("the correction returned ", 1)[1])
    assert result.compensation_summary is not None
    assert "Corrected, not undone" in result.compensation_summary
    assert json.dumps(shown, separators=(",", ":")) in result.compensation_summary
    assert result.final_output == "Sorry: no car was left in Venice, so the quote was corrected."
