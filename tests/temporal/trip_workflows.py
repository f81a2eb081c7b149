"""Workflows for the typed-call tests: a trip booked with typed calls or with calls by name,
sandboxed (as users' workflows are by default) and not."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from sagacity.workflow import Saga, SagaResult
    from tests.temporal.trip_tools import (
        Bag,
        Flight,
        Impostor,
        Seat,
        Seats,
        add_miles,
        book_flight,
        check_bag,
    )


class Trip(BaseModel):
    traveler: str = "Ada"
    day: str = "2027-01-02"
    #: credit miles after the seat (a tool whose result does not match its annotation)
    miles: bool = False
    #: call the tools by name instead
    by_name: bool = False
    #: then check a bag in, its argument a model (and with kilos=None, no JSON at all)
    bag: int | None = None
    #: then name the seat tool of a class the worker does not serve
    impostor: bool = False


def _shape(flight: Any, seat: Any) -> dict[str, Any]:
    """What the workflow got back, as the test reads it from the saga's result."""
    return {
        "flight_type": type(flight).__name__,
        "seat_type": type(seat).__name__,
        "day_type": type(flight.day if isinstance(flight, Flight) else flight["day"]).__name__,
        "token": flight.token if isinstance(flight, Flight) else flight["token"],
        "seat": seat.seat if isinstance(seat, Seat) else seat["seat"],
    }


async def _typed(saga: Saga, trip: Trip) -> dict[str, Any]:
    # positionally, as mypy allows through the tool's ParamSpec; a method tool named from its
    # class, as workflow code (which has no instance) names it
    flight = await saga.call(book_flight, trip.traveler, day=trip.day)
    if trip.bag is not None:
        kilos: Any = trip.bag if trip.bag >= 0 else float("nan")
        await saga.call(check_bag, flight.flight_id, Bag(kilos=kilos, fragile=True))
    if trip.impostor:
        await saga.call(Impostor.pick_seat, flight.flight_id)
    if not trip.miles:
        return _shape(flight, await saga.call_last(Seats.pick_seat, flight.flight_id))
    seat = await saga.call(Seats.pick_seat, flight.flight_id)
    await saga.call_last(add_miles, flight.flight_id)
    return _shape(flight, seat)


async def _by_name(saga: Saga, trip: Trip) -> dict[str, Any]:
    flight = await saga.call("book_flight", traveler=trip.traveler, day=trip.day)
    seat = await saga.call_last("pick_seat", flight_id=flight["flight_id"])
    return _shape(flight, seat)


@workflow.defn(name="tests.Trip")
class TripWorkflow:
    """Sandboxed, as a user's workflow is unless its author says otherwise."""

    @workflow.init
    def __init__(self, trip: Trip) -> None:
        self.saga = Saga()

    @workflow.run
    async def run(self, trip: Trip) -> SagaResult:
        body = _by_name if trip.by_name else _typed
        return await self.saga.run(lambda: body(self.saga, trip))


@workflow.defn(name="tests.TripUnsandboxed", sandboxed=False)
class TripUnsandboxed(TripWorkflow):
    @workflow.run
    async def run(self, trip: Trip) -> SagaResult:
        return await super().run(trip)


WORKFLOWS = [TripWorkflow, TripUnsandboxed]
