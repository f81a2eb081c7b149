"""Roll back an ended saga: compensate what its run chain left live, newest first, as a workflow.

A saga whose workflow was terminated, timed out or failed around the engine leaves its effects
live: nothing in its own code can undo them any more. :class:`RollbackWorkflow` (type
``sagacity.Rollback``, id :func:`rollback_id`) does, through the saga engine's own
``compensate`` activity, so each undo has the same guarantees (one undo even across crashed
attempts, database outages waited out, halts obeyed). It journals in the saga's own chain: first
a REJECTED row of :data:`~sagacity.journal.ROLLBACK` saying who rolled it back and why (after a
REJECTED row closing an approval request the saga left open), then a COMPENSATED or
COMPENSATION_FAILED row per effect, as the saga's own rollback would.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel, Field
from temporalio import activity, workflow
from temporalio.exceptions import ActivityError, ApplicationError

from sagacity.journal import APPROVAL_GATE, ROLLBACK, Phase, rollback_plan, rolled_back_by
from sagacity.journal.canonical import to_json
from sagacity.journal.phases import SUPERSEDED
from sagacity.store.journal import JournalStore
from sagacity.temporal import names
from sagacity.temporal.activities.typed import typed
from sagacity.temporal.failures import compensation_failure, halt_notice
from sagacity.temporal.models import (
    AppendRequest,
    ApprovalClose,
    CompensateRequest,
    Head,
    RowDraft,
    RowRef,
    SagaOptions,
)
from sagacity.temporal.waits import (
    HALT_RECHECK,
    HALT_RECHECK_MAX,
    JOURNAL_HEARTBEAT,
    JOURNAL_RETRY,
    OUTAGE_ALLOWANCE,
    compensation_retry,
)
from sagacity.tools import ToolRegistry

__all__ = [
    "PLAN_ROLLBACK",
    "ROLLBACK_WORKFLOW",
    "RollbackActivities",
    "RollbackRequest",
    "RollbackResult",
    "RollbackWorkflow",
    "Undo",
    "rollback_id",
]

#: the Temporal workflow type of :class:`RollbackWorkflow`
ROLLBACK_WORKFLOW = "sagacity.Rollback"
PLAN_ROLLBACK = "sagacity.plan_rollback"
#: ``ApplicationError`` types the workflow fails with when it has nothing to do
ALREADY_ROLLED_BACK = "AlreadyRolledBack"
NOTHING_LIVE = "NothingLive"


def rollback_id(saga_id: str) -> str:
    """The rollback workflow's id: one per saga, so two rollbacks of it can never run."""
    return f"{saga_id}:rollback"


class RollbackRequest(BaseModel):
    saga_id: str
    by: str = Field(min_length=1, max_length=200)
    reason: str = Field(min_length=1, max_length=2000)
    #: attempts at each compensation before COMPENSATION_FAILED, as a saga's option says
    attempts: int = Field(default=SagaOptions().compensation_attempts, ge=1, le=1000)
    #: a rollback run again after one that ended unfinished (its ROLLBACK row is journaled):
    #: it undoes what is still live rather than refusing
    again: bool = False


class Undo(BaseModel):
    """One live effect to compensate: the call's INTENT seq, and how its tool is timed."""

    tool_name: str
    call_seq: int
    #: the call FAILED and may have taken effect
    failed: bool = False
    timeout_s: float = 60.0
    heartbeat_timeout_s: float = 30.0


class RollbackPlanned(BaseModel):
    """What the journal says to do: the head to chain onto, the effects newest first."""

    head: Head
    undo: list[Undo]
    #: live effects nothing can undo (no compensation declared), as ``tool (call seq N)``
    stays_live: list[str] = Field(default_factory=list)
    #: seq and input of an approval request the saga left undecided
    open_request: tuple[int, str] | None = None
    #: who rolled the saga back already, when its journal says so
    rolled_back_by: str | None = None


class RollbackResult(BaseModel):
    saga_id: str
    compensated: list[Undo] = Field(default_factory=list)
    #: effects whose compensation failed every attempt: COMPENSATION_FAILED, a human's now
    failed: list[Undo] = Field(default_factory=list)
    stays_live: list[str] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.stays_live


