"""The worker's tools as a saga meets them: the catalog, the steps check, a call's binding."""

from __future__ import annotations

import logging
from collections.abc import Collection
from datetime import timedelta
from typing import Any

from temporalio import activity

from sagacity.errors import ToolArgumentsInvalid
from sagacity.temporal.activities.state import ActivityState
from sagacity.temporal.checks import check_steps
from sagacity.temporal.models import Step, StepsCheck, StepsChecked, ToolSpec
from sagacity.temporal.names import DESCRIBE_TOOLS, VALIDATE_STEPS
from sagacity.tools import RegisteredTool, ToolRegistry

__all__ = ["ToolActivities", "bound", "catalog", "steps_problems"]

_log = logging.getLogger(__name__)

#: how much of an unexpected fault's text a refused call's error keeps
_FAULT_CHARS = 300


class ToolActivities:
    """The activities that describe the worker's tools and check steps against them."""

    def __init__(self, state: ActivityState) -> None:
        self.state = state

    @activity.defn(name=DESCRIBE_TOOLS)
    async def describe_tools(self) -> list[ToolSpec]:
        """The tool catalog, described (sagas started before ``open_saga`` existed open with it;
        an agent asks for it to tell the model what each tool does)."""
        return catalog(self.state.tools)

    @activity.defn(name=VALIDATE_STEPS)
    async def validate_steps(self, req: StepsCheck) -> StepsChecked:
        """Check a declarative saga's steps against this worker's tools: every problem, before
        any step runs (the journal is not touched). Sagas started before ``open_saga`` checked
        the steps itself run it."""
        return StepsChecked(problems=steps_problems(self.state, req.steps))


def steps_problems(state: ActivityState, steps: list[Step]) -> list[str]:
    """What is wrong with a declarative saga's ``steps`` on this worker (empty: they can run)."""
    try:
        return check_steps(steps, state.tools)
    except Exception:
        # a fault in the check must not hold every saga: the steps run, checked as they go
        _log.exception("the steps check failed; the saga's steps run unchecked")
        return []


def catalog(
    tools: ToolRegistry, *, brief: bool = False, only: Collection[str] | None = None
) -> list[ToolSpec]:
    """Every tool's spec (``only``: of the tools named there); ``brief``: without descriptions
    and schemas, which only an agent needs (every saga's history keeps the catalog it opened
    with)."""
    return [
        ToolSpec(
            name=t.name,
            description="" if brief else t.tool.description,
            reversibility=t.tool.reversibility,
            idempotent=t.tool.options.idempotent,
            has_compensation=t.compensation is not None,
            params_schema={} if brief else t.params_schema,
            timeout_s=t.tool.options.timeout.total_seconds(),
            heartbeat_timeout_s=t.tool.options.heartbeat_timeout.total_seconds(),
            origin=t.tool.origin,
            approval=t.tool.options.approval,
            approval_sla_s=_seconds(t.tool.options.approval_sla),
            approval_policy=t.tool.options.approval_policy,
        )
        for t in tools
        if only is None or t.name in only
    ]


def _seconds(span: timedelta | None) -> float | None:
    return None if span is None else span.total_seconds()


def bound(
    state: ActivityState, tool_name: str, args: dict[str, Any]
) -> tuple[RegisteredTool, dict[str, Any]]:
    """The tool and the keyword arguments to call it with. Any fault in checking them (a
    tool's schema whose ``$ref`` points nowhere, say) refuses the call as
    :class:`ToolArgumentsInvalid`, which is never retried: a retry would meet the same
    fault, and the saga would wait on the call forever instead of compensating."""
    tool = state.tools.get(tool_name)
    try:
        return tool, tool.bind(args)
    except ToolArgumentsInvalid:
        raise
    except Exception as exc:
        _log.error("checking the arguments of tool %r failed", tool_name, exc_info=exc)
        # the fault's own text may quote a whole schema: kept short, and its chain dropped,
        # so the failure fits in the workflow's history
        kind = type(exc).__name__
        # a private wrapper (jsonschema's) names the error it wraps in its own text
        text = str(exc) if kind.startswith("_") else f"{kind}: {exc}"
        fault = state.redactor.scrub(tool_name, text)
        if len(fault) > _FAULT_CHARS:
            fault = fault[:_FAULT_CHARS] + "…"
        raise ToolArgumentsInvalid(
            f"arguments for tool {tool_name!r} could not be checked ({fault}): "
            "fix the tool's declaration"
        ) from None
