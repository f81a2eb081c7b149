"""Activities: where tool calls, compensations and journal writes actually happen.

A tool call is one activity that writes INTENT, runs the tool and writes the outcome. Writing
both rows inside the call's own activity keeps INTENT-before-execution while costing one
activity per call instead of three (see bench/). Every append is at a seq the workflow chose,
so a retried or replayed activity finds its own row and moves on instead of writing twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from sagacity.errors import (
    SagacityError,
    SeqTaken,
    SuspectCall,
    ToolArgumentsInvalid,
    UnknownTool,
)
from sagacity.evidence.checkpoints import CheckpointWriter
from sagacity.evidence.redaction import Redactor
from sagacity.journal import Draft, Entry, Phase, input_hash, to_json
from sagacity.store.approvals import ApprovalRequest, ApprovalStore
from sagacity.store.journal import JournalStore
from sagacity.temporal.models import (
    AppendRequest,
    ApprovalClose,
    ApprovalOpen,
    ApprovalOpened,
    CallOutcome,
    CallRequest,
    CallStatus,
    CompensateRequest,
    ErrorInfo,
    Resolved,
    ResolveRequest,
    RowRef,
    ToolSpec,
)
from sagacity.temporal.names import (
    APPEND,
    CALL_TOOL,
    CLOSE_APPROVAL,
    COMPENSATE,
    DESCRIBE_TOOLS,
    OPEN_APPROVAL,
    RESOLVE_CALL,
    VERIFICATION_REFUSED,
)
from sagacity.tools import (
    CallInfo,
    CompensationContext,
    RegisteredTool,
    ToolRegistry,
    reset_current_call,
    set_current_call,
)


def _ref(entry: Entry) -> RowRef:
    return RowRef(seq=entry.seq, tool_name=entry.tool_name, phase=entry.phase, hash=entry.hash)


def _error_payload(exc: BaseException) -> str:
    return to_json({"type": type(exc).__name__, "message": str(exc)})


def _non_retryable(exc: SagacityError, *details: Any) -> ApplicationError:
    return ApplicationError(str(exc), *details, type=type(exc).__name__, non_retryable=True)


@contextlib.asynccontextmanager
async def _heartbeating() -> AsyncIterator[None]:
    """Heartbeat while the body runs, so a dead worker is noticed within the heartbeat timeout."""
    timeout = activity.info().heartbeat_timeout
    interval = max(timeout.total_seconds() / 3, 0.1) if timeout else 10.0

    async def beat() -> None:
        # the first beat waits a third of the timeout: a fast call sends none at all
        while True:
            await asyncio.sleep(interval)
            activity.heartbeat()

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


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
    ) -> None:
        self.journal = journal
        self.approvals = approvals
        self.tools = tools
        self.redactor = redactor or Redactor()
        self.checkpoints = checkpoints

    def _draft(
        self, saga_id: str, tool_name: str, phase: Phase, input: str = "", payload: str = ""
    ) -> Draft:
        """A row as it will be stored: secrets redacted before anything reaches Postgres."""
        return self.redactor.draft(Draft(saga_id, tool_name, phase, input, payload)).value

    async def _append_at(
        self, draft: Draft, *, seq: int, prev_hash: str, exclusive: bool = False
    ) -> Entry:
        entry = await self.journal.append_at(
            draft, seq=seq, prev_hash=prev_hash, exclusive=exclusive
        )
        self._checkpoint(entry)
        return entry

    def _checkpoint(self, entry: Entry) -> None:
        # the head also lives outside Postgres, signed, so a rewrite or a cut tail shows
        if self.checkpoints is not None:
            self.checkpoints.record(entry.saga_id, entry.seq, entry.hash)

    def all(self) -> list[Callable[..., Awaitable[Any]]]:
        return [
            self.describe_tools,
            self.call_tool,
            self.compensate,
            self.append,
            self.open_approval,
            self.close_approval,
            self.resolve_call,
        ]

    @activity.defn(name=DESCRIBE_TOOLS)
    async def describe_tools(self) -> list[ToolSpec]:
        return [
            ToolSpec(
                name=t.name,
                description=t.tool.description,
                reversibility=t.tool.reversibility,
                idempotent=t.tool.options.idempotent,
                has_compensation=t.compensation is not None,
                params_schema=t.params_schema,
                timeout_s=t.tool.options.timeout.total_seconds(),
                heartbeat_timeout_s=t.tool.options.heartbeat_timeout.total_seconds(),
            )
            for t in self.tools
        ]

    @activity.defn(name=APPEND)
    async def append(self, req: AppendRequest) -> list[RowRef]:
        drafts = [
            self._draft(req.saga_id, r.tool_name, r.phase, r.input, r.payload) for r in req.rows
        ]
        entries = await self.journal.append_batch_at(drafts, seq=req.seq, prev_hash=req.prev_hash)
        self._checkpoint(entries[-1])
        return [_ref(e) for e in entries]

    @activity.defn(name=OPEN_APPROVAL)
    async def open_approval(self, req: ApprovalOpen) -> ApprovalOpened:
        draft = self._draft(req.saga_id, req.tool_name, Phase.AWAITING_APPROVAL, req.input_json)
        entry = await self._append_at(draft, seq=req.seq, prev_hash=req.prev_hash)
        # the request holds the input as journaled (redacted), so what an approver is shown,
        # what the hash covers and what the chain covers are one text
        request = ApprovalRequest(
            saga_id=req.saga_id,
            journal_seq=req.seq,
            tool_name=req.tool_name,
            input=entry.input,
            input_hash=input_hash(entry.input),
            created_at=entry.timestamp,
        )
        await self.approvals.put(request)
        return ApprovalOpened(
            rows=[_ref(entry)], input=request.input, input_hash=request.input_hash
        )

    @activity.defn(name=CLOSE_APPROVAL)
    async def close_approval(self, req: ApprovalClose) -> bool:
        deleted: bool = await self.approvals.delete(req.saga_id, req.journal_seq)
        return deleted

    @activity.defn(name=CALL_TOOL)
    async def call_tool(self, req: CallRequest) -> CallOutcome:
        intent = self._draft(req.saga_id, req.tool_name, Phase.INTENT, req.input_json)
        # heartbeat from the start: an attempt waiting on the database is alive, and must not be
        # timed out into a second attempt that runs beside it
        async with _heartbeating():
            if activity.info().attempt > 1:
                earlier = await self._resume(req, intent)
                if earlier is not None:
                    return earlier
            if req.approval_seq is not None:
                refusal = await self._verify_approval(req)
                if refusal is not None:
                    return refusal
            try:
                intent_row = await self._append_at(
                    intent, seq=req.seq, prev_hash=req.prev_hash, exclusive=True
                )
            except SeqTaken:
                # an overlapping attempt of this call wrote INTENT first: the call is its own
                earlier = await self._resume(req, intent)
                assert earlier is not None, "INTENT exists, so resume decides"
                return earlier
            if req.approval_seq is not None:
                # consumed only now that the approved call has started; a failure before this
                # point leaves the approval valid for the retry
                await self.approvals.delete(req.saga_id, req.approval_seq)
            return await self._run(req, intent_row)

    async def _resume(self, req: CallRequest, intent: Draft) -> CallOutcome | None:
        """On a retry: finish what an earlier attempt started, never repeat an unsafe call."""
        intent_row = await self.journal.get(req.saga_id, req.seq)
        if intent_row is None or not intent_row.same_content(intent):
            return None  # the earlier attempt died before INTENT: nothing happened yet
        outcome_row = await self.journal.get(req.saga_id, req.seq + 1)
        if outcome_row is not None:
            return _outcome_from_row(intent_row, outcome_row)
        details = activity.info().heartbeat_details
        if details:
            # the tool returned, but its outcome row was not written: write it now
            recorded = json.loads(str(details[0]))
            return await self._record(req, intent_row, recorded["status"], recorded["payload"])
        spec = self.tools.get(req.tool_name) if req.tool_name in self.tools else None
        if spec is not None and spec.tool.options.idempotent:
            return await self._run(req, intent_row)
        raise _non_retryable(
            SuspectCall(
                f"INTENT seq {req.seq} of {req.tool_name!r} has no outcome: the worker died "
                "mid-call and the tool is not idempotent; a human must say whether it took effect"
            ),
            intent_row.hash,
        )

    async def _verify_approval(self, req: CallRequest) -> CallOutcome | None:
        assert req.approval_seq is not None
        stored = await self.approvals.get(req.saga_id, req.approval_seq)
        about_to_run = self.redactor.text(req.tool_name, req.input_json).value
        if stored is None:
            reason = "no approval request is stored for this call"
        elif stored.input_hash != input_hash(about_to_run) or stored.input != about_to_run:
            reason = "the input about to run does not match the approved request's hash"
        elif stored.tool_name != req.tool_name:
            reason = "the approved request names another tool"
        else:
            return None
        rejected = self._draft(
            req.saga_id,
            req.tool_name,
            Phase.REJECTED,
            req.input_json,
            to_json({"reason": f"{VERIFICATION_REFUSED}: {reason}"}),
        )
        row = await self._append_at(rejected, seq=req.seq, prev_hash=req.prev_hash)
        await self.approvals.delete(req.saga_id, req.approval_seq)
        return CallOutcome(
            status=CallStatus.REFUSED,
            error=ErrorInfo(type="ApprovalRefused", message=f"{VERIFICATION_REFUSED}: {reason}"),
            rows=[_ref(row)],
        )

    async def _run(self, req: CallRequest, intent_row: Entry) -> CallOutcome:
        try:
            tool = self.tools.get(req.tool_name)
            kwargs = tool.bind(req.args)
        except (UnknownTool, ToolArgumentsInvalid) as exc:
            return await self._record(req, intent_row, CallStatus.FAILED, _error_payload(exc))
        try:
            result = await self._invoke(req, tool, kwargs)
        except Exception as exc:
            if tool.tool.options.idempotent and activity.info().attempt < _idempotent_attempts():
                raise  # Temporal retries an idempotent tool; FAILED is written on the last try
            return await self._record(req, intent_row, CallStatus.FAILED, _error_payload(exc))
        try:
            payload = to_json(result)
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

    async def _invoke(self, req: CallRequest, tool: RegisteredTool, kwargs: dict[str, Any]) -> Any:
        token = set_current_call(CallInfo(req.saga_id, req.seq, activity.info().attempt))
        try:
            if tool.tool.is_async:
                return await tool.tool.fn(**kwargs)
            return await asyncio.to_thread(tool.tool.fn, **kwargs)
        finally:
            reset_current_call(token)

    async def _record(
        self, req: CallRequest, intent_row: Entry, status: CallStatus | str, payload: str
    ) -> CallOutcome:
        status = CallStatus(status)
        phase = Phase.EXECUTED if status is CallStatus.EXECUTED else Phase.FAILED
        draft = self._draft(req.saga_id, req.tool_name, phase, req.input_json, payload)
        try:
            row = await self._append_at(draft, seq=req.seq + 1, prev_hash=intent_row.hash)
        except Exception:
            # the tool ran but its outcome row could not be written: leave the outcome in the
            # heartbeat details (redacted, as the journal will hold it) so the retry writes it
            # instead of calling the tool again or calling the call SUSPECT
            activity.heartbeat(to_json({"status": status, "payload": draft.payload}))
            raise
        return _outcome_from_row(intent_row, row)

    @activity.defn(name=RESOLVE_CALL)
    async def resolve_call(self, req: ResolveRequest) -> Resolved:
        """Record a human's word on a SUSPECT call, unless the journal already has the outcome.

        An attempt the worker lost track of may still have finished and written EXECUTED or
        FAILED; that row is the truth, and the human's statement is not written over it.
        """
        intent_row = await self.journal.get(req.saga_id, req.call_seq)
        if intent_row is None:
            raise _non_retryable(SuspectCall(f"no INTENT at seq {req.call_seq} to resolve"))
        existing = await self.journal.get(req.saga_id, req.call_seq + 1)
        if existing is not None:
            return Resolved(outcome=_outcome_from_row(intent_row, existing), recorded=False)
        draft = self._draft(
            req.saga_id, intent_row.tool_name, req.row.phase, req.row.input, req.row.payload
        )
        row = await self._append_at(draft, seq=req.call_seq + 1, prev_hash=intent_row.hash)
        return Resolved(outcome=_outcome_from_row(intent_row, row), recorded=True)

    @activity.defn(name=COMPENSATE)
    async def compensate(self, req: CompensateRequest) -> list[RowRef]:
        done = self._draft(req.saga_id, req.tool_name, Phase.COMPENSATED, req.input_json)
        if activity.info().attempt > 1:
            existing = await self.journal.get(req.saga_id, req.seq)
            if existing is not None and existing.same_content(done):
                return [_ref(existing)]
        tool = self.tools.get(req.tool_name)
        if tool.compensation is None:
            raise _non_retryable(UnknownTool(f"tool {req.tool_name!r} has no compensation"))
        ctx = CompensationContext(
            saga_id=req.saga_id,
            seq=req.call_seq,
            tool_name=req.tool_name,
            input=json.loads(req.input_json) if req.input_json else {},
            result=req.result,
            attempt=activity.info().attempt,
        )
        async with _heartbeating():
            if inspect.iscoroutinefunction(tool.compensation):
                await tool.compensation(ctx)
            else:
                await asyncio.to_thread(tool.compensation, ctx)
        row = await self._append_at(done, seq=req.seq, prev_hash=req.prev_hash)
        return [_ref(row)]


def _idempotent_attempts() -> int:
    """The attempt bound travels in the activity's retry policy; default when absent."""
    policy = activity.info().retry_policy
    return policy.maximum_attempts if policy and policy.maximum_attempts else 3


def _outcome_from_row(intent_row: Entry, row: Entry) -> CallOutcome:
    refs = [_ref(intent_row), _ref(row)]
    body = json.loads(row.payload) if row.payload else None
    if row.phase is Phase.EXECUTED:
        return CallOutcome(status=CallStatus.EXECUTED, result=body, rows=refs)
    body = body if isinstance(body, dict) else {"message": row.payload}
    error = ErrorInfo(type=str(body.get("type", "Error")), message=str(body.get("message", "")))
    return CallOutcome(status=CallStatus.FAILED, error=error, rows=refs)
