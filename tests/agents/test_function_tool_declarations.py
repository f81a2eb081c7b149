"""A FunctionTool whose calls could not be checked is refused when it is made a saga tool, with
the fix named: a schema whose ``$ref`` points nowhere (a call would fail its check on every
attempt), one that does not describe an object, a name that is empty or not printable, and a
compensation that is not a function."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from agents import FunctionTool, function_tool
from pydantic import BaseModel

from sagacity import CompensationContext, ToolRegistry
from sagacity.agents import compensable_function_tool
from sagacity.errors import ToolDeclarationError


class Address(BaseModel):
    city: str
    street: str


@function_tool
def ship(to: Address, items: list[Address]) -> str:
    """Ship to an address (a model, so the schema refers to it under $defs)."""
    return to.city


def unship(ctx: CompensationContext) -> None:
    pass


def with_schema(schema: dict[str, Any]) -> FunctionTool:
    tool = copy.copy(ship)
    tool.params_json_schema = schema
    return tool


def test_refs_that_resolve_are_accepted() -> None:
    assert "$defs" in ship.params_json_schema  # the SDK's own schema refers to its model
    registered = ToolRegistry([compensable_function_tool(ship, by=unship)]).get("ship")
    to = {"city": "Oslo", "street": "Main"}
    assert registered.bind({"to": to, "items": [to]}) == {"to": to, "items": [to]}
    # a subschema with an $id of its own resolves its $refs against it
    nested = {
        "type": "object",
        "properties": {
            "x": {
                "$id": "https://example.com/x.json",
                "$defs": {"n": {"type": "integer"}},
                "$ref": "#/$defs/n",
            }
        },
    }
    loose = FunctionTool(
        name="loose",
        description="",
        params_json_schema=nested,
        on_invoke_tool=ship.on_invoke_tool,
        strict_json_schema=False,  # the SDK's strict form refuses a nested $id
    )
    assert compensable_function_tool(loose, by=unship).name == "loose"


@pytest.mark.parametrize(
    ("schema", "ref"),
    [
        ({"type": "object", "properties": {"x": {"$ref": "#/defs/missing"}}}, "#/defs/missing"),
        (
            {
                "type": "object",
                "properties": {"x": {"items": {"$ref": "#/$defs/Gone"}}},
                "$defs": {"Here": {"type": "string"}},
            },
            "#/$defs/Gone",
        ),
        # nothing is fetched: a remote schema is not there
        (
            {"type": "object", "properties": {"x": {"$ref": "https://example.com/s.json"}}},
            "https://example.com/s.json",
        ),
    ],
)
def test_a_ref_that_points_nowhere_is_refused(schema: dict[str, Any], ref: str) -> None:
    with pytest.raises(ToolDeclarationError) as refused:
        compensable_function_tool(with_schema(schema), by=unship)
    assert str(refused.value) == (
        f"FunctionTool 'ship' has a params_json_schema whose $ref {ref!r} points nowhere: "
        "define what it names in the schema itself (under $defs), or replace the $ref with "
        "the schema it stands for"
    )


def test_a_ref_inside_a_constant_is_data_not_a_reference() -> None:
    schema = {"type": "object", "properties": {"x": {"const": {"$ref": "#/nowhere"}}}}
    assert compensable_function_tool(with_schema(schema), by=unship).name == "ship"


@pytest.mark.parametrize(("schema", "kind"), [({"type": "array"}, "'array'"), ({}, "None")])
def test_a_schema_that_is_not_of_an_object_is_refused(schema: dict[str, Any], kind: str) -> None:
    with pytest.raises(ToolDeclarationError) as refused:
        compensable_function_tool(with_schema(schema), by=unship)
    assert str(refused.value) == (
        f"FunctionTool 'ship' has a params_json_schema of type {kind}: a tool's arguments are "
        'a JSON object, so its schema needs "type": "object"'
    )


@pytest.mark.parametrize("name", ["", "  ", "ship\n", "sh\x00ip"])
def test_an_empty_or_unprintable_name_is_refused(name: str) -> None:
    with pytest.raises(ToolDeclarationError, match="needs a name of printable text"):
        compensable_function_tool(ship, by=unship, name=name)
    unnamed = copy.copy(ship)
    unnamed.name = name
    with pytest.raises(ToolDeclarationError, match="pass name="):
        compensable_function_tool(unnamed, by=unship)
    assert compensable_function_tool(unnamed, by=unship, name="ship_it").name == "ship_it"


def test_a_compensation_that_is_not_callable_is_refused() -> None:
    with pytest.raises(ToolDeclarationError) as refused:
        compensable_function_tool(ship, by="unship")  # type: ignore[arg-type]
    assert str(refused.value) == (
        "FunctionTool 'ship': by='unship' is not callable: pass the compensation function "
        "itself, def undo(ctx: CompensationContext) -> None"
    )
