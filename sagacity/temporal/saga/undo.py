"""Compensation: the saga's effects undone newest first, and what could not be undone.

An undo that fails for good is journaled COMPENSATION_FAILED and its effect stays live; an
effect whose tool has no compensation stays live too. A halt holds the compensation; another
run that undid an effect meanwhile is read from the journal.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

from sagacity.journal.canonical import to_json
from sagacity.journal.phases import Phase
from sagacity.temporal import names
from sagacity.temporal.failures import compensation_failure, error_type, halt_notice
from sagacity.temporal.models import (
    CompensateRequest,
    Effect,
    RowDraft,
    RowRef,
    SagaCarry,
    SagaState,
    ToolSpec,
)
from sagacity.temporal.saga.controls import Controls
from sagacity.temporal.saga.core import AHEAD, SagaCore
from sagacity.temporal.saga.ending import Ending
from sagacity.temporal.saga.halts import Halts
from sagacity.temporal.saga.journal import Journal
from sagacity.temporal.saga.view import View
from sagacity.temporal.waits import OUTAGE_ALLOWANCE, compensation_retry


class Undo:
    """Effects compensated, failed to compensate and left live, the one undone now, and why."""

    def __init__(
        self,
        core: SagaCore,
        controls: Controls,
        halts: Halts,
        ending: Ending,
        view: View,
        journal: Journal,
        carry: SagaCarry | None,
    ) -> None:
        self._core = core
        self._controls = controls
        self._halts = halts
        self._ending = ending
        self._view = view
        self._journal = journal
        # how far an earlier run's compensation got (continue-as-new), until the catalog is known
        self._carried = carry
        self.compensated: list[Effect] = []
        self.compensation_failed: list[Effect] = []
        self.live: list[Effect] = []
        #: the effect whose compensation runs now, for the status query
        self.undoing: Effect | None = None

    def unpack(self) -> None:
        """Effects a continued run carries by reference, as effects once the catalog is known."""
        carry, self._carried = self._carried, None
        if carry is None:
            return
        kinds = {name: spec.reversibility for name, spec in (self._core.catalog or {}).items()}
        self._core.executed = carry.executed.effects(kinds)
        self.compensated = carry.compensated.effects(kinds)
        self.compensation_failed = carry.compensation_failed.effects(kinds)
        self.live = carry.live.effects(kinds)

    async def compensate(
        self, catalog: dict[str, ToolSpec], hand_over: Callable[[], None] | None
    ) -> tuple[list[Effect], list[Effect], list[Effect]]:
        """Undo executed effects in reverse order; returns (compensated, failed, still live).

        ``hand_over`` (it raises ``workflow.continue_as_new``): called between undos whenever
        history grows long.
        """
        core = self._core
        undone_here = 0
        while core.executed:
            if hand_over and undone_here and core.continue_as_new_suggested():
                hand_over()
            effect = core.executed.pop()
            undone_here += 1
            spec = catalog.get(effect.tool_name)
            if spec is None or not spec.has_compensation:
                self.live.append(effect)
                continue
            self.undoing = effect
            try:
                undone = await self._compensate_one(spec, effect)
            finally:
                self.undoing = None
            if undone:
                self.compensated.append(effect)
            else:
                self.compensation_failed.append(effect)
                self.live.append(effect)
        self._view.no_more_adoptions()
        return self.compensated, self.compensation_failed, self.live

    async def _compensate_one(self, spec: ToolSpec, effect: Effect) -> bool:
        core, controls = self._core, self._controls
        # the compensation gets what the call really took and returned, not the journal's view
        original = self._view.original(effect.call_seq)
        input_json = to_json(original.input if original else effect.input)
        # the last effect undone, none having failed: the saga ends after its row
        last = not core.executed and not self.compensation_failed
        end = SagaState.ABORTED if controls.aborted else SagaState.COMPENSATED
        seal_as = self._ending.seal_as(end) if last else None
        options = core.options
        while True:
            request = CompensateRequest(
                saga_id=core.saga_id,
                seq=core.head.seq + 1,
                prev_hash=core.head.hash,
                tool_name=effect.tool_name,
                call_seq=effect.call_seq,
                input_json=input_json,
                result=original.result if original else effect.result,
                failed=effect.failed,
                by_ref=effect.by_ref and original is None,
                result_by_ref=original is not None and original.result_in_journal,
                seal_as=seal_as,
            )
            try:
                rows = await controls.shielded(
                    workflow.start_activity(
                        names.COMPENSATE,
                        request,
                        result_type=list[RowRef],
                        start_to_close_timeout=timedelta(seconds=spec.timeout_s) + OUTAGE_ALLOWANCE,
                        heartbeat_timeout=core.heartbeat_timeout(spec),
                        retry_policy=compensation_retry(options),
                    )
                )
            except ActivityError as err:
                notice = halt_notice(err)
                if notice is not None:
                    await self._halts.held(notice, forward=False)
                    continue
                if error_type(err) in AHEAD:
                    # another run wrote past this one; if it undid this effect, it is done
                    core.executed.append(effect)
                    await self._view.catch_up()
                    if effect not in core.executed:
                        return True
                    core.executed.remove(effect)
                    continue
                await self._journal_compensation_failed(effect, input_json, err)
                return False
            core.track(rows)
            self._ending.wrote(rows, seal_as)
            # what a correction returned, for the saga's result (deterministic: the activity's)
            effect.correction = next((r.correction for r in rows if r.correction is not None), None)
            return True

    async def _journal_compensation_failed(
        self, effect: Effect, input_json: str, err: ActivityError
    ) -> None:
        # an undo that failed for good says on which attempt (no patch needed: the append's
        # input is not part of the history's commands, and a replay takes its recorded one)
        failed = compensation_failure(err, self._core.options.compensation_attempts)
        by_ref = effect.by_ref and self._view.original(effect.call_seq) is None
        await self._journal.append(
            [
                RowDraft(
                    tool_name=effect.tool_name,
                    phase=Phase.COMPENSATION_FAILED,
                    input=input_json,
                    input_of=effect.call_seq if by_ref else None,
                    payload=to_json(failed),
                )
            ]
        )
        workflow.logger.error(
            "saga %s: compensation of %s (call seq %d) failed: %s",
            self._core.saga_id,
            effect.tool_name,
            effect.call_seq,
            failed["message"],
        )
