"""Tool declarations: mistakes fail at worker start with the tool's name and the fix."""

from __future__ import annotations

import pytest

from sagacity import (
    CompensationContext,
    ProbeContext,
    Reversibility,
    ToolRegistry,
    compensable,
)
from sagacity.errors import ToolArgumentsInvalid, ToolDeclarationError, UnknownTool
from sagacity.temporal.plugin import SagacityPlugin


def undo(ctx: CompensationContext) -> None:
    """A compensation that takes the context."""


@compensable(by=undo)
def book_room(room: str, nights: int = 1) -> str:
    return room


def test_decorated_tool_keeps_its_signature_and_still_runs() -> None:
    assert book_room("r1", nights=2) == "r1"
    assert book_room.name == "book_room"
    assert book_room.reversibility is Reversibility.REVERSIBLE
    registered = ToolRegistry([book_room]).get("book_room")
    assert registered.compensation is undo
    assert registered.params_schema["required"] == ["room"]
    assert registered.bind({"room": "r2", "nights": "3"}) == {"room": "r2", "nights": 3}


def test_reversible_without_compensation_names_tool_and_fix() -> None:
    @compensable
    def charge_card(amount: int) -> None: ...

    with pytest.raises(
        ToolDeclarationError,
        match=r"'charge_card' is REVERSIBLE but declares no compensation: add by=",
    ):
        SagacityPlugin(tools=[charge_card])


def test_compensatable_without_compensation() -> None:
    @compensable(reversibility=Reversibility.COMPENSATABLE)
    def send_invoice(to: str) -> None: ...

    with pytest.raises(ToolDeclarationError, match="COMPENSATABLE but declares no compensation"):
        ToolRegistry([send_invoice])


def test_compensation_named_but_missing() -> None:
    @compensable(by="refund_nowhere")
    def take_payment(amount: int) -> None: ...

    with pytest.raises(
        ToolDeclarationError, match=r"names compensation 'refund_nowhere'.*no such function"
    ):
        ToolRegistry([take_payment])


def test_compensation_that_cannot_take_the_context() -> None:
    def release(a: int, b: int) -> None: ...

    @compensable(by=release)
    def hold(x: int) -> None: ...

    with pytest.raises(
        ToolDeclarationError, match=r"compensation 'release' of tool 'hold' cannot take the context"
    ):
        ToolRegistry([hold])


def test_duplicate_tool_names() -> None:
    @compensable(by=undo, name="book_room")
    def other(room: str) -> str:
        return room

    with pytest.raises(ToolDeclarationError, match=r"two tools are named 'book_room'.*pass name="):
        ToolRegistry([book_room, other])


def test_irreversible_with_compensation_is_a_contradiction() -> None:
    @compensable(by=undo, reversibility=Reversibility.IRREVERSIBLE)
    def wire_money(amount: int) -> None: ...

    with pytest.raises(ToolDeclarationError, match="IRREVERSIBLE but declares a compensation"):
        ToolRegistry([wire_money])


def test_decorator_form_attaches_the_compensation() -> None:
    @compensable
    def lock_door(door: str) -> None: ...

    @lock_door.compensation
    def unlock_door(ctx: CompensationContext) -> None: ...

    assert ToolRegistry([lock_door]).get("lock_door").compensation is unlock_door


def test_a_probe_is_declared_like_a_compensation_and_checked_the_same_way() -> None:
    @compensable
    def open_door(door: str) -> None: ...

    @open_door.compensation
    def close_door(ctx: CompensationContext) -> None: ...

    @open_door.probe
    def door_open(ctx: ProbeContext) -> bool:
        return ctx.input["door"] == "front"

    registered = ToolRegistry([open_door]).get("open_door")
    assert (
        registered.probe is door_open and ToolRegistry([book_room]).get("book_room").probe is None
    )

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def ring_bell(bell: str) -> None: ...

    @ring_bell.probe
    def heard(a: int, b: int) -> bool: ...

    with pytest.raises(
        ToolDeclarationError,
        match=r"probe 'heard' of tool 'ring_bell' cannot take the context: "
        r"declare it as def heard\(ctx: ProbeContext\) -> bool",
    ):
        ToolRegistry([ring_bell])


def test_plain_function_is_refused() -> None:
    def not_a_tool() -> None: ...

    with pytest.raises(ToolDeclarationError, match="decorate it with @compensable"):
        ToolRegistry([not_a_tool])  # type: ignore[list-item]


def test_unknown_tool_and_bad_arguments_are_typed() -> None:
    registry = ToolRegistry([book_room])
    with pytest.raises(UnknownTool, match="known: book_room"):
        registry.get("book_flight")
    with pytest.raises(ToolArgumentsInvalid, match="room: Field required"):
        registry.get("book_room").bind({"nights": 1})
    with pytest.raises(ToolArgumentsInvalid, match="colour"):
        registry.get("book_room").bind({"room": "r", "colour": "red"})
