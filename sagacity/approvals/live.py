"""What a saga says about itself now: its ``status`` query, or why it cannot answer."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    RPCTimeoutOrCancelledError,
    WorkflowFailureError,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.common import QueryRejectCondition
from temporalio.service import RPCError, RPCStatusCode

from sagacity.errors import SagacityError
from sagacity.temporal.models import SagaState, SagaStatus

__all__ = ["Live", "live_status"]


@dataclass(frozen=True, slots=True)
class Live:
    """What a saga answered: its Temporal status and, while it runs, its saga status.

    ``workflow_status`` is ``running`` (with ``status``), a closed workflow's status
    (``completed``, ``terminated``, …), ``not_found``, or ``no_answer`` (``detail`` says why).
    A completed saga's ``outcome`` is the state its result names.
    """

    workflow_status: str
    status: SagaStatus | None = None
    detail: str = ""
    outcome: SagaState | None = None

    @property
    def ended(self) -> str:
        """How a closed saga ended, in a word: its outcome (``aborted``, ``compensated``, …),
        else Temporal's status (``terminated``, …)."""
        return self.outcome.value if self.outcome is not None else self.workflow_status


async def live_status(client: Client, saga_id: str, rpc_timeout: timedelta) -> Live:
    """Ask the saga's ``status`` query; a closed, missing or silent saga says so instead."""
    handle = client.get_workflow_handle(saga_id)
    try:
        status: SagaStatus = await handle.query(
            "status",
            result_type=SagaStatus,
            reject_condition=QueryRejectCondition.NOT_OPEN,
            rpc_timeout=rpc_timeout,
        )
    except WorkflowQueryRejectedError as err:
        closed = err.status.name.lower() if err.status else "closed"
        if closed != "completed":
            return Live(closed)
        return Live(closed, outcome=await _ended_as(client, saga_id, rpc_timeout))
    except RPCError as err:
        if err.status is RPCStatusCode.NOT_FOUND:
            return Live("not_found")
        return Live("no_answer", detail=err.message)
    except WorkflowQueryFailedError as err:
        return Live("no_answer", detail=err.message)
    except RPCTimeoutOrCancelledError as err:
        return Live("no_answer", detail=str(err) or "no answer in time")
    return Live("running", status)


async def _ended_as(client: Client, saga_id: str, rpc_timeout: timedelta) -> SagaState | None:
    """The end state a completed saga's result names (a saga's, or an agent saga's ``saga``)."""
    try:
        handle = client.get_workflow_handle(saga_id, result_type=dict)
        result: dict[str, Any] = await handle.result(rpc_timeout=rpc_timeout)
    except (RPCError, WorkflowFailureError, RPCTimeoutOrCancelledError, SagacityError, ValueError):
        return None  # not a saga's result, or unreadable here: Temporal's status says it
    found = result.get("status") or (result.get("saga") or {}).get("status")
    try:
        return SagaState(str(found))
    except ValueError:
        return None
