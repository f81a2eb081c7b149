"""A tool call as one activity: bind its arguments, write INTENT, run the tool with heartbeats,
write EXECUTED or FAILED; finish an earlier attempt's call on a retry, and resolve a SUSPECT one.

Writing both rows inside the call's own activity keeps INTENT-before-execution while costing one
activity per call instead of three (see bench/).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python
from temporalio import activity

from sagacity.call_context import CallInfo, reset_current_call, set_current_call
from sagacity.errors import (
    Halted,
    InvalidEntry,
    JournalAhead,
    NoEffect,
    SeqTaken,
    SuspectCall,
    ToolArgumentsInvalid,
    ToolTimeout,
    UnknownTool,
)
from sagacity.evidence.redaction import could_be
from sagacity.journal import Draft, Entry, Phase, to_json
from sagacity.temporal.activities.approvals import Approvals
from sagacity.temporal.activities.heartbeat import current_beat
from sagacity.temporal.activities.notices import halted
from sagacity.temporal.activities.outcomes import outcome_from_row
from sagacity.temporal.activities.state import ActivityState
from sagacity.temporal.activities.tools import bound
from sagacity.temporal.activities.typed import non_retryable, scrubbed, typed
from sagacity.temporal.activities.writes import JournalWrites
from sagacity.temporal.models import (
    CallOutcome,
    CallRequest,
    CallStatus,
    ErrorInfo,
    Resolved,
    ResolveRequest,
    RowDraft,
    SagaState,
    failure_payload,
)
from sagacity.temporal.names import CALL_TOOL, OPEN_AND_CALL, RESOLVE_CALL
from sagacity.temporal.waits import OUTAGE_ALLOWANCE
from sagacity.tools import (
    RegisteredTool,
    Reversibility,
)

__all__ = ["Calls"]


class Calls:
    """The call path: every tool call a saga makes runs here, journaled before and after."""

    def __init__(self, state: ActivityState, writes: JournalWrites, approvals: Approvals) -> None:
        self.state = state
        self.writes = writes
        self.approvals = approvals

    @activity.defn(name=CALL_TOOL)
    @typed
    async def call_tool(self, req: CallRequest) -> CallOutcome:
        return await self._call(req)

    @activity.defn(name=OPEN_AND_CALL)
    @typed
    async def open_and_call(self, req: CallRequest) -> CallOutcome:
        """A new saga's first call: its journal claimed here (``req.opening``), not in a local
        activity first; the outcome carries the open's answer, or is that answer alone."""
        assert req.opening is not None, "an opening call says what it opens"
        binding = self._first_binding(req)
        intent = None
        if binding is not None:
            intent = self.state.draft(req.saga_id, req.tool_name, Phase.INTENT, req.input_json)
        opened, go_on, intent_row = await self.writes.open_in_call(
            req.opening, fits=self._fits(req), intent=intent
        )
        if not go_on:
            return CallOutcome(status=CallStatus.OPENED, rows=[], opened=opened)
        if intent_row is None or binding is None:
            outcome = await self._call(req)
        else:
            # the INTENT went in with the claim, as _call would have written it
            if req.anchor_intent:
                self.writes.checkpoint(intent_row)
            outcome = await self._run(req, intent_row, binding)
        outcome.opened = opened
        return outcome

    def _first_binding(self, req: CallRequest) -> tuple[RegisteredTool, dict[str, Any]] | None:
        """The tool and arguments of an opening call that may write its INTENT with the claim:
        a first attempt, under no approval (verified first), its arguments bound (a call that
        cannot run is refused before any INTENT, on the way ``_call`` refuses it)."""
        if activity.info().attempt > 1 or req.approval_seq is not None:
            return None
        try:
            return bound(self.state, req.tool_name, req.args)
        except (UnknownTool, ToolArgumentsInvalid):
            return None

    def _fits(self, req: CallRequest) -> bool:
        """Whether an opening call was scheduled as its tool's spec schedules a call (the saga
        did not know the spec yet): a tool that is irreversible or has an approval rule (its
        approval may come first), idempotent (retried otherwise) or timed otherwise runs once
        the saga knows it."""
        if req.tool_name not in self.state.tools:
            return False
        tool = self.state.tools.get(req.tool_name).tool
        info = activity.info()
        return (
            tool.reversibility is not Reversibility.IRREVERSIBLE
            and tool.options.approval is None  # its rule is judged first, in workflow code
            and not tool.options.idempotent
            and info.heartbeat_timeout == tool.options.heartbeat_timeout
            and info.start_to_close_timeout == tool.options.timeout + OUTAGE_ALLOWANCE
        )

    async def _call(self, req: CallRequest) -> CallOutcome:
        intent = self.state.draft(req.saga_id, req.tool_name, Phase.INTENT, req.input_json)
        if activity.info().attempt > 1:
            earlier = await self._resume(req, intent)
            if earlier is not None:
                return earlier
        binding = await self._bindable(req)
        if req.approval_seq is not None:
            refusal = await self.approvals.verify(req)
            if refusal is not None:
                return refusal
        try:
            # the outcome's checkpoint covers INTENT through the chain; a worker that dies
            # mid-call leaves it to the transparency log's next pass
            intent_row = await self.writes.append_at(
                intent,
                seq=req.seq,
                prev_hash=req.prev_hash,
                exclusive=True,
                anchor=req.anchor_intent,
                guarded=True,
            )
        except SeqTaken:
            # an overlapping attempt of this call wrote INTENT first: the call is its own
            earlier = await self._resume(req, intent)
            assert earlier is not None, "INTENT exists, so resume decides"
            return earlier
        outcome = await self._run(req, intent_row, binding)
        await self.approvals.consume(req)
        return outcome

    async def _bindable(self, req: CallRequest) -> tuple[RegisteredTool, dict[str, Any]]:
        """Refuse a call whose tool is unknown or whose arguments do not fit its signature,
        before its INTENT: the journal never shows a call that was not attempted. The tool and
        its arguments, bound once: the call runs with them."""
        try:
            return bound(self.state, req.tool_name, req.args)
        except (UnknownTool, ToolArgumentsInvalid):
            # its approval, if any, is spent: the approved call cannot run
            await self.approvals.consume(req)
            raise

    @activity.defn(name=RESOLVE_CALL)
    @typed
    async def resolve_call(self, req: ResolveRequest) -> Resolved:
        """Record an outcome for a call that has none (a human's word, or effect unknown).

        An attempt the worker lost track of may still have finished and written EXECUTED or
        FAILED; that row is the truth, and the statement is not written over it.
        """
        intent_row = await self.state.outlast(
            lambda: self.state.journal.get(req.saga_id, req.call_seq)
        )
        if intent_row is None:
            raise SuspectCall(f"no INTENT at seq {req.call_seq} to resolve")
        if req.approval_seq is not None:
            # the approved call started: its request is spent, whatever the resolution says
            approval_seq = req.approval_seq
            await self.state.outlast(lambda: self.state.approvals.delete(req.saga_id, approval_seq))
        existing = await self.state.outlast(
            lambda: self.state.journal.get(req.saga_id, req.call_seq + 1)
        )
        if existing is not None:
            outcome = outcome_from_row(intent_row, existing, input_json=req.row.input)
            return Resolved(outcome=outcome, recorded=False)
        row_draft = req.row
        refused = self.approvals.resolution_refused(req, intent_row)
        if refused is not None:
            # the human's word does not hold here: the outcome stays unknown, so the call is
            # compensated, and the row says why
            error = ErrorInfo(type="ResolutionRefused", message=f"resolution refused: {refused}")
            row_draft = RowDraft(
                tool_name=intent_row.tool_name,
                phase=Phase.FAILED,
                input=req.row.input,
                payload=failure_payload(error, effect_unknown=True),
            )
        elif req.resolution is not None:
            row_draft = self.approvals.signed_resolution(req.resolution, intent_row, row_draft)
        draft = self.state.draft(
            req.saga_id, intent_row.tool_name, row_draft.phase, row_draft.input, row_draft.payload
        )
        row = await self.writes.append_at(draft, seq=req.call_seq + 1, prev_hash=intent_row.hash)
        outcome = outcome_from_row(
            intent_row, row, input_json=row_draft.input, payload=row_draft.payload
        )
        return Resolved(outcome=outcome, recorded=True)

    async def _resume(self, req: CallRequest, intent: Draft) -> CallOutcome | None:
        """On a retry: finish what an earlier attempt started, never repeat an unsafe call."""
        intent_row = await self.state.outlast(lambda: self.state.journal.get(req.saga_id, req.seq))
        if intent_row is None:
            return None  # the earlier attempt died before INTENT: nothing happened yet
        if not (intent_row.same_content(intent) or _redacted_otherwise(intent_row, intent, req)):
            raise JournalAhead(
                f"saga {req.saga_id!r} seq {req.seq} holds {intent_row.tool_name} "
                f"{intent_row.phase}, not this call's INTENT"
            )
        outcome_row = await self.state.outlast(
            lambda: self.state.journal.get(req.saga_id, req.seq + 1)
        )
        if outcome_row is not None:
            await self.writes.at_tail(outcome_row)
            # the attempt that wrote it may have died before its checkpoint or seal
            sealed = self.writes.checkpoint(outcome_row, _seal_as(req, outcome_row.phase))
            await self.approvals.consume(req)
            # the attempt that wrote it is gone: the result is what the journal holds
            return outcome_from_row(
                intent_row, outcome_row, input_json=req.input_json, sealed=sealed
            )
        await self.writes.at_tail(intent_row)
        details = activity.info().heartbeat_details
        if details:
            # the tool returned, but its outcome row was not written: write it now
            recorded = json.loads(str(details[0]))
            outcome = await self._record(req, intent_row, recorded["status"], recorded["payload"])
            await self.approvals.consume(req)
            return outcome
        spec = self.state.tools.get(req.tool_name) if req.tool_name in self.state.tools else None
        if spec is not None and spec.tool.options.idempotent:
            # a retry is a new start of the tool: a halt since the first attempt holds it too
            task_queue = activity.info().task_queue
            halt = await self.state.outlast(
                lambda: self.state.halts.covering(req.saga_id, req.tool_name, task_queue)
            )
            if halt is not None:
                # held with no outcome: as for a SUSPECT call below
                self.writes.checkpoint(intent_row)
                raise await halted(
                    self.state,
                    Halted(
                        f"saga {req.saga_id!r}: the retry of {req.tool_name!r} (seq {req.seq}) "
                        f"did not start: halt {halt.id} covers it",
                        halt.id,
                    ),
                    intent_written=True,
                )
            return await self._run(req, intent_row)
        # this call's own INTENT (same content, at the tail) stays without an outcome until a
        # human resolves it (or, above, a halt is lifted): checkpoint it, so the transparency log
        # admits it as attested
        self.writes.checkpoint(intent_row)
        raise non_retryable(
            SuspectCall(
                f"INTENT seq {req.seq} of {req.tool_name!r} has no outcome: the worker died "
                "mid-call and the tool is not idempotent; a human must say whether it took effect"
            ),
            intent_row.hash,
            intent_row.input,  # as journaled: what the saga's status shows of the call
        )

    async def _run(
        self,
        req: CallRequest,
        intent_row: Entry,
        binding: tuple[RegisteredTool, dict[str, Any]] | None = None,
    ) -> CallOutcome:
        """Run the tool and write its outcome; ``binding``: the tool and arguments as bound
        before INTENT (None on a retry that resumes the call: bound here)."""
        if binding is None:
            try:
                binding = bound(self.state, req.tool_name, req.args)
            except (UnknownTool, ToolArgumentsInvalid) as exc:
                # refused before the tool was called: certainly no effect
                return await self._failed(req, intent_row, exc, effect_unknown=False)
        tool, kwargs = binding
        try:
            result = await self._invoke(req, tool, kwargs)
        except Exception as exc:
            clean = isinstance(exc, (NoEffect, *tool.tool.options.no_effect_on))
            if (
                not clean
                and tool.tool.options.idempotent
                and activity.info().attempt < _idempotent_attempts()
            ):
                # Temporal retries an idempotent tool; FAILED is written on the last try
                raise scrubbed(self.state.redactor, req.tool_name, exc) from None
            return await self._failed(req, intent_row, exc, effect_unknown=not clean)
        try:
            payload = to_json(_json_data(result))
        except (TypeError, ValueError) as exc:
            # the effect happened: journal it as EXECUTED so it is compensated, and say why
            # its result could not be kept
            payload = to_json({"unserializable_result": type(result).__name__, "error": str(exc)})
            outcome = await self._record(req, intent_row, CallStatus.EXECUTED, payload)
            outcome.error = ErrorInfo(
                type="ResultNotSerializable",
                message=f"tool {req.tool_name!r} returned a {type(result).__name__}, "
                f"which cannot be journaled as JSON: {exc}",
            )
            return outcome
        return await self._record(req, intent_row, CallStatus.EXECUTED, payload)

    async def _failed(
        self, req: CallRequest, intent_row: Entry, exc: BaseException, *, effect_unknown: bool
    ) -> CallOutcome:
        error = ErrorInfo(type=type(exc).__name__, message=str(exc) or type(exc).__name__)
        payload = failure_payload(error, effect_unknown=effect_unknown)
        # the row's draft scrubs the message, and the outcome is read back from the row
        return await self._record(req, intent_row, CallStatus.FAILED, payload)

    async def _invoke(self, req: CallRequest, tool: RegisteredTool, kwargs: dict[str, Any]) -> Any:
        token = set_current_call(CallInfo(req.saga_id, req.seq, activity.info().attempt))
        timeout = tool.tool.options.timeout.total_seconds()
        try:
            # the tool's own time limit; the activity's is longer, to wait out a journal outage
            async with asyncio.timeout(timeout):
                if tool.tool.is_async:
                    return await tool.tool.fn(**kwargs)
                return await asyncio.to_thread(tool.tool.fn, **kwargs)
        except TimeoutError:
            raise ToolTimeout(
                f"tool {req.tool_name!r} did not return within {timeout:g}s; "
                "whether it took effect is unknown"
            ) from None
        finally:
            reset_current_call(token)

    async def _record(
        self, req: CallRequest, intent_row: Entry, status: CallStatus | str, payload: str
    ) -> CallOutcome:
        status = CallStatus(status)
        phase = Phase.EXECUTED if status is CallStatus.EXECUTED else Phase.FAILED
        draft = self.state.draft(req.saga_id, req.tool_name, phase, req.input_json, payload)
        beats = current_beat()
        if beats is not None:
            # from now on every heartbeat carries the outcome (sent at once if the write has to
            # wait): a retry writes it from there instead of calling the tool again or calling
            # the call SUSPECT
            beats.outcome = (status.value, payload)
        try:
            row = await self.writes.append_at(
                draft, seq=req.seq + 1, prev_hash=intent_row.hash, anchor=False
            )
        except InvalidEntry as exc:
            if status is not CallStatus.EXECUTED:
                raise
            # the tool ran but the database refuses its result (a NUL byte, say): the effect
            # is journaled all the same, so it is compensated
            kept = to_json({"unjournalable_result": str(exc)[:500]})
            return await self._record(req, intent_row, status, kept)
        sealed = self.writes.checkpoint(row, _seal_as(req, phase))
        return outcome_from_row(
            intent_row, row, input_json=req.input_json, payload=payload, sealed=sealed
        )


