"""Continue-as-new: what each part of the saga hands to the next run, gathered in a SagaCarry.

The next run's parts take their own fields back, each in its constructor (``carry=``); effects
travel by reference and become effects once the catalog is known (``Undo.unpack``).
"""

from __future__ import annotations

from sagacity.temporal.models import EffectRefs, SagaCarry
from sagacity.temporal.saga.controls import Controls
from sagacity.temporal.saga.core import SagaCore
from sagacity.temporal.saga.ending import Ending
from sagacity.temporal.saga.gate import Gate
from sagacity.temporal.saga.signals import Refusals
from sagacity.temporal.saga.undo import Undo
from sagacity.temporal.saga.view import View


def carry_of(
    core: SagaCore,
    refusals: Refusals,
    controls: Controls,
    gate: Gate,
    view: View,
    undo: Undo,
    ending: Ending,
) -> SagaCarry:
    """The state the next run needs to go on as this one: head, effects, failures, decisions."""
    return SagaCarry(
        saga_id=core.saga_id,
        head=core.head,
        rows=core.rows,
        executed=EffectRefs.of(core.executed),
        adoptable=view.adoptable(),
        failures=core.failures,
        needs_attention=core.needs_attention,
        refused=refusals.refused,
        decided=sorted(gate.decided),
        abort=controls.abort,
        abort_signalled=controls.abort_signalled,
        cancelled=controls.cancelled,
        abort_halt=controls.abort_halt,
        error=ending.error,
        compensated=EffectRefs.of(undo.compensated),
        compensation_failed=EffectRefs.of(undo.compensation_failed),
        live=EffectRefs.of(undo.live),
        originals=view.originals(core.executed),
    )
