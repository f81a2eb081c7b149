"""Tools from where they already are: methods of an instance holding a connection pool, and an
existing Agents SDK ``FunctionTool``, journaled and compensated like any other tool."""

from __future__ import annotations

import types
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from agents import function_tool
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from sagacity import CompensationContext, compensable, current_call, tools_of
from sagacity.agents import compensable_function_tool
from sagacity.errors import ToolDeclarationError
from sagacity.evidence.checkpoints import CheckpointWriter
from sagacity.evidence.redaction import Redactor
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import SagaState, Step
from sagacity.temporal.plugin import SagacityPlugin
from sagacity.tools import CompensableTool, app_tools
from tests.temporal.conftest import phases, serving
from tests.temporal.test_bad_input import run

Pool = AsyncConnectionPool[AsyncConnection[Any]]


class Bookings:
    """The spec's component: tools as methods, their dependency (a pool) injected."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    @compensable(by="cancel_flight")
    async def book_flight(self, traveler: str, day: str) -> dict[str, str]:
        """Book a flight for a traveler on a day."""
        booking = _effect_id("flight")
        await self.write("INSERT INTO tool_sources_bookings VALUES (%s, %s)", booking, traveler)
        return {"booking": booking}

    async def cancel_flight(self, ctx: CompensationContext) -> None:
        await self.write("DELETE FROM tool_sources_bookings WHERE id = %s", ctx.result["booking"])

    @compensable
    async def book_hotel(self, traveler: str, nights: int) -> dict[str, str]:
        """Book a hotel room."""
        booking = _effect_id("hotel")
        await self.write("INSERT INTO tool_sources_bookings VALUES (%s, %s)", booking, traveler)
        return {"booking": booking}

    @book_hotel.compensation
    async def cancel_hotel(self, ctx: CompensationContext) -> None:
        await self.write("DELETE FROM tool_sources_bookings WHERE id = %s", ctx.result["booking"])

    async def write(self, statement: str, *params: str) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(statement, params)

    async def held(self) -> list[str]:
        async with self.pool.connection() as conn:
            rows = await (await conn.execute("SELECT id FROM tool_sources_bookings")).fetchall()
        return sorted(row[0] for row in rows)


def _effect_id(kind: str) -> str:
    call = current_call()
    return f"{kind}-{call.saga_id}-{call.seq}"


#: the cars rented, as the rental company sees them
RENTED: list[str] = []
#: what the failing tool's compensation was told
SMASHED: list[str] = []


@function_tool
async def rent_car(city: str, days: int) -> str:
    """Rent a car in a city for some days."""
    car = f"car-{city}-{days}-{len(RENTED)}"
    RENTED.append(car)
    return car


def return_car(ctx: CompensationContext) -> None:
    RENTED.remove(ctx.result)


@function_tool
def pay_deposit(amount: int) -> str:
    """Pay the rental deposit."""
    raise RuntimeError(f"card declined for {amount}")


def refund_deposit(ctx: CompensationContext) -> None:
    SMASHED.append(f"refund failed={ctx.failed} result={ctx.result}")


book_car = compensable_function_tool(rent_car, by=return_car)
deposit = compensable_function_tool(pay_deposit, by=refund_deposit, name="deposit")


@asynccontextmanager
async def lifespan(database_url: str) -> AsyncIterator[Bookings]:
    """The travel app's lifespan: it opens the pool the tools need and yields the component."""
    async with AsyncConnectionPool(database_url, open=False) as pool:
        async with pool.connection() as conn:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS tool_sources_bookings (id text PRIMARY KEY, who text)"
            )
        yield Bookings(pool)


def travel_tools(bookings: Bookings) -> list[CompensableTool[..., Any]]:
    """The travel app's TOOLS: a function of what its lifespan yielded."""
    return [*tools_of(bookings), book_car, deposit]


#: the travel app as a worker loads it: ``app_tools`` reads TOOLS once the lifespan is open
travel_app = types.ModuleType("travel_app")
travel_app.lifespan = lifespan  # type: ignore[attr-defined]
travel_app.TOOLS = travel_tools  # type: ignore[attr-defined]


@pytest.fixture
async def bookings(database_url: str) -> AsyncIterator[Bookings]:
    """The component the travel app's lifespan yields, its bookings and rentals emptied."""
    async with travel_app.lifespan(database_url) as opened:
        await opened.write("DELETE FROM tool_sources_bookings")
        RENTED.clear()
        SMASHED.clear()
        yield opened


@pytest.fixture
async def travel_worker(
    temporal_client: Client,
    task_queue: str,
    journal: JournalStore,
    approvals: ApprovalStore,
    checkpoint_writer: CheckpointWriter,
    redactor: Redactor,
    bookings: Bookings,
) -> AsyncIterator[Worker]:
    async with serving(
        temporal_client,
        task_queue,
        journal=journal,
        approvals=approvals,
        tools=app_tools(travel_app, bookings),
        redactor=redactor,
        checkpoints=checkpoint_writer,
    ) as worker:
        yield worker


