"""The wait for a decision past an SLA: escalate once, keep waiting until the deadline.

Only a saga whose options, or whose recorded catalog's tool, declare an SLA takes this path;
every history recorded before escalation existed has neither, and waits with the one timer it
always did (no patch needed: the option decides, and it is in history).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from sagacity.evidence.decisions import payload_object
from sagacity.journal.canonical import to_json
from sagacity.temporal import names
from sagacity.temporal.models import Escalate, Escalated, Escalation, PendingApproval, ToolSpec
from sagacity.temporal.saga.controls import Controls
from sagacity.temporal.saga.core import SagaCore

#: one attempt's limit: the POST has its own (10 s), the rest is the store's claim and record
ESCALATION_TIMEOUT = timedelta(minutes=2)
#: a webhook that keeps failing is tried for about an hour, doubling from 2 s up to 10 min;
#: the saga waits for its human meanwhile, whatever the webhook does
ESCALATION_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=10),
    maximum_attempts=10,
)


def approval_sla_s(spec: ToolSpec, options_sla_s: float | None) -> float | None:
    """The SLA of ``spec``'s approval request: the shorter of the tool's and the saga's, or None."""
    given = [s for s in (spec.approval_sla_s, options_sla_s) if s is not None]
    return min(given) if given else None


class Escalations:
    """Waits for a request's decision across its SLA, and what escalating it recorded."""

    def __init__(self, core: SagaCore, controls: Controls) -> None:
        self._core = core
        self._controls = controls
        #: the escalation posting now: it outlives a wait that an edit, refused later, ended
        self._live: workflow.ActivityHandle[Escalated] | None = None

    async def wait(
        self,
        pending: PendingApproval,
        decided: Callable[[], bool],
        sla_s: float,
        started: datetime,
    ) -> None:
        """Wait for ``decided`` until the deadline after ``started`` (``TimeoutError`` then),
        escalating once if still undecided past ``sla_s``: a decision, abort or cancel before it
        escalates nothing. Called again after a refused edit, it escalates at most once in all.
        ``pending.escalation`` says what escalating did. The escalation goes on after this
        returns (an edited approval may yet be refused) until :meth:`stop`."""
        deadline_s = self._core.options.approval_deadline_s
        if pending.escalation is not None and self._live is not None:
            await self._told(pending, decided, started, self._live)
            return
        if sla_s >= deadline_s or pending.escalation is not None:
            await self._until(started, deadline_s, decided)
            return
        try:
            await self._until(started, sla_s, decided)
            return
        except TimeoutError:
            pass
        at = workflow.now()
        if (at - started).total_seconds() >= deadline_s:
            # the SLA's wait ended past the deadline: a wait begun by a worker of the release
            # before (its one timer was the deadline's), or no worker until then. The request
            # is rejected now: no one is told, and no escalation is recorded
            raise TimeoutError
        pending.escalation = Escalation(at=at)
        request = Escalate(
            saga_id=self._core.saga_id,
            journal_seq=pending.journal_seq,
            tool_name=pending.tool_name,
            at=at,
            waited_s=(at - started).total_seconds(),
        )
        # beside the wait, not before it: a webhook that hangs or keeps failing holds nothing
        self._live = workflow.start_activity(
            names.ESCALATE_APPROVAL,
            request,
            result_type=Escalated,
            start_to_close_timeout=ESCALATION_TIMEOUT,
            heartbeat_timeout=self._core.heartbeat_timeout(None),
            retry_policy=ESCALATION_RETRY,
        )
        await self._told(pending, decided, started, self._live)

    async def _told(
        self,
        pending: PendingApproval,
        decided: Callable[[], bool],
        started: datetime,
        escalating: workflow.ActivityHandle[Escalated],
    ) -> None:
        """Wait for ``decided`` until the deadline, taking the escalation's outcome when it
        ends first."""
        deadline_s = self._core.options.approval_deadline_s
        await self._until(started, deadline_s, lambda: decided() or escalating.done())
        if escalating.done():
            assert pending.escalation is not None
            if pending.escalation.outcome == "pending":
                pending.escalation = self._outcome(pending.escalation, escalating)
            await self._until(started, deadline_s, decided)

    def stop(self) -> None:
        """The request is decided (or timed out): an escalation still posting is cancelled,
        a late POST would call people to nothing."""
        live, self._live = self._live, None
        if live is not None and not live.done():
            live.cancel()

    async def _until(
        self, started: datetime, deadline_s: float, condition: Callable[[], bool]
    ) -> None:
        """Wait for ``condition`` until ``deadline_s`` after ``started``; TimeoutError then."""
        left = deadline_s - (workflow.now() - started).total_seconds()
        if left <= 0:
            if not condition():
                raise TimeoutError
            return
        await self._controls.wait(condition, timeout=timedelta(seconds=left))

    @staticmethod
    def _outcome(escalation: Escalation, done: workflow.ActivityHandle[Escalated]) -> Escalation:
        """``escalation`` with what the finished activity ``done`` says."""
        try:
            result = done.result()
        except ActivityError as err:
            cause = err.cause
            details = cause.details if isinstance(cause, ApplicationError) else ()
            to = str(details[0]) if details else ""
            return escalation.model_copy(update={"to": to, "outcome": "failed"})
        return escalation.model_copy(update={"to": result.to, "outcome": result.outcome})


def with_escalation(payload: str, escalation: Escalation | None) -> str:
    """A decision row's payload, carrying ``escalation`` when the request was escalated.

    The key sits beside a signed decision's fields, outside the statement its signature covers
    (the saga, not the approver, knows it): the row's hash covers it (``docs/decisions.md``).
    """
    if escalation is None:
        return payload
    record = {
        "at": escalation.at.isoformat().replace("+00:00", "Z"),
        "to": escalation.to,
        "outcome": escalation.outcome,
    }
    # an unsigned approval's payload is ``approver=<name>``: a JSON object, once it has more to say
    body = payload_object(payload) or {"by": payload.removeprefix("approver=")}
    return to_json({**body, "escalated": record})
