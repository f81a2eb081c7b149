"""The call path: one tool call journaled, started, recovered when its activity is lost, settled.

A call goes through the approval gate when its tool is irreversible or its ``needs_approval`` rule
matches the arguments, waits out a halt, and when its activity ends without an outcome the journal
says what happened (a call whose INTENT has no outcome is SUSPECT). An effect an earlier run left
live for the same call is adopted instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from sagacity.errors import ApprovalRejected, ToolArgumentsInvalid, ToolFailed, UnknownTool
from sagacity.journal.canonical import to_json
from sagacity.journal.phases import APPROVAL_GATE, SUPERSEDED, Phase
from sagacity.rules import asks
from sagacity.temporal import limits, names
from sagacity.temporal.failures import error_message, error_type, halt_notice
from sagacity.temporal.models import (
    CallOutcome,
    CallRequest,
    CallStatus,
    ErrorInfo,
    Head,
    RowDraft,
    SagaOpen,
    SagaState,
    ToolSpec,
    failure_payload,
)
from sagacity.temporal.saga.controls import Controls
from sagacity.temporal.saga.core import AHEAD, Desync, SagaCore, loads
from sagacity.temporal.saga.ending import Ending
from sagacity.temporal.saga.gate import Gate
from sagacity.temporal.saga.halts import Halts
from sagacity.temporal.saga.journal import Journal
from sagacity.temporal.saga.patches import PAYLOAD_LIMIT_PATCH, QUEUED_CALLS_PATCH
from sagacity.temporal.saga.suspect import Suspects
from sagacity.temporal.saga.view import View
from sagacity.temporal.waits import OUTAGE_ALLOWANCE
from sagacity.tools import Reversibility, ToolOptions

#: activity error types of a call the worker refused before its INTENT: the tool never ran
_REFUSED_BEFORE_INTENT = frozenset({"ToolArgumentsInvalid", "UnknownTool"})

_DEFAULTS = ToolOptions()
#: what an opening call assumes of its tool, the catalog unknown: a tool of the defaults
_ASSUMED = ToolSpec(
    name="",
    reversibility=Reversibility.REVERSIBLE,
    idempotent=_DEFAULTS.idempotent,
    has_compensation=True,
    timeout_s=_DEFAULTS.timeout.total_seconds(),
    heartbeat_timeout_s=_DEFAULTS.heartbeat_timeout.total_seconds(),
)


def _check_origin(tool: str, spec: ToolSpec | None, origin: str | None) -> None:
    if spec is not None and origin and spec.origin and spec.origin != origin:
        # the worker's tool of that name is another function: running it would run what
        # the workflow never named (and hand back a result of another type)
        raise UnknownTool(
            f"the worker's tool {tool!r} is {spec.origin}, not {origin}: register "
            f"{origin} on the worker, or give one of them another name="
        )


class Calls:
    """Makes the saga's tool calls, one at a time (the caller holds the core's lock)."""

    def __init__(
        self,
        core: SagaCore,
        controls: Controls,
        halts: Halts,
        ending: Ending,
        view: View,
        journal: Journal,
        gate: Gate,
        suspects: Suspects,
    ) -> None:
        self._core = core
        self._controls = controls
        self._halts = halts
        self._ending = ending
        self._view = view
        self._journal = journal
        self._gate = gate
        self._suspects = suspects

    async def call(self, tool: str, args: dict[str, Any], origin: str | None, *, last: bool) -> Any:
        """Run the call of ``tool`` with ``args`` (named JSON data): its result, or raised.

        ``last``: the body's last call (``call_last``): the saga is ending while it runs.
        """
        if not last:
            return await self._call_locked(tool, args, origin)
        self._core.ending = True
        try:
            return await self._call_locked(tool, args, origin)
        finally:
            self._core.ending = False

    async def _call_locked(self, tool: str, args: dict[str, Any], origin: str | None) -> Any:
        # a new saga's first call may open its journal itself: the catalog comes with its answer
        opening = self._view.opening()
        if opening is not None:
            # a Temporal cancel already asked lands here, before the call that opens the
            # journal starts (which a cancel does not break): the saga ends aborted, with
            # nothing run, as it does when the cancel lands in an open of its own
            await asyncio.sleep(0)
        catalog = await self._view.tools() if opening is None else {}
        self._controls.raise_if_aborted()
        if self._core.compensating and workflow.patched(QUEUED_CALLS_PATCH):
            # queued behind the lock (a parallel call) while the saga chose to compensate:
            # run now, it would make an effect only to undo it, or wait on an approver meanwhile
            raise ToolFailed(
                tool, "SagaCompensating", "the saga began to compensate first", ran=False
            )
        spec = catalog.get(tool)
        _check_origin(tool, spec, origin)
        try:
            input_json = to_json(args)
        except ValueError as exc:  # NaN or an infinity: no JSON, so no journal row
            raise ToolArgumentsInvalid(f"arguments for tool {tool!r}: {exc}") from None
        size = limits.json_size(input_json)
        if size > limits.MAX_VALUE_BYTES and workflow.patched(PAYLOAD_LIMIT_PATCH):
            # the call's activity could never be scheduled: refused before INTENT rather than
            # a workflow task that fails for ever (histories from before replay as they ran)
            limits.check(f"the arguments of tool {tool!r}", size)
        while True:
            adopted = self._view.adopt(tool, args, input_json)
            if adopted is not None:
                return adopted.result
            run_args, run_json = args, input_json
            try:
                approval_seq: int | None = None
                if spec is not None and spec.reversibility is Reversibility.IRREVERSIBLE:
                    approval_seq = await self._gate.await_approval(spec, input_json)
                elif spec is not None and spec.approval is not None and asks(spec.approval, args):
                    # no patch: only a tool declared with needs_approval= has a rule in the
                    # catalog, and no history recorded before the option existed holds one
                    approval_seq = await self._gate.await_approval(spec, input_json, spec.approval)
                if approval_seq is not None:
                    run_args, run_json = self._approved(args, input_json)
                outcome = await self._call(spec, tool, run_args, run_json, approval_seq, opening)
            except Desync:
                # an opening call that failed opens the journal as a saga's start would
                await (self._view.tools() if opening is not None else self._view.catch_up())
                self._controls.raise_if_aborted()
            else:
                if outcome.status is not CallStatus.OPENED:
                    if run_args is not args and outcome.rows:
                        self._gate.edits.ran(outcome.rows[0].seq)
                    return self._settle(tool, run_args, outcome)
            if opening is not None:
                # the journal is open now: the call goes as the catalog says
                opening, spec = None, (await self._view.tools()).get(tool)
                _check_origin(tool, spec, origin)

    def _approved(self, args: dict[str, Any], input_json: str) -> tuple[dict[str, Any], str]:
        """The arguments the approved call runs with: an approver's edit, else as proposed."""
        approval = self._gate.approval
        if approval is None or approval.args is None:
            return args, input_json
        return approval.args, to_json(approval.args)

    async def _call(
        self,
        spec: ToolSpec | None,
        tool: str,
        args: dict[str, Any],
        input_json: str,
        approval_seq: int | None,
        opening: SagaOpen | None = None,
    ) -> CallOutcome:
        core, controls, gate, ending = self._core, self._controls, self._gate, self._ending
        seq = core.head.seq + 1
        approval = gate.approval if approval_seq else None
        request = CallRequest(
            saga_id=core.saga_id,
            seq=seq,
            prev_hash=core.head.hash,
            tool_name=tool,
            args=args,
            approval_seq=approval_seq,
            approved_input_hash=gate.approved_input_hash if approval_seq is not None else None,
            approved_request_hash=gate.approved_request_hash if approval_seq is not None else None,
            # the saga completes after this call, unless a failure was swallowed or it aborted
            seal_as=None
            if core.failures or controls.aborted
            else ending.seal_as(SagaState.COMPLETED, opening=opening is not None),
            anchor_intent=ending.anchor_intent(),
            approver=approval.approver if approval else None,
            approval_signature=approval.signature if approval else None,
            edited=approval is not None and approval.args is not None,
            opening=opening,
        )
        core.running = tool
        try:
            while True:
                try:
                    # an opening call is scheduled as a tool of the defaults is; its worker
                    # runs the tool only if that is how the tool's spec schedules it
                    outcome = await controls.shielded(
                        self._start_call(spec or (_ASSUMED if opening else None), request)
                    )
                    break
                except ActivityError as err:
                    notice = halt_notice(err)
                    if notice is None:
                        raise
                    halted = err
                # the same call goes at the same seq once the halt lifts
                await self._halts.held(notice, forward=True)
                if controls.aborted:
                    if notice.intent_written:
                        # a retry was held after its INTENT: the first attempt may have acted
                        return await self._recover_call(tool, seq, input_json, halted, approval_seq)
                    if approval_seq is not None:
                        await self._journal.close_request(approval_seq)
                    controls.raise_if_aborted()
        except ActivityError as err:
            kind = error_type(err)
            if kind == "SuspectCall":
                cause = err.cause
                details = cause.details if isinstance(cause, ApplicationError) else ()
                intent_hash = str(details[0]) if details else ""
                # the INTENT's input as journaled, which status shows (older workers sent none)
                shown = str(details[1]) if len(details) > 1 else input_json
                if opening is not None:
                    # the catalog and the keys first, read after this call's INTENT (the tail)
                    await self._view.catch_up(after=Head(seq=seq, hash=intent_hash))
                return await self._suspects.resolve(
                    tool, seq, intent_hash, input_json, error_message(err), approval_seq, shown
                )
            if opening is not None and kind == "SagaIdTaken":
                # as an open refuses it: nothing can safely run, so the workflow fails
                raise ApplicationError(error_message(err), type=kind, non_retryable=True) from None
            if kind in AHEAD or opening is not None:
                raise Desync from err
            return await self._recover_call(tool, seq, input_json, err, approval_seq)
        finally:
            core.running = None
        if outcome.opened is not None:
            await self._view.opened_in_call(outcome.opened)
        if outcome.status is CallStatus.OPENED:
            return outcome  # nothing journaled: the next INTENT is checkpointed if it must be
        self._suspects.finished(seq)
        core.track(outcome.rows)
        ending.anchored()
        executed = outcome.status is CallStatus.EXECUTED
        ending.wrote(outcome.rows, request.seal_as if executed else None)
        return outcome

    def _start_call(self, spec: ToolSpec | None, request: CallRequest) -> Awaitable[CallOutcome]:
        idempotent = spec is not None and spec.idempotent
        return workflow.start_activity(
            names.OPEN_AND_CALL if request.opening else names.CALL_TOOL,
            request,
            result_type=CallOutcome,
            # the tool's own limit is enforced inside; this one leaves room to wait out a
            # journal outage
            start_to_close_timeout=timedelta(seconds=spec.timeout_s if spec else 60)
            + OUTAGE_ALLOWANCE,
            heartbeat_timeout=self._core.heartbeat_timeout(spec),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(seconds=1),
                maximum_interval=timedelta(seconds=10),
                maximum_attempts=self._core.options.idempotent_attempts if idempotent else 0,
            ),
        )

    async def _recover_call(
        self,
        tool: str,
        seq: int,
        input_json: str,
        err: ActivityError,
        approval_seq: int | None = None,
    ) -> CallOutcome:
        """The call's activity ended without an outcome: the journal says what happened.

        No INTENT: the tool never started. An outcome row: it stands. INTENT alone: the tool
        may have taken effect, so the call is FAILED with its effect unknown (and compensated).
        """
        error = ErrorInfo(type=error_type(err), message=error_message(err))
        row = RowDraft(
            tool_name=tool,
            phase=Phase.FAILED,
            input=input_json,
            payload=failure_payload(error, effect_unknown=True),
        )
        try:
            resolved = await self._journal.record_outcome(seq, row, approval_seq)
        except ActivityError:
            # no INTENT was written: nothing ran, and there is no row to pair a FAILED with
            self._core.failures.append(error)
            refused = error.type in _REFUSED_BEFORE_INTENT
            raise ToolFailed(tool, error.type, error.message, ran=not refused) from None
        self._core.track(resolved.outcome.rows)
        return resolved.outcome

    def _settle(self, tool: str, args: dict[str, Any], outcome: CallOutcome) -> Any:
        core, view = self._core, self._view
        if outcome.status is CallStatus.REFUSED:
            assert outcome.error is not None
            core.failures.append(outcome.error)
            raise ApprovalRejected(outcome.error.message)
        call_seq = outcome.rows[0].seq
        view.note_view(call_seq, outcome.journaled)
        if outcome.status is CallStatus.EXECUTED:
            view.took_effect(tool, call_seq, args, outcome.result, journaled=outcome.journaled)
            if outcome.result_withheld:
                # undone with the result the journal holds, and the input it was called with
                view.result_in_journal(call_seq, args)
        elif outcome.effect_unknown:
            # the call may have done something before it failed: undo whatever it did
            view.took_effect(tool, call_seq, args, None, failed=True, journaled=outcome.journaled)
        if outcome.error is not None:
            core.failures.append(outcome.error)
            raise ToolFailed(tool, outcome.error.type, outcome.error.message)
        self._controls.raise_if_aborted()
        return outcome.result

    async def settle_left_open(self) -> None:
        """A call or an approval request an earlier run left open is settled before going on."""
        gate = self._view.take_open_gate()
        if gate is not None:
            # nobody decided it and the run that asked is gone; this run asks again if it must
            await self._journal.append(
                [
                    RowDraft(
                        tool_name=APPROVAL_GATE,
                        phase=Phase.REJECTED,
                        input=gate.input,
                        payload=to_json(
                            {"by": "sagacity", "reason": SUPERSEDED + "the run that asked ended"}
                        ),
                    )
                ]
            )
            await self._journal.close_request(gate.seq)
        intent = self._view.take_open_intent()
        if intent is not None:
            outcome = await self._suspects.resolve(
                intent.tool_name,
                intent.seq,
                intent.hash,
                intent.input,
                "an earlier run of this saga left this call without an outcome",
            )
            if outcome.status is CallStatus.EXECUTED:
                # the input is the INTENT row's (the run that had the real one is gone), the
                # result the human's or the one another attempt wrote: where either is not
                # real, the undo reads the rows, which say why it cannot run
                journaled = outcome.journaled
                _, by_ref = self._view.from_rows(intent, None, None, outcome.result_withheld)
                self._view.took_effect(
                    intent.tool_name,
                    intent.seq,
                    loads(intent.input) or {},
                    journaled.result if by_ref and journaled else outcome.result,
                    adoptable=True,
                    journaled=None if by_ref else journaled,
                    by_ref=by_ref,
                )
