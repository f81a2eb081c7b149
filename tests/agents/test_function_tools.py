"""An existing Agents SDK FunctionTool made a saga tool: declared, shown to the model, journaled
and compensated like any other tool, beside methods of an instance holding a pool."""

from __future__ import annotations

from typing import Any

import pytest
from agents import FunctionTool, Model, Tool, function_tool
from temporalio.client import Client

from sagacity import Reversibility, ToolRegistry
from sagacity.agents import AgentSagaRequest, Call, Say, Script, ScriptedModelProvider
from sagacity.agents import compensable_function_tool as saga_tool
from sagacity.agents.models import ScriptedModel
from sagacity.errors import ToolArgumentsInvalid, ToolDeclarationError
from sagacity.rules import ALWAYS
from sagacity.store import JournalStore
from sagacity.temporal.models import SagaState
from tests.agents.conftest import WorkerFactory, start_agent
from tests.temporal.test_tool_sources import (
    RENTED,
    SMASHED,
    Bookings,
    book_car,
    bookings,
    failed_trip,
    rent_car,
    return_car,
    travel_tools,
)

__all__ = ["bookings"]  # the fixture, shared with the plain saga tests

TRIP = Script(
    turns=[
        [
            Call("book_flight", {"traveler": "ada", "day": "2026-12-24"}),
            Call("rent_car", {"city": "Oslo", "days": 3}),
            Call("deposit", {"amount": 300}),
            Say(lambda c: f"Booked, but the deposit said: {c.result_of('deposit')}"),
        ],
        [Say("Understood: the flight and the car were cancelled.")],
    ]
)


class SeeingProvider(ScriptedModelProvider):
    """The scripted model, noting the tools each model call was shown."""

    def __init__(self, scripts: dict[str, Script]) -> None:
        super().__init__(scripts)
        self.shown: list[Tool] = []

    def get_model(self, model_name: str | None) -> Model:
        provider = self

        class Seeing(ScriptedModel):
            async def get_response(self, *args: Any, **kwargs: Any) -> Any:
                provider.shown.extend(kwargs.get("tools") or args[3])
                return await super().get_response(*args, **kwargs)

        return Seeing(self.scripts[model_name or self.default])


async def test_an_agent_calls_a_function_tool_and_method_tools_and_they_are_compensated(
    temporal_client: Client, agent_worker: WorkerFactory, bookings: Bookings, journal: JournalStore
) -> None:
    provider = SeeingProvider({"trip": TRIP})
    async with agent_worker(provider=provider, tools=travel_tools(bookings)) as worker:
        handle = await start_agent(
            temporal_client, worker.task_queue, AgentSagaRequest(prompt="plan it", model="trip")
        )
        result = await handle.result()

    # the model was shown the FunctionTool as it describes itself
    shown = {t.name: t for t in provider.shown if isinstance(t, FunctionTool)}
    assert shown["rent_car"].description == "Rent a car in a city for some days."
    assert shown["rent_car"].params_json_schema["required"] == ["city", "days"]
    assert shown["book_flight"].description == "Book a flight for a traveler on a day."
    assert result.turns[0] == (
        "Booked, but the deposit said: The tool call failed (RuntimeError): card declined for 300"
    )
    assert result.saga.status is SagaState.COMPENSATED
    assert [e.tool_name for e in result.saga.compensated] == ["deposit", "rent_car", "book_flight"]
    assert [(s.tool, s.status, s.output) for s in result.steps[:2]] == [
        ("book_flight", "executed", {"booking": f"flight-{handle.id}-1"}),
        ("rent_car", "executed", "car-Oslo-3-0"),
    ]
    assert RENTED == [] and await bookings.held() == []
    assert SMASHED == ["refund failed=True result=None"]
    rows = await journal.read(handle.id)
    assert [(r.tool_name, r.phase.value) for r in rows] == failed_trip(
        "book_flight", "rent_car", "deposit"
    )
    assert (await journal.verify(handle.id)).ok


def test_the_registry_checks_a_function_tool_against_its_own_schema() -> None:
    registered = ToolRegistry([book_car]).get("rent_car")
    assert registered.params_schema == rent_car.params_json_schema
    assert registered.tool.description == rent_car.description
    assert registered.compensation is return_car
    assert registered.bind({"city": "Oslo", "days": 2}) == {"city": "Oslo", "days": 2}
    with pytest.raises(ToolArgumentsInvalid, match=r"\(arguments\): 'days' is a required property"):
        registered.bind({"city": "Oslo"})
    with pytest.raises(ToolArgumentsInvalid, match="Additional properties are not allowed"):
        registered.bind({"city": "Oslo", "days": 1, "colour": "red"})


async def test_a_function_tool_called_directly_runs_its_function() -> None:
    before = len(RENTED)
    assert await book_car(city="Bern", days=1) == f"car-Bern-1-{before}"
    RENTED.pop()


def test_function_tool_declaration_mistakes_name_the_fix() -> None:
    @function_tool(needs_approval=True)
    def wire(amount: int) -> str:
        """Wire money."""
        return "sent"

    # the SDK's needs_approval=True is Sagacity's always-rule, whatever the reversibility
    assert saga_tool(wire, by=return_car).options.approval == ALWAYS
    assert saga_tool(wire, reversibility=Reversibility.IRREVERSIBLE).name == "wire"
    wire.needs_approval = lambda *_: True  # type: ignore[assignment, unused-ignore]
    with pytest.raises(ToolDeclarationError, match=r"'wire' needs approval by a function"):
        saga_tool(wire, by=return_car)

    bad = FunctionTool(
        name="bad",
        description="",
        params_json_schema={"type": "object", "properties": {"n": {"type": "number-ish"}}},
        on_invoke_tool=rent_car.on_invoke_tool,
        strict_json_schema=False,
    )
    with pytest.raises(ToolDeclarationError, match="'bad' has an invalid params_json_schema"):
        saga_tool(bad, by=return_car)
    with pytest.raises(ToolDeclarationError, match="not an Agents SDK FunctionTool"):
        saga_tool(return_car, by=return_car)  # type: ignore[arg-type]
