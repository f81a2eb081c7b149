"""The worker's Sagacity tools as Agents SDK function tools, built inside a workflow.

Each tool's ``on_invoke_tool`` parses the model's JSON arguments and calls
``await saga.call(name, **args)``: the call is the journaled ``sagacity.call_tool`` activity
(INTENT, then EXECUTED or FAILED), it is serialized with the saga's other calls (so a parallel
tool-call turn still journals gap-free), and an IRREVERSIBLE tool first goes through Sagacity's
durable approval gate.

Approval: the SDK's own ``needs_approval`` is left False. Sagacity's gate *is* the approval: it
is journaled (AWAITING_APPROVAL, APPROVED/REJECTED with the approver), checked against the input
hash the human saw, survives worker restarts as workflow state, and is decided by a signal or
update from any client. The SDK's mechanism would interrupt the run and need the run state
carried out of the workflow and back, a second gate beside the first. The tool description tells
the model which tools wait for a human.

Failures: like the SDK's ``function_tool`` default, a failed call (a tool error, a rejection,
arguments that do not fit) becomes a message to the model and the run carries on. The saga has
recorded the failure all the same (``saga.failures``), so the agent saga still compensates at the
end unless its policy lets the agent recover. An abort is not a message: it stops the run.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Sequence
from typing import Any, Literal

from agents import FunctionTool, RunContextWrapper
from agents.tool import ToolErrorFunction
from agents.tool_context import ToolContext
from pydantic import BaseModel

from sagacity.errors import (
    ApprovalRejected,
    PayloadTooLarge,
    SagaAborted,
    SagacityError,
    ToolArgumentsInvalid,
    ToolFailed,
    UnknownTool,
)
from sagacity.rules import describe
from sagacity.temporal.models import Rejection, ToolSpec, rejection_of
from sagacity.temporal.saga import Saga
from sagacity.tools import Reversibility

__all__ = [
    "AgentStep",
    "failure_message",
    "function_tool_for",
    "rejection_message",
    "saga_function_tools",
]

StepStatus = Literal["executed", "failed", "rejected", "invalid"]


class AgentStep(BaseModel):
    """One tool call the agent made, and what became of it."""

    tool: str
    arguments: dict[str, Any]
    status: StepStatus
    #: the tool's result when executed, else the error text the model was given
    output: Any = None
    #: journal seq of the row that opened the call (INTENT; AWAITING_APPROVAL or REJECTED when
    #: it never ran); None when it never reached the journal
    seq: int | None = None
    #: who rejected the call, why, and their message to the model (status ``rejected``)
    rejection: Rejection | None = None
    #: which turn of a multi-turn saga the call belongs to (0 for the first)
    turn: int = 0
    #: the arguments the model proposed, when an approver changed them (``arguments`` are the
    #: approved ones, which ran), and who did
    proposed: dict[str, Any] | None = None
    approved_by: str | None = None


def failure_message(_ctx: RunContextWrapper[Any], error: Exception) -> str:
    """What the model is told when a call fails (plain text, never JSON)."""
    if isinstance(error, ApprovalRejected):
        return rejection_message(error)
    if isinstance(error, ToolFailed):
        return f"The tool call failed ({error.error_type}): {error.error_message}"
    return f"The tool call failed: {error}"


def rejection_message(error: ApprovalRejected) -> str:
    """What the model is told of a rejected call: who rejected it, why, and the approver's
    message, so it can try another way."""
    if error.tool is None or error.by is None:
        return f"Not approved, the tool did not run: {error}"
    text = f"Not approved, the tool did not run. Rejected by {error.by}. Reason: {error.reason}"
    if error.message is not None:
        text += f"\nMessage from the approver: {error.message}"
    return text


def _status(error: SagacityError) -> StepStatus:
    if isinstance(error, ApprovalRejected):
        return "rejected"
    if isinstance(error, ToolFailed):
        return "failed"
    return "invalid"


def _strict_ok(schema: Any) -> bool:
    """True when OpenAI's strict mode can express ``schema`` without changing what it accepts.

    Strict mode needs a type on every property and closes every object, so an ``Any`` parameter
    or a free-form ``dict`` cannot be strict.
    """
    if not isinstance(schema, dict):
        return True
    if schema.get("type") == "object" and "properties" not in schema:
        return False
    for prop in schema.get("properties", {}).values():
        if not isinstance(prop, dict) or not (
            {"type", "anyOf", "$ref", "enum", "const"} & prop.keys()
        ):
            return False
    nested = [*schema.get("properties", {}).values(), *schema.get("$defs", {}).values()]
    nested += schema.get("anyOf", []) + ([schema["items"]] if "items" in schema else [])
    return all(_strict_ok(s) for s in nested)


def _description(spec: ToolSpec) -> str:
    if spec.reversibility is Reversibility.IRREVERSIBLE:
        return (
            f"{spec.description} (Irreversible: each call waits until a human approves it, "
            "and may be rejected.)"
        )
    if spec.approval is not None:
        # the model learns which calls wait, so it can tell its user (or keep under the rule)
        when = "Each call" if spec.approval.always else f"A call where {describe(spec.approval)}"
        return f"{spec.description} ({when} waits until a human approves it, and may be rejected.)"
    return spec.description


def _parse(name: str, raw: str) -> dict[str, Any]:
    try:
        args = json.loads(raw or "{}")
    except ValueError as exc:
        raise ToolArgumentsInvalid(f"arguments for tool {name!r} are not JSON: {exc}") from None
    if not isinstance(args, dict):
        raise ToolArgumentsInvalid(f"arguments for tool {name!r} must be a JSON object")
    return args


def function_tool_for(
    saga: Saga,
    spec: ToolSpec,
    *,
    on_step: Callable[[AgentStep], None] | None = None,
    on_failure: ToolErrorFunction | None = failure_message,
) -> FunctionTool:
    """One Sagacity tool as a function tool whose calls run through ``saga``.

    ``on_failure`` turns a failed call into the model's message (the SDK's convention); with
    None the failure is raised instead and ends the run.
    """

    def record(step: AgentStep) -> None:
        if on_step is not None:
            on_step(step)

    async def invoke(ctx: ToolContext[Any], raw: str) -> str:
        args: dict[str, Any] = {}
        try:
            args = _parse(spec.name, raw)
            # shielded: when a sibling call in the same turn stops the run, this call still
            # finishes and is journaled, so compensation knows about its effect
            result = await asyncio.shield(saga.call(spec.name, **args))
        except SagaAborted:
            raise
        except SagacityError as error:
            message = None
            if on_failure is not None:
                outcome = on_failure(ctx, error)
                message = await outcome if inspect.isawaitable(outcome) else outcome
            # arguments that are not JSON, or too large, never reach the journal: no row
            unparsed = isinstance(error, ToolArgumentsInvalid | PayloadTooLarge)
            seq = None if unparsed else saga.last_call_seq(spec.name)
            shown = saga.journaled(seq)
            record(
                AgentStep(
                    tool=spec.name,
                    arguments=shown.input if shown else args,
                    status=_status(error),
                    output=message or str(error),
                    seq=seq,
                    rejection=rejection_of(error),
                )
            )
            if message is None:
                raise
            return message
        # the step is shown as journaled, secrets redacted; the model is given the real result
        seq = saga.last_call_seq(spec.name)
        shown = saga.journaled(seq)
        change = saga.approved_change(seq)
        record(
            AgentStep(
                tool=spec.name,
                arguments=change.approved if change else shown.input if shown else args,
                status="executed",
                output=shown.result if shown else result,
                seq=seq,
                proposed=change.proposed if change else None,
                approved_by=change.approver if change else None,
            )
        )
        output = json.dumps(result, ensure_ascii=False)
        # the model must know the call it made is not the call that ran
        return f"{change.summary()}\nResult: {output}" if change else output

    return FunctionTool(
        name=spec.name,
        description=_description(spec),
        params_json_schema=spec.params_schema,
        on_invoke_tool=invoke,
        strict_json_schema=_strict_ok(spec.params_schema),
    )


async def saga_function_tools(
    saga: Saga,
    names: Sequence[str] | None = None,
    *,
    on_step: Callable[[AgentStep], None] | None = None,
    on_failure: ToolErrorFunction | None = failure_message,
) -> list[FunctionTool]:
    """Function tools for the worker's tools named in ``names`` (all of them when None)."""
    catalog = await saga.tools(described=True)
    chosen = list(catalog) if names is None else list(names)
    missing = [n for n in chosen if n not in catalog]
    if missing:
        known = ", ".join(sorted(catalog)) or "none"
        raise UnknownTool(f"no tool named {', '.join(map(repr, missing))} (known: {known})")
    return [
        function_tool_for(saga, catalog[n], on_step=on_step, on_failure=on_failure) for n in chosen
    ]
