"""How a saga's workflow run chain stands in Temporal: running, finished, or ended unfinished.

A saga's journal belongs to one run chain (its workflow id and first run id, claimed when it
opened): resets and continue-as-new go on in that chain, and a later workflow under the same id
is another chain, refused by the journal. What certify, ``saga status`` and ``saga rollback``
judge a saga by is that chain's newest run, not the newest run of its id.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from temporalio.client import Client, WorkflowExecutionDescription, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from sagacity.temporal import visibility

__all__ = ["UNFINISHED", "ChainRun", "RunChains", "chain_run"]

S = WorkflowExecutionStatus
#: how a run can close without the saga engine ending the saga: nothing in workflow code ran
#: a rollback (a terminate, a timeout) or the workflow failed around the engine
UNFINISHED = frozenset({S.TERMINATED, S.TIMED_OUT, S.FAILED, S.CANCELED})


@dataclass(frozen=True, slots=True)
class ChainRun:
    """The newest run of a saga's run chain, as Temporal describes it."""

    workflow_id: str
    run_id: str
    status: WorkflowExecutionStatus
    task_queue: str
    #: the state the saga showed last in visibility (``SagacityState``); None when not shown
    state: str | None = None

    @property
    def running(self) -> bool:
        return self.status is S.RUNNING

    @property
    def unfinished(self) -> bool:
        """The run closed, and not by completing: effects it left are nobody's to undo."""
        return self.status in UNFINISHED

    @property
    def completed(self) -> bool:
        """The run completed, and the saga showed it completed (not compensated or aborted)."""
        return self.status is S.COMPLETED and self.state == "completed"

    @property
    def how(self) -> str:
        """The status in words: ``terminated``, ``timed out``, ..."""
        return self.status.name.lower().replace("_", " ")


def _run(described: WorkflowExecutionDescription) -> ChainRun:
    # a description always has a status; the SDK types it optional
    status = described.status or S.RUNNING
    state = described.typed_search_attributes.get(visibility.STATE)
    return ChainRun(described.id, described.run_id, status, described.task_queue, state)


def _first_run(described: WorkflowExecutionDescription) -> str:
    return described.raw_description.workflow_execution_info.first_run_id


async def chain_run(client: Client, workflow_id: str, first_run_id: str) -> ChainRun | None:
    """The newest run of the chain that began with ``first_run_id``; None when Temporal no
    longer has it (its retention ran out) or never had it."""
    try:
        newest = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return None
        raise
    if _first_run(newest) == first_run_id:
        return _run(newest)
    # the id was used again after this chain: its runs are among the id's older ones
    quoted = workflow_id.replace("\\", "\\\\").replace("'", "\\'")
    found: list[WorkflowExecutionDescription] = []
    async for execution in client.list_workflows(f"WorkflowId = '{quoted}'"):
        described = await client.get_workflow_handle(
            workflow_id, run_id=execution.run_id
        ).describe()
        if _first_run(described) == first_run_id and described.status is not S.CONTINUED_AS_NEW:
            found.append(described)
    if not found:
        return None
    last = max(found, key=lambda d: (d.start_time is not None, d.start_time))
    return _run(last)


class RunChains:
    """:func:`chain_run` for many sagas, connecting to Temporal the first time one is asked.

    Sagas journaled by no workflow never need Temporal, so a journal checked alone does not.
    """

    def __init__(self, connect: Callable[[], Awaitable[Client]]) -> None:
        self._connect = connect
        self._client: Client | None = None

    async def run(self, workflow_id: str, first_run_id: str) -> ChainRun | None:
        if self._client is None:
            self._client = await self._connect()
        return await chain_run(self._client, workflow_id, first_run_id)
