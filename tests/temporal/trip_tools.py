"""Typed tools for the typed-call tests: results are a pydantic model and a dataclass."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from pydantic import BaseModel

from sagacity import CompensableTool, CompensationContext, compensable, tools_of

#: the flight's boarding token: the workflow gets it, the journal redacts it (field ``token``)
BOARDING_TOKEN = "tok-board-91c2"
#: what the tools and their undos did, in order
EFFECTS: list[str] = []


class Flight(BaseModel):
    flight_id: str
    traveler: str
    day: date
    token: str


@dataclass
class Seat:
    flight_id: str
    seat: str


@compensable(by="cancel_flight")
async def book_flight(traveler: str, day: str) -> Flight:
    """Book a flight (async, returns a pydantic model)."""
    EFFECTS.append(f"booked {traveler}")
    return Flight(
        flight_id=f"FL-{traveler}-{day}",
        traveler=traveler,
        day=date.fromisoformat(day),
        token=BOARDING_TOKEN,
    )


def cancel_flight(ctx: CompensationContext) -> None:
    EFFECTS.append(f"cancelled {ctx.result['flight_id']}")


class Seats:
    """Seats as a component: its tool is a method, its dependency (the cabin) injected."""

    def __init__(self, cabin: str) -> None:
        self.cabin = cabin

    @compensable(by="free_seat")
    def pick_seat(self, flight_id: str, row: int = 12) -> Seat:
        """Pick a seat (sync, a method, returns a dataclass)."""
        EFFECTS.append(f"seat on {flight_id}")
        return Seat(flight_id=flight_id, seat=f"{row}{self.cabin}")

    def free_seat(self, ctx: CompensationContext) -> None:
        EFFECTS.append(f"freed {ctx.result['seat']}")


@compensable(by="forget_miles")
def add_miles(flight_id: str) -> int:
    """Credit miles; declared to return an int, but hands back text."""
    EFFECTS.append(f"miles for {flight_id}")
    return "lots"  # type: ignore[return-value]


def forget_miles(ctx: CompensationContext) -> None:
    EFFECTS.append(f"forgot miles {ctx.result}")


class Bag(BaseModel):
    kilos: float
    fragile: bool = False


@compensable(by="unpack")
def check_bag(flight_id: str, bag: Bag) -> str:
    """Check a bag in (its argument a pydantic model)."""
    EFFECTS.append(f"bag of {bag.kilos} kg on {flight_id}")
    return f"bag-{bag.kilos}"


def unpack(ctx: CompensationContext) -> None:
    EFFECTS.append(f"unpacked {ctx.result}")


class Impostor:
    """A class the worker does not serve, with a tool of the same name as a served one."""

    @compensable(by="free_seat")
    def pick_seat(self, flight_id: str, row: int = 12) -> Seat:
        EFFECTS.append("the impostor ran")
        return Seat(flight_id=flight_id, seat="0Z")

    def free_seat(self, ctx: CompensationContext) -> None: ...


TOOLS: list[CompensableTool[..., object]] = [
    book_flight,
    *tools_of(Seats("A")),
    add_miles,
    check_bag,
]