class RollbackActivities:
    """The one activity a rollback adds to the saga engine's: reading what to undo."""

    def __init__(self, journal: JournalStore, tools: ToolRegistry) -> None:
        self.journal = journal
        self.tools = tools

    @activity.defn(name=PLAN_ROLLBACK)
    @typed
    async def plan(self, saga_id: str) -> RollbackPlanned:
        rows = await self.journal.read(saga_id)
        registered = {t.name: t for t in self.tools}
        plan = rollback_plan(
            rows, {name: t.compensation is not None for name, t in registered.items()}
        )
        undo, stays = [], []
        for step in plan.compensate:
            call, tool = step.call, registered[step.call.intent.tool_name]
            if call.outcome is None:
                continue  # SUSPECT: whether it happened is a human's to resolve first
            undo.append(
                Undo(
                    tool_name=tool.name,
                    call_seq=call.intent.seq,
                    failed=call.outcome.phase is Phase.FAILED,
                    timeout_s=tool.tool.options.timeout.total_seconds(),
                    heartbeat_timeout_s=tool.tool.options.heartbeat_timeout.total_seconds(),
                )
            )
        for step in plan.live:
            if step.call.undone is None and step.call.outcome is not None:
                stays.append(f"{step.call.intent.tool_name} (call seq {step.call.intent.seq})")
        request = plan.awaiting_approval
        head = Head(seq=rows[-1].seq, hash=rows[-1].hash) if rows else Head()
        return RollbackPlanned(
            head=head,
            undo=undo,
            stays_live=stays,
            open_request=(request.seq, request.input) if request is not None else None,
            rolled_back_by=rolled_back_by(rows),
        )


