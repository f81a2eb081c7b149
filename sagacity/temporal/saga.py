"""The workflow-side saga engine: decides seqs, gates, and what to compensate; activities do the I/O.

Use it inside any ``@workflow.defn``::

    saga = Saga()
    result = await saga.run(lambda: place_order(saga))

It registers the saga's signals (``abort``, ``approve``, ``reject``, ``resolve``), its update
(``decide``) and its queries (``status``) on the running workflow. Everything here is
deterministic: no I/O, clocks or randomness outside Temporal's APIs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Literal, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from sagacity.errors import (
    ApprovalRejected,
    SagaAborted,
    SagacityError,
    ToolFailed,
)
from sagacity.journal.canonical import to_json
from sagacity.journal.phases import APPROVAL_GATE, Phase
from sagacity.temporal import names
from sagacity.temporal.models import (
    Abort,
    AppendRequest,
    ApprovalClose,
    ApprovalOpen,
    ApprovalOpened,
    Approve,
    CallOutcome,
    CallRequest,
    CallStatus,
    CompensateRequest,
    Decision,
    Effect,
    ErrorInfo,
    Head,
    PendingApproval,
    Reject,
    Resolve,
    Resolved,
    ResolveRequest,
    RowDraft,
    RowRef,
    SagaOptions,
    SagaResult,
    SagaState,
    SagaStatus,
    Suspect,
    ToolSpec,
)
from sagacity.tools import Reversibility

T = TypeVar("T")

#: why a decision was refused, as an update caller finds it in the error's first detail
RefusalKind = Literal[
    "no_approver",
    "already_decided",
    "not_waiting",
    "unknown_seq",
    "input_hash_mismatch",
    "not_allowed",
]

_JOURNAL_TIMEOUT = timedelta(seconds=10)
# Journal writes wait out a database outage rather than drop a row.
_JOURNAL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10)
)


class Saga:
    """One saga's journal head, executed effects and human decisions, inside a workflow."""

    def __init__(self, options: SagaOptions | None = None, *, saga_id: str | None = None) -> None:
        self.saga_id = saga_id or workflow.info().workflow_id
        self.options = options or SagaOptions()
        self.state = SagaState.RUNNING
        self.head = Head()
        self.rows: list[RowRef] = []
        self.executed: list[Effect] = []
        #: tool failures seen, even those the caller caught and carried on from
        self.failures: list[ErrorInfo] = []
        self.needs_attention: str | None = None
        self._lock = asyncio.Lock()
        self._catalog: dict[str, ToolSpec] | None = None
        self._abort: Abort | None = None
        self._pending: PendingApproval | None = None
        self._decision: Approve | Reject | None = None
        self._decided: set[int] = set()
        self._refused: list[str] = []
        self._suspect: Suspect | None = None
        self._resolution: Resolve | None = None
        self._running: str | None = None
        workflow.set_signal_handler("abort", self._on_abort)
        workflow.set_signal_handler("approve", self._on_approve)
        workflow.set_signal_handler("reject", self._on_reject)
        workflow.set_signal_handler("resolve", self._on_resolve)
        workflow.set_update_handler("decide", self._on_decide, validator=self._validate_decision)
        workflow.set_query_handler("status", self.status)

    # -- tool calls ----------------------------------------------------------------------------

    async def tools(self) -> dict[str, ToolSpec]:
        """The worker's tool catalog, fetched once and kept in history for replay."""
        if self._catalog is None:
            specs = await workflow.execute_local_activity(
                names.DESCRIBE_TOOLS,
                result_type=list[ToolSpec],
                start_to_close_timeout=timedelta(seconds=10),
            )
            self._catalog = {s.name: s for s in specs}
        return self._catalog

    async def call(self, tool: str, /, **args: Any) -> Any:
        """Run one tool call under the journal; returns its result or raises :class:`ToolFailed`.

        Calls are serialized so each saga's journal order is the order of execution.
        """
        async with self._lock:
            self._raise_if_aborted()
            spec = (await self.tools()).get(tool)
            input_json = to_json(args)
            approval_seq: int | None = None
            if spec is not None and spec.reversibility is Reversibility.IRREVERSIBLE:
                approval_seq = await self._await_approval(spec, input_json)
            outcome = await self._call(spec, tool, args, input_json, approval_seq)
            return self._settle(spec, tool, args, outcome)

    async def _call(
        self,
        spec: ToolSpec | None,
        tool: str,
        args: dict[str, Any],
        input_json: str,
        approval_seq: int | None,
    ) -> CallOutcome:
        seq = self.head.seq + 1
        request = CallRequest(
            saga_id=self.saga_id,
            seq=seq,
            prev_hash=self.head.hash,
            tool_name=tool,
            args=args,
            approval_seq=approval_seq,
        )
        idempotent = spec is not None and spec.idempotent
        self._running = tool
        try:
            outcome: CallOutcome = await workflow.execute_activity(
                names.CALL_TOOL,
                request,
                result_type=CallOutcome,
                start_to_close_timeout=timedelta(seconds=spec.timeout_s if spec else 60),
                heartbeat_timeout=self._heartbeat_timeout(spec),
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(seconds=1),
                    maximum_interval=timedelta(seconds=10),
                    maximum_attempts=self.options.idempotent_attempts if idempotent else 0,
                ),
            )
        except ActivityError as err:
            cause = err.cause
            if not isinstance(cause, ApplicationError) or cause.type != "SuspectCall":
                raise
            intent_hash = str(cause.details[0]) if cause.details else ""
            return await self._resolve_suspect(tool, seq, intent_hash, input_json, cause.message)
        finally:
            self._running = None
        self._track(outcome.rows)
        return outcome

    def _heartbeat_timeout(self, spec: ToolSpec | None) -> timedelta:
        seconds = self.options.heartbeat_timeout_s or (spec.heartbeat_timeout_s if spec else 30.0)
        return timedelta(seconds=seconds)

    def _settle(
        self, spec: ToolSpec | None, tool: str, args: dict[str, Any], outcome: CallOutcome
    ) -> Any:
        call_seq = outcome.rows[0].seq
        if outcome.status is CallStatus.REFUSED:
            assert outcome.error is not None
            self.failures.append(outcome.error)
            raise ApprovalRejected(outcome.error.message)
        if outcome.status is CallStatus.EXECUTED:
            self.executed.append(
                Effect(
                    tool_name=tool,
                    call_seq=call_seq,
                    reversibility=spec.reversibility if spec else Reversibility.IRREVERSIBLE,
                    input=args,
                    result=outcome.result,
                )
            )
        if outcome.error is not None:
            self.failures.append(outcome.error)
            raise ToolFailed(tool, outcome.error.type, outcome.error.message)
        self._raise_if_aborted()
        return outcome.result

    async def _resolve_suspect(
        self, tool: str, seq: int, intent_hash: str, input_json: str, reason: str
    ) -> CallOutcome:
        """Stop until a human says whether the call with no outcome took effect."""
        self.state = SagaState.SUSPECT
        self._suspect = Suspect(call_seq=seq, tool_name=tool, input_json=input_json, reason=reason)
        self._resolution = None
        workflow.logger.warning("saga %s: call seq %d of %s is SUSPECT", self.saga_id, seq, tool)
        await workflow.wait_condition(lambda: self._resolution is not None)
        resolution = self._resolution
        assert resolution is not None
        self._suspect = None
        self.state = SagaState.RUNNING
        intent = RowRef(seq=seq, tool_name=tool, phase=Phase.INTENT, hash=intent_hash)
        self._track([intent])  # the INTENT row was written by the attempt that died
        if resolution.happened:
            row = RowDraft(
                tool_name=tool,
                phase=Phase.EXECUTED,
                input=input_json,
                payload=to_json({"resolved_by": resolution.resolver, "result": resolution.result}),
            )
            status, error = CallStatus.EXECUTED, None
        else:
            error = ErrorInfo(
                type="SuspectResolved", message=f"{resolution.resolver}: the call did not happen"
            )
            row = RowDraft(
                tool_name=tool,
                phase=Phase.FAILED,
                input=input_json,
                payload=error.model_dump_json(),
            )
            status = CallStatus.FAILED
        resolved: Resolved = await workflow.execute_activity(
            names.RESOLVE_CALL,
            ResolveRequest(saga_id=self.saga_id, call_seq=seq, row=row),
            result_type=Resolved,
            start_to_close_timeout=_JOURNAL_TIMEOUT,
            retry_policy=_JOURNAL_RETRY,
        )
        self._track(resolved.outcome.rows[1:])
        if not resolved.recorded:
            # the lost attempt had finished after all: its own outcome row stands
            workflow.logger.warning(
                "saga %s: call seq %d already had an outcome; %s's resolution not written",
                self.saga_id,
                seq,
                resolution.resolver,
            )
            return resolved.outcome
        return CallOutcome(
            status=status, result=resolution.result, error=error, rows=resolved.outcome.rows
        )

    # -- approvals -------------------------------------------------------------------------------

    async def _await_approval(self, spec: ToolSpec, input_json: str) -> int:
        """Journal AWAITING_APPROVAL, wait for a decision or the deadline; return the request seq."""
        seq = self.head.seq + 1
        opened: ApprovalOpened = await workflow.execute_activity(
            names.OPEN_APPROVAL,
            ApprovalOpen(
                saga_id=self.saga_id,
                seq=seq,
                prev_hash=self.head.hash,
                tool_name=spec.name,
                input_json=input_json,
            ),
            result_type=ApprovalOpened,
            start_to_close_timeout=_JOURNAL_TIMEOUT,
            retry_policy=_JOURNAL_RETRY,
        )
        self._track(opened.rows)
        # approvers see the request as stored (secrets redacted); its hash is what they confirm
        self._pending = PendingApproval(
            journal_seq=seq,
            tool_name=spec.name,
            input_json=opened.input,
            input_hash=opened.input_hash,
            deadline_s=self.options.approval_deadline_s,
        )
        self._decision = None
        self.state = SagaState.AWAITING_APPROVAL
        try:
            await workflow.wait_condition(
                lambda: self._decision is not None or self._abort is not None,
                timeout=timedelta(seconds=self.options.approval_deadline_s),
            )
        except TimeoutError:
            self._decision = Reject(journal_seq=seq, approver="sagacity", reason="timeout")
        decision = self._decision or Reject(
            journal_seq=seq,
            approver=(self._abort.by if self._abort else None) or "sagacity",
            reason=f"aborted: {self._abort.reason if self._abort else ''}",
        )
        self._decided.add(seq)
        self._pending = None
        self.state = SagaState.RUNNING
        if isinstance(decision, Approve):
            await self._append(
                [
                    RowDraft(
                        tool_name=APPROVAL_GATE,
                        phase=Phase.APPROVED,
                        input=input_json,
                        payload=f"approver={decision.approver}",
                    )
                ]
            )
            return seq
        await self._append(
            [
                RowDraft(
                    tool_name=APPROVAL_GATE,
                    phase=Phase.REJECTED,
                    input=input_json,
                    payload=to_json({"by": decision.approver, "reason": decision.reason}),
                )
            ]
        )
        await workflow.execute_activity(
            names.CLOSE_APPROVAL,
            ApprovalClose(saga_id=self.saga_id, journal_seq=seq),
            start_to_close_timeout=_JOURNAL_TIMEOUT,
            retry_policy=_JOURNAL_RETRY,
        )
        error = ErrorInfo(type="ApprovalRejected", message=f"{spec.name}: {decision.reason}")
        self.failures.append(error)
        raise ApprovalRejected(f"{spec.name} rejected by {decision.approver}: {decision.reason}")

    def _refusal(
        self, journal_seq: int, approver: str, given_hash: str | None
    ) -> tuple[RefusalKind, str] | None:
        """Why a decision cannot be taken (a stable kind and a sentence), or None when it can."""
        pending = self._pending
        if not approver.strip():
            return "no_approver", "a decision must name its approver"
        if journal_seq in self._decided or (
            pending is not None
            and pending.journal_seq == journal_seq
            and self._decision is not None
        ):
            return "already_decided", f"the request at seq {journal_seq} is already decided"
        if pending is None:
            return "not_waiting", "the saga is not waiting for an approval"
        if pending.journal_seq != journal_seq:
            return (
                "unknown_seq",
                f"no request awaits a decision at seq {journal_seq} "
                f"(waiting: {pending.journal_seq})",
            )
        if given_hash is not None and given_hash != pending.input_hash:
            return "input_hash_mismatch", "input_hash does not match the request awaiting approval"
        allowed = self._allowed_approvers(pending.tool_name)
        if allowed is not None and approver not in allowed:
            return "not_allowed", f"{approver!r} may not approve {pending.tool_name!r}"
        return None

    def _allowed_approvers(self, tool: str) -> set[str] | None:
        policy = self.options.approvers
        if policy is None:
            return None
        return set(policy.get(tool, [])) | set(policy.get("*", []))

    def _take(self, decision: Approve | Reject, given_hash: str | None) -> None:
        refusal = self._refusal(decision.journal_seq, decision.approver, given_hash)
        if refusal is not None:
            # a signal is in history, so this note survives replay; the caller is not told
            self._refused.append(f"{decision.approver}: {refusal[1]}")
            workflow.logger.warning("saga %s refused a decision: %s", self.saga_id, refusal[1])
            return
        self._decision = decision

    def _on_approve(self, decision: Approve) -> None:
        self._take(decision, decision.input_hash)

    def _on_reject(self, decision: Reject) -> None:
        self._take(decision, None)

    def _validate_decision(self, decision: Decision) -> None:
        # a rejected update leaves no history event and validators must not change state: the
        # caller is told (kind in the error's details) and the refusal is logged, not kept
        refusal = self._refusal(decision.journal_seq, decision.approver, decision.input_hash)
        if refusal is not None:
            kind, message = refusal
            workflow.logger.warning("saga %s refused a decision: %s", self.saga_id, message)
            raise ApplicationError(message, kind, type="ApprovalRefused", non_retryable=True)

    async def _on_decide(self, decision: Decision) -> str:
        if decision.approve:
            self._decision = Approve(journal_seq=decision.journal_seq, approver=decision.approver)
        else:
            self._decision = Reject(
                journal_seq=decision.journal_seq, approver=decision.approver, reason=decision.reason
            )
        seq = decision.journal_seq
        await workflow.wait_condition(lambda: self.head.seq > seq)
        return "approved" if decision.approve else "rejected"

    # -- abort, suspect resolution ------------------------------------------------------------

    def _on_abort(self, abort: Abort) -> None:
        if self._abort is None:
            self._abort = abort

    def _on_resolve(self, resolution: Resolve) -> None:
        if self._suspect is None or self._suspect.call_seq != resolution.call_seq:
            self._refused.append(
                f"{resolution.resolver}: no SUSPECT call at seq {resolution.call_seq}"
            )
            return
        self._resolution = resolution

    def _raise_if_aborted(self) -> None:
        if self._abort is not None:
            raise SagaAborted(f"aborted by {self._abort.by or 'unknown'}: {self._abort.reason}")

    @property
    def aborted(self) -> bool:
        return self._abort is not None

    # -- journal bookkeeping -----------------------------------------------------------------

    def _track(self, rows: list[RowRef]) -> None:
        for row in rows:
            if row.seq == self.head.seq + 1:
                self.rows.append(row)
                self.head = Head(seq=row.seq, hash=row.hash)

    async def _append(self, rows: list[RowDraft]) -> list[RowRef]:
        seq = self.head.seq + 1
        written: list[RowRef] = await workflow.execute_activity(
            names.APPEND,
            AppendRequest(saga_id=self.saga_id, seq=seq, prev_hash=self.head.hash, rows=rows),
            result_type=list[RowRef],
            start_to_close_timeout=_JOURNAL_TIMEOUT,
            retry_policy=_JOURNAL_RETRY,
        )
        self._track(written)
        return written

    # -- compensation ------------------------------------------------------------------------

    async def compensate(self) -> tuple[list[Effect], list[Effect], list[Effect]]:
        """Undo executed effects in reverse order; returns (compensated, failed, still live)."""
        async with self._lock:
            self.state = SagaState.COMPENSATING
            catalog = await self.tools()
            compensated: list[Effect] = []
            failed: list[Effect] = []
            live: list[Effect] = []
            for effect in reversed(self.executed):
                spec = catalog.get(effect.tool_name)
                if spec is None or not spec.has_compensation:
                    live.append(effect)
                    continue
                if await self._compensate_one(spec, effect):
                    compensated.append(effect)
                else:
                    failed.append(effect)
                    live.append(effect)
            self.executed = []
            return compensated, failed, live

    async def _compensate_one(self, spec: ToolSpec, effect: Effect) -> bool:
        request = CompensateRequest(
            saga_id=self.saga_id,
            seq=self.head.seq + 1,
            prev_hash=self.head.hash,
            tool_name=effect.tool_name,
            call_seq=effect.call_seq,
            input_json=to_json(effect.input),
            result=effect.result,
        )
        try:
            rows = await workflow.execute_activity(
                names.COMPENSATE,
                request,
                result_type=list[RowRef],
                start_to_close_timeout=timedelta(seconds=spec.timeout_s),
                heartbeat_timeout=self._heartbeat_timeout(spec),
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(seconds=self.options.compensation_backoff_s),
                    backoff_coefficient=2.0,
                    maximum_attempts=self.options.compensation_attempts,
                ),
            )
        except ActivityError as err:
            cause = err.cause if err.cause is not None else err
            message = str(getattr(cause, "message", cause))
            error_type = str(getattr(cause, "type", None) or type(cause).__name__)
            await self._append(
                [
                    RowDraft(
                        tool_name=effect.tool_name,
                        phase=Phase.COMPENSATION_FAILED,
                        input=request.input_json,
                        payload=to_json(
                            {
                                "type": error_type,
                                "message": message,
                                "attempts": self.options.compensation_attempts,
                            }
                        ),
                    )
                ]
            )
            workflow.logger.error(
                "saga %s: compensation of %s (call seq %d) failed: %s",
                self.saga_id,
                effect.tool_name,
                effect.call_seq,
                message,
            )
            return False
        self._track(rows)
        return True

    # -- running a whole saga ----------------------------------------------------------------

    async def run(
        self,
        body: Callable[[], Awaitable[T]],
        *,
        compensate_swallowed_failures: bool = True,
    ) -> SagaResult:
        """Run ``body``; on a failure, an abort or a rejection, compensate in reverse.

        With ``compensate_swallowed_failures`` (the default), a tool failure that ``body``
        caught and carried on from still ends the saga compensated.
        """
        error: ErrorInfo | None = None
        value: Any = None
        try:
            value = await body()
        except (SagacityError, ActivityError) as exc:
            # an activity that exhausted its retries is a failure too: compensate what ran
            error = ErrorInfo(type=type(exc).__name__, message=str(exc))
        if error is None and self.aborted:
            error = ErrorInfo(
                type="SagaAborted", message=f"aborted: {self._abort.reason if self._abort else ''}"
            )
        if error is None and self.failures and compensate_swallowed_failures:
            first = self.failures[0]
            error = ErrorInfo(
                type=first.type, message=f"a tool failure was swallowed: {first.message}"
            )
        if error is None:
            self.state = SagaState.COMPLETED
            return self.result(value)
        compensated, failed, live = await self.compensate()
        if failed:
            self.state = SagaState.COMPENSATION_FAILED
            self.needs_attention = (
                f"{len(failed)} compensation(s) failed; their effects are still live: "
                + ", ".join(f"{e.tool_name} (seq {e.call_seq})" for e in failed)
            )
        elif self.aborted:
            self.state = SagaState.ABORTED
        else:
            self.state = SagaState.COMPENSATED
        return self.result(value, error=error, compensated=compensated, failed=failed, live=live)

    def result(
        self,
        value: Any,
        *,
        error: ErrorInfo | None = None,
        compensated: list[Effect] | None = None,
        failed: list[Effect] | None = None,
        live: list[Effect] | None = None,
    ) -> SagaResult:
        return SagaResult(
            saga_id=self.saga_id,
            status=self.state,
            value=value,
            error=error,
            compensated=compensated or [],
            compensation_failed=failed or [],
            live_effects=live or [],
            needs_attention=self.needs_attention,
            head=self.head,
        )

    def status(self) -> SagaStatus:
        return SagaStatus(
            saga_id=self.saga_id,
            state=self.state,
            head=self.head,
            rows=self.rows,
            executed=self.executed,
            running=self._running,
            pending_approval=self._pending,
            suspect=self._suspect,
            refused_decisions=self._refused,
            needs_attention=self.needs_attention,
        )
