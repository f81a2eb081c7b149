"""Sagacity in a Temporal worker: the long-lived worker process, and the one call that equips a
worker or client of your own (:class:`Sagacity`).

Your own worker::

    from sagacity.worker import Sagacity

    async with Sagacity.open(settings, tools=TOOLS, workflows=[BookTrip]) as sagacity:
        worker = Worker(sagacity.client, task_queue="travel", interceptors=sagacity.interceptors)
        await worker.run()

or your own client: ``Client.connect(address, plugins=[sagacity.plugin])``; a worker built from
that client serves the saga workflow, the tools and ``workflows`` (give a workflow there or to
``Worker(workflows=...)``, not both). A client that only starts, decides and queries sagas needs
no database: ``plugins=[Sagacity.client_plugin(settings)]``, or :func:`connect_client`.

An *app* is a module, importable from the current directory or ``PYTHONPATH``, that exposes:

- ``TOOLS``: the declared tools (:class:`~sagacity.tools.CompensableTool`) its sagas call;
- ``WORKFLOWS``: workflow classes to serve beside the generic saga workflow (at least one of
  ``TOOLS`` and ``WORKFLOWS``);
- ``lifespan`` (optional): a function returning an async context manager, entered once around the
  worker (open what the tools need: a pool, a client). It is called as ``lifespan()``,
  ``lifespan(database_url)`` (a parameter named ``database_url`` or annotated ``str``: the journal
  database's URL) or ``lifespan(settings)`` (named ``settings`` or annotated
  :class:`~sagacity.settings.Settings`);
- ``plugins(settings)`` (optional): returns a list of more Temporal client/worker plugins
  (``temporalio.plugin.SimplePlugin``), added after Sagacity's own (the agent example adds
  Temporal's OpenAI Agents plugin this way).

The Order example is ``workflows.order.app``. Serve apps with ``sagacity worker --app MODULE`` or
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
import inspect
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from types import ModuleType
from typing import Any

from temporalio.client import Client
from temporalio.client import Interceptor as ClientInterceptor
from temporalio.converter import PayloadCodec
from temporalio.plugin import SimplePlugin
from temporalio.runtime import Runtime
from temporalio.worker import Interceptor as WorkerInterceptor
from temporalio.worker import Worker

from sagacity.devstack import running_dev_database
from sagacity.errors import SettingsError
from sagacity.evidence.checkpoints import CheckpointWriter
from sagacity.evidence.rotation import trusted_keys
from sagacity.evidence.tlog import run_sequencer
from sagacity.evidence.trust import load_trust
from sagacity.observability import (
    ObservabilityInterceptor,
    ProbeServer,
    TimedJournalStore,
    configure_logging,
    temporal_runtime,
    tracing,
)
from sagacity.observability.metrics import APPROVALS_WAITING
from sagacity.settings import Settings, dev_stack_hint
from sagacity.store import ApprovalStore, JournalStore, Pool, journal_rights, open_pool
from sagacity.store.migrate import migrate as apply_migrations
from sagacity.store.migrate import unapplied
from sagacity.store.roles import placement
from sagacity.temporal.plugin import SagacityPlugin, escalation_target
from sagacity.tools import CompensableTool, app_tools

__all__ = [
    "DEFAULT_APP",
    "App",
    "Sagacity",
    "check_journal_rights",
    "connect",
    "connect_client",
    "load_apps",
    "main",
    "running_worker",
    "serve",
    "worker_codec",
]

log = logging.getLogger("sagacity.worker")

DEFAULT_APP = "workflows.order.app"

Lifespan = Callable[[Settings, str], AbstractAsyncContextManager[Any]]

_LIFESPAN_SIGNATURES = (
    "lifespan(), lifespan(database_url: str) or lifespan(settings: Settings), "
    "returning an async context manager"
)


@dataclass
class App:
    """What one or more app modules contribute to a worker."""

    #: the app modules, in order, each with its ``lifespan`` (called as its signature asks)
    modules: list[tuple[ModuleType, Lifespan | None]] = field(default_factory=list)
    #: every module's tools, read once its lifespan is open (:meth:`enter`)
    tools: list[CompensableTool[..., Any]] = field(default_factory=list)
    workflows: list[type] = field(default_factory=list)
    #: ``plugins(settings)`` callables: more client/worker plugins, added after Sagacity's
    plugin_factories: list[Callable[[Settings], Sequence[SimplePlugin]]] = field(
        default_factory=list
    )

    async def enter(self, stack: AsyncExitStack, settings: Settings, database_url: str) -> None:
        """Enter each app's lifespan on ``stack`` (what its tools and probes need: a pool, say),
        then read its ``TOOLS``, which may be a function of what the lifespan yielded."""
        self.tools.clear()
        for module, lifespan in self.modules:
            opened = None
            if lifespan is not None:
                opened = await stack.enter_async_context(lifespan(settings, database_url))
            self.tools.extend(app_tools(module, opened))


def load_apps(modules: Sequence[str]) -> App:
    """The workflows, lifespans and plugins of ``modules`` (their tools come with
    :meth:`App.enter`); :class:`SettingsError` when one cannot be imported, offers nothing to
    serve, or has a lifespan of another shape.

    Modules are imported from the current directory or ``PYTHONPATH``, as ``python -m`` finds
    them: a console script's ``sys.path`` starts at its own ``bin/`` folder, so the current
    directory is put first if it is not there.
    """
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    app = App()
    for name in modules:
        module = _import_app(name)
        workflows = list(getattr(module, "WORKFLOWS", []))
        if not getattr(module, "TOOLS", None) and not workflows:
            raise SettingsError(
                f"app module {name!r} ({module.__file__}) has no TOOLS and no WORKFLOWS: an app "
                "declares its tools in TOOLS (a list, or a function of what its lifespan "
                "yields) and its workflow classes in WORKFLOWS"
            )
        app.workflows.extend(workflows)
        lifespan = getattr(module, "lifespan", None)
        app.modules.append((module, None if lifespan is None else _lifespan(name, lifespan)))
        if hasattr(module, "plugins"):
            if not callable(module.plugins):
                raise SettingsError(
                    f"app module {name!r}: plugins must be a function plugins(settings) that "
                    "returns a list of Temporal plugins"
                )
            app.plugin_factories.append(module.plugins)
    return app


def _import_app(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing = getattr(exc, "name", None)
        if isinstance(exc, ModuleNotFoundError) and missing and _is_part_of(name, missing):
            path = os.environ.get("PYTHONPATH") or "unset"
            top = missing.split(".")[0]
            raise SettingsError(
                f"app module {name!r} not found (no module {missing!r}): an app must be "
                f"importable from the current directory ({os.getcwd()}) or PYTHONPATH ({path}); "
                f"run from the folder that holds {top}.py (or the package {top}/), or add that "
                "folder to PYTHONPATH"
            ) from None
        raise SettingsError(
            f"app module {name!r} was found but failed to import: "
            f"{type(exc).__name__}: {exc} (a dependency of the app is missing, or the app has an "
            "import error of its own)"
        ) from None


def _is_part_of(name: str, missing: str) -> bool:
    """Whether ``missing`` is ``name`` or one of its parent packages (the app itself is absent,
    not something it imports)."""
    return name == missing or name.startswith(f"{missing}.")


def _lifespan(app: str, lifespan: Any) -> Lifespan:
    """``lifespan`` as a call of (settings, database_url), by what its one parameter asks for."""
    wrong = SettingsError(
        f"app module {app!r}: lifespan must be {_LIFESPAN_SIGNATURES}; got {lifespan!r}"
    )
    try:
        signature = inspect.signature(lifespan)
    except (TypeError, ValueError):  # not callable, or a builtin that hides its signature
        raise wrong from None
    required = [
        p
        for p in signature.parameters.values()
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if not required:
        return lambda settings, database_url: _entered(app, lifespan())
    if len(required) == 1 and required[0].kind is not required[0].KEYWORD_ONLY:
        (param,) = required
        if param.name == "settings" or param.annotation in (Settings, "Settings"):
            return lambda settings, database_url: _entered(app, lifespan(settings))
        if param.name == "database_url" or param.annotation in (str, "str"):
            return lambda settings, database_url: _entered(app, lifespan(database_url))
    raise SettingsError(
        f"app module {app!r}: lifespan{signature} must be {_LIFESPAN_SIGNATURES} (a parameter "
        "named database_url or annotated str gets the journal's URL; one named settings or "
        "annotated Settings gets the settings)"
    )


def _entered(app: str, manager: Any) -> AbstractAsyncContextManager[Any]:
    if not isinstance(manager, AbstractAsyncContextManager):
        raise SettingsError(
            f"app module {app!r}: lifespan returned {type(manager).__name__}, not an async "
            f"context manager: it must be {_LIFESPAN_SIGNATURES} (decorate it with "
            "@contextlib.asynccontextmanager)"
        )
    return manager


def _no_temporal(settings: Settings) -> SettingsError:
    return SettingsError(
        f"no Temporal address: set TEMPORAL_ADDRESS {dev_stack_hint(settings.data_dir)}"
    )


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
        raise _no_temporal(settings)
    return await Client.connect(
        settings.temporal_address,
        namespace=settings.temporal_namespace,
        api_key=settings.temporal_api_key,
        tls=settings.temporal_tls,
        plugins=[plugin, *extra_plugins],
        runtime=runtime,
        interceptors=interceptors,
    )


def client_plugin(settings: Settings) -> SagacityPlugin:
    """The plugin of a client that starts, signals and queries sagas (no database): the data
    converter, with the payload codec of ``settings``, that the workers read."""
    return SagacityPlugin(codec=settings.payload_codec())


async def connect_client(
    settings: Settings, *, interceptors: Sequence[ClientInterceptor] = ()
) -> Client:
    """A client of the configured Temporal frontend that starts, decides and queries sagas."""
    return await connect(settings, client_plugin(settings), interceptors=interceptors)


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

    :class:`SettingsError` when ``settings.production`` and not ``allow_writable_journal``; and
    always when a shadow of Sagacity's tables is there, or an append-only role may create
    objects in the journal's schema (:func:`sagacity.store.roles.placement`).
    """
    rights = await journal_rights(database_url)
    place = await placement(database_url)
    # a login that may rewrite the journal may create in its schema too: the rule below says
    # whether such a login may run at all
    if place.shadows or (place.creators and rights.append_only):
        raise SettingsError("refusing to start: " + "; ".join(place.describe()))
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


