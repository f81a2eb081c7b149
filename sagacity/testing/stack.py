"""The services a test session runs sagas on: a Temporal server and a journal database of its
own, started (or reached) once, and the worker plugin that serves tools on them."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import uuid4

from temporalio.client import Client

from sagacity.devstack import DevStack
from sagacity.errors import SettingsError
from sagacity.settings import Settings
from sagacity.store import ApprovalStore, JournalStore, open_pool
from sagacity.store.databases import drop_database, ensure_database
from sagacity.store.migrate import provision
from sagacity.temporal.codec import data_converter
from sagacity.temporal.plugin import SagacityPlugin
from sagacity.tools import CompensableTool

__all__ = ["SagacityStack", "attach_stack", "open_stack"]


@dataclass(frozen=True)
class SagacityStack:
    """A running Temporal server and a migrated journal, as a test session uses them."""

    #: ``database_url`` (the append-only ``sagacity_app`` login) and ``temporal_address`` set
    settings: Settings
    client: Client
    journal: JournalStore
    approvals: ApprovalStore

    @property
    def database_url(self) -> str:
        """The journal database, as the ``sagacity_app`` login (an app's lifespan gets it too)."""
        assert self.settings.database_url is not None  # set by open_stack and attach_stack
        return self.settings.database_url

    def plugin(
        self, tools: Sequence[CompensableTool[..., Any]] = (), workflows: Sequence[type] = ()
    ) -> SagacityPlugin:
        """Sagacity's worker plugin on this stack's journal, serving ``tools`` and
        ``workflows`` (``Worker(stack.client, plugins=[stack.plugin(...)], ...)``)."""
        return SagacityPlugin(
            journal=self.journal,
            approvals=self.approvals,
            tools=tools,
            workflows=workflows,
            redactor=self.settings.redactor(),
            codec=self.settings.payload_codec(),
        )


@contextlib.asynccontextmanager
async def open_stack(settings: Settings) -> AsyncIterator[SagacityStack]:
    """Start what ``settings`` leave unset (the embedded Postgres under ``data_dir``, an
    in-memory Temporal dev server), set up a journal database of this stack's own on the
    server (migrated, ``sagacity_app`` granted; dropped on exit) and connect to both.

    The database is created through ``owner_database_url`` when it is set (``sagacity dev``
    exports it: its ``SAGACITY_DATABASE_URL`` is the append-only login, which cannot).
    """
    async with DevStack(settings, temporal_db="memory", witness=False) as endpoints:
        server = settings.owner_database_url or endpoints.database_url
        name = f"sagacity_test_{uuid4().hex[:12]}"
        owner = await ensure_database(server, name)
        try:
            update = {
                "database_url": await provision(owner),
                "owner_database_url": owner,
                "temporal_address": endpoints.temporal_address,
            }
            async with attach_stack(settings.model_copy(update=update)) as stack:
                yield stack
        finally:
            await drop_database(server, name)


@contextlib.asynccontextmanager
async def attach_stack(settings: Settings) -> AsyncIterator[SagacityStack]:
    """Connect to services already running: Temporal at ``settings.temporal_address`` and a
    journal already migrated at ``settings.database_url``; closes what it opened on exit."""
    if not settings.database_url or not settings.temporal_address:
        raise SettingsError("attach_stack needs settings with database_url and temporal_address")
    pool = await open_pool(settings.database_url, max_size=10)
    try:
        journal = JournalStore(pool)
        client = await Client.connect(
            settings.temporal_address,
            namespace=settings.temporal_namespace,
            api_key=settings.temporal_api_key,
            tls=settings.temporal_tls or None,
            data_converter=data_converter(settings.payload_codec()),
        )
        try:
            yield SagacityStack(settings, client, journal, ApprovalStore(pool))
        finally:
            await journal.close()  # the connections its compensation locks used
    finally:
        await pool.close()