@workflow.defn(name=ROLLBACK_WORKFLOW)
class RollbackWorkflow:
    """Compensate an ended saga's live effects, newest first; see the module's docstring."""

    def __init__(self) -> None:
        self._head = Head()
        self._resumes = 0

    @workflow.signal(name="resume")
    def resume(self, notice: Any = None) -> None:
        """A halt was lifted (``sagacity resume`` tells every running workflow it reached): look
        again now. Unread: the compensate activity checks the halts itself."""
        self._resumes += 1

    @workflow.run
    async def run(self, request: RollbackRequest) -> RollbackResult:
        saga_id = request.saga_id
        plan = await self._plan(saga_id)
        # `again` is only ever set on rollbacks started after this field existed: the ones
        # already running take the same path as before
        if plan.rolled_back_by is not None and not request.again:
            raise ApplicationError(
                f"saga {saga_id} was rolled back already, by {plan.rolled_back_by}",
                type=ALREADY_ROLLED_BACK,
                non_retryable=True,
            )
        if not plan.undo:
            raise ApplicationError(
                f"saga {saga_id} has no live effect to compensate"
                + (f" (nothing undoes {', '.join(plan.stays_live)})" if plan.stays_live else ""),
                type=NOTHING_LIVE,
                non_retryable=True,
            )
        self._head = plan.head
        # who and why come first: the journal tells it was rolled back from the first undo on
        said = [RowDraft(tool_name=ROLLBACK, phase=Phase.REJECTED, payload=_payload(request))]
        if plan.open_request is not None:
            asked = plan.open_request[1]
            # a decision row follows its request at once (the decision check reads it so)
            gate = {"by": "sagacity", "reason": SUPERSEDED + "the saga was rolled back"}
            said.insert(
                0,
                RowDraft(
                    tool_name=APPROVAL_GATE,
                    phase=Phase.REJECTED,
                    input=asked,
                    payload=to_json(gate),
                ),
            )
        await self._append(saga_id, said)
        if plan.open_request is not None:
            await workflow.execute_activity(
                names.CLOSE_APPROVAL,
                ApprovalClose(saga_id=saga_id, journal_seq=plan.open_request[0]),
                result_type=bool,
                start_to_close_timeout=OUTAGE_ALLOWANCE,
                heartbeat_timeout=JOURNAL_HEARTBEAT,
                retry_policy=JOURNAL_RETRY,
            )
        result = RollbackResult(saga_id=saga_id, stays_live=plan.stays_live)
        for undo in plan.undo:
            if await self._compensate(saga_id, undo, request.attempts):
                result.compensated.append(undo)
            else:
                result.failed.append(undo)
        return result

    async def _plan(self, saga_id: str) -> RollbackPlanned:
        planned: RollbackPlanned = await workflow.execute_activity(
            PLAN_ROLLBACK,
            saga_id,
            result_type=RollbackPlanned,
            start_to_close_timeout=OUTAGE_ALLOWANCE,
            # a worker killed mid-activity is noticed by heartbeats: the time limit leaves room
            # for an outage, which alone would hold the rollback for a quarter of an hour
            heartbeat_timeout=JOURNAL_HEARTBEAT,
            retry_policy=JOURNAL_RETRY,
        )
        return planned

    async def _resumed(self, *, within: timedelta) -> bool:
        """Whether a ``resume`` signal came ``within`` that time."""
        seen = self._resumes
        try:
            await workflow.wait_condition(lambda: self._resumes != seen, timeout=within)
        except TimeoutError:
            return False
        return True

    async def _append(self, saga_id: str, rows: list[RowDraft]) -> None:
        written = await workflow.execute_activity(
            names.APPEND,
            AppendRequest(
                saga_id=saga_id, seq=self._head.seq + 1, prev_hash=self._head.hash, rows=rows
            ),
            result_type=list[RowRef],
            start_to_close_timeout=OUTAGE_ALLOWANCE,
            # a worker killed mid-activity is noticed by heartbeats: the time limit leaves room
            # for an outage, which alone would hold the rollback for a quarter of an hour
            heartbeat_timeout=JOURNAL_HEARTBEAT,
            retry_policy=JOURNAL_RETRY,
        )
        self._head = Head(seq=written[-1].seq, hash=written[-1].hash)

    async def _compensate(self, saga_id: str, undo: Undo, attempts: int) -> bool:
        """Undo one effect as the saga would; False when every attempt failed (journaled)."""
        options = SagaOptions(compensation_attempts=attempts)
        recheck = HALT_RECHECK
        while True:
            request = CompensateRequest(
                saga_id=saga_id,
                seq=self._head.seq + 1,
                prev_hash=self._head.hash,
                tool_name=undo.tool_name,
                call_seq=undo.call_seq,
                input_json="",
                failed=undo.failed,
                by_ref=True,  # the saga's run is gone: the journal holds the call
            )
            try:
                rows = await workflow.execute_activity(
                    names.COMPENSATE,
                    request,
                    result_type=list[RowRef],
                    start_to_close_timeout=timedelta(seconds=undo.timeout_s) + OUTAGE_ALLOWANCE,
                    heartbeat_timeout=timedelta(seconds=undo.heartbeat_timeout_s),
                    retry_policy=compensation_retry(options),
                )
            except ActivityError as err:
                if halt_notice(err) is not None:
                    # a halt holds compensations: wait for its lifting, or look again later (a
                    # lost signal only delays it), as a held saga does
                    resumed = await self._resumed(within=recheck)
                    recheck = HALT_RECHECK if resumed else min(recheck * 2, HALT_RECHECK_MAX)
                    continue
                failed = compensation_failure(err, options.compensation_attempts)
                workflow.logger.error(
                    "rollback of saga %s: compensation of %s (call seq %d) failed: %s",
                    saga_id,
                    undo.tool_name,
                    undo.call_seq,
                    failed["message"],
                )
                await self._append(
                    saga_id,
                    [
                        RowDraft(
                            tool_name=undo.tool_name,
                            phase=Phase.COMPENSATION_FAILED,
                            input_of=undo.call_seq,
                            payload=to_json(failed),
                        )
                    ],
                )
                return False
            self._head = Head(seq=rows[-1].seq, hash=rows[-1].hash)
            return True


def _payload(request: RollbackRequest) -> str:
    return to_json(
        {
            "rollback": True,
            "by": request.by,
            "reason": request.reason,
            "workflow_id": workflow.info().workflow_id,
        }
    )
