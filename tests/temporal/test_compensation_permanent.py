"""A compensation that cannot succeed is told apart from a slow one.

An undo that raises a programming error (``TypeError`` from ``ctx.result["id"]`` on a call that
raised, whose result is None), a missing key of its context, or the declared
``PermanentCompensationError`` is journaled COMPENSATION_FAILED after its one attempt, the saga
is flagged for a human and its other effects are still undone, newest first. An undo that fails
transiently is retried, and meanwhile the saga's status shows its attempt and last error.
Real Temporal, real Postgres.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import REGISTRY
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from sagacity import (
    CompensableTool,
    CompensationContext,
    NoEffect,
    PermanentCompensationError,
    compensable,
)
from sagacity.observability import ObservabilityInterceptor
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import SagaOptions, SagaResult, SagaSpec, SagaState, Step
from sagacity.temporal.plugin import SagacityPlugin
from sagacity.temporal.undo_attempts import with_attempts
from sagacity.temporal.workflow import STEPS_WORKFLOW
from tests.temporal.conftest import phases, wait_for
from workflows.order import app as order_app

#: what the undos did, in order: ("undo", tool, outcome)
UNDONE: list[tuple[str, str]] = []
#: how each undo of ``book_hotel`` behaves, set by each test
HOTEL_UNDO: dict[str, Any] = {}


def _undo_car(ctx: CompensationContext) -> None:
    UNDONE.append(("return_car", ctx.result["car"]))


def _undo_flight(ctx: CompensationContext) -> None:
    UNDONE.append(("cancel_flight", ctx.result["flight"]))


async def _undo_hotel(ctx: CompensationContext) -> None:
    """Behaves as the test set in :data:`HOTEL_UNDO`; each attempt is recorded."""
    UNDONE.append(("cancel_hotel", f"attempt {ctx.attempt}"))
    mode = HOTEL_UNDO["mode"]
    if mode == "read_result":  # written when a call that raised was not compensated
        UNDONE.append(("cancel_hotel", ctx.result["hotel"]))
    elif mode == "missing_key":
        UNDONE.append(("cancel_hotel", ctx.result["reservation"]))
    elif mode == "own_lookup":  # a lookup of the undo's own, in a service's answer
        answer: dict[str, str] = {}
        UNDONE.append(("cancel_hotel", answer["session"]))
    elif mode == "declared":
        raise PermanentCompensationError("the hotel says booking H-1 cannot be cancelled")
    elif mode == "transient" and ctx.attempt <= HOTEL_UNDO["failures"]:
        raise ConnectionError(f"hotel API unreachable (attempt {ctx.attempt})")
    UNDONE.append(("cancel_hotel", "done"))


@compensable(by=_undo_flight)
async def book_flight(city: str) -> dict[str, str]:
    """Book a flight."""
    return {"flight": f"F-{city}"}


@compensable(by=_undo_car)
async def rent_car(city: str) -> dict[str, str]:
    """Rent a car."""
    return {"car": f"C-{city}"}


@compensable(by=_undo_hotel)
async def book_hotel(city: str, fail: bool = False) -> dict[str, str]:
    """Book a hotel; with ``fail``, raise after an unknown effect (the call is FAILED)."""
    if fail:
        raise RuntimeError("hotel API timed out mid-booking")
    return {"hotel": f"H-{city}"}


@compensable(by=_undo_flight)
async def pay(amount: int) -> dict[str, str]:
    """Always refused, with no effect: the step that makes the saga roll back."""
    raise NoEffect(f"card declined for {amount}")


TOOLS: list[CompensableTool[..., Any]] = [book_flight, rent_car, book_hotel, pay]


@pytest.fixture
async def undo_worker(
    temporal_client: Client, task_queue: str, journal: JournalStore, approvals: ApprovalStore
) -> AsyncIterator[Worker]:
    UNDONE.clear()
    HOTEL_UNDO.clear()
    async with serving_undos(temporal_client, task_queue, journal, approvals) as worker:
        yield worker


def serving_undos(
    client: Client, task_queue: str, journal: JournalStore, approvals: ApprovalStore
) -> Worker:
    """A worker of :data:`TOOLS`, with Sagacity's metrics interceptor."""
    return Worker(
        client,
        task_queue=task_queue,
        plugins=[
            SagacityPlugin(
                journal=journal, approvals=approvals, tools=TOOLS, workflows=order_app.WORKFLOWS
            )
        ],
        interceptors=[ObservabilityInterceptor()],
        graceful_shutdown_timeout=timedelta(seconds=1),
    )


def trip(*, hotel_fails: bool, attempts: int = 20, backoff_s: float = 0.1) -> SagaSpec:
    """Flight, car, hotel, then a payment that fails: the saga compensates all three."""
    steps = [
        Step(tool="book_flight", args={"city": "Oslo"}),
        Step(tool="rent_car", args={"city": "Oslo"}),
        Step(tool="book_hotel", args={"city": "Oslo", "fail": hotel_fails}),
    ]
    if not hotel_fails:
        steps.append(Step(tool="pay", args={"amount": 900}))
    return SagaSpec(
        steps=steps,
        options=SagaOptions(
            compensation_attempts=attempts,
            compensation_backoff_s=backoff_s,
            compensation_max_interval_s=max(backoff_s, 0.5),
        ),
    )


