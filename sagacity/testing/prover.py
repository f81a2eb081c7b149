"""The rollback prover: run a tool and its undo through the saga engine, case by case, and say
what broke.

Each case is a real saga (:class:`~sagacity.testing.workflow.ProveRollback`) on a worker of its
own, journaled like any other; faults are injected at the tool's boundaries
(:mod:`sagacity.testing.faults`). A *probe* is the user's read-only look at the world (any
value that compares with ``==``): the prover reads it before the call, after the call (or
while an IRREVERSIBLE call waits) and after the undo, and compares.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta
from typing import Any
from uuid import uuid4

from temporalio.client import WorkflowHandle
from temporalio.service import RPCError
from temporalio.worker import Worker

from sagacity.journal import Entry, Phase
from sagacity.temporal.models import Abort, SagaOptions, SagaResult, SagaState, SagaStatus
from sagacity.testing.faults import FaultPlan
from sagacity.testing.report import CaseVerdict, ProofReport, RollbackCase
from sagacity.testing.stack import SagacityStack
from sagacity.testing.workflow import PROVE_ROLLBACK, ROLL_BACK, ProofRun, ProveRollback
from sagacity.tools import CompensableTool, Reversibility

__all__ = ["PROOF_OPTIONS", "Probe", "RollbackProver"]

#: a read-only look at the world the tool changes: a value compared with ``==`` (sync or async)
Probe = Callable[[], Any | Awaitable[Any]]

#: proving sagas give up on a broken undo fast, and retry a lost one at once
PROOF_OPTIONS = SagaOptions(
    compensation_attempts=3,
    compensation_backoff_s=0.1,
    compensation_max_interval_s=0.5,
    idempotent_attempts=2,
)

#: cases that need an undo, and what the call left it
_UNDO_CASES = {
    RollbackCase.RESTORES_STATE: "on a call that succeeded",
    RollbackCase.FAILED_BEFORE_EFFECT: "on a call that failed before its effect (ctx.failed, no result)",
    RollbackCase.FAILED_AFTER_EFFECT: "on a call that failed after its effect (ctx.failed, no result)",
    RollbackCase.WORKER_KILLED_AFTER_EFFECT: "on a call whose worker died after its effect (ctx.failed, no result)",
    RollbackCase.UNDO_TWICE: "run a second time (its first run's acknowledgement lost)",
}


class RollbackProver:
    """Proves tools' undos on ``stack``; ``on_report`` sees each :class:`ProofReport` (the
    pytest plugin's table)."""

    def __init__(
        self,
        stack: SagacityStack,
        *,
        on_report: Callable[[ProofReport], None] | None = None,
        timeout: float = 60.0,
    ) -> None:
        self.stack = stack
        self.on_report = on_report
        #: how long one case's saga may take before the prover gives up on it
        self.timeout = timeout

    async def prove_rollback(
        self,
        tool: CompensableTool[..., Any],
        *,
        args: dict[str, Any],
        probe: Probe,
        cases: Iterable[RollbackCase | str] | None = None,
    ) -> ProofReport:
        """Run ``tool`` with ``args`` in each of ``cases`` (all by default), one saga each, and
        judge its undo by what ``probe`` sees. A tool that is a method must be bound to its
        instance (``tools_of(instance)``, or the tools the app fixture lists)."""
        # a case named by its value ("undo_twice") is taken too; a wrong one is a ValueError
        chosen = list(RollbackCase) if cases is None else [RollbackCase(c) for c in cases]
        plan = FaultPlan()
        served = plan.wrap(tool)
        task_queue = f"sagacity-prove-{uuid4().hex[:12]}"
        verdicts = []
        async with Worker(
            self.stack.client,
            task_queue=task_queue,
            plugins=[self.stack.plugin([served], [ProveRollback])],
            graceful_shutdown_timeout=timedelta(seconds=1),
        ):
            for case in chosen:
                verdicts.append(await self._case(plan, tool, case, args, probe, task_queue))
        report = ProofReport(tool.name, tuple(verdicts))
        if self.on_report is not None:
            self.on_report(report)
        return report

    async def _case(
        self,
        plan: FaultPlan,
        tool: CompensableTool[..., Any],
        case: RollbackCase,
        args: dict[str, Any],
        probe: Probe,
        task_queue: str,
    ) -> CaseVerdict:
        irreversible = tool.reversibility is Reversibility.IRREVERSIBLE
        if irreversible != (case is RollbackCase.IRREVERSIBLE_WAITS):
            why = (
                "no undo to prove: IRREVERSIBLE"
                if irreversible
                else f"{tool.reversibility.value}: runs without approval"
            )
            return CaseVerdict(case, None, why)
        saga_id = f"prove-{case.value}-{uuid4().hex[:12]}"
        plan.arm(saga_id, case)
        try:
            before = await _look(probe)
            handle = await self.stack.client.start_workflow(
                PROVE_ROLLBACK,
                ProofRun(tool=tool.name, args=args, options=PROOF_OPTIONS),
                id=saga_id,
                task_queue=task_queue,
                result_type=SagaResult,
            )
            during, result = await asyncio.wait_for(self._drive(handle, probe), self.timeout)
            after = await _look(probe)
            rows = await self.stack.journal.read(saga_id)
        except TimeoutError:
            # the next case must not meet this saga's undo still running
            with contextlib.suppress(RPCError):  # it ended meanwhile
                await self.stack.client.get_workflow_handle(saga_id).terminate("proof timed out")
            late = f"the saga did not end within {self.timeout:g}s"
            return CaseVerdict(case, False, late, saga_id)
        finally:
            plan.disarm(saga_id)
        judged = _Judged(case, tool.name, before, during, after, result, rows)
        broke = judged.waited() if irreversible else judged.undone()
        return CaseVerdict(case, broke is None, broke or "ok", saga_id)

    async def _drive(
        self, handle: WorkflowHandle[Any, SagaResult], probe: Probe
    ) -> tuple[Any, SagaResult]:
        """Follow the saga to its end: look at the world once its call executed (then roll it
        back) or waits for approval (then abort it); abort a SUSPECT call. Returns what the
        probe saw then (None when it never looked) and the saga's result."""
        ending = asyncio.ensure_future(handle.result())
        during: Any = None
        stopped = False
        try:
            while not ending.done():
                status = None if stopped else await _status(handle)
                if status is not None:
                    if status.state in (SagaState.AWAITING_APPROVAL, SagaState.SUSPECT):
                        if status.state is SagaState.AWAITING_APPROVAL:
                            during = await _look(probe)
                        await handle.signal(
                            "abort", Abort(reason="the rollback prover", by="sagacity.testing")
                        )
                        stopped = True
                    elif _executed(status):
                        during = await _look(probe)
                        await handle.signal(ROLL_BACK)
                        stopped = True
                await asyncio.wait({ending}, timeout=0.05)
            return during, ending.result()
        finally:
            ending.cancel()


