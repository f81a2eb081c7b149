"""A typed tool call as the named JSON call the journal records, and its result typed again."""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Awaitable, Coroutine
from dataclasses import dataclass
from typing import Any, ParamSpec, Protocol, TypeVar, get_args, get_origin

from pydantic import TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError, to_jsonable_python

from sagacity.errors import ToolArgumentsInvalid, ToolFailed
from sagacity.temporal.saga.signals import problems
from sagacity.tools import CompensableTool, MethodTool

P = ParamSpec("P")
T_co = TypeVar("T_co", covariant=True)


class TypedTool(Protocol[P, T_co]):
    """A declared tool as a saga's typed call sees it: its parameters (without ``self`` for a
    tool method named from its class) and its result once awaited (``typed_call`` exists for
    type checkers only: see ``CompensableTool``)."""

    def typed_call(self, *args: P.args, **kwargs: P.kwargs) -> T_co: ...


class ToolName(Protocol[P]):
    """A tool named by string, as a saga's typed call sees it: ``str.format`` takes any
    arguments, so a str binds the call's parameters to any. (A ParamSpec default would say the
    same, but pyright leaves one unbound in a union: microsoft/pyright#11152.)"""

    def format(self, *args: P.args, **kwargs: P.kwargs) -> str: ...


@dataclass(frozen=True, slots=True)
class _ToolTyping:
    """How a typed call binds a tool's positional arguments and converts its result."""

    signature: inspect.Signature
    #: None when the tool's return annotation is missing or Any: the JSON data as it came
    result: TypeAdapter[Any] | None


# one per tool object: TypeAdapters are costly to build. Weak, so a tools module a sandboxed
# workflow imports afresh in each run does not keep every run's tools alive.
_TYPINGS: weakref.WeakKeyDictionary[CompensableTool[..., Any], _ToolTyping] = (
    weakref.WeakKeyDictionary()
)


def _typing(tool: CompensableTool[..., Any]) -> _ToolTyping:
    cached = _TYPINGS.get(tool)
    if cached is None:
        signature = inspect.signature(tool.fn, eval_str=True)
        if isinstance(tool, MethodTool):
            # named from its class: the worker's tool is bound to the app's instance
            signature = signature.replace(parameters=list(signature.parameters.values())[1:])
        returns = signature.return_annotation
        if get_origin(returns) in (Awaitable, Coroutine):
            # a sync function handing back an awaitable: the activity awaits it
            returns = get_args(returns)[-1]
        adapter = None if returns in (signature.empty, Any) else TypeAdapter(returns)
        cached = _TYPINGS[tool] = _ToolTyping(signature, adapter)
    return cached


def named_call(
    tool: str | CompensableTool[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """The tool's name and its arguments by name, as JSON data: what the journal records and
    the worker binds either way. :class:`ToolArgumentsInvalid` (the saga compensates) for what
    no call can take, rather than a workflow task that fails until someone terminates it."""
    if isinstance(tool, str):
        if args:
            raise ToolArgumentsInvalid(
                f"tool {tool!r} is named by string: pass its arguments by keyword, or pass "
                "the tool itself"
            )
        return tool, json_arguments(tool, kwargs)
    if not isinstance(tool, CompensableTool):
        raise ToolArgumentsInvalid(
            f"saga.call takes a declared tool (@compensable) or a tool's name, not {tool!r}"
        )
    # before the call runs: a return type pydantic cannot convert fails the workflow task
    # (which waits for a fixed worker) while the call has had no effect yet
    typing = _typing(tool)
    if not args:
        return tool.name, json_arguments(tool.name, kwargs)
    try:
        bound = typing.signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise ToolArgumentsInvalid(
            f"arguments for tool {tool.name!r} do not match its signature: {exc}"
        ) from None
    return tool.name, json_arguments(tool.name, dict(bound.arguments))


def origin(tool: str | CompensableTool[..., Any]) -> str | None:
    """Which function a typed call names (None for a tool named by string)."""
    return None if isinstance(tool, str) else tool.origin


def json_arguments(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """``args`` as JSON data: a pydantic model, a dataclass or a date given to a typed tool
    becomes the JSON the worker validates back into it (plain JSON data is left as it is)."""
    try:
        data: dict[str, Any] = to_jsonable_python(args)
    except PydanticSerializationError as exc:
        raise ToolArgumentsInvalid(
            f"arguments for tool {name!r} cannot be journaled as JSON: {exc}"
        ) from None
    return data


def typed_result(tool: str | CompensableTool[..., Any], result: Any) -> Any:
    """A typed call's JSON result as the tool's annotated return type (a model, a dataclass…)."""
    if isinstance(tool, str):
        return result
    adapter = _typing(tool).result
    if adapter is None:
        return result
    try:
        return adapter.validate_python(result)
    except ValidationError as exc:
        # the call took effect (it is compensated); its result, as the worker gave it back or
        # a human resolved it, is not what the workflow was promised
        raise ToolFailed(
            tool.name, "ResultInvalid", f"result does not match its return type: {problems(exc)}"
        ) from None
