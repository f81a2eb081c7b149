"""What a failed activity says, as the saga and the rollback workflows read it: type, message, halt."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import ValidationError
from temporalio.exceptions import ActivityError, ApplicationError

from sagacity.temporal.models import HaltNotice, undo_attempt

if TYPE_CHECKING:
    from temporalio.client import WorkflowUpdateFailedError

__all__ = ["compensation_failure", "error_message", "error_type", "halt_notice"]


def error_type(err: ActivityError | WorkflowUpdateFailedError) -> str:
    """The failure's type: the application error's own, else the cause's class name (an
    update's failure too, as its caller sees it)."""
    cause = err.cause
    if isinstance(cause, ApplicationError) and cause.type:
        return cause.type
    return type(cause).__name__ if cause is not None else type(err).__name__


def error_message(err: ActivityError) -> str:
    """The failure's message, without Temporal's wrapping."""
    cause = err.cause if err.cause is not None else err
    return str(getattr(cause, "message", None) or cause)


def halt_notice(err: ActivityError) -> HaltNotice | None:
    """The halt that refused an activity, or None when it failed otherwise."""
    if error_type(err) != "Halted":
        return None
    cause = err.cause
    details = cause.details if isinstance(cause, ApplicationError) else ()
    try:
        return HaltNotice.model_validate(details[0] if details else {}, strict=False)
    except ValidationError:
        return HaltNotice(halt_id=0)  # a halt this worker cannot read: held all the same


def compensation_failure(err: ActivityError, attempts: int) -> dict[str, object]:
    """A COMPENSATION_FAILED row's payload: the failure, and the attempt it failed on (the one a
    permanent failure names, else ``attempts``, the bound it ran out of)."""
    cause = err.cause
    failed_on = undo_attempt(cause.details) if isinstance(cause, ApplicationError) else None
    return {
        "type": error_type(err),
        "message": error_message(err),
        "attempts": failed_on or attempts,
    }
