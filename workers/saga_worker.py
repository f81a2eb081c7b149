"""The long-lived worker: serves the saga workflow, its activities and an app's tools and workflows.

An *app* is a module exposing ``TOOLS`` (declared tools), optionally ``WORKFLOWS`` (workflow
classes) and ``lifespan(database_url)`` (an async context manager run around the worker). The
Order example is ``workflows.order.app``. Run it as ``sagacity worker`` or
``python -m workers.saga_worker``.

The worker does not migrate: the schema is the tables' owner's (``sagacity db migrate``), and the
worker should log in as ``sagacity_app``, which may only insert and read journal rows. At start it
checks that: a role that can rewrite the journal is logged as a warning, and refused with
``SAGACITY_PRODUCTION`` unless ``SAGACITY_ALLOW_WRITABLE_JOURNAL`` says otherwise. With the
checkpoint settings (on by default under ``sagacity dev``) it also runs the transparency log's
sequencer every ``SAGACITY_LOG_INTERVAL`` (10 s). Its redaction rules are ``SAGACITY_REDACT`` and
``SAGACITY_REDACT_DEFAULTS``; its payload codec keys ``SAGACITY_CODEC_KEYS`` (or ``_FILE``):
without them it logs ``PAYLOADS IN CLEAR``, and with ``SAGACITY_PRODUCTION`` refuses to start.
With ``SAGACITY_KEYRING`` (on by default under ``sagacity dev``; required with
``SAGACITY_PRODUCTION``) every decision must be signed by a key in it, and
``SAGACITY_APPROVERS`` / ``SAGACITY_RESOLVERS`` say who may decide and resolve, on every route.

On SIGTERM or SIGINT the worker stops polling, lets in-flight activities finish for up to
``SAGACITY_GRACEFUL_SHUTDOWN``, then exits 0; the sagas it was running continue on another worker
of the task queue. With ``SAGACITY_METRICS_ADDRESS`` set it serves ``/metrics`` (Sagacity's
counters and the Temporal SDK's runtime metrics), ``/healthz`` and ``/readyz``.
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
from temporalio.client import Interceptor as ClientInterceptor
from temporalio.converter import PayloadCodec
from temporalio.plugin import SimplePlugin
from temporalio.runtime import Runtime
from temporalio.worker import Worker

from sagacity.devstack import running_dev_database
from sagacity.errors import SettingsError
from sagacity.evidence.checkpoints import CheckpointWriter
from sagacity.evidence.tlog import run_sequencer
from sagacity.observability import (
    ObservabilityInterceptor,
    ProbeServer,
    TimedJournalStore,
    configure_logging,
    temporal_runtime,
    tracing,
)
from sagacity.observability.metrics import APPROVALS_WAITING
from sagacity.settings import Settings
from sagacity.store import ApprovalStore, journal_rights, open_pool
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
    #: ``plugins(settings)`` callables: more client/worker plugins, added after Sagacity's
    plugin_factories: list[Any] = field(default_factory=list)

    async def enter(self, stack: AsyncExitStack, database_url: str) -> None:
        """Enter each app's lifespan on ``stack``: what its tools (and probes) need, a pool say."""
        for lifespan in self.lifespans:
            await stack.enter_async_context(lifespan(database_url))


def load_apps(modules: Sequence[str]) -> App:
    app = App()
    for name in modules:
        module = importlib.import_module(name)
        app.tools.extend(getattr(module, "TOOLS", []))
        app.workflows.extend(getattr(module, "WORKFLOWS", []))
        if hasattr(module, "lifespan"):
            app.lifespans.append(module.lifespan)
        if hasattr(module, "plugins"):
            app.plugin_factories.append(module.plugins)
    return app


async def connect(
    settings: Settings,
    plugin: SagacityPlugin,
    *,
    extra_plugins: Sequence[SimplePlugin] = (),
    runtime: Runtime | None = None,
    interceptors: Sequence[ClientInterceptor] = (),
) -> Client:
    """A client of the configured Temporal frontend; :class:`SettingsError` when none is set."""
    if not settings.temporal_address:
        raise SettingsError("no Temporal address: set TEMPORAL_ADDRESS (or run `sagacity dev`)")
    return await Client.connect(
        settings.temporal_address,
        namespace=settings.temporal_namespace,
        api_key=settings.temporal_api_key,
        tls=settings.temporal_tls,
        plugins=[plugin, *extra_plugins],
        runtime=runtime,
        interceptors=interceptors,
    )


