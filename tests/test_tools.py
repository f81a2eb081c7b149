"""Tool declarations: mistakes fail at worker start with the tool's name and the fix."""

from __future__ import annotations

import types
from typing import Any

import pytest

from sagacity import (
    CompensationContext,
    PermanentCompensationError,
    ProbeContext,
    Reversibility,
    ToolRegistry,
    compensable,
    tools_of,
)
from sagacity.errors import (
    ContextKeyMissing,
    ToolArgumentsInvalid,
    ToolDeclarationError,
    UnknownTool,
)
from sagacity.temporal.plugin import SagacityPlugin
from sagacity.tools import app_tools


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

    @compensable(by=release)  # type: ignore[arg-type]  # mypy refuses it too; untyped code
    def hold(x: int) -> None: ...

    with pytest.raises(
        ToolDeclarationError, match=r"compensation 'release' of tool 'hold' cannot take the context"
    ):
        ToolRegistry([hold])


def test_a_compensation_declared_with_the_tool_s_arguments_is_refused_at_registration() -> None:
    # the mistake a new user makes: the undo takes the tool's argument, not the context
    async def delete_bucket(bucket_id: str) -> None: ...

    @compensable(by=delete_bucket)  # type: ignore[arg-type]  # as mypy says; untyped code
    async def create_bucket(bucket_id: str) -> str:
        return bucket_id

    with pytest.raises(
        ToolDeclarationError,
        match=r"compensation 'delete_bucket' of tool 'create_bucket' takes bucket_id: str, but "
        r"is called with a CompensationContext .*ctx.input and ctx.result.*: "
        r"declare it as def delete_bucket\(ctx: CompensationContext\) -> None",
    ):
        ToolRegistry([create_bucket])

    def relaxed(ctx: Any, attempt: int = 1) -> None: ...

    @compensable(by=relaxed)
    def open_gate(gate: str) -> None: ...

    assert ToolRegistry([open_gate]).get("open_gate").compensation is relaxed


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
        return bool(ctx.input["door"] == "front")

    registered = ToolRegistry([open_door]).get("open_door")
    assert (
        registered.probe is door_open and ToolRegistry([book_room]).get("book_room").probe is None
    )

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def ring_bell(bell: str) -> None: ...

    @ring_bell.probe  # type: ignore[type-var]  # mypy refuses it too; untyped code
    def heard(a: int, b: int) -> bool: ...  # type: ignore[empty-body]

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


class Rooms:
    """Tools as methods of an instance holding what they need (here a plain dict)."""

    def __init__(self, booked: dict[str, int]) -> None:
        self.booked = booked

    @compensable(by="release")
    async def hold(self, room: str, nights: int = 1) -> str:
        """Hold a room."""
        self.booked[room] = nights
        return room

    async def release(self, ctx: CompensationContext) -> None:
        self.booked.pop(ctx.input["room"], None)

    @compensable
    def paint(self, room: str) -> None: ...

    @paint.compensation
    def unpaint(self, ctx: CompensationContext) -> None: ...

    @paint.probe
    def painted(self, ctx: ProbeContext) -> bool:
        return ctx.input["room"] in self.booked


async def test_methods_of_an_instance_are_tools_bound_to_it() -> None:
    first, second = Rooms({}), Rooms({})
    registry = ToolRegistry(tools_of(first))
    hold = registry.get("hold")
    # the argument model and schema have no self; the name is the method's
    assert hold.params_schema["required"] == ["room"] and "self" not in hold.params_schema
    assert hold.tool.description == "Hold a room." and hold.tool.is_async
    assert await hold.tool.fn(**hold.bind({"room": "r1", "nights": "2"})) == "r1"
    assert first.booked == {"r1": 2} and second.booked == {}
    # the compensation named by=, the decorated one and the probe are the same instance's
    assert hold.compensation == first.release
    assert registry.get("paint").compensation == first.unpaint
    assert registry.get("paint").probe == first.painted
    # the class attribute is the declaration: the plain function, self first
    assert await Rooms.hold(second, "r2") == "r2" and second.booked == {"r2": 1}
    assert first.hold.name == "hold" and first.hold is not second.hold
    # read from the instance it is the bound tool, typed without self
    assert await first.hold("r3", nights=4) == "r3" and first.booked["r3"] == 4


def test_a_subclass_override_of_the_compensation_is_the_one_bound() -> None:
    class QuietRooms(Rooms):
        async def release(self, ctx: CompensationContext) -> None: ...

    quiet = QuietRooms({})
    assert ToolRegistry(tools_of(quiet)).get("hold").compensation == quiet.release


