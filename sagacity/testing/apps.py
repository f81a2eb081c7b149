"""A user's app modules served in a test session: their lifespans entered, their tools and
workflows on a worker with a task queue of its own."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import uuid4

from temporalio.client import Client
from temporalio.worker import Worker

from sagacity.errors import UnknownTool
from sagacity.testing.stack import SagacityStack
from sagacity.tools import CompensableTool
from sagacity.worker import load_apps

__all__ = ["RunningApp", "serve_apps"]


@dataclass(frozen=True)
class RunningApp:
    """App modules as a worker serves them: start their workflows on ``task_queue``."""

    client: Client
    task_queue: str
    #: every module's tools by name, as ``TOOLS`` lists them once the lifespans are open
    tools: dict[str, CompensableTool[..., Any]]

    def tool(self, name: str) -> CompensableTool[..., Any]:
        """The tool named ``name``; :class:`~sagacity.errors.UnknownTool` listing the others."""
        try:
            return self.tools[name]
        except KeyError:
            known = ", ".join(sorted(self.tools)) or "none"
            raise UnknownTool(f"the apps serve no tool named {name!r} (known: {known})") from None


@contextlib.asynccontextmanager
async def serve_apps(stack: SagacityStack, modules: Sequence[str]) -> AsyncIterator[RunningApp]:
    """Import ``modules`` as ``sagacity worker --app`` does, enter their lifespans (given the
    stack's journal database, as a worker's are), and run a worker for them until exit."""
    app = load_apps(modules)
    plugins = [p for factory in app.plugin_factories for p in factory(stack.settings)]
    async with AsyncExitStack() as exits:
        await app.enter(exits, stack.settings, stack.database_url)
        task_queue = f"sagacity-test-{uuid4().hex[:12]}"
        async with Worker(
            stack.client,
            task_queue=task_queue,
            plugins=[stack.plugin(app.tools, app.workflows), *plugins],
            graceful_shutdown_timeout=timedelta(seconds=1),
        ):
            yield RunningApp(stack.client, task_queue, {t.name: t for t in app.tools})
