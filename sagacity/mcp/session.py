"""``sagacity.McpSession``: the saga behind one MCP client session of the gateway.

The gateway (:mod:`sagacity.mcp.gateway`) starts one for a client session and sends each tool
call as the update ``call``; the workflow body runs them one at a time with ``saga.call`` (each a
journaled activity on the workers, one that needs approval after it), so the saga's
compensation runs on the workers whatever becomes of the gateway.

How a session's saga ends:

* ``commit`` (update): the saga completes; ``rollback`` (update): it compensates, newest first.
* A call that fails (FAILED journaled), or whose approval is rejected: the saga compensates and
  the update ``call`` fails (``McpCallFailed``), naming the saga and what was undone.
* ``end`` (signal, the gateway's clean close), or no word from the gateway for ``lease_s`` (it
  sends ``keepalive`` while its client is connected; a killed gateway sends nothing): the saga
  follows ``on_end``, ``compensate`` or ``commit``.

A session's saga ends once; after that, ``call`` is refused. With ``boundary: explicit`` the
gateway then starts a new saga for the client's next call; with ``session`` the client must open
a new MCP session (the refusal says which). A call refused before it ran (unknown to the workers,
arguments that do not fit) fails alone, and the session goes on. A long session continues as
new between calls, carrying its saga.

A session lost while a call waits at its approval gate aborts the saga under ``on_end:
compensate`` (the call never runs); under ``commit`` the call waits for a human or its deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from sagacity.errors import (
        ApprovalRejected,
        PayloadTooLarge,
        SagacityError,
        SessionEnded,
        ToolFailed,
    )
    from sagacity.temporal.models import Effect, SagaCarry, SagaOptions, SagaResult, SagaState
    from sagacity.temporal.saga import Saga

__all__ = [
    "MCP_SESSION_WORKFLOW",
    "McpCall",
    "McpEnd",
    "McpResume",
    "McpSessionRequest",
    "McpSessionWorkflow",
    "undone",
]

MCP_SESSION_WORKFLOW = "sagacity.McpSession"
#: sessions from before this marker wait out their approval deadline when lost at a gate
LEASE_AT_GATE_PATCH = "sagacity-mcp-lease-at-gate"
#: a `rollback` while a call waits for approval aborts the saga (before: it waited for a human)
ROLLBACK_AT_GATE_PATCH = "sagacity-mcp-rollback-at-gate"

Boundary = Literal["session", "explicit"]
OnEnd = Literal["compensate", "commit"]


class McpResume(BaseModel):
    """A session handed to its next run by continue-as-new, between calls."""

    carry: SagaCarry
    last_word: datetime


class McpSessionRequest(BaseModel):
    """What the gateway starts a session's saga with (the policy's ``session`` block)."""

    model_config = ConfigDict(extra="forbid")

    #: the policy's server name: logs and error texts say which upstream
    server: str
    boundary: Boundary = "session"
    on_end: OnEnd = "compensate"
    #: no word from the gateway for this long: the session is lost and ends per ``on_end``
    lease_s: float = Field(default=60.0, gt=0)
    options: SagaOptions = Field(default_factory=SagaOptions)
    #: set by the workflow itself when a long session continues as new; None from the gateway
    resume: McpResume | None = None


class McpCall(BaseModel):
    """One tool call, the argument of the update ``call``."""

    model_config = ConfigDict(extra="forbid")

    #: a tool's name: no control characters (the journal stores it as TEXT)
    tool: str = Field(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+$")
    arguments: dict[str, Any] = Field(default_factory=dict)
    #: a call a worker takes up later than this is refused: the gateway gave up waiting and told
    #: its client the call was not run, so it must never run after all
    expires_at: datetime | None = None


class McpEnd(BaseModel):
    """How the session's saga ended: the reply of ``commit`` and ``rollback``, and the result."""

    saga_id: str
    state: SagaState
    #: why it ended, in words for the client
    message: str
    saga: SagaResult


def undone(effects: list[Effect]) -> str:
    """The compensated effects in words, newest first: ``create_ticket (call 3), ...``."""
    return ", ".join(f"{e.tool_name} (call {e.call_seq})" for e in effects) or "nothing"


