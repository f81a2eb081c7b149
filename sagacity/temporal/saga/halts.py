"""An operator's halt as the saga meets it: obeyed when proven, waited out, resumed.

A ``halt`` signal (policy ``compensate``) aborts the saga once an activity finds it real; a
call or a compensation the activities' gate refused waits here until a ``resume`` or the next
look at the halt.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

from sagacity.temporal import names
from sagacity.temporal.failures import error_message
from sagacity.temporal.models import HaltLookedUp, HaltLookup, HaltNotice, Resume, SagaState
from sagacity.temporal.saga.controls import Controls, halt_abort
from sagacity.temporal.saga.core import SagaCore
from sagacity.temporal.saga.gate import Gate
from sagacity.temporal.saga.patches import HALT_CHECK_PATCH
from sagacity.temporal.saga.signals import Refusals
from sagacity.temporal.waits import HALT_RECHECK, HALT_RECHECK_MAX, JOURNAL_RETRY, JOURNAL_TIMEOUT


class Halts:
    """The halt the saga waits on, the ``resume`` signals so far, and halts being looked up."""

    def __init__(self, core: SagaCore, refusals: Refusals, controls: Controls, gate: Gate) -> None:
        self._core = core
        self._refusals = refusals
        self._controls = controls
        self._gate = gate
        #: halt signals being checked against the halt store
        self._lookups: set[asyncio.Task[None]] = set()
        #: the operator's halt the saga waits on, and how many ``resume`` signals came so far
        self.halt: HaltNotice | None = None
        self._resumes = 0
        #: looks at a halt since the last resume: the wait between them doubles
        self._looks = 0

    def on_halt(self, *payloads: Any) -> None:
        """An operator halted this saga: under ``compensate`` it aborts (unless it waits for an
        approval, which stays waiting, or already compensates); under ``keep`` its next call is
        held anyway, by the activities' gate.

        The signal is obeyed only when it is real, as an activity judges it (so replay follows
        the recorded answer): the halt store holds that halt in force, or (the store has no such
        halt) its signature verifies with the worker's keyring. Otherwise it is refused and
        recorded in ``refused_decisions``.
        """
        notice = self._refusals.parse("halt", HaltNotice, payloads)
        if notice is None or notice.policy != "compensate":
            return
        if not workflow.patched(HALT_CHECK_PATCH):
            if self._gate.pending is None and self._controls.abort is None:
                self._controls.abort = halt_abort(notice)
            return
        if not self._halt_aborts():
            return
        lookup = asyncio.create_task(self._look_up_halt(notice))
        self._lookups.add(lookup)
        lookup.add_done_callback(self._lookups.discard)

    def _halt_aborts(self) -> bool:
        """Whether a halt may abort the saga now: not when it aborted already, waits for an
        approval (it stays waiting) or compensates after a failure (the halt stops what is
        still to run, and only compensations are: the saga ends as it would have)."""
        return self._controls.abort is None and self._gate.pending is None and not self._core.ending

    async def _look_up_halt(self, notice: HaltNotice) -> None:
        """Obey ``notice`` if an activity finds it real (the halt store holds it in force, or
        its signature verifies) and aborting this saga; else refuse it (recorded)."""
        sender = notice.operator or "?"
        try:
            found: HaltLookedUp = await workflow.execute_activity(
                names.READ_HALT,
                HaltLookup(saga_id=self._core.saga_id, told=notice),
                result_type=HaltLookedUp,
                start_to_close_timeout=JOURNAL_TIMEOUT,
                heartbeat_timeout=self._core.heartbeat_timeout(None),
                retry_policy=JOURNAL_RETRY,
            )
        except ActivityError as err:
            self._refusals.refuse(sender, f"halt {notice.halt_id} refused: {error_message(err)}")
            return
        if found.notice is None:
            self._refusals.refuse(sender, f"halt {notice.halt_id} refused: {found.refusal}")
        elif self._halt_aborts():
            self._controls.abort_for(found.notice)

    def on_resume(self, *payloads: Any) -> None:
        if self._refusals.parse("resume", Resume, payloads or ({},)) is not None:
            self._resumes += 1

    async def held(self, notice: HaltNotice, *, forward: bool) -> None:
        """Wait out a halt that refused a call (``forward``) or a compensation.

        A call under a ``compensate`` halt aborts the saga instead. The wait ends at a
        ``resume`` signal, an abort, or the next look: the activity checks the halt again, so a
        lost signal only delays the saga.
        """
        core, controls = self._core, self._controls
        if forward and notice.policy == "compensate":
            if controls.abort is None:
                if workflow.patched(HALT_CHECK_PATCH):
                    controls.abort_for(notice)  # the activity read it from the halt store
                else:
                    controls.abort = halt_abort(notice)
            return
        if forward and controls.aborted:
            return
        before, self.halt = core.state, notice
        core.enter(SagaState.HALTED)
        seen = self._resumes
        looks = self._looks
        self._looks += 1
        try:
            await controls.wait(
                lambda: self._resumes != seen or (forward and controls.aborted),
                timeout=min(HALT_RECHECK * 2**looks, HALT_RECHECK_MAX),
            )
        except TimeoutError:
            pass
        finally:
            core.state, self.halt = before, None
            if self._resumes != seen:
                self._looks = 0
        core.enter(before)  # shown again: the activity looks at the halt next
