"""Sagacity in a worker and a client of the user's own, built by one call: ``Sagacity.open``.

The worker is the user's: their own ``Worker``, task queue and workflow; Sagacity adds its
plugin and interceptors. Real Temporal and Postgres, as everywhere.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import psycopg
import pytest
from prometheus_client import REGISTRY
from temporalio.client import Client
from temporalio.worker import Worker

from sagacity.devstack import Endpoints
from sagacity.errors import SettingsError
from sagacity.settings import Settings
from sagacity.store.databases import drop_database, ensure_database
from sagacity.temporal.models import SagaState
from sagacity.worker import Sagacity
from tests.conftest import scratch_database
from tests.embedding import trip


def counted(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(f"{name}_total", labels) or 0.0


async def test_an_existing_worker_runs_a_saga_that_compensates(
    app_settings: Settings, endpoints: Endpoints, task_queue: str
) -> None:
    booked = counted("sagacity_tool_calls", tool="book_embedded_flight", phase="EXECUTED")
    declined = counted("sagacity_tool_calls", tool="charge_embedded_card", phase="FAILED")
    undone = counted("sagacity_compensations", tool="book_embedded_flight", outcome="compensated")
    traveler = f"ada-{uuid.uuid4().hex[:8]}"

    async with Sagacity.open(app_settings, tools=trip.TOOLS) as sagacity:
        assert sagacity.client is not None  # the settings name Temporal: connected for you
        # the user's own client and worker, as Temporal's documentation builds them
        client = await Client.connect(
            endpoints.temporal_address,
            namespace=endpoints.temporal_namespace,
            plugins=[sagacity.plugin],
        )
        worker = Worker(
            client,
            task_queue=task_queue,
            workflows=[trip.BookTrip],
            interceptors=sagacity.interceptors,
            graceful_shutdown_timeout=timedelta(seconds=1),
        )
        async with worker:
            # a client with no database: the plugin's data converter and codec only
            starter = await Client.connect(
                endpoints.temporal_address,
                namespace=endpoints.temporal_namespace,
                plugins=[Sagacity.client_plugin(app_settings)],
            )
            result = await starter.execute_workflow(
                trip.BookTrip.run,
                traveler,
                id=f"trip-{traveler}",
                task_queue=task_queue,
                execution_timeout=timedelta(seconds=60),
            )
        rows = [(e.tool_name, e.phase.value) for e in await sagacity.journal.read(result.saga_id)]

    assert result.status is SagaState.COMPENSATED
    assert result.error is not None and "declined" in result.error.message
    assert [e.tool_name for e in result.compensated] == ["book_embedded_flight"]
    assert f"LH400-{traveler}" not in trip.BOOKED  # booked, then cancelled
    assert rows == [
        ("book_embedded_flight", "INTENT"),
        ("book_embedded_flight", "EXECUTED"),
        ("charge_embedded_card", "INTENT"),
        ("charge_embedded_card", "FAILED"),
        ("book_embedded_flight", "COMPENSATED"),
    ]
    # the metrics interceptor saw every call and the compensation
    assert counted("sagacity_tool_calls", tool="book_embedded_flight", phase="EXECUTED") == (
        booked + 1
    )
    assert counted("sagacity_tool_calls", tool="charge_embedded_card", phase="FAILED") == (
        declined + 1
    )
    assert counted(
        "sagacity_compensations", tool="book_embedded_flight", outcome="compensated"
    ) == (undone + 1)


async def test_the_workflows_given_to_open_run_on_a_worker_of_its_client(
    app_settings: Settings, task_queue: str
) -> None:
    """The short form: Sagacity's connected client, its workflows registered by the plugin."""
    traveler = f"bob-{uuid.uuid4().hex[:8]}"
    async with Sagacity.open(app_settings, tools=trip.TOOLS, workflows=[trip.BookTrip]) as sagacity:
        assert sagacity.client is not None
        worker = Worker(
            sagacity.client,
            task_queue=task_queue,
            interceptors=sagacity.interceptors,
            graceful_shutdown_timeout=timedelta(seconds=1),
        )
        async with worker:
            result = await sagacity.client.execute_workflow(
                trip.BookTrip.run,
                traveler,
                id=f"trip-{traveler}",
                task_queue=task_queue,
                execution_timeout=timedelta(seconds=60),
            )

    assert result.status is SagaState.COMPENSATED
    assert f"LH400-{traveler}" not in trip.BOOKED


async def test_an_unmigrated_database_is_refused_by_name_or_migrated_when_asked(
    app_settings: Settings, endpoints: Endpoints
) -> None:
    name = f"sagacity_embed_{uuid.uuid4().hex[:8]}"
    owner = await ensure_database(endpoints.database_url, name)
    fresh = app_settings.model_copy(
        update={"database_url": owner, "owner_database_url": owner, "temporal_address": None}
    )
    try:
        with pytest.raises(
            SettingsError, match=r"lacks migrations 0001_journal.*sagacity db migrate"
        ):
            async with Sagacity.open(fresh, tools=trip.TOOLS):
                pass

        async with Sagacity.open(fresh, tools=trip.TOOLS, migrate=True) as sagacity:
            assert sagacity.client is None  # no Temporal address: the plugin is for your client
            assert await sagacity.journal.read("no-such-saga") == []
        async with Sagacity.open(fresh, tools=trip.TOOLS) as sagacity:  # migrated: no refusal
            assert sagacity.plugin in sagacity.plugins
    finally:
        await drop_database(endpoints.database_url, name)


async def test_the_app_login_sees_a_migration_its_database_lacks(
    app_settings: Settings, endpoints: Endpoints
) -> None:
    """A worker logged in as sagacity_app, on a database one migration behind its Sagacity."""
    async with scratch_database(endpoints, "sagacity_embed") as (owner, app):
        async with await psycopg.AsyncConnection.connect(owner, autocommit=True) as conn:
            await conn.execute("DELETE FROM sagacity_schema_version WHERE version = '0007_halt'")
        behind = app_settings.model_copy(update={"database_url": app, "temporal_address": None})

        with pytest.raises(SettingsError, match=r"lacks migrations 0007_halt: run `sagacity db"):
            async with Sagacity.open(behind, tools=trip.TOOLS):
                pass
