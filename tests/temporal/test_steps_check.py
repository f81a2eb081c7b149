"""What the steps check knows of a tool's declared result: models, dataclasses, open types."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents import function_tool
from pydantic import BaseModel

from sagacity import CompensationContext, compensable
from sagacity.agents import compensable_function_tool
from sagacity.temporal.checks import check_steps
from sagacity.temporal.models import Step
from sagacity.tools import ToolRegistry


class Booking(BaseModel):
    ref: str
    nights: int
    guest: Guest | None = None


class Guest(BaseModel):
    name: str


Booking.model_rebuild()


@dataclass
class Quote:
    price: float
    currency: str


def undo(ctx: CompensationContext) -> None:
    pass


@compensable(by=undo)
def book(city: str) -> Booking:
    return Booking(ref=city, nights=1)


@compensable(by=undo)
def quote(nights: int) -> Quote:
    return Quote(price=1.0, currency="EUR")


@compensable(by=undo)
def anything() -> dict[str, Any]:
    return {}


@compensable(by=undo)
def pay(amount: float, note: str = "", tags: list[str] | None = None) -> None:
    pass


@function_tool
def rent_car(city: str, days: int) -> str:
    """An Agents SDK tool: its arguments are checked against its own JSON schema."""
    return city


TOOLS = ToolRegistry([book, quote, anything, pay, compensable_function_tool(rent_car, by=undo)])


def problems(*steps: Step) -> list[str]:
    return check_steps(list(steps), TOOLS)


def test_fields_of_models_and_dataclasses_are_followed_and_typed() -> None:
    assert (
        problems(
            Step(tool="book", args={"city": "Oslo"}),
            Step(tool="quote", args={"nights": {"$ref": "book.nights"}}),
            Step(
                tool="pay", args={"amount": {"$ref": "quote.price"}, "note": {"$ref": "book.ref"}}
            ),
            # through an Optional model field
            Step(tool="pay", id="again", args={"amount": 1, "note": {"$ref": "book.guest.name"}}),
        )
        == []
    )
    assert problems(
        Step(tool="book", args={"city": "Oslo"}),
        Step(tool="quote", args={"nights": {"$ref": "book.guest.age"}}),
        Step(tool="pay", args={"amount": 1, "note": {"$ref": "book.nights"}}),
    ) == [
        "steps[1] ('quote'): argument 'nights': $ref 'book.guest.age': book.guest is Guest, "
        "which has no field 'age' (fields: name)",
        "steps[2] ('pay'): argument 'note': $ref 'book.nights' is integer, but 'pay' takes "
        "string there: reference a field of that type, or change the tool's annotation",
    ]


def test_open_results_and_nested_refs_are_not_judged() -> None:
    assert (
        problems(
            Step(tool="anything"),
            Step(tool="pay", args={"amount": {"$ref": "anything.deep.path"}}),
            # a $ref inside a literal list: its place is checked, not its type
            Step(tool="pay", id="tagged", args={"amount": 2, "tags": [{"$ref": "anything.x"}]}),
        )
        == []
    )


def test_a_whole_result_of_the_wrong_kind_is_refused() -> None:
    assert problems(
        Step(tool="book", args={"city": "Oslo"}),
        Step(tool="pay", args={"amount": {"$ref": "book"}}),
    ) == [
        "steps[1] ('pay'): argument 'amount': $ref 'book' is object, but 'pay' takes number "
        "there: reference a field of that type, or change the tool's annotation"
    ]


def test_a_function_tool_is_checked_against_its_own_schema_strictly() -> None:
    assert (
        problems(
            Step(tool="book", args={"city": "Oslo"}),
            Step(
                tool="rent_car",
                args={"city": {"$ref": "book.ref"}, "days": {"$ref": "book.nights"}},
            ),
        )
        == []
    )
    assert problems(
        Step(tool="book", args={"city": "Oslo"}),
        Step(tool="rent_car", args={"city": "Oslo"}),
        # its schema takes no "7" for an integer, as pydantic would
        Step(tool="rent_car", id="again", args={"city": "Oslo", "days": {"$ref": "book.ref"}}),
    ) == [
        "steps[1] ('rent_car'): 'rent_car': (arguments): 'days' is a required property",
        "steps[2] ('again'): argument 'days': $ref 'book.ref' is string, but 'rent_car' takes "
        "integer there: reference a field of that type, or change the tool's annotation",
    ]
