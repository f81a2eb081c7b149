"""Typed calls: ``saga.call(book_flight, ...)`` gives the workflow the tool's own return type
(a pydantic model, a dataclass) and journals exactly what the call by name journals."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from sagacity.evidence.redaction import Redactor
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.plugin import SagacityPlugin
from sagacity.workflow import SagaResult, SagaState
from tests.temporal import trip_tools
from tests.temporal.trip_workflows import WORKFLOWS, Trip


@pytest.fixture
async def trip_worker(
    temporal_client: Client,
    task_queue: str,
    journal: JournalStore,
    approvals: ApprovalStore,
    redactor: Redactor,
) -> AsyncIterator[Worker]:
    trip_tools.EFFECTS.clear()
    plugin = SagacityPlugin(
        journal=journal,
        approvals=approvals,
        tools=trip_tools.TOOLS,
        workflows=WORKFLOWS,
        redactor=redactor,
    )
    async with Worker(
        temporal_client,
        task_queue=task_queue,
        plugins=[plugin],
        graceful_shutdown_timeout=timedelta(seconds=1),
    ) as worker:
        yield worker


async def trip(client: Client, worker: Worker, workflow: str, **request: Any) -> SagaResult:
    result: SagaResult = await client.execute_workflow(
        workflow,
        Trip(**request),
        id=f"trip-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )
    return result


async def journaled(journal: JournalStore, saga_id: str) -> list[tuple[str, str, str, str]]:
    return [(e.tool_name, e.phase.value, e.input, e.payload) for e in await journal.read(saga_id)]


@pytest.mark.parametrize("workflow", ["tests.Trip", "tests.TripUnsandboxed"])
async def test_typed_calls_give_the_model_and_journal_as_calls_by_name(
    temporal_client: Client, trip_worker: Worker, journal: JournalStore, workflow: str
) -> None:
    typed = await trip(temporal_client, trip_worker, workflow)
    named = await trip(temporal_client, trip_worker, workflow, by_name=True)

    assert typed.status is SagaState.COMPLETED, typed.error
    # the workflow held a Flight (its day a date), a Seat, and the real token
    assert typed.value == {
        "flight_type": "Flight",
        "seat_type": "Seat",
        "day_type": "date",
        "token": trip_tools.BOARDING_TOKEN,
        "seat": "12A",
    }
    # by name: the same call gives JSON data
    assert named.status is SagaState.COMPLETED, named.error
    assert named.value["flight_type"] == "dict" and named.value["seat_type"] == "dict"
    assert named.value["token"] == trip_tools.BOARDING_TOKEN

    rows = await journaled(journal, typed.saga_id)
    assert rows == await journaled(journal, named.saga_id)
    assert [(tool, phase) for tool, phase, _, _ in rows] == [
        ("book_flight", "INTENT"),
        ("book_flight", "EXECUTED"),
        ("pick_seat", "INTENT"),
        ("pick_seat", "EXECUTED"),
    ]
    # the positional arguments were journaled by name; the token never reached the journal
    assert rows[0][2] == '{"day":"2027-01-02","traveler":"Ada"}'
    assert rows[2][2] == '{"flight_id":"FL-Ada-2027-01-02"}'
    assert trip_tools.BOARDING_TOKEN not in "".join(payload for *_, payload in rows)


async def test_a_result_not_of_its_return_type_fails_the_call_and_compensates(
    temporal_client: Client, trip_worker: Worker, journal: JournalStore
) -> None:
    result = await trip(temporal_client, trip_worker, "tests.Trip", miles=True)

    assert result.status is SagaState.COMPENSATED
    assert result.error is not None
    assert result.error.type == "ToolFailed" and "ResultInvalid" in result.error.message
    assert "add_miles" in result.error.message
    # the call ran, so it is undone with the rest, newest first
    assert trip_tools.EFFECTS == [
        "booked Ada",
        "seat on FL-Ada-2027-01-02",
        "miles for FL-Ada-2027-01-02",
        "forgot miles lots",
        "freed 12A",
        "cancelled FL-Ada-2027-01-02",
    ]


async def test_a_model_argument_is_journaled_as_json_and_validated_back_into_the_model(
    temporal_client: Client, trip_worker: Worker, journal: JournalStore
) -> None:
    result = await trip(temporal_client, trip_worker, "tests.Trip", bag=23)

    assert result.status is SagaState.COMPLETED, result.error
    assert "bag of 23.0 kg on FL-Ada-2027-01-02" in trip_tools.EFFECTS
    rows = await journaled(journal, result.saga_id)
    assert rows[2][:3] == (
        "check_bag",
        "INTENT",
        '{"bag":{"fragile":true,"kilos":23.0},"flight_id":"FL-Ada-2027-01-02"}',
    )


async def test_arguments_that_are_no_json_are_refused_and_the_saga_compensates(
    temporal_client: Client, trip_worker: Worker, journal: JournalStore
) -> None:
    # a NaN in the model: no JSON, so no journal row; the saga ends instead of wedging
    result = await trip(temporal_client, trip_worker, "tests.Trip", bag=-1)

    assert result.status is SagaState.COMPENSATED
    assert result.error is not None and result.error.type == "ToolArgumentsInvalid"
    assert "check_bag" in result.error.message
    assert trip_tools.EFFECTS == ["booked Ada", "cancelled FL-Ada-2027-01-02"]
    phases = [(tool, phase) for tool, phase, _, _ in await journaled(journal, result.saga_id)]
    assert phases == [
        ("book_flight", "INTENT"),
        ("book_flight", "EXECUTED"),
        ("book_flight", "COMPENSATED"),
    ]


async def test_a_typed_call_to_another_function_of_the_same_name_is_refused(
    temporal_client: Client, trip_worker: Worker, journal: JournalStore
) -> None:
    # the worker serves Seats.pick_seat; the workflow names Impostor.pick_seat
    result = await trip(temporal_client, trip_worker, "tests.Trip", impostor=True)

    assert result.status is SagaState.COMPENSATED
    assert result.error is not None and result.error.type == "UnknownTool"
    assert "Seats.pick_seat, not tests.temporal.trip_tools.Impostor.pick_seat" in (
        result.error.message
    )
    assert "the impostor ran" not in trip_tools.EFFECTS
    assert trip_tools.EFFECTS == ["booked Ada", "cancelled FL-Ada-2027-01-02"]
