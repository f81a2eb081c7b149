"""``saga status``: where a saga is, as Temporal tells it, and why a saga that cannot move on is stuck.

:func:`status_of` looks once (an ended saga's result from history, else its live status);
:func:`settle` follows the saga until it ends or only a human can move it on. Both raise a
:class:`~sagacity.cli.saga.shared.Stuck` when the saga cannot answer and Temporal can tell why:
no worker polls its queue, its workflow task fails, or no worker registers its type.
"""

from __future__ import annotations

import asyncio
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from typing import Any

import typer
from pydantic import ValidationError
from temporalio.api.enums.v1 import PendingWorkflowTaskState, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
)
from temporalio.exceptions import ApplicationError, CancelledError, TerminatedError, TimeoutError
from temporalio.service import RPCError, RPCStatusCode

from sagacity.cli._exit import hard_exit
from sagacity.cli.rollback import LeftBehind, left_behind, live_lines
from sagacity.cli.saga.found import AppWorkflow, Ended, Found, report
from sagacity.cli.saga.shape import LeftLive, StatusReport, Unfinished
from sagacity.cli.saga.shared import (
    UNDO_FAILING,
    AsJson,
    SagaId,
    Stuck,
    Usage,
    Wait,
    connected,
    read_settings,
    run,
)
from sagacity.errors import InvalidInput, SagacityError
from sagacity.temporal import names
from sagacity.temporal.models import ErrorInfo, SagaResult, SagaState, SagaStatus
from sagacity.temporal.task_health import causes, task_failure
from sagacity.temporal.undo_attempts import failing, with_attempts

#: states in which only a human can move the saga on
WAITING = frozenset({SagaState.AWAITING_APPROVAL, SagaState.SUSPECT})
_QUERY_TIMEOUT = timedelta(seconds=10)
#: how a workflow closed, by what its result raised (anything else failed)
_ENDED_AS: dict[type[BaseException], Unfinished] = {
    TerminatedError: "terminated",
    TimeoutError: "timed_out",
    CancelledError: "canceled",
}
#: a workflow task scheduled this long and not picked up: look whether any worker polls
_UNPICKED = timedelta(seconds=3)


class NoWorker(Stuck):
    """No worker polls the workflow's task queue."""


class WorkflowTaskFailing(Stuck):
    """The workflow's task fails on the worker: the input does not decode, or its code raises."""


class WorkflowNotRegistered(Stuck):
    """The worker polling the task queue does not register the workflow's type."""


@hard_exit
def status(saga: SagaId, wait: Wait = False, as_json: AsJson = False) -> None:
    """Where the saga is: state, journal head, what it waits for; or how it ended."""

    async def work() -> int:
        settings = read_settings()
        async with connected(settings) as client:
            handle = client.get_workflow_handle(saga)
            try:
                found = await (settle(client, handle) if wait else status_of(client, handle))
            except SagacityError as exc:
                # a workflow that closed unfinished (terminated, timed out) left these live
                left = await left_behind(client, settings, saga)
                if as_json and isinstance(exc, EndedUnfinished):
                    typer.echo(_unfinished(exc, left).model_dump_json(indent=2))
                for line in live_lines(left):
                    typer.echo(line, err=True)
                undo_failing = left.undo_failing if left is not None else None
                if undo_failing is None:
                    raise
                # a rollback of it runs, and its undo keeps failing: told apart, as a saga's
                typer.echo(f"error: {exc}", err=True)
                typer.echo(undo_failing, err=True)
                return UNDO_FAILING
            code = report(found, as_json=as_json)
            if isinstance(found, SagaStatus) and not as_json:
                for line in await _retrying(client, handle):
                    typer.echo(line)
            return code

    run(work())


class EndedUnfinished(SagacityError):
    """The saga's workflow closed without the saga engine ending it: terminated, timed out,
    failed or canceled around it; ``state`` says which, ``error`` why."""

    def __init__(self, message: str, saga_id: str, state: Unfinished, error: ErrorInfo) -> None:
        super().__init__(message)
        self.saga_id = saga_id
        self.state: Unfinished = state
        self.error = error


