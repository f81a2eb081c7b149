"""How a saga's running compensation is faring: its attempt and last error, from Temporal.

The saga's ``status`` query names the effect being undone (``SagaStatus.compensating``); how
the undo's attempts went is the server's to tell, in the pending activities of the workflow's
description. An undo that has failed :data:`FAILING_AFTER` attempts is shown as failing, apart
from one that is merely slow: ``saga status --wait`` exits 4 on it, the console marks it.
"""

from __future__ import annotations

from datetime import UTC

from temporalio.client import Client, WorkflowExecutionDescription
from temporalio.exceptions import ApplicationError

from sagacity.temporal import names
from sagacity.temporal.models import Compensating, SagaStatus

__all__ = ["FAILING_AFTER", "attempts", "failing", "reason", "with_attempts"]

#: failed attempts after which a compensation that is still retried is reported as failing
FAILING_AFTER = 3
#: how much of the last error is shown
_ERROR_CHARS = 500


async def with_attempts(
    client: Client, status: SagaStatus, described: WorkflowExecutionDescription | None = None
) -> SagaStatus:
    """``status`` with its compensation's attempt and last error filled in from Temporal
    (``described``: the workflow's description, when the caller has it already)."""
    undoing = status.compensating
    if undoing is None:
        return status
    if described is None:
        described = await client.get_workflow_handle(status.saga_id).describe()
    found = await attempts(client, undoing, described)
    return status if found is None else status.model_copy(update={"compensating": found})


async def attempts(
    client: Client, undoing: Compensating, described: WorkflowExecutionDescription
) -> Compensating | None:
    """``undoing`` with the attempt and last error of the compensate activity the workflow
    ``described`` has pending (a saga's, or a rollback's); None when it has none."""
    for pending in described.raw_description.pending_activities:
        if pending.activity_type.name != names.COMPENSATE:
            continue
        last_error = None
        if pending.HasField("last_failure"):
            failure = await client.data_converter.decode_failure(pending.last_failure)
            kind = failure.type if isinstance(failure, ApplicationError) else None
            text = failure.message if isinstance(failure, ApplicationError) else str(failure)
            last_error = " ".join(f"{kind or type(failure).__name__}: {text}".split())
        due = None
        if pending.HasField("next_attempt_schedule_time"):
            due = pending.next_attempt_schedule_time.ToDatetime(UTC)
        update = {
            "attempt": pending.attempt,
            "last_error": last_error[:_ERROR_CHARS] if last_error else None,
            "next_attempt_at": due,
        }
        return undoing.model_copy(update=update)
    return None


def failing(undoing: Compensating | None) -> bool:
    """Whether the compensation has failed :data:`FAILING_AFTER` attempts and is still retried."""
    return undoing is not None and undoing.failed_attempts >= FAILING_AFTER


def reason(saga_id: str, undoing: Compensating) -> str:
    """One line: which compensation keeps failing, on which attempt, with what error."""
    return (
        f"saga {saga_id}: the compensation of {undoing.tool_name} (call seq {undoing.call_seq}) "
        f"has failed {undoing.failed_attempts} attempts and is retried (attempt "
        f"{undoing.attempt}); last error: {undoing.last_error}"
    )
