"""Faults the rollback prover injects at a tool's boundaries: the tool and its undo, wrapped to
fail where the case a saga runs says.

The wrapped tool keeps the tool's name, signature, options and probe, so the worker runs it
exactly as it runs the tool; which fault (if any) a call meets is looked up by its saga id.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from typing import Any

from sagacity.call_context import current_call
from sagacity.testing.report import RollbackCase
from sagacity.tools import CompensableTool, CompensationContext, ToolRegistry

__all__ = ["AttemptLost", "FaultPlan", "InjectedFault"]


class InjectedFault(Exception):
    """A failure the rollback prover raised at a tool's boundary (not the tool's own)."""


class AttemptLost(BaseException):
    """The end of an activity attempt whose worker died: raised past the call's own error
    handling, so, as after a kill, neither EXECUTED nor FAILED is journaled and the next
    attempt finds the call's INTENT alone."""


class FaultPlan:
    """Which case each proving saga runs, and the tools wrapped to stage it."""

    def __init__(self) -> None:
        self._cases: dict[str, RollbackCase] = {}

    def arm(self, saga_id: str, case: RollbackCase) -> None:
        self._cases[saga_id] = case

    def disarm(self, saga_id: str) -> None:
        self._cases.pop(saga_id, None)

    def wrap(self, tool: CompensableTool[..., Any]) -> CompensableTool[..., Any]:
        """``tool`` as the worker should serve it for proofs; its declaration is checked as a
        worker checks it (:class:`~sagacity.errors.ToolDeclarationError` naming the fix)."""
        registered = ToolRegistry([tool]).get(tool.name)
        undo = registered.compensation
        wrapped = CompensableTool(
            self._faulty_tool(tool),
            name=tool.name,
            description=tool.description,
            reversibility=tool.reversibility,
            by=None if undo is None else self._faulty_undo(undo),
            options=tool.options,
            json_arguments=tool.json_arguments,
        )
        if registered.probe is not None:
            wrapped.probe(registered.probe)
        return wrapped

    def _faulty_tool(self, tool: CompensableTool[..., Any]) -> Any:
        fn = tool.fn
        runs_async = tool.is_async

        # wraps: the worker reads the tool's signature (and so its arguments) through it
        @functools.wraps(fn)
        async def call(**kwargs: Any) -> Any:
            info = current_call()
            case = self._cases.get(info.saga_id)
            if case is RollbackCase.FAILED_BEFORE_EFFECT:
                raise InjectedFault("the rollback prover failed the call before the tool ran")
            result = await fn(**kwargs) if runs_async else await asyncio.to_thread(fn, **kwargs)
            if case is RollbackCase.FAILED_AFTER_EFFECT:
                raise InjectedFault("the rollback prover failed the call after the tool ran")
            if case is RollbackCase.WORKER_KILLED_AFTER_EFFECT and info.attempt == 1:
                raise AttemptLost("the rollback prover killed the attempt after the tool ran")
            return result

        return call

    def _faulty_undo(self, undo: Any) -> Any:
        runs_async = inspect.iscoroutinefunction(undo)

        async def compensate(ctx: CompensationContext) -> None:
            if runs_async:
                await undo(ctx)
            else:
                await asyncio.to_thread(undo, ctx)
            if self._cases.get(ctx.saga_id) is RollbackCase.UNDO_TWICE and ctx.attempt == 1:
                # the undo ran; its activity fails as if its acknowledgement were lost, and
                # the engine retries it
                raise InjectedFault("the rollback prover lost the undo's acknowledgement")

        return compensate