def journal_database(settings: Settings) -> str:
    """The journal database's URL: the settings', or (unset) the running dev stack's, as every
    dev-stack command finds it; :class:`SettingsError` when there is neither."""
    database_url = settings.database_url or running_dev_database(settings.data_dir)
    if not database_url:
        raise SettingsError(
            f"no journal database: set SAGACITY_DATABASE_URL {dev_stack_hint(settings.data_dir)}"
        )
    return database_url


@dataclass
class Sagacity:
    """Everything a Temporal worker or client of your own needs to run sagas, from settings.

    Open it with :meth:`open`; pass ``plugin`` (or ``plugins``, with the extra ones) to
    ``Client.connect`` — or use ``client``, already connected when ``settings.temporal_address``
    is set — and ``interceptors`` to ``Worker(...)``. Workers built from a client with the
    plugin serve the saga workflow, its activities, ``tools`` and ``workflows``.
    """

    settings: Settings
    database_url: str
    pool: Pool
    journal: JournalStore
    approvals: ApprovalStore
    #: Sagacity's plugin: data converter and codec, the saga workflow, activities and tools
    plugin: SagacityPlugin
    #: ``plugin`` and the extra plugins :meth:`open` was given, for ``Client.connect(plugins=...)``
    plugins: list[SimplePlugin]
    #: for ``Worker(interceptors=...)``: Sagacity's metrics and saga-tagged logs
    interceptors: list[WorkerInterceptor]
    #: a client with ``plugins``, when the settings name a Temporal address
    client: Client | None = None

    client_plugin = staticmethod(client_plugin)

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        settings: Settings,
        *,
        tools: Sequence[CompensableTool[..., Any]] = (),
        workflows: Sequence[type] = (),
        plugins: Sequence[SimplePlugin] = (),
        migrate: bool = False,
        runtime: Runtime | None = None,
        client_interceptors: Sequence[ClientInterceptor] = (),
    ) -> AsyncIterator[Sagacity]:
        """Open the pool and stores, check the schema (``migrate=True``: migrate it, as the
        settings' owner URL) and the journal's rights, build the plugin, run the transparency
        log's sequencer (every ``settings.log_interval``); stop and close it all on exit.

        :class:`SettingsError` when there is no database, the schema lacks migrations, or
        production settings lack the keyring, codec keys or an append-only journal role.
        """
        database_url = journal_database(settings)
        keyring = settings.load_keyring()
        if keyring is None and settings.production:
            raise SettingsError(
                "refusing to start: a production worker needs SAGACITY_KEYRING, or anyone who "
                "can reach Temporal can approve as anyone"
            )
        codec = worker_codec(settings)
        await _schema_ready(settings, database_url, migrate=migrate)
        await check_journal_rights(settings, database_url)
        async with AsyncExitStack() as stack:
            pool = await open_pool(
                database_url, min_size=settings.pool_min_size, max_size=settings.pool_max_size
            )
            stack.push_async_callback(pool.close)
            approvals = ApprovalStore(pool)
            journal = TimedJournalStore(pool)
            stack.push_async_callback(journal.close)  # before the pool
            plugin = SagacityPlugin(
                journal=journal,
                approvals=approvals,
                tools=tools,
                workflows=workflows,
                redactor=settings.redactor(),
                checkpoints=CheckpointWriter.open(settings.checkpoint_dir, settings.signing_key),
                outage_window=settings.outage_window,
                keyring=keyring,
                policy=settings.policy(),
                codec=codec,
                escalation=escalation_target(settings),
            )
            stack.push_async_callback(_cancelled, _sequencer(settings, database_url))
            client = None
            if settings.temporal_address:
                client = await connect(
                    settings,
                    plugin,
                    extra_plugins=plugins,
                    runtime=runtime,
                    interceptors=client_interceptors,
                )
            yield cls(
                settings=settings,
                database_url=database_url,
                pool=pool,
                journal=journal,
                approvals=approvals,
                plugin=plugin,
                plugins=[plugin, *plugins],
                interceptors=[ObservabilityInterceptor()],
                client=client,
            )


