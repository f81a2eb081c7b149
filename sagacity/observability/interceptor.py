"""A worker interceptor that counts sagas, tool calls and compensations, and logs each call.

It reads what the saga activities already exchange (:mod:`sagacity.temporal.models`): a
``sagacity.call_tool`` result names the journaled outcome, a ``sagacity.compensate`` that returns
has journaled COMPENSATED, one that raises is a failed attempt at it (by error type, and whether
it is retried), and a ``sagacity.append`` of COMPENSATION_FAILED means a compensation gave up. Workflow results give sagas' outcomes: a :class:`~sagacity.temporal.models.SagaResult`,
or one that holds it as ``saga`` (an agent saga's); they are counted only outside replay, so a
worker that replays a history counts nothing twice.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from temporalio import activity, workflow
from temporalio.exceptions import ApplicationError, FailureError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    ExecuteWorkflowInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from sagacity.journal import Phase
from sagacity.observability.logs import log_context
from sagacity.observability.metrics import (
    COMPENSATION_ATTEMPTS_FAILED,
    COMPENSATION_FAILED_ATTEMPT,
    COMPENSATIONS,
    SAGAS_ENDED,
    SAGAS_STARTED,
    TOOL_CALLS,
)
from sagacity.temporal import names
from sagacity.temporal.models import CallOutcome, RowRef, SagaResult

__all__ = ["ObservabilityInterceptor"]

log = logging.getLogger("sagacity.worker")


class ObservabilityInterceptor(Interceptor):
    """Add to ``Worker(interceptors=[...])``: metrics and saga-tagged logs for every activity."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ActivityObserver(next)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        return _WorkflowObserver


class _ActivityObserver(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        request = input.args[0] if input.args else None
        with log_context(
            saga_id=getattr(request, "saga_id", None) or info.workflow_id,
            seq=getattr(request, "seq", None),
            tool=getattr(request, "tool_name", None),
            activity=info.activity_type,
            attempt=info.attempt,
        ):
            start = time.perf_counter()
            try:
                result = await super().execute_activity(input)
            except Exception as exc:
                log.warning(
                    "%s attempt %d raised %s: %s",
                    info.activity_type,
                    info.attempt,
                    type(exc).__name__,
                    exc,
                )
                if info.activity_type == names.COMPENSATE and request is not None:
                    _undo_failed(info, request.tool_name, exc)
                raise
            _observe(info.activity_type, request, result, time.perf_counter() - start)
            return result


#: a compensation's activity ending with these did not fail: a halt holds it, or another
#: attempt already wrote its row
_NOT_FAILED = frozenset({"Halted", "JournalAhead"})


def _undo_failed(info: activity.Info, tool_name: str, exc: Exception) -> None:
    """Count a failed attempt at a compensation, and note the attempt it failed on."""
    kind = exc.type if isinstance(exc, ApplicationError) and exc.type else type(exc).__name__
    if kind in _NOT_FAILED:
        return
    limit = info.retry_policy.maximum_attempts if info.retry_policy else 0
    final = isinstance(exc, ApplicationError) and exc.non_retryable
    retried = not final and (limit == 0 or info.attempt < limit)
    COMPENSATION_ATTEMPTS_FAILED.labels(tool_name, kind, str(retried).lower()).inc()
    COMPENSATION_FAILED_ATTEMPT.labels(tool_name).set(info.attempt)


def _observe(activity_type: str, request: Any, result: Any, seconds: float) -> None:
    """Count and log what one finished activity journaled."""
    # a call that only opened the saga's journal (its tool did not run) journaled nothing
    called = activity_type in (names.CALL_TOOL, names.OPEN_AND_CALL)
    if called and isinstance(result, CallOutcome) and result.rows:
        phase = result.rows[-1].phase.value
        TOOL_CALLS.labels(request.tool_name, phase).inc()
        log.info("tool %s: %s in %.3fs", request.tool_name, phase, seconds)
    elif activity_type == names.COMPENSATE:
        COMPENSATIONS.labels(request.tool_name, "compensated").inc()
        COMPENSATION_FAILED_ATTEMPT.labels(request.tool_name).set(0)
        log.info(
            "compensated %s (call seq %d) in %.3fs", request.tool_name, request.call_seq, seconds
        )
    elif isinstance(result, list):
        for row in result:
            if isinstance(row, RowRef) and row.phase is Phase.COMPENSATION_FAILED:
                COMPENSATIONS.labels(row.tool_name, "failed").inc()
                log.error(
                    "compensation of %s gave up: its effect is still live (seq %d)",
                    row.tool_name,
                    row.seq,
                )
        log.debug("%s done in %.3fs", activity_type, seconds)


class _WorkflowObserver(WorkflowInboundInterceptor):
    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        name = workflow.info().workflow_type
        if not workflow.unsafe.is_replaying():
            SAGAS_STARTED.labels(name).inc()
        try:
            result = await super().execute_workflow(input)
        except FailureError:
            _ended(name, "failed")
            raise
        except asyncio.CancelledError:
            _ended(name, "cancelled")
            raise
        _ended(name, outcome(result))
        return result


def outcome(result: Any) -> str:
    """A workflow's result as a saga outcome: its saga's state, ``completed`` for other results.

    An agent saga's result holds its saga's as ``saga`` (duck-typed: the agents package sits
    above this one).
    """
    saga = result if isinstance(result, SagaResult) else getattr(result, "saga", None)
    return saga.status.value if isinstance(saga, SagaResult) else "completed"


def _ended(workflow_type: str, outcome: str) -> None:
    if workflow.unsafe.is_replaying():
        return
    SAGAS_ENDED.labels(workflow_type, outcome).inc()
    workflow.logger.info("saga ended: %s", outcome)
