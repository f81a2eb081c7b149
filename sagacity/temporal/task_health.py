"""Whether a saga's workflow task keeps failing, and why, as Temporal's describe and history say.

A workflow task that fails is retried by the server for ever: the saga answers no query, takes
no signal into effect and never compensates, while its journal may look complete. Temporal
records the first failure of a run of them (``WorkflowTaskFailed``, with its cause and message)
and counts the attempts on the pending task; :func:`task_failure` reads both.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import Client, WorkflowExecutionDescription, WorkflowExecutionStatus

__all__ = ["TaskFailing", "causes", "failing_tasks", "task_failure"]

#: history events read back from the newest while looking for the failure
_PAGE = 50
_CAUSE_PREFIX = "WORKFLOW_TASK_FAILED_CAUSE_"


@dataclass(frozen=True, slots=True)
class TaskFailing:
    """A running workflow whose last workflow task failed and was not completed since."""

    workflow_id: str
    workflow_type: str
    #: the pending task's attempt: it counts on while the task keeps failing
    attempt: int
    #: Temporal's cause, without its prefix: ``PAYLOADS_TOO_LARGE``,
    #: ``WORKFLOW_WORKER_UNHANDLED_FAILURE``, ...
    cause: str
    #: the failure's message and its causes, on one line
    message: str

    def describe(self) -> str:
        """One line for an operator: what fails, why, and how often it was tried."""
        return (
            f"the workflow task of {self.workflow_id} ({self.workflow_type}) keeps failing "
            f"({self.cause}, attempt {self.attempt}): {self.message}"
        )


def causes(error: BaseException) -> str:
    """An error and its causes on one line: "Failed decoding arguments" alone says too little."""
    said: list[str] = []
    cause: BaseException | None = error
    while cause is not None and len(said) < 5:
        text = " ".join(str(cause).split())
        if text and text not in said:
            said.append(text)
        cause = cause.__cause__
    return ": ".join(said)[:2000]


async def task_failure(
    client: Client, workflow_id: str, *, described: WorkflowExecutionDescription | None = None
) -> TaskFailing | None:
    """The failure that holds ``workflow_id``'s workflow task, or None: it is not running, or its
    last workflow task did not fail (a failure since followed by a completed task is over)."""
    if described is None:
        described = await client.get_workflow_handle(workflow_id).describe()
    if described.status is not WorkflowExecutionStatus.RUNNING:
        return None
    history = await client.workflow_service.get_workflow_execution_history_reverse(
        GetWorkflowExecutionHistoryReverseRequest(
            namespace=client.namespace,
            execution=described.raw_description.workflow_execution_info.execution,
            maximum_page_size=_PAGE,
        )
    )
    for event in history.history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            return None
        if event.event_type != EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            continue
        attributes = event.workflow_task_failed_event_attributes
        failure = await client.data_converter.decode_failure(attributes.failure)
        cause = WorkflowTaskFailedCause.Name(attributes.cause).removeprefix(_CAUSE_PREFIX)
        return TaskFailing(
            workflow_id=workflow_id,
            workflow_type=described.workflow_type,
            attempt=max(described.raw_description.pending_workflow_task.attempt, 1),
            cause=cause,
            message=causes(failure),
        )
    return None


async def failing_tasks(client: Client, saga_ids: Collection[str]) -> dict[str, TaskFailing]:
    """Those of ``saga_ids`` whose workflow runs and whose workflow task keeps failing, by id.

    Only running workflows are described (one visibility list, then one look each).
    """
    wanted = set(saga_ids)
    running = [
        w.id async for w in client.list_workflows('ExecutionStatus="Running"') if w.id in wanted
    ]
    found: dict[str, TaskFailing] = {}
    for workflow_id in dict.fromkeys(running):
        failing = await task_failure(client, workflow_id)
        if failing is not None:
            found[workflow_id] = failing
    return found