def _sequencer(settings: Settings, database_url: str) -> asyncio.Task[None] | None:
    """The transparency log's sequencer, beside the tool calls on a small pool of its own
    (several workers take turns); it returns at once when the checkpoint settings are unset."""
    every = settings.log_interval.total_seconds()
    if every <= 0:
        return None
    # the witnesses asked to cosign each head are the trust file's (those with a url); rows are
    # attested by the worker's own checkpoints, and by those of the keys the trust file pins or
    # that they rotated to (checkpoints signed before a rotation)
    roots = load_trust(settings.trust_file) if settings.trust_file else None
    signers = None
    if roots is not None:
        signers, _ = trusted_keys(roots.signer_keys(), settings.checkpoint_dir)
    return asyncio.create_task(
        run_sequencer(
            database_url,
            settings.checkpoint_dir,
            settings.signing_key,
            every=every,
            witnesses=() if roots is None else roots.witnesses,
            signers=signers,
        )
    )


async def _cancelled(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _schema_ready(settings: Settings, database_url: str, *, migrate: bool) -> None:
    """Migrate when asked; otherwise :class:`SettingsError` if the schema lacks migrations."""
    if migrate:
        applied = await apply_migrations(settings.owner_database_url or database_url)
        if applied:
            log.info("journal schema migrated: applied %s", ", ".join(applied))
        return
    missing = await unapplied(database_url)
    if missing:
        raise SettingsError(
            f"the journal schema lacks migrations {', '.join(missing)}: run `sagacity db "
            "migrate` as the tables' owner (or open Sagacity with migrate=True)"
        )


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
    app = load_apps(apps)
    extra = [p for factory in app.plugin_factories for p in factory(settings)]
    async with AsyncExitStack() as stack:
        # the apps' lifespans first: an app's TOOLS may be made from what its lifespan opened
        await app.enter(stack, settings, journal_database(settings))
        sagacity = await stack.enter_async_context(
            Sagacity.open(
                settings,
                tools=app.tools,
                workflows=app.workflows,
                plugins=extra,
                runtime=runtime,
                client_interceptors=interceptors,
            )
        )
        if sagacity.client is None:
            raise _no_temporal(settings)
        worker = Worker(
            sagacity.client,
            task_queue=settings.task_queue,
            max_concurrent_activities=settings.max_concurrent_activities,
            graceful_shutdown_timeout=timedelta(seconds=graceful_s),
            interceptors=sagacity.interceptors,
        )
        task = asyncio.create_task(worker.run())
        try:
            yield _Running(worker, task, sagacity.approvals)
        finally:
            if not task.done():
                await worker.shutdown()
            with contextlib.suppress(asyncio.CancelledError):
                await task


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
