"""The work both sides of ``bench.saga_overhead`` run: three trivial steps, the last may fail.

Sagacity runs :func:`work` as three ``@compensable`` tools through the generic ``sagacity.Steps``
workflow; the baseline runs the same function as three plain activities in
:class:`bench.plain_workflow.PlainThreeSteps`, with :func:`undo_plain` as their undo.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from bench.plain_workflow import STEPS, step_activity, undo_activity
from sagacity.temporal.models import SagaSpec, Step
from sagacity.tools import CompensableTool, CompensationContext, compensable


async def work(n: int, fail: bool = False) -> dict[str, int]:
    """The trivial step: echo ``n``, or fail as a logical "no" (never worth a retry)."""
    if fail:
        # BENIGN: the SDK logs it at debug level, without formatting a traceback per failure
        raise ApplicationError(
            f"step {n} said no",
            type="StepRefused",
            non_retryable=True,
            category=ApplicationErrorCategory.BENIGN,
        )
    return {"n": n}


async def undo(ctx: CompensationContext) -> None:
    """Undo of :func:`work`: there is nothing to give back."""


async def undo_plain(result: Any) -> None:
    """The baseline's undo: as trivial as :func:`undo`."""


def tool_name(step: int) -> str:
    return f"bench_step_{step}"


TOOLS: list[CompensableTool[..., Any]] = [
    # a step that says no has done nothing: no undo is owed for it
    compensable(by=undo, name=tool_name(step), no_effect_on=(ApplicationError,))(work)
    for step in range(1, STEPS + 1)
]


def saga_spec(*, fail_last: bool, engine_version: int | None = None) -> SagaSpec:
    """The three steps for the generic saga workflow (``engine_version``: the spec's, see
    ``docs/versioning.md``; None, as a spec is by default)."""
    return SagaSpec(
        steps=[
            Step(tool=tool_name(step), args={"n": step, "fail": fail_last and step == STEPS})
            for step in range(1, STEPS + 1)
        ],
        engine_version=engine_version,
    )


def _plain(name: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    # a fresh function per name (activity.defn marks the function object it is given), with
    # fn's signature so the SDK converts arguments exactly as it would for fn itself
    @functools.wraps(fn)
    async def run(*args: Any) -> Any:
        return await fn(*args)

    return activity.defn(name=name)(run)


PLAIN_ACTIVITIES = [
    *(_plain(step_activity(step), work) for step in range(1, STEPS + 1)),
    *(_plain(undo_activity(step), undo_plain) for step in range(1, STEPS + 1)),
]
