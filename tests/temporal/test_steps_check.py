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


class Ticket(BaseModel):
    ticket_id: str
    labels: list[str]
    meta: dict[str, str]


@compensable(by=undo)
def make_ticket(title: str) -> Ticket:
    return Ticket(ticket_id=title, labels=[], meta={})


@compensable(by=undo)
def list_items(  # type: ignore[no-untyped-def]
    n: int,
    urgent: bool = False,
    filters: dict[str, str] | None = None,
    note: str = "",
    loose=None,
) -> dict[str, str]:
    return {}


@function_tool
def rent_car(city: str, days: int) -> str:
    """An Agents SDK tool: its arguments are checked against its own JSON schema."""
    return city


TOOLS = ToolRegistry(
    [
        book,
        quote,
        anything,
        pay,
        make_ticket,
        list_items,
        compensable_function_tool(rent_car, by=undo),
    ]
)


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


def wrong(ref: str, given: str, tool: str, wanted: str) -> str:
    return (
        f"$ref {ref!r} is {given}, but {tool!r} takes {wanted} there: reference a field of "
        "that type, or change the tool's annotation"
    )


def test_refs_are_typed_strictly_in_json_terms_not_by_what_pydantic_coerces() -> None:
    """pydantic would turn a ticket id "42" into n=42 when the call runs; a steps file that
    leans on that is refused before any step runs, like one whose id is "abc"."""
    assert problems(
        Step(tool="make_ticket", args={"title": "t"}),
        Step(tool="list_items", id="first", args={"n": {"$ref": "make_ticket.ticket_id"}}),
        Step(tool="list_items", id="urgent", args={"n": 1, "urgent": {"$ref": "first.x"}}),
        Step(tool="list_items", id="noted", args={"n": 1, "note": {"$ref": "make_ticket.meta"}}),
        Step(tool="list_items", id="f", args={"n": 1, "filters": {"$ref": "make_ticket.labels"}}),
        Step(tool="pay", args={"amount": {"$ref": "noted.anything"}}),
    ) == [
        "steps[1] ('first'): argument 'n': "
        + wrong("make_ticket.ticket_id", "string", "list_items", "integer"),
        # a field of a dict[str, str] result: any key may be there, and its value is a string
        "steps[2] ('urgent'): argument 'urgent': "
        + wrong("first.x", "string", "list_items", "boolean"),
        "steps[3] ('noted'): argument 'note': "
        + wrong("make_ticket.meta", "object", "list_items", "string"),
        "steps[4] ('f'): argument 'filters': "
        + wrong("make_ticket.labels", "array", "list_items", "null or object"),
        "steps[5] ('pay'): argument 'amount': "
        + wrong("noted.anything", "string", "pay", "number"),
    ]


def test_an_integer_feeds_a_number_and_open_types_feed_anything() -> None:
    assert (
        problems(
            Step(tool="book", args={"city": "Oslo"}),
            Step(tool="make_ticket", args={"title": "t"}),
            Step(tool="anything"),
            # integer into number
            Step(tool="pay", args={"amount": {"$ref": "book.nights"}}),
            # the whole dict[str, str] result into a dict[str, str] parameter
            Step(tool="list_items", args={"n": 1, "filters": {"$ref": "make_ticket.meta"}}),
            # an unannotated parameter takes anything; an Any result feeds anything
            Step(tool="list_items", id="loose", args={"n": 2, "loose": {"$ref": "book"}}),
            Step(tool="list_items", id="open", args={"n": {"$ref": "anything.count"}}),
        )
        == []
    )