@workflow.defn(name=MCP_SESSION_WORKFLOW)
class McpSessionWorkflow:
    """One MCP client session's tool calls as one saga, ended by commit, rollback or the lease."""

    @workflow.init
    def __init__(self, request: McpSessionRequest) -> None:
        self._request = request
        resume = request.resume
        # the saga's signals, updates and its `status` query answer from the first task
        self._saga = Saga(request.options, carry=resume.carry if resume else None)
        self._queue: list[tuple[int, McpCall]] = []
        self._taken = 0
        self._replies: dict[int, Any] = {}
        #: the call whose failure ended the saga, and why it failed
        self._failed: tuple[int, str, str] | None = None
        #: how the session is to end ("commit" or "compensate") and why, once asked
        self._end: tuple[OnEnd, str] | None = None
        self._last_word = resume.last_word if resume else workflow.now()
        self._result: SagaResult | None = None

    @workflow.run
    async def run(self, request: McpSessionRequest) -> McpEnd:
        saga = self._saga
        lease = timedelta(seconds=request.lease_s)

        def go_on(carry: SagaCarry) -> None:
            resume = McpResume(carry=carry, last_word=self._last_word)
            workflow.continue_as_new(request.model_copy(update={"resume": resume}))

        def idle_and_long() -> bool:
            # between calls, with no update waiting: nothing is lost by handing over now
            return saga.continue_as_new_suggested() and workflow.all_handlers_finished()

        async def session() -> None:
            while True:
                while not (self._queue or self._end or saga.aborted):
                    if idle_and_long():
                        go_on(saga.carry())
                    left = self._last_word + lease - workflow.now()
                    if left <= timedelta(0):
                        self._end = (
                            request.on_end,
                            f"the gateway said nothing for {request.lease_s:g}s: session lost",
                        )
                        break
                    # woken by work, or by the timer: keepalives moved the lease on, or it ran out
                    with contextlib.suppress(TimeoutError):
                        await workflow.wait_condition(
                            lambda: (
                                bool(self._queue or self._end or saga.aborted) or idle_and_long()
                            ),
                            timeout=left,
                        )
                if saga.aborted:
                    return  # saga.run compensates and ends it ABORTED
                if self._queue:
                    index, call = self._queue.pop(0)
                    await self._run_call(index, call)
                    self._last_word = workflow.now()  # a long call is not silence
                    continue
                assert self._end is not None
                how, why = self._end
                if how == "commit":
                    return
                raise SessionEnded(why)

        watching = asyncio.create_task(self._watch_gates(lease))
        # no hand-over while compensating: a `rollback` or `call` waiting for the outcome must
        # get its answer from this run
        result = await saga.run(session, compensate_swallowed_failures=False)
        self._result = result
        await watching
        # let the updates waiting on the end answer before the workflow completes
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self._ended(result)

    async def _watch_gates(self, lease: timedelta) -> None:
        """Under ``on_end: compensate``, a session lost while a call waits for approval aborts
        the saga: nobody waits for that call's outcome any more. (The session loop, blocked in
        the call, cannot see the lease run out.) Without a gate, this adds nothing to history."""
        saga, request = self._saga, self._request
        if request.on_end != "compensate":
            return
        while True:
            await workflow.wait_condition(
                lambda: saga.state is SagaState.AWAITING_APPROVAL or self._result is not None
            )
            if self._result is not None or not workflow.patched(LEASE_AT_GATE_PATCH):
                return
            while saga.state is SagaState.AWAITING_APPROVAL and not saga.aborted:
                left = self._last_word + lease - workflow.now()
                if left <= timedelta(0):
                    saga.abort(
                        f"the gateway said nothing for {request.lease_s:g}s while a call waited "
                        "for approval: session lost",
                        by="sagacity-mcp",
                    )
                    return
                with contextlib.suppress(TimeoutError):
                    await workflow.wait_condition(
                        lambda: saga.state is not SagaState.AWAITING_APPROVAL, timeout=left
                    )

    async def _run_call(self, index: int, call: McpCall) -> None:
        try:
            self._replies[index] = await self._saga.call(call.tool, **call.arguments)
        except PayloadTooLarge as exc:
            # refused before its INTENT (a client other than the gateway, which refuses it
            # first): nothing ran, the session goes on
            self._replies[index] = ApplicationError(
                f"{call.tool} was not run: {exc}", type="McpCallRefused", non_retryable=True
            )
            return
        except ToolFailed as exc:
            if not exc.ran:
                # refused before it ran: nothing to undo, the session goes on
                self._replies[index] = ApplicationError(
                    f"{call.tool} was not run: {exc.error_type}: {exc.error_message}",
                    type="McpCallRefused",
                    non_retryable=True,
                )
                return
            self._failed = (index, "McpCallFailed", f"{exc.error_type}: {exc.error_message}")
            raise
        except (SagacityError, ActivityError) as exc:
            # rejected at its gate, aborted, or an activity out of retries: the saga compensates
            kind = "McpCallRejected" if isinstance(exc, ApprovalRejected) else "McpCallFailed"
            self._failed = (index, kind, str(exc))
            raise

    def _ended(self, result: SagaResult, *, why: bool = True) -> McpEnd:
        """How the saga ended, in words; ``why``: with the error that ended it."""
        saga_id = self._saga.saga_id
        state = result.status.value
        if result.status is SagaState.COMPLETED:
            message = f"saga {saga_id} committed ({state})"
        else:
            cause = f": {result.error.message}" if why and result.error else ""
            message = (
                f"saga {saga_id} rolled back ({state}){cause}; compensated, newest first: "
                f"{undone(result.compensated)}"
            )
            if result.live_effects:
                message += f"; still in effect (no undo): {undone(result.live_effects)}"
            if result.compensation_failed or result.needs_attention:
                message += f"; needs attention: {result.needs_attention}"
        return McpEnd(saga_id=saga_id, state=result.status, message=message, saga=result)

    def _after(self) -> str:
        if self._request.boundary == "explicit":
            return "the gateway starts a new saga for the next call"
        return "this MCP session takes no more calls: open a new one"

    # -- the gateway's word ------------------------------------------------------------------

    @workflow.update
    async def call(self, call: McpCall) -> Any:
        """Run one tool call in the session's saga; its journaled result, or a typed failure."""
        self._last_word = workflow.now()
        index = self._taken
        self._taken += 1
        self._queue.append((index, call))
        await workflow.wait_condition(lambda: index in self._replies or self._result is not None)
        if index in self._replies:
            reply = self._replies.pop(index)
            if isinstance(reply, ApplicationError):
                raise reply
            return reply
        assert self._result is not None
        if self._failed is not None and self._failed[0] == index:
            _, kind, why = self._failed
            ended = self._ended(self._result, why=False)
            raise ApplicationError(
                f"{call.tool} failed: {why}. So {ended.message}; {self._after()}",
                ended.model_dump(mode="json"),
                type=kind,
                non_retryable=True,
            )
        ended = self._ended(self._result)
        raise ApplicationError(
            f"{call.tool} was not run: {ended.message}; {self._after()}",
            type="McpSessionEnded",
            non_retryable=True,
        )

    @call.validator
    def _validate_call(self, call: McpCall) -> None:
        if call.expires_at is not None and workflow.now() > call.expires_at:
            raise ApplicationError(
                f"{call.tool} reached the workers after the gateway stopped waiting for it "
                f"({call.expires_at.isoformat()}): not run",
                type="McpCallExpired",
            )
        self._refuse_when_ended()
        self._saga.refuse_if_busy("call")

    @workflow.update
    async def commit(self) -> McpEnd:
        """End the saga completed (after the calls already sent); how it ended."""
        return await self._finish("commit", "committed by the client")

    @workflow.update
    async def rollback(self) -> McpEnd:
        """End the saga compensated, newest effect first; how it ended."""
        return await self._finish("compensate", "rolled back by the client")

    @commit.validator
    def _validate_commit(self) -> None:
        self._refuse_when_ended()
        self._saga.refuse_if_busy("commit")

    @rollback.validator
    def _validate_rollback(self) -> None:
        self._refuse_when_ended()
        self._saga.refuse_if_busy("rollback")

    async def _finish(self, how: OnEnd, why: str) -> McpEnd:
        self._last_word = workflow.now()
        if self._end is None:
            self._end = (how, why)
        if how == "compensate":
            # a call waiting for approval would hold the rollback up until a human decides:
            # abort the saga, which rejects that call at its gate and compensates
            saga = self._saga
            await workflow.wait_condition(
                lambda: self._result is not None or saga.state is SagaState.AWAITING_APPROVAL
            )
            if self._result is None and workflow.patched(ROLLBACK_AT_GATE_PATCH):
                saga.abort(why, by="sagacity-mcp")
        await workflow.wait_condition(lambda: self._result is not None)
        assert self._result is not None
        return self._ended(self._result)

    def _refuse_when_ended(self) -> None:
        if self._result is not None:
            raise ApplicationError(
                f"{self._ended(self._result).message}; {self._after()}", type="McpSessionEnded"
            )
        if self._end is not None or self._failed is not None or self._saga.aborted:
            raise ApplicationError(
                f"saga {self._saga.saga_id} is ending; {self._after()}", type="McpSessionEnded"
            )

    @workflow.signal
    def keepalive(self) -> None:
        """The gateway's client is still connected: the lease starts again."""
        self._last_word = workflow.now()

    @workflow.signal
    def end(self, reason: str = "the MCP session ended") -> None:
        """The client's session closed: the saga follows the policy's ``on_end``."""
        if self._end is None:
            self._end = (self._request.on_end, str(reason)[:500])
