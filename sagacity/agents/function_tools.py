"""An existing Agents SDK ``FunctionTool`` made a saga tool, with a declared undo.

``compensable_function_tool(book_car, by=cancel_car)`` gives a :class:`~sagacity.CompensableTool`
that the registry, the agent's tool catalog and the journal treat like any other: its arguments
are checked against the FunctionTool's ``params_json_schema`` before the call (so a bad call
never reaches it), and a call runs its ``on_invoke_tool`` with a :class:`ToolContext` of its own
(the saga call's id; no run context, since the call runs in a worker's activity, not in the
agent's run). What it returns (a string, usually) is the call's result, journaled as it is.

A failure is the saga's to handle: the FunctionTool's own failure handler, which would turn an
exception into a message for the model (and so a "successful" call), is switched off for the
saga's copy. The SDK's run-time extras (guardrails, ``is_enabled``) belong to an agent run and do
not apply here. Its ``needs_approval=True`` becomes Sagacity's approval gate on every call; a
function there cannot be replayed, so it is refused in favour of an :class:`~sagacity.ApprovalRule`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Awaitable
from datetime import timedelta
from typing import Any

from agents import FunctionTool
from agents.tool import set_function_tool_failure_error_function
from agents.tool_context import ToolContext
from pydantic import BaseModel

from sagacity.approval_policy import ApprovalPolicy
from sagacity.call_context import current_call
from sagacity.errors import ToolDeclarationError
from sagacity.rules import ApprovalRule
from sagacity.tools import (
    CompensableTool,
    Compensation,
    JsonArguments,
    Reversibility,
    compensable,
)

__all__ = ["compensable_function_tool"]


def compensable_function_tool(
    tool: FunctionTool,
    *,
    by: Compensation | None = None,
    reversibility: Reversibility | None = None,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
    timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None,
    no_effect_on: tuple[type[BaseException], ...] = (),
    needs_approval: bool | ApprovalRule = False,
    approval_sla: timedelta | None = None,
    approval_policy: ApprovalPolicy | None = None,
) -> CompensableTool[..., Awaitable[Any]]:
    """``tool`` as a saga tool: ``book_car = compensable_function_tool(book_car_tool, by=cancel_car)``.

    The keywords are :func:`~sagacity.compensable`'s (``by`` is a function taking a
    :class:`~sagacity.CompensationContext`; reversibility defaults to REVERSIBLE); name and
    description default to the FunctionTool's, the timeout to its ``timeout_seconds``. Raises
    :class:`~sagacity.errors.ToolDeclarationError` for a tool that is not a FunctionTool, a name
    that is empty or not printable, a ``by`` that is not callable, a parameters schema that is
    invalid, does not describe an object or has a ``$ref`` that resolves to nothing, or a
    FunctionTool whose SDK ``needs_approval`` is a function (pass an
    :class:`~sagacity.ApprovalRule` as ``needs_approval``; the SDK's True is an always-rule).
    """
    if not isinstance(tool, FunctionTool):
        raise ToolDeclarationError(
            f"{tool!r} is not an Agents SDK FunctionTool: for a plain function use @compensable"
        )
    tool_name = tool.name if name is None else name
    _check_name(tool_name)
    if not isinstance(tool.needs_approval, bool) and needs_approval is False:
        raise ToolDeclarationError(
            f"FunctionTool {tool_name!r} needs approval by a function, which a saga cannot "
            "judge the same way on replay: pass needs_approval=ApprovalRule(...) (e.g. "
            'ApprovalRule(name="large", field="amount", op=">", value=1000)), or True'
        )
    # the SDK's True is Sagacity's always-rule; a rule given here wins over the SDK's function
    needs_approval = needs_approval or tool.needs_approval is True
    if by is not None and not callable(by):
        raise ToolDeclarationError(
            f"FunctionTool {tool_name!r}: by={by!r} is not callable: pass the compensation "
            "function itself, def undo(ctx: CompensationContext) -> None"
        )
    json_arguments = JsonArguments.of(
        tool.params_json_schema,
        owner=f"FunctionTool {tool_name!r}",
        field="params_json_schema",
    )

    # the saga's own copy raises what the tool raises, instead of answering with an error text
    runs = set_function_tool_failure_error_function(copy.copy(tool), None)

    async def invoke(**arguments: Any) -> Any:
        raw = json.dumps(arguments, ensure_ascii=False)
        context: ToolContext[Any] = ToolContext(
            context=None, tool_name=runs.name, tool_call_id=_call_id(), tool_arguments=raw
        )
        return _plain(await runs.on_invoke_tool(context, raw))

    invoke.__name__ = invoke.__qualname__ = tool_name
    declare = compensable(
        by=by,
        reversibility=reversibility,
        name=tool_name,
        description=description or tool.description or None,
        idempotent=idempotent,
        timeout=timeout
        or (timedelta(seconds=tool.timeout_seconds) if tool.timeout_seconds else None),
        heartbeat_timeout=heartbeat_timeout,
        no_effect_on=no_effect_on,
        needs_approval=needs_approval,
        approval_sla=approval_sla,
        approval_policy=approval_policy,
    )
    saga_tool: CompensableTool[..., Awaitable[Any]] = declare(invoke)
    saga_tool.json_arguments = json_arguments
    return saga_tool


def _check_name(name: str) -> None:
    if not name.strip() or not name.isprintable():
        raise ToolDeclarationError(
            f"a FunctionTool made a saga tool needs a name of printable text, not {name!r}: "
            "pass name=..."
        )


def _call_id() -> str:
    """The id the SDK's tool context carries: the saga call's, stable across its retries."""
    try:
        call = current_call()
    except LookupError:  # called directly, outside a saga
        return "sagacity-direct"
    return f"sagacity-{call.saga_id}-{call.seq}"


def _plain(output: Any) -> Any:
    """The SDK's structured outputs (``ToolOutputText`` and the like) as JSON data; the rest as
    it is."""
    if isinstance(output, BaseModel):
        return output.model_dump(mode="json")
    if isinstance(output, list):
        return [_plain(item) for item in output]
    return output
