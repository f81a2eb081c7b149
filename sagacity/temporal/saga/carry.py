"""Continue-as-new: what each part of the saga hands to the next run, gathered in a SagaCarry.

The next run's parts take their own fields back, each in its constructor (``carry=``); effects
travel by reference and become effects once the catalog is known (``Undo.unpack``).
"""

from __future__ import annotations

from sagacity.temporal.models import EffectRefs, SagaCarry
from sagacity.temporal.saga.parts import SagaParts


def carry_of(parts: SagaParts) -> SagaCarry:
    """The state the next run needs to go on as this one: head, effects, failures, decisions."""
    core, controls, view, undo = parts.core, parts.controls, parts.view, parts.undo
    return SagaCarry(
        saga_id=core.saga_id,
        head=core.head,
        rows=core.rows,
        executed=EffectRefs.of(core.executed),
        adoptable=view.adoptable(),
        failures=core.failures,
        needs_attention=core.needs_attention,
        refused=parts.refusals.refused,
        decided=sorted(parts.gate.decided),
        abort=controls.abort,
        abort_signalled=controls.abort_signalled,
        cancelled=controls.cancelled,
        abort_halt=controls.abort_halt,
        error=parts.ending.error,
        compensated=EffectRefs.of(undo.compensated),
        compensation_failed=EffectRefs.of(undo.compensation_failed),
        live=EffectRefs.of(undo.live),
        originals=view.originals(core.executed),
    )