def worker_codec(settings: Settings) -> PayloadCodec | None:
    """The worker's payload codec. Without keys, say loudly that payloads reach Temporal's
    history in clear; :class:`SettingsError` in production, where keys are required."""
    codec = settings.payload_codec()
    if codec is not None:
        log.info("payload codec on: encrypting with key %s", codec.key_ids[0])
        return codec
    message = "no SAGACITY_CODEC_KEYS: tool arguments and results reach Temporal's history in clear"
    if settings.production:
        raise SettingsError(f"refusing to start: {message}; set SAGACITY_CODEC_KEYS (or _FILE)")
    log.warning("PAYLOADS IN CLEAR (dev mode): %s", message)
    return None


async def check_journal_rights(settings: Settings, database_url: str) -> None:
    """Say loudly when the worker's role can rewrite the journal; refuse it in production.

    :class:`SettingsError` when ``settings.production`` and not ``allow_writable_journal``.
    """
    rights = await journal_rights(database_url)
    if rights.append_only:
        log.info("journal append-only for role %s (INSERT and SELECT only)", rights.role)
        return
    refuse = settings.production and not settings.allow_writable_journal
    message = (
        f"{rights.describe()}: the journal is not append-only by permission, so an edit made "
        "through this login is caught only by the anchors; connect as sagacity_app "
        "(`sagacity db grants`)"
    )
    if refuse:
        raise SettingsError(
            f"refusing to start: {message}, or set SAGACITY_ALLOW_WRITABLE_JOURNAL=true"
        )
    allowed = "allowed by SAGACITY_ALLOW_WRITABLE_JOURNAL" if settings.production else "dev mode"
    log.warning("WRITABLE JOURNAL (%s): %s", allowed, message)


@dataclass
class _Running:
    worker: Worker
    task: asyncio.Task[None]
    approvals: ApprovalStore


@contextlib.asynccontextmanager
async def _running(
    settings: Settings,
    apps: Sequence[str],
    graceful_s: float,
    runtime: Runtime | None = None,
    interceptors: Sequence[ClientInterceptor] = (),
) -> AsyncIterator[_Running]:
    # unset: the running dev stack's database, as every dev-stack command finds it
    database_url = settings.database_url or running_dev_database(settings.data_dir)
    if not database_url:
        raise SettingsError(
            "no journal database: set SAGACITY_DATABASE_URL (or run `sagacity dev`)"
        )
    app = load_apps(apps)
    keyring = settings.load_keyring()
    if keyring is None and settings.production:
        raise SettingsError(
            "refusing to start: a production worker needs SAGACITY_KEYRING, or anyone who can "
            "reach Temporal can approve as anyone"
        )
    codec = worker_codec(settings)
    await check_journal_rights(settings, database_url)
    async with AsyncExitStack() as stack:
        pool = await open_pool(
            database_url, min_size=settings.pool_min_size, max_size=settings.pool_max_size
        )
        stack.push_async_callback(pool.close)
        await app.enter(stack, database_url)
        approvals = ApprovalStore(pool)
        journal = TimedJournalStore(pool)
        stack.push_async_callback(journal.close)  # after the worker, before the pool
        plugin = SagacityPlugin(
            journal=journal,
            approvals=approvals,
            tools=app.tools,
            workflows=app.workflows,
            redactor=settings.redactor(),
            checkpoints=CheckpointWriter.open(settings.checkpoint_dir, settings.signing_key),
            outage_window=settings.outage_window,
            keyring=keyring,
            policy=settings.policy(),
            codec=codec,
        )
        extra = [p for factory in app.plugin_factories for p in factory(settings)]
        client = await connect(
            settings, plugin, extra_plugins=extra, runtime=runtime, interceptors=interceptors
        )
        worker = Worker(
            client,
            task_queue=settings.task_queue,
            max_concurrent_activities=settings.max_concurrent_activities,
            graceful_shutdown_timeout=timedelta(seconds=graceful_s),
            interceptors=[ObservabilityInterceptor()],
        )
        task = asyncio.create_task(worker.run())
        # the transparency log, beside the tool calls on a small pool of its own (several
        # workers take turns); it returns at once when the checkpoint settings are unset
        every = settings.log_interval.total_seconds()
        sequencer = (
            asyncio.create_task(
                run_sequencer(
                    database_url, settings.checkpoint_dir, settings.signing_key, every=every
                )
            )
            if every > 0
            else None
        )
        try:
            yield _Running(worker, task, approvals)
        finally:
            if not task.done():
                await worker.shutdown()
            if sequencer is not None:
                sequencer.cancel()
            for running in (task, sequencer):
                if running is not None:
                    with contextlib.suppress(asyncio.CancelledError):
                        await running