def failed_trip(*tools: str) -> list[tuple[str, str]]:
    """A saga's journal whose calls ran, and whose last call failed and was compensated with the
    rest, newest first."""
    *done, failed = tools
    rows = [(t, phase) for t in done for phase in ("INTENT", "EXECUTED")]
    return [*rows, (failed, "INTENT"), (failed, "FAILED")] + [
        (t, "COMPENSATED") for t in reversed(tools)
    ]


async def test_method_and_function_tools_run_then_compensate_when_a_later_call_fails(
    temporal_client: Client, travel_worker: Worker, bookings: Bookings, journal: JournalStore
) -> None:
    sid, result = await run(
        temporal_client,
        travel_worker,
        [
            Step(tool="book_flight", args={"traveler": "ada", "day": "2026-12-24"}),
            Step(tool="book_hotel", args={"traveler": "ada", "nights": 2}),
            Step(tool="rent_car", args={"city": "Oslo", "days": 3}),
            Step(tool="deposit", args={"amount": 300}),
        ],
    )
    assert result.status is SagaState.COMPENSATED
    # the FunctionTool's exception failed the call (it was not turned into an error text)
    assert result.error is not None and "card declined for 300" in result.error.message
    assert await bookings.held() == [] and RENTED == []
    # a failure leaves the effect unknown: the failed call is compensated too, told so
    assert SMASHED == ["refund failed=True result=None"]
    assert await phases(journal, sid) == failed_trip(
        "book_flight", "book_hotel", "rent_car", "deposit"
    )
    rows = await journal.read(sid)
    # arguments and results journaled as given and returned: no self, the FunctionTool's text
    assert rows[0].input == '{"day":"2026-12-24","traveler":"ada"}'
    assert rows[1].payload == f'{{"booking":"flight-{sid}-1"}}'
    assert rows[4].input == '{"city":"Oslo","days":3}'
    assert rows[5].payload == '"car-Oslo-3-0"'
    assert (await journal.verify(sid)).ok


async def test_a_completed_saga_keeps_the_rows_and_the_rental(
    temporal_client: Client, travel_worker: Worker, bookings: Bookings
) -> None:
    sid, result = await run(
        temporal_client,
        travel_worker,
        [
            Step(tool="book_flight", args={"traveler": "bo", "day": "2027-01-02"}),
            Step(tool="rent_car", args={"city": "Rome", "days": 1}),
        ],
    )
    assert result.status is SagaState.COMPLETED
    assert result.value == {
        "book_flight": {"booking": f"flight-{sid}-1"},
        "rent_car": "car-Rome-1-0",
    }
    assert await bookings.held() == [f"flight-{sid}-1"] and RENTED == ["car-Rome-1-0"]


async def test_function_tool_arguments_are_checked_against_its_schema_before_it_runs(
    temporal_client: Client, travel_worker: Worker, bookings: Bookings, journal: JournalStore
) -> None:
    # checked with the steps, before the first one runs (test_validation.py)
    with pytest.raises(WorkflowFailureError) as refused:
        await run(
            temporal_client,
            travel_worker,
            [
                Step(tool="book_flight", args={"traveler": "cy", "day": "2027-02-03"}),
                Step(tool="rent_car", args={"city": "Lima", "days": "many"}),
            ],
        )
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "StepsInvalid"
    assert "steps[1] ('rent_car'): 'rent_car': days: 'many' is not of type 'integer'" in (
        cause.message
    )
    assert RENTED == [] and await bookings.held() == []


async def test_declaration_mistakes_of_the_new_forms_stop_the_worker_at_start(
    bookings: Bookings, journal: JournalStore, approvals: ApprovalStore
) -> None:
    def start(tools: list[Any]) -> None:
        SagacityPlugin(journal=journal, approvals=approvals, tools=tools)

    with pytest.raises(ToolDeclarationError, match="method of Bookings, registered without an"):
        start([Bookings.book_flight])
    with pytest.raises(ToolDeclarationError, match=r"register tools_of\(it\)"):
        start([bookings])
    with pytest.raises(ToolDeclarationError, match="decorate it with @compensable"):
        start([rent_car])  # the FunctionTool itself, not made a saga tool
    with pytest.raises(ToolDeclarationError, match="'rent_car' is REVERSIBLE but declares no"):
        start([compensable_function_tool(rent_car)])
    with pytest.raises(ToolDeclarationError, match="two tools are named 'book_flight'"):
        start([*tools_of(bookings), *tools_of(Bookings(bookings.pool))])
