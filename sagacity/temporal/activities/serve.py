"""The activities one worker serves: its parts, composed under their Temporal names."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python
from temporalio import activity
from temporalio.exceptions import ApplicationError

from sagacity.errors import (
    Halted,
    InvalidEntry,
    JournalAhead,
    NoEffect,
    PermanentCompensationError,
    ResultUnavailable,
    SeqConflict,
    SeqTaken,
    SuspectCall,
    ToolArgumentsInvalid,
    ToolTimeout,
    UnknownTool,
)
from sagacity.evidence.checkpoints import CheckpointWriter
from sagacity.evidence.decisions import (
    Keyring,
    Policy,
)
from sagacity.evidence.redaction import Redactor, could_be
from sagacity.journal import Draft, Entry, JournaledResult, Phase, to_json
from sagacity.journal.results import read_input, read_result
from sagacity.store.approvals import ApprovalStore
from sagacity.store.halts import HaltStore
from sagacity.store.journal import JournalStore
from sagacity.temporal.activities.approvals import Approvals
from sagacity.temporal.activities.heartbeat import current_beat
from sagacity.temporal.activities.notices import halted
from sagacity.temporal.activities.outcomes import outcome_from_row, ref
from sagacity.temporal.activities.state import DEFAULT_OUTAGE_WINDOW, ActivityState
from sagacity.temporal.activities.tools import ToolActivities, bound
from sagacity.temporal.activities.typed import non_retryable, scrubbed, typed
from sagacity.temporal.activities.writes import JournalWrites
from sagacity.temporal.models import (
    CallOutcome,
    CallRequest,
    CallStatus,
    CompensateRequest,
    ErrorInfo,
    Resolved,
    ResolveRequest,
    RowDraft,
    RowRef,
    SagaState,
    failure_payload,
    undo_attempt_detail,
)
from sagacity.temporal.names import (
    CALL_TOOL,
    COMPENSATE,
    RESOLVE_CALL,
)
from sagacity.tools import (
    CallInfo,
    CompensationContext,
    RegisteredTool,
    ToolRegistry,
    reset_current_call,
    set_current_call,
)

#: a compensation's errors that no retry can fix: declared so, or a programming error in the
#: undo itself (a missing key of its context is a PermanentCompensationError too)
_PERMANENT_UNDO = (PermanentCompensationError, TypeError, AttributeError, NameError)


class SagaActivities:
    """The activities one worker serves, bound to its journal, approval store and tools."""

    def __init__(
        self,
        journal: JournalStore,
        approvals: ApprovalStore,
        tools: ToolRegistry,
        *,
        redactor: Redactor | None = None,
        checkpoints: CheckpointWriter | None = None,
        outage_window: timedelta = DEFAULT_OUTAGE_WINDOW,
        keyring: Keyring | None = None,
        policy: Policy | None = None,
    ) -> None:
        self.state = ActivityState(
            journal=journal,
            approvals=approvals,
            tools=tools,
            redactor=redactor or Redactor(),
            checkpoints=checkpoints,
            outage_window=outage_window,
            keyring=keyring,
            policy=policy or Policy(),
            halts=HaltStore(journal.pool),
        )
        #: the namespaces whose sagas show their state in search attributes (registered there)
        self.visible_in = self.state.visible_in
        catalog = ToolActivities(self.state)
        self._writes = JournalWrites(self.state)
        self._approvals = Approvals(self.state, self._writes)
        # each activity is its part's, under the Temporal name the part gives it
        self.describe_tools = catalog.describe_tools
        self.validate_steps = catalog.validate_steps
        self.open_saga = self._writes.open_saga
        self.append = self._writes.append
        self.seal_saga = self._writes.seal_saga
        self.read_halt = self._writes.read_halt
        self.open_approval = self._approvals.open_approval
        self.close_approval = self._approvals.close_approval

    def all(self) -> list[Callable[..., Awaitable[Any]]]:
        return [
            self.describe_tools,
            self.open_saga,
            self.call_tool,
            self.compensate,
            self.append,
            self.open_approval,
            self.close_approval,
            self.resolve_call,
            self.seal_saga,
            self.validate_steps,
            self.read_halt,
        ]

    @activity.defn(name=CALL_TOOL)
    @typed
    async def call_tool(self, req: CallRequest) -> CallOutcome:
        intent = self.state.draft(req.saga_id, req.tool_name, Phase.INTENT, req.input_json)
        if activity.info().attempt > 1:
            earlier = await self._resume(req, intent)
            if earlier is not None:
                return earlier
        await self._bindable(req)
        if req.approval_seq is not None:
            refusal = await self._approvals.verify(req)
            if refusal is not None:
                return refusal
        try:
            # the outcome's checkpoint covers INTENT through the chain; a worker that dies
            # mid-call leaves it to the transparency log's next pass
            intent_row = await self._writes.append_at(
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
        outcome = await self._run(req, intent_row)
        await self._approvals.consume(req)
        return outcome

    async def _bindable(self, req: CallRequest) -> None:
        """Refuse a call whose tool is unknown or whose arguments do not fit its signature,
        before its INTENT: the journal never shows a call that was not attempted."""
        try:
            bound(self.state, req.tool_name, req.args)
        except (UnknownTool, ToolArgumentsInvalid):
            # its approval, if any, is spent: the approved call cannot run
            await self._approvals.consume(req)
            raise

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
            await self._writes.at_tail(outcome_row)
            # the attempt that wrote it may have died before its checkpoint or seal
            sealed = self._writes.checkpoint(outcome_row, _seal_as(req, outcome_row.phase))
            await self._approvals.consume(req)
            # the attempt that wrote it is gone: the result is what the journal holds
            return outcome_from_row(
                intent_row, outcome_row, input_json=req.input_json, sealed=sealed
            )
        await self._writes.at_tail(intent_row)
        details = activity.info().heartbeat_details
        if details:
            # the tool returned, but its outcome row was not written: write it now
            recorded = json.loads(str(details[0]))
            outcome = await self._record(req, intent_row, recorded["status"], recorded["payload"])
            await self._approvals.consume(req)
            return outcome
        spec = self.state.tools.get(req.tool_name) if req.tool_name in self.state.tools else None
        if spec is not None and spec.tool.options.idempotent:
            # a retry is a new start of the tool: a halt since the first attempt holds it too
            task_queue = activity.info().task_queue
            halt = await self.state.outlast(
                lambda: self.state.halts.covering(req.saga_id, req.tool_name, task_queue)
            )
            if halt is not None:
                self._writes.checkpoint(
                    intent_row
                )  # held with no outcome: as for a SUSPECT call below
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
        self._writes.checkpoint(intent_row)
        raise non_retryable(
            SuspectCall(
                f"INTENT seq {req.seq} of {req.tool_name!r} has no outcome: the worker died "
                "mid-call and the tool is not idempotent; a human must say whether it took effect"
            ),
            intent_row.hash,
            intent_row.input,  # as journaled: what the saga's status shows of the call
        )

    async def _run(self, req: CallRequest, intent_row: Entry) -> CallOutcome:
        try:
            tool, kwargs = bound(self.state, req.tool_name, req.args)
        except (UnknownTool, ToolArgumentsInvalid) as exc:
            # refused before the tool was called: certainly no effect
            return await self._failed(req, intent_row, exc, effect_unknown=False)
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
            row = await self._writes.append_at(
                draft, seq=req.seq + 1, prev_hash=intent_row.hash, anchor=False
            )
        except InvalidEntry as exc:
            if status is not CallStatus.EXECUTED:
                raise
            # the tool ran but the database refuses its result (a NUL byte, say): the effect
            # is journaled all the same, so it is compensated
            kept = to_json({"unjournalable_result": str(exc)[:500]})
            return await self._record(req, intent_row, status, kept)
        sealed = self._writes.checkpoint(row, _seal_as(req, phase))
        return outcome_from_row(
            intent_row, row, input_json=req.input_json, payload=payload, sealed=sealed
        )

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
        refused = self._approvals.resolution_refused(req, intent_row)
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
            row_draft = self._approvals.signed_resolution(req.resolution, intent_row, row_draft)
        draft = self.state.draft(
            req.saga_id, intent_row.tool_name, row_draft.phase, row_draft.input, row_draft.payload
        )
        row = await self._writes.append_at(draft, seq=req.call_seq + 1, prev_hash=intent_row.hash)
        outcome = outcome_from_row(
            intent_row, row, input_json=row_draft.input, payload=row_draft.payload
        )
        return Resolved(outcome=outcome, recorded=True)

    @activity.defn(name=COMPENSATE)
    @typed
    async def compensate(self, req: CompensateRequest) -> list[RowRef]:
        """Undo one effect, once: whichever attempt holds the undo lock runs it.

        Every attempt heartbeats from its start, and looks for the COMPENSATED row once it holds
        the lock (a later attempt also before), so an attempt that overlaps a slow one, or follows
        one that died after writing, never undoes twice.
        """
        if req.by_ref or req.result_by_ref:
            req = await self._from_journal(req)
        done = self.state.draft(req.saga_id, req.tool_name, Phase.COMPENSATED, req.input_json)
        tool = self.state.tools.get(req.tool_name)
        if tool.compensation is None:
            raise UnknownTool(f"tool {req.tool_name!r} has no compensation")
        first_try = activity.info().attempt == 1
        while True:
            # only a later attempt can find the row already written before it takes the lock
            if not first_try:
                written = await self._compensated(req, done)
                if written is not None:
                    return written
            first_try = False
            async with self.state.journal.exclusive(req.saga_id, req.call_seq) as mine:
                if mine:
                    # the lock holder that finished before us may have written it
                    written = await self._compensated(req, done)
                    if written is not None:
                        return written
                    await self._unless_held(req)
                    await self._undo(req, tool)
                    try:
                        row = await self._writes.append_at(
                            done, seq=req.seq, prev_hash=req.prev_hash, anchor=False
                        )
                    except SeqConflict:
                        # the undo ran, so the journal must say so: another writer took the seq
                        # (a rollback of this saga's terminated run, while this undo ran), and
                        # the row goes after the tail, where that rollback's own attempt at
                        # this undo looks for it (under this lock) before running it again
                        row = await self.state.outlast(lambda: self.state.journal.append(done))
                    return [ref(row, sealed=self._writes.checkpoint(row, req.seal_as))]
            # another attempt is undoing this effect right now: wait for it to finish or die
            await asyncio.sleep(1.0)

    async def _unless_held(self, req: CompensateRequest) -> None:
        """Raise ``Halted`` when a freezing halt or a quarantine covers this compensation."""
        task_queue = activity.info().task_queue
        halt = await self.state.outlast(
            lambda: self.state.halts.holding(req.saga_id, req.tool_name, task_queue)
        )
        if halt is not None:
            raise await halted(
                self.state,
                Halted(
                    f"saga {req.saga_id!r}: the compensation of {req.tool_name!r} (call seq "
                    f"{req.call_seq}) did not start: halt {halt.id} holds it",
                    halt.id,
                ),
            )

    async def _from_journal(self, req: CompensateRequest) -> CompensateRequest:
        """An effect carried by reference: its input (unless only its result is) and result, as
        the journal holds them (read by ``read_result``). ``ResultUnavailable`` when the journal
        holds no real one: redacted, or never journaled."""
        intent = await self.state.outlast(lambda: self.state.journal.get(req.saga_id, req.call_seq))
        outcome = await self.state.outlast(
            lambda: self.state.journal.get(req.saga_id, req.call_seq + 1)
        )
        if intent is None or intent.phase is not Phase.INTENT or intent.tool_name != req.tool_name:
            raise SeqConflict(
                f"saga {req.saga_id!r} seq {req.call_seq} is not an INTENT of {req.tool_name!r}"
            )
        executed = outcome is not None and outcome.phase is Phase.EXECUTED
        result = read_result(outcome.payload) if executed and outcome else JournaledResult()
        input_json = intent.input if req.by_ref else req.input_json
        # an input the workflow has only as journaled is the INTENT row's text: real or redacted
        missing = result.missing or (
            read_input(input_json).missing if input_json == intent.input else None
        )
        if missing is not None:
            # an undo given markers (or nothing) in place of what the call used would act on
            # data that never existed: it does not run, and the saga is flagged for a human
            raise non_retryable(
                ResultUnavailable(
                    f"the compensation of {req.tool_name!r} (call seq {req.call_seq}) did not "
                    f"run: {missing}; a human must undo the effect"
                )
            )
        return req.model_copy(
            update={
                "input_json": input_json,
                "result": result.value,
                "by_ref": False,
                "result_by_ref": False,
            }
        )

    async def _compensated(self, req: CompensateRequest, done: Draft) -> list[RowRef] | None:
        existing = await self.state.outlast(lambda: self.state.journal.get(req.saga_id, req.seq))
        if existing is None:
            return None
        if not existing.same_content(done):
            raise JournalAhead(
                f"saga {req.saga_id!r} seq {req.seq} holds {existing.tool_name} "
                f"{existing.phase}, not this compensation"
            )
        await self._writes.at_tail(existing)
        # the attempt that wrote it may have died before its checkpoint or seal
        return [ref(existing, sealed=self._writes.checkpoint(existing, req.seal_as))]

    async def _undo(self, req: CompensateRequest, tool: RegisteredTool) -> None:
        assert tool.compensation is not None
        ctx = CompensationContext(
            saga_id=req.saga_id,
            seq=req.call_seq,
            tool_name=req.tool_name,
            input=json.loads(req.input_json) if req.input_json else {},
            result=req.result,
            attempt=activity.info().attempt,
            failed=req.failed,
        )
        try:
            if inspect.iscoroutinefunction(tool.compensation):
                await tool.compensation(ctx)
            else:
                await asyncio.to_thread(tool.compensation, ctx)
        except Exception as exc:
            # journaled by the workflow as COMPENSATION_FAILED once the retries run out, or at
            # once when no retry can help
            error = scrubbed(self.state.redactor, req.tool_name, exc)
            if not (error.non_retryable or isinstance(exc, _PERMANENT_UNDO)):
                raise error from None
            raise ApplicationError(
                error.message,
                *error.details,
                undo_attempt_detail(activity.info().attempt),
                type=error.type,
                non_retryable=True,
            ) from None

    def _scrubbed(self, tool_name: str, exc: Exception) -> ApplicationError:
        """How a tool's or an undo's error ``exc`` leaves this worker's activities."""
        return scrubbed(self.state.redactor, tool_name, exc)


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
