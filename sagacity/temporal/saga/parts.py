"""The saga's parts, built for one saga and wired to each other: who is given whom.

Only the facade (``Saga``) holds them all; a part holds the few others it calls. Two calls go
against the build order, so they are passed as functions: the view settles what an earlier run
left open through the call path, and hands carried effects to the compensation's lists.
"""

from __future__ import annotations

from dataclasses import dataclass

from sagacity.temporal.models import STATUS_ROWS, Compensating, SagaCarry, SagaOptions, SagaStatus
from sagacity.temporal.saga.calls import Calls
from sagacity.temporal.saga.controls import Controls
from sagacity.temporal.saga.core import SagaCore
from sagacity.temporal.saga.ending import Ending
from sagacity.temporal.saga.gate import Gate
from sagacity.temporal.saga.halts import Halts
from sagacity.temporal.saga.journal import Journal
from sagacity.temporal.saga.signals import Refusals, Signals
from sagacity.temporal.saga.suspect import Suspects
from sagacity.temporal.saga.undo import Undo
from sagacity.temporal.saga.view import View


@dataclass(frozen=True, slots=True)
class SagaParts:
    """One saga's parts, over the state they share (``core``)."""

    core: SagaCore
    refusals: Refusals
    controls: Controls
    ending: Ending
    view: View
    gate: Gate
    halts: Halts
    suspects: Suspects
    undo: Undo
    calls: Calls
    #: the saga's signals by name, each to the part it is for
    signals: Signals

    @classmethod
    def build(cls, saga_id: str, options: SagaOptions, carry: SagaCarry | None) -> SagaParts:
        """A new saga's parts, or those that go on from ``carry`` (each takes its own fields)."""
        core = SagaCore.start(saga_id, options, carry)
        refusals = Refusals(saga_id, carry)
        controls = Controls(core, refusals, carry)
        ending = Ending(core, controls, carry)
        view = View(
            core,
            controls,
            ending,
            carry,
            unpack=lambda: undo.unpack(),
            settle=lambda: calls.settle_left_open(),
        )
        journal = Journal(core, controls, view.catch_up)
        gate = Gate(core, refusals, controls, journal, carry)
        halts = Halts(core, refusals, controls, gate)
        suspects = Suspects(core, refusals, controls, journal)
        undo = Undo(core, controls, halts, ending, view, journal, carry)
        calls = Calls(core, controls, halts, ending, view, journal, gate, suspects)
        signals = Signals(
            refusals,
            {
                "abort": controls.on_abort,
                "approve": gate.on_approve,
                "reject": gate.on_reject,
                "resolve": suspects.on_resolve,
                "halt": halts.on_halt,
                "resume": halts.on_resume,
            },
        )
        return cls(
            core, refusals, controls, ending, view, gate, halts, suspects, undo, calls, signals
        )

    def status(self) -> SagaStatus:
        """The ``status`` query: state, head, newest rows and effects, and what waits on whom."""
        core, undoing = self.core, self.undo.undoing
        return SagaStatus(
            saga_id=core.saga_id,
            state=core.state,
            head=core.head,
            rows=core.rows,
            executed=core.executed[-STATUS_ROWS:],
            executed_count=len(core.executed),
            running=core.running,
            pending_approval=self.gate.pending,
            suspect=self.suspects.suspect,
            refused_decisions=self.refusals.refused,
            needs_attention=core.needs_attention,
            halted=self.halts.halt,
            compensating=(
                Compensating(tool_name=undoing.tool_name, call_seq=undoing.call_seq)
                if undoing is not None
                else None
            ),
        )
