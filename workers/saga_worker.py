"""The long-lived worker: serves the saga workflow, its activities and an app's tools and workflows.

An *app* is a module exposing ``TOOLS`` (declared tools), optionally ``WORKFLOWS`` (workflow
classes) and ``lifespan(database_url)`` (an async context manager run around the worker). The
Order example is ``workflows.order.app``. Run it as ``sagacity worker`` or
``python -m workers.saga_worker``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import signal
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from sagacity.settings import Settings
from sagacity.store import ApprovalStore, JournalStore, migrate, open_pool
from sagacity.temporal.plugin import SagacityPlugin
from sagacity.tools import CompensableTool

log = logging.getLogger("sagacity.worker")

DEFAULT_APP = "workflows.order.app"


@dataclass
class App:
    """What one or more app modules contribute to a worker."""

    tools: list[CompensableTool[..., Any]] = field(default_factory=list)
    workflows: list[type] = field(default_factory=list)
    lifespans: list[Any] = field(default_factory=list)


def load_apps(modules: Sequence[str]) -> App:
    app = App()
    for name in modules:
        module = importlib.import_module(name)
        app.tools.extend(getattr(module, "TOOLS", []))
        app.workflows.extend(getattr(module, "WORKFLOWS", []))
        if hasattr(module, "lifespan"):
            app.lifespans.append(module.lifespan)
    return app


async def connect(settings: Settings, plugin: SagacityPlugin) -> Client:
    if not settings.temporal_address:
        raise RuntimeError("no Temporal address: set TEMPORAL_ADDRESS (or run `sagacity dev`)")
    return await Client.connect(
        settings.temporal_address,
        namespace=settings.temporal_namespace,
        api_key=settings.temporal_api_key,
        tls=settings.temporal_tls,
        plugins=[plugin],
    )


@contextlib.asynccontextmanager
async def running_worker(
    settings: Settings, apps: Sequence[str] = (DEFAULT_APP,), *, graceful_s: float = 20.0
) -> AsyncIterator[Worker]:
    """A started worker (migrations applied, app lifespans entered); shut down on exit."""
    if not settings.database_url:
        raise RuntimeError("no journal database: set SAGACITY_DATABASE_URL (or run `sagacity dev`)")
    app = load_apps(apps)
    async with AsyncExitStack() as stack:
        await migrate(settings.database_url)
        pool = await open_pool(
            settings.database_url, min_size=settings.pool_min_size, max_size=settings.pool_max_size
        )
        stack.push_async_callback(pool.close)
        for lifespan in app.lifespans:
            await stack.enter_async_context(lifespan(settings.database_url))
        plugin = SagacityPlugin(
            journal=JournalStore(pool),
            approvals=ApprovalStore(pool),
            tools=app.tools,
            workflows=app.workflows,
        )
        client = await connect(settings, plugin)
        worker = Worker(
            client,
            task_queue=settings.task_queue,
            max_concurrent_activities=settings.max_concurrent_activities,
            graceful_shutdown_timeout=timedelta(seconds=graceful_s),
        )
        task = asyncio.create_task(worker.run())
        try:
            yield worker
        finally:
            await worker.shutdown()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def serve(
    settings: Settings, apps: Sequence[str] = (DEFAULT_APP,), *, graceful_s: float = 20.0
) -> None:
    """Run until SIGTERM or SIGINT, then let in-flight activities finish (up to ``graceful_s``)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with running_worker(settings, apps, graceful_s=graceful_s):
        log.info("worker ready on task queue %s", settings.task_queue)
        print(f"sagacity worker ready: task queue {settings.task_queue}", flush=True)
        await stop.wait()
        log.info("shutting down: in-flight activities get %.0fs", graceful_s)


def main() -> None:
    from sagacity.settings import load_settings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(serve(load_settings()))


if __name__ == "__main__":
    main()
