"""An operator's rollback of an ended saga: what it left live, and starting the rollback workflow.

``sagacity saga rollback`` and the console's button both come here. A rollback undoes what a
saga whose workflow closed unfinished (terminated, timed out, failed around the engine) left
live. It is refused (:class:`RollbackRefused`) for a saga still running (abort it instead), one
its own engine ended (what that left live is a human's), one rolled back already or with a
rollback running, and one that left nothing live. A rollback whose own workflow ended
unfinished (terminated, failed) may be started again: it undoes what is still live.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from sagacity.errors import InvalidInput
from sagacity.evidence.certify import Finding, Kind, effect_findings
from sagacity.journal import Entry, rolled_back_by
from sagacity.store.journal import JournalStore
from sagacity.temporal.rollback import (
    ROLLBACK_WORKFLOW,
    RollbackRequest,
    RollbackResult,
    rollback_id,
)
from sagacity.temporal.runs import UNFINISHED, ChainRun, chain_run

__all__ = ["Ended", "RollbackRefused", "ended", "left_live", "start_rollback"]


class RollbackRefused(InvalidInput):
    """The saga cannot be rolled back: it runs, was rolled back, or left nothing live."""

    code = "rollback_refused"


@dataclass(frozen=True)
class Ended:
    """A saga as a rollback judges it: its rows, its run chain's newest run (None: Temporal no
    longer has it), and the effects it left live by closing unfinished."""

    saga_id: str
    rows: list[Entry]
    run: ChainRun | None
    live: list[Finding]

    @property
    def rolled_back_by(self) -> str | None:
        return rolled_back_by(self.rows)


async def ended(client: Client, journal: JournalStore, saga_id: str) -> Ended:
    """The saga's rows, run and live effects; :class:`RollbackRefused` when no workflow
    journaled it."""
    chain = (await journal.chains([saga_id])).get(saga_id)
    if chain is None:
        raise RollbackRefused(f"no saga {saga_id!r} in the journal")
    run = await chain_run(client, *chain)
    rows = await journal.read(saga_id)
    found = effect_findings(saga_id, rows, run) if run is not None and run.unfinished else []
    return Ended(saga_id, rows, run, [f for f in found if f.kind is Kind.LIVE_EFFECT])


async def left_live(client: Client, journal: JournalStore, saga_id: str) -> list[Finding]:
    """The effects the saga left live when its workflow closed unfinished (none otherwise, and
    when no workflow journaled it)."""
    try:
        return (await ended(client, journal, saga_id)).live
    except RollbackRefused:
        return []


async def start_rollback(
    client: Client,
    journal: JournalStore,
    saga_id: str,
    *,
    by: str,
    reason: str,
    task_queue: str,
    attempts: int | None = None,
) -> tuple[Ended, WorkflowHandle[Any, RollbackResult]]:
    """Start the rollback workflow of an ended saga on its run's task queue (``task_queue``
    when Temporal no longer has the run); refused as the module says."""
    saga = await ended(client, journal, saga_id)
    if saga.run is not None and saga.run.running:
        raise RollbackRefused(
            f"saga {saga_id} is still running: abort it (`sagacity saga abort {saga_id}`) and "
            "it compensates itself"
        )
    if saga.run is not None and not saga.run.unfinished:
        raise RollbackRefused(
            f"saga {saga_id} {saga.run.how} as its own engine ended it: a rollback undoes what "
            "a saga whose workflow was terminated or timed out left live"
        )
    again = saga.rolled_back_by is not None
    if again and not await _rollback_ended_unfinished(client, saga_id):
        raise RollbackRefused(f"saga {saga_id} was rolled back already, by {saga.rolled_back_by}")
    if not saga.live:
        raise RollbackRefused(f"saga {saga_id} left no effect live: nothing to roll back")
    try:
        tries = {} if attempts is None else {"attempts": attempts}
        request = RollbackRequest(saga_id=saga_id, by=by, reason=reason, again=again, **tries)
    except ValueError as exc:
        raise InvalidInput(f"rollback of {saga_id}: {exc}") from None
    queue = saga.run.task_queue if saga.run is not None else None
    try:
        handle: WorkflowHandle[Any, RollbackResult] = await client.start_workflow(
            ROLLBACK_WORKFLOW,
            request,
            id=rollback_id(saga_id),
            task_queue=queue or task_queue,
            result_type=RollbackResult,
            # one rollback per saga: a second is refused while the first runs or after it
            # completed; one that ended unfinished (terminated, failed) may be run again
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
        )
    except WorkflowAlreadyStartedError:
        raise RollbackRefused(
            f"saga {saga_id} has a rollback already (workflow {rollback_id(saga_id)})"
        ) from None
    except RPCError as exc:
        if exc.status is RPCStatusCode.ALREADY_EXISTS:
            raise RollbackRefused(
                f"saga {saga_id} has a rollback already (workflow {rollback_id(saga_id)})"
            ) from None
        raise
    return saga, handle


async def _rollback_ended_unfinished(client: Client, saga_id: str) -> bool:
    """Whether the saga's rollback workflow closed without finishing (terminated, timed out,
    failed): its journal says it was rolled back, but what it did not undo is still live."""
    try:
        described = await client.get_workflow_handle(rollback_id(saga_id)).describe()
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return False  # Temporal no longer has it: the journal's word stands
        raise
    return described.status in UNFINISHED