def _executed(status: SagaStatus) -> bool:
    """Whether the saga's call executed and its body waits for the rollback."""
    return (
        status.state is SagaState.RUNNING
        and status.running is None
        and any(not effect.failed for effect in status.executed)
    )


async def _status(handle: WorkflowHandle[Any, SagaResult]) -> SagaStatus | None:
    try:
        status: SagaStatus = await handle.query("status", result_type=SagaStatus)
    except Exception:  # before the saga's first workflow task, or as it ends
        return None
    return status


async def _look(probe: Probe) -> Any:
    seen = probe()
    return await seen if inspect.isawaitable(seen) else seen


class _Judged:
    """One case's saga as it ended, and what the probe saw; each judgement returns what broke
    (None: nothing)."""

    def __init__(
        self,
        case: RollbackCase,
        tool: str,
        before: Any,
        during: Any,
        after: Any,
        result: SagaResult,
        rows: list[Entry],
    ) -> None:
        self.case, self.tool, self.result, self.rows = case, tool, result, rows
        self.before, self.during, self.after = before, during, after

    def waited(self) -> str | None:
        """An IRREVERSIBLE call: it must wait for approval, and nothing runs before it."""
        if not any(row.phase is Phase.AWAITING_APPROVAL for row in self.rows):
            return f"the call never waited for approval (the saga ended {self.result.status})"
        if any(row.phase is Phase.INTENT for row in self.rows):
            return "the tool ran (INTENT journaled) though nobody approved it"
        if self.during != self.before:
            return (
                f"while the call waited for approval the probe saw {self.during!r}, "
                f"not {self.before!r}: something changed before a human approved"
            )
        return None

    def undone(self) -> str | None:
        """A call with an undo: the undo must restore the state the probe saw before it."""
        failed = self._row(Phase.COMPENSATION_FAILED)
        if self.case is RollbackCase.RESTORES_STATE or self.case is RollbackCase.UNDO_TWICE:
            refused = self._unrun()
            if refused is not None:
                return refused
        if failed is not None:
            return self._undo_raised(failed)
        if not any(row.phase is Phase.COMPENSATED for row in self.rows):
            error = self.result.error
            return f"the call was never undone: the saga ended {self.result.status} ({error})"
        if self.after != self.before:
            return self._left_changed()
        return None

    def _unrun(self) -> str | None:
        """The call must have run, and the probe must have seen what it changed."""
        if self._row(Phase.EXECUTED) is None:
            error = self.result.error
            message = f"{error.type}: {error.message}" if error else self.result.status
            return f"the tool did not run with the example arguments: {message}"
        if self.during == self.before:
            return (
                f"the probe saw no change after the call ({self.during!r}): it must read what "
                "the tool changes, or nothing is proven"
            )
        return None

    def _undo_raised(self, row: Entry) -> str:
        failure = json.loads(row.payload) if row.payload else {}
        kind, message = failure.get("type", "?"), failure.get("message", "")
        said = f"{_UNDO_CASES[self.case]}, the undo raised {kind}: {message}"
        assumed = self.case not in (RollbackCase.RESTORES_STATE, RollbackCase.UNDO_TWICE) and (
            "NoneType" in message or (kind == "ContextKeyMissing" and "result" in message)
        )
        return f"{said}: it assumed a result" if assumed else said

    def _left_changed(self) -> str:
        if self.case is RollbackCase.UNDO_TWICE:
            return (
                f"run twice, the undo left {self.after!r}, not the state before the call "
                f"{self.before!r}: its second run is not harmless"
            )
        return (
            f"{_UNDO_CASES[self.case]}, the undo left {self.after!r}, not the state before the "
            f"call {self.before!r}"
        )

    def _row(self, phase: Phase) -> Entry | None:
        return next((row for row in self.rows if row.phase is phase), None)