async def start_trip(
    client: Client, worker: Worker, spec: SagaSpec
) -> WorkflowHandle[Any, SagaResult]:
    return await client.start_workflow(
        STEPS_WORKFLOW,
        spec,
        id=f"trip-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )


def hotel_attempts() -> int:
    return sum(1 for tool, what in UNDONE if tool == "cancel_hotel" and what.startswith("attempt"))


async def failed_row(journal: JournalStore, saga_id: str) -> dict[str, Any]:
    rows = [r for r in await journal.read(saga_id) if r.phase.value == "COMPENSATION_FAILED"]
    assert len(rows) == 1, rows
    assert rows[0].tool_name == "book_hotel"
    payload: dict[str, Any] = json.loads(rows[0].payload)
    return payload


@pytest.mark.parametrize(
    ("mode", "hotel_fails", "error_type"),
    [
        # the case: the call raised, so ctx.result is None
        ("read_result", True, "TypeError"),
        # the result has no such key: a KeyError on the context
        ("missing_key", False, "ContextKeyMissing"),
        ("declared", False, "PermanentCompensationError"),
    ],
)
async def test_an_undo_that_cannot_succeed_fails_at_once_and_the_rest_are_undone(
    temporal_client: Client,
    undo_worker: Worker,
    journal: JournalStore,
    mode: str,
    hotel_fails: bool,
    error_type: str,
) -> None:
    HOTEL_UNDO["mode"] = mode
    handle = await start_trip(temporal_client, undo_worker, trip(hotel_fails=hotel_fails))
    result = await asyncio.wait_for(handle.result(), 60)

    assert hotel_attempts() == 1, UNDONE  # not the 20 the saga allows
    assert result.status is SagaState.COMPENSATION_FAILED
    assert [e.tool_name for e in result.compensation_failed] == ["book_hotel"]
    assert result.needs_attention and "book_hotel" in result.needs_attention
    # the other effects are still undone, newest first
    assert [u for u in UNDONE if u[0] != "cancel_hotel"] == [
        ("return_car", "C-Oslo"),
        ("cancel_flight", "F-Oslo"),
    ]
    undo_rows = [p for p in await phases(journal, handle.id) if p[1].startswith("COMPENSAT")]
    assert undo_rows == [
        ("book_hotel", "COMPENSATION_FAILED"),
        ("rent_car", "COMPENSATED"),
        ("book_flight", "COMPENSATED"),
    ]
    failed = await failed_row(journal, handle.id)
    assert failed["type"] == error_type and failed["attempts"] == 1, failed
    assert (await journal.verify(handle.id)).ok


async def test_a_plain_key_error_of_the_undo_s_own_is_retried(
    temporal_client: Client, undo_worker: Worker, journal: JournalStore
) -> None:
    """Only a key missing from the context is permanent: a KeyError elsewhere (a lookup in a
    service's answer) may go away, and is retried up to the bound."""
    HOTEL_UNDO["mode"] = "own_lookup"
    handle = await start_trip(
        temporal_client, undo_worker, trip(hotel_fails=False, attempts=3, backoff_s=0.1)
    )
    result = await asyncio.wait_for(handle.result(), 60)

    assert hotel_attempts() == 3
    assert result.status is SagaState.COMPENSATION_FAILED
    failed = await failed_row(journal, handle.id)
    assert failed["type"] == "KeyError" and failed["attempts"] == 3, failed


def attempts_failed(error: str) -> float:
    value = REGISTRY.get_sample_value(
        "sagacity_compensation_attempts_failed_total",
        {"tool": "book_hotel", "error": error, "retried": "true"},
    )
    return value or 0.0


async def test_a_transient_undo_is_retried_and_its_attempts_and_last_error_show(
    temporal_client: Client, undo_worker: Worker, journal: JournalStore
) -> None:
    HOTEL_UNDO.update(mode="transient", failures=4)
    counted = attempts_failed("ConnectionError")
    handle = await start_trip(temporal_client, undo_worker, trip(hotel_fails=False, backoff_s=0.5))

    # while the undo retries: its tool, attempt and last error, from Temporal
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        status = await wait_for(handle, lambda s: s.compensating is not None)
        status = await with_attempts(temporal_client, status)
        undoing = status.compensating
        if undoing is not None and undoing.failed_attempts >= 3:
            break
        assert asyncio.get_running_loop().time() < deadline, status
        await asyncio.sleep(0.1)
    assert status.state is SagaState.COMPENSATING
    assert (undoing.tool_name, undoing.call_seq) == ("book_hotel", 5)
    assert undoing.attempt >= 4
    assert undoing.last_error is not None
    # the attempt shown is the one after the failure shown: failed_attempts counts right
    assert undoing.last_error == (
        f"ConnectionError: hotel API unreachable (attempt {undoing.failed_attempts})"
    )

    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status is SagaState.COMPENSATED, result
    assert hotel_attempts() == 5 and ("cancel_hotel", "done") in UNDONE
    assert [e.tool_name for e in result.compensated] == ["book_hotel", "rent_car", "book_flight"]
    assert attempts_failed("ConnectionError") - counted == 4
