"""The saga's public face inside a workflow: :class:`Saga`, composed of its parts.

Use it inside any ``@workflow.defn``::

    saga = Saga()
    result = await saga.run(lambda: place_order(saga))

It registers the saga's signals (``abort``, ``approve``, ``reject``, ``resolve``, ``halt``,
``resume``), its update (``decide``) and its query (``status``) on the running workflow.
Everything here is deterministic: no I/O, clocks or randomness outside Temporal's APIs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, cast

from temporalio import workflow
from temporalio.exceptions import ActivityError
from typing_extensions import TypeVar

from sagacity.errors import SagacityError
from sagacity.temporal import codec_scope
from sagacity.temporal.checks import steps_refused
from sagacity.temporal.models import (
    Effect,
    ErrorInfo,
    Head,
    Journaled,
    RowRef,
    SagaCarry,
    SagaOptions,
    SagaResult,
    SagaState,
    SagaStatus,
    Step,
    ToolSpec,
    rejection_of,
)
from sagacity.temporal.saga.carry import carry_of
from sagacity.temporal.saga.edits import Change
from sagacity.temporal.saga.parts import SagaParts
from sagacity.temporal.saga.signals import hinted
from sagacity.temporal.saga.tooltyping import (
    ToolName,
    TypedTool,
    named_call,
    origin,
    typed_result,
)
from sagacity.tools import CompensableTool

P = ParamSpec("P")
# the default (typing's own from Python 3.13): a tool named by string gives JSON data
T = TypeVar("T", default=Any)


class Saga:
    """One saga's journal head, executed effects and human decisions, inside a workflow."""

    def __init__(
        self,
        options: SagaOptions | None = None,
        *,
        saga_id: str | None = None,
        carry: SagaCarry | None = None,
    ) -> None:
        # sealed by the codec from here on, even where the workflow is registered as the app's
        codec_scope.claim_run()
        saga_id = carry.saga_id if carry else saga_id or workflow.info().workflow_id
        parts = self._parts = SagaParts.build(saga_id, options or SagaOptions(), carry)
        # the saga's signals and its update take their payloads raw, decoded by its own code
        # (see Signals); a handler the workflow itself registered by name comes first, and
        # the saga takes the workflow's dynamic handlers (names it does not take are refused)
        workflow.set_dynamic_signal_handler(parts.signals.on_signal)
        workflow.set_dynamic_update_handler(
            parts.gate.on_update, validator=parts.gate.validate_update
        )
        workflow.set_query_handler("status", self.status)

    # -- what the workflow reads -------------------------------------------------------------

    @property
    def saga_id(self) -> str:
        return self._parts.core.saga_id

    @property
    def options(self) -> SagaOptions:
        return self._parts.core.options

    @property
    def state(self) -> SagaState:
        return self._parts.core.state

    @property
    def head(self) -> Head:
        return self._parts.core.head

    @property
    def rows(self) -> list[RowRef]:
        """The newest rows (at most STATUS_ROWS)."""
        return self._parts.core.rows

    @property
    def executed(self) -> list[Effect]:
        return self._parts.core.executed

    @property
    def failures(self) -> list[ErrorInfo]:
        """Tool failures seen, even those the caller caught and carried on from."""
        return self._parts.core.failures

    @property
    def needs_attention(self) -> str | None:
        return self._parts.core.needs_attention

    @property
    def aborted(self) -> bool:
        return self._parts.controls.aborted

    @property
    def cancelled(self) -> bool:
        """Whether a Temporal cancel request reached the saga (it aborts, then compensates)."""
        return self._parts.controls.cancelled

    def abort(self, reason: str, *, by: str) -> None:
        """Abort from the workflow's own code, as the ``abort`` signal from ``by`` would: a call
        waiting for approval is rejected, and the saga compensates. A second abort changes
        nothing."""
        self._parts.controls.request_abort(reason, by)

    def refuse_if_busy(self, what: str) -> None:
        """In an update's validator: turn the update away (``SagaBusy``, nothing recorded)
        while a local activity of the saga runs; ``what`` names it in the message."""
        self._parts.controls.refuse_if_busy(what)

    async def shielded(self, awaitable: Awaitable[T], *, local: bool = False) -> T:
        """Await a started activity that a Temporal cancel must not interrupt: the cancel
        aborts the saga instead (it then ends ABORTED, its effects compensated). ``local``: a
        local activity (the saga refuses updates while one runs, see docs/versioning.md)."""
        return await self._parts.controls.shielded(awaitable, local=local)

    # -- continue-as-new ---------------------------------------------------------------------

    def carry(self) -> SagaCarry:
        """The state the next run needs (head, effects, failures, decisions) to go on as this one.

        Take it between calls, never while one runs: ``workflow.continue_as_new`` with it and
        ``Saga(carry=...)`` in the new run continue the same journal.
        """
        return carry_of(self._parts)

    def continue_as_new_suggested(self) -> bool:
        """Whether history is long enough that the workflow should continue as new now."""
        return self._parts.core.continue_as_new_suggested()

    # -- tool calls ----------------------------------------------------------------------------

    async def tools(self, *, described: bool = False) -> dict[str, ToolSpec]:
        """The worker's tool catalog, fetched when the saga opens its journal (kept in history).

        ``described``: with each tool's description and parameter schema, what an agent shows
        its model. A saga opens with the brief catalog, so asking costs one more local activity.
        """
        return await self._parts.view.tools(described=described)

    async def open(self, *, check: list[Step] | None = None) -> None:
        """Claim the saga's journal now, as its first call would otherwise.

        ``check``: steps the worker checks against its tools in the same local activity, before
        it claims anything; if any cannot run, nothing is claimed or journaled (the id stays
        free) and a non-retryable ``StepsInvalid`` listing every problem is raised.
        """
        problems = await self._parts.view.catch_up(check=check)
        if problems:
            raise steps_refused(problems)

    def open_in_first_call(self, *, check: list[Step]) -> None:
        """Open the journal in the first call's activity instead (no local activity): the
        worker checks ``check``, then claims the id, before that call's INTENT; refused steps
        raise ``StepsInvalid`` from the call, with nothing claimed or journaled. Anything that
        needs the catalog before that call opens the journal then, as :meth:`open` would."""
        self._parts.view.defer_open(check)

    async def call(
        self, tool: TypedTool[P, T] | ToolName[P], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Run one tool call under the journal; returns its result or raises :class:`ToolFailed`.

        ``tool`` is the declared tool (``saga.call(book_flight, traveler="Ada")``: arguments
        checked by mypy, the result converted to the function's return annotation) or its name
        (the result as JSON data). Calls are serialized so each saga's journal order is the
        order of execution.
        """
        return await self._call(tool, args, kwargs, last=False)

    async def call_last(
        self, tool: TypedTool[P, T] | ToolName[P], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """:meth:`call` for the body's last call: when it executes, its activity seals the end.

        The saga then ends without the local activity that seals it otherwise. A call after
        this one is still journaled and sealed correctly: the later end seals again.
        """
        return await self._call(tool, args, kwargs, last=True)

    async def _call(
        self,
        typed: TypedTool[..., T] | ToolName[...],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        last: bool,
    ) -> T:
        # TypedTool and ToolName are for type checkers only: what a caller hands in is a
        # declared tool or a str, and named_call refuses anything else (ToolArgumentsInvalid)
        tool = cast("str | CompensableTool[..., Any]", typed)
        name, named = named_call(tool, args, kwargs)
        async with self._parts.core.lock:
            result = await self._parts.calls.call(name, named, origin(tool), last=last)
        # the result converted to the tool's return annotation: T
        return cast(T, typed_result(tool, result))

    def last_call_seq(self, tool: str) -> int | None:
        """The seq of the row that opened ``tool``'s newest call (INTENT; AWAITING_APPROVAL or
        REJECTED when it never ran), or None."""
        return self._parts.view.last_call_seq(tool)

    def approved_change(self, call_seq: int | None) -> Change | None:
        """How an approver changed the call at ``call_seq`` before it ran (None: approved as
        proposed, or not gated): who, and both inputs as journaled."""
        return self._parts.gate.edits.of(call_seq)

    def journaled(self, call_seq: int | None) -> Journaled | None:
        """How the journal holds the call at ``call_seq`` when redaction changed it (None when it
        did not): what to show of a call that just returned, its secrets redacted."""
        return self._parts.view.journaled(call_seq)

    # -- compensation and the end --------------------------------------------------------------

    async def compensate(
        self, *, continue_as_new: Callable[[SagaCarry], None] | None = None
    ) -> tuple[list[Effect], list[Effect], list[Effect]]:
        """Undo executed effects in reverse order; returns (compensated, failed, still live).

        With ``continue_as_new`` (which must raise ``workflow.continue_as_new``), a long
        compensation hands its state to a new run whenever history grows long.
        """
        core = self._parts.core
        core.compensating = True  # before the lock: calls queued ahead of it do not start
        async with core.lock:
            core.enter(SagaState.COMPENSATING)
            catalog = await self.tools()
            hand_over = (lambda: continue_as_new(self.carry())) if continue_as_new else None
            return await self._parts.undo.compensate(catalog, hand_over)

    async def run(
        self,
        body: Callable[[], Awaitable[T]],
        *,
        compensate_swallowed_failures: bool = True,
        continue_as_new: Callable[[SagaCarry], None] | None = None,
    ) -> SagaResult:
        """Run ``body``; on a failure, an abort, a cancel or a rejection, compensate in reverse.

        With ``compensate_swallowed_failures`` (the default), a tool failure that ``body``
        caught and carried on from still ends the saga compensated. A Temporal cancel ends the
        saga ABORTED, its effects compensated, and the workflow completes with that result.
        ``continue_as_new`` (a function that raises ``workflow.continue_as_new`` with the
        carry) lets a long compensation go on in new runs; a saga that continued as new in
        the middle of compensating resumes there, without running ``body``. The run that ends
        the saga seals its journal's final head.
        """
        error: ErrorInfo | None = self._parts.ending.error
        value: Any = None
        try:
            if not self._parts.view.opens_in_call:
                await self.tools()  # claim the journal before anything else
            if error is None:
                value = await body()
        except (SagacityError, ActivityError) as exc:
            # an activity that exhausted its retries is a failure too: compensate what ran
            error = ErrorInfo(
                type=type(exc).__name__, message=str(exc), rejection=rejection_of(exc)
            )
        except asyncio.CancelledError:
            self._parts.controls.cancel_requested()
        return await self._parts.ending.finish(
            value,
            error,
            compensate_swallowed_failures,
            lambda: self.compensate(continue_as_new=continue_as_new),
        )

    def result(
        self,
        value: Any,
        *,
        error: ErrorInfo | None = None,
        compensated: list[Effect] | None = None,
        failed: list[Effect] | None = None,
        live: list[Effect] | None = None,
    ) -> SagaResult:
        """The saga's result as it stands, with ``value`` and what its compensation did."""
        return self._parts.ending.result(value, error, compensated or [], failed or [], live or [])

    @hinted
    def status(self) -> SagaStatus:
        """The ``status`` query: state, head, newest rows and effects, and what waits on whom."""
        return self._parts.status()
