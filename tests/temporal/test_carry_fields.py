"""Every field of a :class:`SagaCarry` reaches the part that owns it, and comes back out.

The saga's state is spread over its parts (``sagacity.temporal.saga.parts``), each taking its own
fields from the carry in its constructor. A field no part takes would be lost at continue-as-new
without any error: here a carry with every field set (a halted abort, decided requests, refused
decisions, redacted originals, effects compensated, failed and live) is handed to a new saga's
parts and taken again.
"""

from __future__ import annotations

from sagacity.journal.phases import Phase
from sagacity.temporal.models import (
    Abort,
    Effect,
    EffectRefs,
    ErrorInfo,
    HaltNotice,
    Head,
    Original,
    RowRef,
    SagaCarry,
    SagaOptions,
    ToolSpec,
)
from sagacity.temporal.saga.carry import carry_of
from sagacity.temporal.saga.parts import SagaParts
from sagacity.tools import Reversibility


def effect(tool: str, seq: int, *, failed: bool = False) -> Effect:
    return Effect(
        tool_name=tool,
        call_seq=seq,
        reversibility=Reversibility.COMPENSATABLE,
        input={},
        failed=failed,
        by_ref=True,
    )


def spec(name: str) -> ToolSpec:
    return ToolSpec(
        name=name,
        reversibility=Reversibility.COMPENSATABLE,
        idempotent=False,
        has_compensation=True,
        timeout_s=1.0,
        heartbeat_timeout_s=1.0,
    )


def test_every_carried_field_comes_back_from_the_parts() -> None:
    head = Head(seq=9, hash="ab" * 32)
    carry = SagaCarry(
        saga_id="carried",
        head=head,
        rows=[RowRef(seq=9, tool_name="d", phase=Phase.COMPENSATION_FAILED, hash=head.hash)],
        executed=EffectRefs.of([effect("a", 1), effect("b", 3, failed=True)]),
        adoptable=[effect("a", 1)],
        failures=[ErrorInfo(type="ToolFailed", message="b failed")],
        needs_attention="look at b",
        refused=["mallory: not waiting"],
        decided=[4, 7],
        abort=Abort(reason="halted: stop", by="operator"),
        abort_signalled=True,
        cancelled=True,
        abort_halt=HaltNotice(halt_id=3, policy="compensate", operator="operator"),
        error=ErrorInfo(type="SagaAborted", message="aborted: halted: stop"),
        compensated=EffectRefs.of([effect("c", 5)]),
        compensation_failed=EffectRefs.of([effect("d", 6)]),
        live=EffectRefs.of([effect("d", 6)]),
        originals=[Original(call_seq=1, input={"secret": "s3cr3t"}, result="made")],
    )
    parts = SagaParts.build(carry.saga_id, SagaOptions(), carry)
    # effects travel by reference: they become effects once the catalog is known
    parts.core.catalog = {name: spec(name) for name in "abcd"}
    parts.undo.unpack()

    assert carry_of(parts) == carry
