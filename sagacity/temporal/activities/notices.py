"""What a saga is told of a halt that holds or aborts it: the notice, and the error it holds on."""

from __future__ import annotations

from pydantic import ValidationError
from temporalio.exceptions import ApplicationError

from sagacity.errors import Halted
from sagacity.evidence.decisions import Signature
from sagacity.store.halts import Halt
from sagacity.temporal.activities.state import ActivityState
from sagacity.temporal.models import HaltNotice

__all__ = ["halted", "not_this_saga", "notice"]


async def halted(
    state: ActivityState, exc: Halted, *, intent_written: bool = False
) -> ApplicationError:
    """The error a saga holds on: the halt's id, kind and policy, and who halted why."""
    halt = await state.outlast(lambda: state.halts.get(exc.halt_id))
    told = notice(halt, exc.halt_id, intent_written=intent_written)
    message = f"{exc}: {told.describe()}"
    return ApplicationError(
        message, told.model_dump(mode="json"), type="Halted", non_retryable=True
    )


def not_this_saga(halt_id: int) -> str:
    return f"halt {halt_id} does not abort this saga (its policy or scope says otherwise)"


def notice(halt: Halt | None, halt_id: int, *, intent_written: bool = False) -> HaltNotice:
    """A halt as a saga meets it, with its scope and signature, which prove it to the saga."""
    if halt is None:
        return HaltNotice(halt_id=halt_id, intent_written=intent_written)
    try:
        signature = None if halt.signature is None else Signature.model_validate(halt.signature)
    except ValidationError:
        signature = None  # changed after it was signed: the halt stands, unproven
    try:
        return HaltNotice(
            halt_id=halt_id,
            kind=halt.kind,
            policy=halt.policy,
            reason=halt.reason,
            operator=halt.operator,
            intent_written=intent_written,
            scope=halt.scope.as_json(),
            signature=signature,
        )
    except ValidationError:
        # a row edited past what a halt may say: held all the same, under its id
        return HaltNotice(halt_id=halt_id, intent_written=intent_written)