@contextlib.asynccontextmanager
async def running_worker(
    settings: Settings, apps: Sequence[str] = (DEFAULT_APP,), *, graceful_s: float | None = None
) -> AsyncIterator[Worker]:
    """A started worker (journal rights checked, app lifespans entered); shut down on exit.

    ``graceful_s`` defaults to ``settings.graceful_shutdown``.
    """
    grace = settings.graceful_shutdown.total_seconds() if graceful_s is None else graceful_s
    async with _running(settings, apps, grace) as running:
        yield running.worker


async def serve(
    settings: Settings, apps: Sequence[str] = (DEFAULT_APP,), *, graceful_s: float | None = None
) -> None:
    """Run until SIGTERM or SIGINT, then let in-flight activities finish (up to the grace period).

    Raises if the worker stops on its own (for example Temporal refused it), so the process
    exits non-zero and its supervisor restarts it.
    """
    grace = settings.graceful_shutdown.total_seconds() if graceful_s is None else graceful_s
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    ready = False
    runtime, temporal_metrics = temporal_runtime() if settings.metrics_address else (None, None)
    async with AsyncExitStack() as stack:
        interceptors = stack.enter_context(tracing(settings, "sagacity-worker"))
        running: _Running | None = None
        if settings.metrics_address:

            def loop_answers() -> bool:
                # alive = the event loop still runs callbacks; a tool blocking it (sync I/O
                # on the loop, say) stalls every saga on this worker: restart it
                try:
                    asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result(timeout=5)
                except Exception:
                    return False
                return True

            def waiting_approvals() -> None:
                if running is not None:
                    listed = asyncio.run_coroutine_threadsafe(running.approvals.list(), loop)
                    APPROVALS_WAITING.set(len(listed.result(timeout=5)))

            try:
                probes = ProbeServer(
                    settings.metrics_address,
                    alive=loop_answers,
                    ready=lambda: ready,
                    temporal_metrics=temporal_metrics,
                    before_scrape=waiting_approvals,
                ).start()
            except OSError as exc:
                raise SettingsError(
                    f"SAGACITY_METRICS_ADDRESS: cannot listen on {settings.metrics_address}: {exc}"
                ) from None
            stack.callback(probes.stop)
        running = await stack.enter_async_context(
            _running(settings, apps, grace, runtime, interceptors)
        )
        ready = True
        log.info("sagacity worker ready: task queue %s", settings.task_queue)
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({stopping, running.task}, return_when=asyncio.FIRST_COMPLETED)
        ready = False
        if running.task.done():
            stopping.cancel()
            running.task.result()  # the worker's own error, if it has one
            raise RuntimeError("the worker stopped on its own")
        log.info("shutting down: in-flight activities get up to %.0fs", grace)
    log.info("worker stopped")


def main(apps: Sequence[str] = (DEFAULT_APP,), **overrides: Any) -> None:
    """Load settings, set up logging, serve until a signal."""
    from sagacity.settings import load_settings

    settings = load_settings(**overrides)
    configure_logging(settings.log_format)
    asyncio.run(serve(settings, apps))


if __name__ == "__main__":
    from sagacity.cli._exit import exit_now

    main()
    exit_now(0)  # past the Temporal SDK's interpreter-teardown crash (see sagacity/cli/_exit.py)