def test_method_tools_without_an_instance_name_the_fix() -> None:
    with pytest.raises(
        ToolDeclarationError,
        match=r"'hold' is a method of Rooms, registered without an instance: "
        r"register tools_of\(Rooms\(...\)\)",
    ):
        ToolRegistry([Rooms.hold])
    with pytest.raises(ToolDeclarationError, match=r"Rooms is a class: .*tools_of\(Rooms\(...\)\)"):
        ToolRegistry([Rooms])  # type: ignore[list-item]
    with pytest.raises(ToolDeclarationError, match=r"holds some: register tools_of\(it\)"):
        ToolRegistry([Rooms({})])  # type: ignore[list-item]
    with pytest.raises(ToolDeclarationError, match=r"got the class: pass an instance"):
        tools_of(Rooms)
    with pytest.raises(ToolDeclarationError, match="Rooms declares no tools"):
        tools_of(Rooms.__new__(type("Rooms", (), {})))


def test_method_compensations_missing_or_without_self_name_the_fix() -> None:
    class Flights:
        @compensable(by="cancel")
        def book(self, day: str) -> None: ...

    with pytest.raises(
        ToolDeclarationError,
        match=r"names compensation 'cancel', but class .*Flights has no such method: "
        r"define def cancel\(self, ctx: CompensationContext\)",
    ):
        ToolRegistry(tools_of(Flights()))

    class Cars:
        @compensable
        def rent(self, city: str) -> None: ...

        @rent.compensation  # type: ignore[type-var]
        def unrent() -> None: ...  # type: ignore[misc]  # forgot self and ctx

    with pytest.raises(
        ToolDeclarationError,
        match=r"compensation 'unrent' of tool 'rent' cannot take the context: "
        r"declare it as def unrent\(self, ctx: CompensationContext\)",
    ):
        ToolRegistry(tools_of(Cars()))


def test_a_module_tool_stored_on_a_class_stays_unbound() -> None:
    class Holder:
        room = book_room

    # typed as bound through an instance, as a tool defined in a class is; at run time a
    # module's tool stays unbound
    assert Holder().room is book_room  # type: ignore[comparison-overlap]

    class Helpers:
        @compensable(by=undo)
        @staticmethod
        def stamp(page: str) -> str:
            return page

    # a static method tool is typed as bound through an instance too
    stamp: Any = Helpers().stamp
    assert stamp("p1") == "p1"
    assert stamp is Helpers.stamp
    assert ToolRegistry([Holder().room]).get("book_room").compensation is undo


def test_app_tools_reads_a_list_or_a_function_of_what_the_lifespan_opened() -> None:
    listed = types.ModuleType("listed_app")
    listed.TOOLS = [book_room]  # type: ignore[attr-defined]
    assert app_tools(listed) == [book_room]
    built = types.ModuleType("built_app")
    built.TOOLS = tools_of  # type: ignore[attr-defined]
    rooms = Rooms({})
    assert [t.name for t in app_tools(built, rooms)] == ["hold", "paint"]
    assert app_tools(types.ModuleType("no_tools")) == []

    async def later(opened: object) -> list[object]:
        return []

    broken = types.ModuleType("broken_app")
    broken.TOOLS = later  # type: ignore[attr-defined]
    with pytest.raises(ToolDeclarationError, match=r"broken_app\.TOOLS is an async function"):
        app_tools(broken, rooms)
    broken.TOOLS = book_room  # type: ignore[attr-defined]
    with pytest.raises(ToolDeclarationError, match="make it a list of tools"):
        app_tools(broken)


def test_a_key_missing_from_a_compensation_s_context_is_a_permanent_key_error() -> None:
    ctx = CompensationContext(
        saga_id="s-1",
        seq=3,
        tool_name="book_room",
        input={"room": "r1"},
        result={"booking": {"id": "b-1", "nights": [{"night": 1}]}},
    )
    assert ctx.result["booking"]["nights"][0]["night"] == 1  # the data as journaled
    assert ctx.result == {"booking": {"id": "b-1", "nights": [{"night": 1}]}}
    assert ctx.input.get("guest", "nobody") == "nobody"
    with pytest.raises(ContextKeyMissing) as missing:
        ctx.result["booking"]["nights"][0]["guest"]
    assert isinstance(missing.value, KeyError)
    assert isinstance(missing.value, PermanentCompensationError)
    assert missing.value.args == ("guest",)
    assert str(missing.value) == "'guest' is not in the call's result"
    with pytest.raises(KeyError, match="is not in the call's input"):
        ctx.input["guest"]