def _unfinished(exc: EndedUnfinished, left: LeftBehind | None) -> StatusReport:
    """The report of a saga whose workflow closed unfinished, with what its journal says it
    left (``left`` None: the journal is out of reach)."""
    saga = exc.saga_id
    if left is None:
        return StatusReport.unfinished(
            saga, exc.state, exc.error, head=None, live=[],
            needs_attention=f"the journal is out of reach, so what saga {saga} left live is "
            f"unknown: `sagacity certify --saga {saga}` names it once the journal is back",
        )  # fmt: skip
    live = [LeftLive(tool_name=tool, call_seq=seq, detail=d) for tool, seq, d in left.effects]
    todo = left.rollback_line
    if todo is not None and left.undo_failing is not None:
        todo = f"{todo}; {left.undo_failing}"
    elif todo is None and live:
        todo = f"{len(live)} effect(s) left live: undo them with `sagacity saga rollback {saga}`"
    return StatusReport.unfinished(
        saga, exc.state, exc.error, head=left.head, live=live, needs_attention=todo
    )


async def _retrying(client: Client, handle: WorkflowHandle[Any, Any]) -> list[str]:
    """A line for each of the saga's activities that failed and is retried, with its last error
    (its compensation has a line of its own)."""
    described = await handle.describe()
    lines = []
    for pending in described.raw_description.pending_activities:
        if pending.attempt <= 1 or not pending.HasField("last_failure"):
            continue
        if pending.activity_type.name == names.COMPENSATE:
            continue  # on the saga's own "compensating" line
        failure = await client.data_converter.decode_failure(pending.last_failure)
        error = causes(failure)
        if isinstance(failure, ApplicationError) and failure.type:
            error = f"{failure.type}: {error}"
        lines.append(
            f"  retrying: {pending.activity_type.name} (activity {pending.activity_id}), "
            f"attempt {pending.attempt}; last error: {error}"
        )
    return lines


async def settle(client: Client, handle: WorkflowHandle[Any, Any]) -> Found:
    """Wait until the saga ends (its result), waits for a human or its compensation keeps
    failing (its status)."""
    while True:
        found = await _look(client, handle, patient=True)
        if found is None:  # a workflow task is under way: a query would only wait on it
            await asyncio.sleep(0.25)
            continue
        if isinstance(found, AppWorkflow) and found.running:
            return await _result(handle, found.workflow_type)  # nothing to follow but its end
        if not isinstance(found, SagaStatus) or found.state in WAITING:
            return found
        if failing(found.compensating):
            return found
        await asyncio.sleep(0.25)


async def status_of(client: Client, handle: WorkflowHandle[Any, Any]) -> Found:
    """The result of an ended saga (from history: no worker needed), else its live status.

    :class:`Stuck` when a running saga cannot answer and Temporal can tell why.
    """
    found = await _look(client, handle, patient=False)
    assert found is not None  # only a patient look comes back empty
    return found