def _seal_as(req: CallRequest, outcome: Phase) -> SagaState | None:
    """The state to seal a call's outcome row in: a FAILED call compensates, so only EXECUTED."""
    return req.seal_as if outcome is Phase.EXECUTED else None


def _redacted_otherwise(row: Entry, intent: Draft, req: CallRequest) -> bool:
    """Whether ``row`` is this call's INTENT as an earlier attempt redacted it under other rules
    or another fingerprint key (a worker deployed between the attempts)."""
    if (row.saga_id, row.tool_name, row.phase) != (intent.saga_id, intent.tool_name, intent.phase):
        return False
    try:
        return could_be(json.loads(row.input), req.args)
    except ValueError:
        return False


def _idempotent_attempts() -> int:
    """The attempt bound travels in the activity's retry policy; default when absent."""
    policy = activity.info().retry_policy
    return policy.maximum_attempts if policy and policy.maximum_attempts else 3


def _json_data(value: Any) -> Any:
    """A tool's result with its pydantic models and dataclasses (nested in lists and dicts too)
    as JSON data, which a typed ``saga.call`` turns back into them; anything else as it is."""
    if isinstance(value, BaseModel) or (
        dataclasses.is_dataclass(value) and not isinstance(value, type)
    ):
        return to_jsonable_python(value)
    if isinstance(value, list | tuple):
        return [_json_data(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_data(v) for k, v in value.items()}
    return value
