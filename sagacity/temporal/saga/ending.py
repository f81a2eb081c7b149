"""How a saga ends: the error it ends with, what needs a human, the sealed head, its result.

The run that ends the saga seals its journal's final head: a signed checkpoint no row may
follow, written by the activity of the last row when the worker can, else by one local activity.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from sagacity.temporal import limits, names
from sagacity.temporal.models import (
    RESULT_EFFECTS,
    Effect,
    ErrorInfo,
    RowRef,
    SagaCarry,
    SagaOpened,
    SagaResult,
    SagaState,
    SealRequest,
)
from sagacity.temporal.saga.controls import Controls
from sagacity.temporal.saga.core import SagaCore
from sagacity.temporal.saga.patches import PAYLOAD_LIMIT_PATCH
from sagacity.temporal.waits import JOURNAL_RETRY, JOURNAL_TIMEOUT


def _listed(effects: list[Effect]) -> str:
    return ", ".join(f"{e.tool_name} (seq {e.call_seq})" for e in effects)


class Ending:
    """Whether and how the worker seals, what is sealed so far, and the saga's end and result."""

    def __init__(self, core: SagaCore, controls: Controls, carry: SagaCarry | None) -> None:
        self._core = core
        self._controls = controls
        #: why the saga compensates, once it does (carried by continue-as-new)
        self.error: ErrorInfo | None = carry.error if carry else None
        #: whether the worker seals ended sagas, and does so in the activity that writes the last
        #: row, as ``open_saga`` recorded it in the history
        self._seals = False
        self._seals_in_calls = False
        self._seals_reported = False
        #: checkpoint the next call's INTENT: the head it follows is sealed, or another run's
        self._anchor_next = False
        #: the head and state an activity sealed as the saga's end
        self._sealed: tuple[int, SagaState] | None = None

    def opened(self, opened: SagaOpened) -> None:
        """Take how the worker seals, as ``open_saga`` reported it."""
        self._seals, self._seals_in_calls = opened.seals, opened.seals_in_calls
        self._seals_reported = opened.seals_reported
        # rows another run wrote: the next call's INTENT is checkpointed, lifting a seal
        self._anchor_next = self._anchor_next or bool(opened.rows)

    def anchor_intent(self) -> bool:
        """Whether the next call's INTENT is checkpointed (see :meth:`opened`)."""
        head = self._core.head
        return self._anchor_next or (self._sealed is not None and self._sealed[0] == head.seq)

    def anchored(self) -> None:
        """A call's activity wrote its rows: its INTENT was checkpointed if it had to be."""
        self._anchor_next = False

    def seal_as(self, state: SagaState, *, opening: bool = False) -> SagaState | None:
        """``state``, when the saga is ending and the worker seals in the last row's activity
        (``opening``: a call that opens the journal, whose worker seals if it signs at all)."""
        core = self._core
        seals = opening or (self._seals and self._seals_in_calls)
        return state if core.ending and seals else None

    def wrote(self, rows: list[RowRef], seal_as: SagaState | None) -> None:
        """An activity asked to seal as ``seal_as`` wrote ``rows``: note the seal if it did,
        as it reports (workers from before the report: as asked; histories recorded then replay
        as they ran)."""
        if seal_as is not None and rows and (rows[-1].sealed or not self._seals_reported):
            self._sealed = (self._core.head.seq, seal_as)

    async def _seal(self) -> None:
        """Seal the ended saga's final head: a signed checkpoint that no row may follow.

        When the worker signs checkpoints, the activity that writes the last row seals it (the
        last compensation, or a ``call_last`` that executed); otherwise one local activity
        does, after the last row. A saga that journaled nothing has nothing to seal. A journal
        that went on past this run's head is not sealed: logged, and the saga ends as decided.
        Both are read from the recorded ``open_saga`` result, not patch markers: older histories
        replay as they ran, and a saga pays no marker events for it.
        """
        core = self._core
        if not core.head.seq or not self._seals or self._sealed == (core.head.seq, core.state):
            return  # nothing to seal, no key to seal with, or the last row's activity sealed it
        request = SealRequest(saga_id=core.saga_id, head=core.head, state=core.state)
        try:
            await self._controls.shielded(
                workflow.start_local_activity(
                    names.SEAL_SAGA,
                    request,
                    result_type=bool,
                    start_to_close_timeout=JOURNAL_TIMEOUT,
                    retry_policy=JOURNAL_RETRY,
                ),
                local=True,
            )
        except ApplicationError as err:
            # a local activity's failure arrives as the activity's own error (JournalAhead,
            # SeqConflict), not wrapped in an ActivityError; the retry policy retries the rest
            workflow.logger.error(
                "saga %s: its end at seq %d is not sealed: %s: %s",
                core.saga_id,
                core.head.seq,
                err.type,
                err.message,
            )

    # -- the end -------------------------------------------------------------------------------

    async def finish(
        self,
        value: Any,
        error: ErrorInfo | None,
        swallowed: bool,
        compensate: Callable[[], Awaitable[tuple[list[Effect], list[Effect], list[Effect]]]],
    ) -> SagaResult:
        """End the saga its body left with ``value`` or ``error``: COMPLETED, or compensated.

        An abort fails it too, and so does a tool failure the body caught and carried on from
        (``swallowed``). A saga rolled back by an operator leaves its effects to the rollback.
        """
        core, controls = self._core, self._controls
        if error is None and controls.abort is not None:
            error = ErrorInfo(
                type="SagaCancelled" if controls.cancelled else "SagaAborted",
                message=f"aborted: {controls.abort.reason}",
            )
        if error is None and core.failures and swallowed:
            first = core.failures[0]
            error = ErrorInfo(
                type=first.type, message=f"a tool failure was swallowed: {first.message}"
            )
        if error is None:
            core.enter(SagaState.COMPLETED)
            self._flag_unknown_effects()
            value = self._fitting(value)
            await self._seal()
            return self.result(value, None, [], [], [])
        self.error = error
        core.ending = True
        compensated: list[Effect] = []
        failed: list[Effect] = []
        live = list(core.executed)
        if not controls.left_to_rollback:
            compensated, failed, live = await compensate()
        if failed:
            core.enter(SagaState.COMPENSATION_FAILED)
            core.needs_attention = (
                f"{len(failed)} compensation(s) failed; their effects are still live: "
                + _listed(failed)
            )
        else:
            core.enter(SagaState.ABORTED if controls.aborted else SagaState.COMPENSATED)
            unknown = [e for e in live if e.failed]
            if controls.left_to_rollback and live:
                core.needs_attention = (
                    "the saga was rolled back; the rollback undoes what is still live (run "
                    "`sagacity saga rollback` again if it ended unfinished): " + _listed(live)
                )
            elif unknown:
                core.needs_attention = (
                    f"{len(unknown)} failed call(s) may have taken effect and cannot be "
                    "compensated; check them: " + _listed(unknown)
                )
        await self._seal()
        return self.result(value, error, compensated, failed, live)

    def _fitting(self, value: Any) -> Any:
        """``value``, the body's return value, unless it is too large for the workflow's result:
        then None, and ``needs_attention`` says so (the saga completed; its effects stand)."""
        size = workflow.payload_converter().to_payload(value).ByteSize()
        if size <= limits.MAX_VALUE_BYTES or not workflow.patched(PAYLOAD_LIMIT_PATCH):
            return value
        note = (
            f"the saga completed, but its body's return value ({size:,} bytes) is too large for "
            f"Temporal's history ({limits.MAX_VALUE_BYTES:,}): it is not in the result"
        )
        core = self._core
        core.needs_attention = "; ".join(filter(None, (core.needs_attention, note)))
        return None

    def _flag_unknown_effects(self) -> None:
        unknown = [e for e in self._core.executed if e.failed]
        if unknown:
            self._core.needs_attention = (
                f"the saga completed, but {len(unknown)} failed call(s) may have taken effect: "
                + _listed(unknown)
            )

    def result(
        self,
        value: Any,
        error: ErrorInfo | None,
        compensated: list[Effect],
        failed: list[Effect],
        live: list[Effect],
    ) -> SagaResult:
        """The saga's result as it stands: ``value`` and what its compensation did."""
        core = self._core
        return SagaResult(
            saga_id=core.saga_id,
            status=core.state,
            value=value,
            error=error,
            compensated=compensated[:RESULT_EFFECTS],
            compensation_failed=failed,
            live_effects=live,
            needs_attention=core.needs_attention,
            head=core.head,
            compensated_count=len(compensated),
        )