async def _look(client: Client, handle: WorkflowHandle[Any, Any], *, patient: bool) -> Found | None:
    """:func:`status_of`; ``patient``: None rather than a query while a workflow task is under
    way. A failing task is reported once it failed; one no worker picks up, after
    :data:`_UNPICKED`."""
    try:
        described = await handle.describe()
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            raise Usage(f"no saga {handle.id!r} in this Temporal namespace") from None
        raise
    if described.status is not WorkflowExecutionStatus.RUNNING:
        return await _result(handle, described.workflow_type)
    pending = described.raw_description.pending_workflow_task
    if pending.attempt > 1:  # the task failed at least once: say why rather than wait
        failing = await _task_failure(client, handle, described)
        if failing is not None:
            raise failing
    states = PendingWorkflowTaskState
    if pending.state == states.PENDING_WORKFLOW_TASK_STATE_SCHEDULED:
        waited = datetime.now(UTC) - pending.scheduled_time.ToDatetime(UTC)
        if waited > _UNPICKED:  # no worker took it: is there one?
            stuck = await _stuck(client, handle, described)
            if stuck is not None:
                raise stuck
    if patient and pending.state != states.PENDING_WORKFLOW_TASK_STATE_UNSPECIFIED:
        return None
    try:
        live: SagaStatus = await handle.query(
            "status", result_type=SagaStatus, rpc_timeout=_QUERY_TIMEOUT
        )
    except WorkflowQueryFailedError:
        # the worker answered, but not a status (no such query, and its message may be
        # encrypted): a workflow of the app's own, not a saga
        return AppWorkflow(handle.id, described.workflow_type, running=True)
    except RPCError as exc:
        raise await _stuck(client, handle, described) or SagacityError(
            f"saga {handle.id} is running but no worker answered its status query: {exc}"
        ) from None
    return await with_attempts(client, live, described)


async def _result(handle: WorkflowHandle[Any, Any], workflow_type: str) -> Ended:
    """What the workflow returned, as the type it has; a failed workflow is an error (exit 1)."""
    try:
        raw = await handle.result()
    except WorkflowFailureError as exc:
        cause = exc.cause
        if isinstance(cause, ApplicationError) and cause.type == "StepsInvalid":
            # refused whole before any step ran: bad input, like a malformed steps file
            raise InvalidInput(f"the worker refused saga {handle.id}'s steps: {cause}") from None
        error = ErrorInfo(type=type(cause).__name__, message=str(cause))
        raise EndedUnfinished(
            f"workflow {handle.id} ({workflow_type}) did not complete: {error.type}: "
            f"{error.message}",
            handle.id,
            _ENDED_AS.get(type(cause), "failed"),
            error,
        ) from None
    if isinstance(raw, dict) and {"saga", "steps"} <= raw.keys():
        from sagacity.agents.workflow import AgentSagaResult  # slow: imported only here

        with suppress(ValidationError):
            return AgentSagaResult.model_validate(raw)
    elif isinstance(raw, dict):
        with suppress(ValidationError):
            return SagaResult.model_validate(raw)
    return AppWorkflow(handle.id, workflow_type, running=False, value=raw)


async def _stuck(
    client: Client, handle: WorkflowHandle[Any, Any], described: WorkflowExecutionDescription
) -> Stuck | None:
    """Why a running workflow does not answer: its task fails, or no worker polls its queue."""
    failing = await _task_failure(client, handle, described)
    if failing is not None:
        return failing
    queue = described.task_queue
    polled = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    if not polled.pollers:
        return NoWorker(
            f"no worker polls task queue {queue!r}, where saga {handle.id} "
            f"({described.workflow_type}) waits: start one (`sagacity worker --app …`) with "
            "SAGACITY_TASK_QUEUE set to it"
        )
    return None


async def _task_failure(
    client: Client, handle: WorkflowHandle[Any, Any], described: WorkflowExecutionDescription
) -> Stuck | None:
    """The failure that holds the saga's workflow task, as a typed error; None if none since its
    last completed workflow task."""
    failing = await task_failure(client, handle.id, described=described)
    if failing is None:
        return None
    kind, message = described.workflow_type, failing.message
    if "not registered" in message:
        return WorkflowNotRegistered(
            f"no worker on task queue {described.task_queue!r} registers workflow type "
            f"{kind!r} (saga {handle.id}): {message}"
        )
    return WorkflowTaskFailing(
        f"the workflow task of saga {handle.id} ({kind}) is failing: {message} ({failing.cause}, "
        f"attempt {failing.attempt}; the worker retries it: fix the code and restart the worker, "
        f"or end it with `temporal workflow terminate --workflow-id {handle.id}` and start it "
        "again)"
    )
