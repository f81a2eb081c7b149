"""What a saga says about itself now: its ``status`` query, or why it cannot answer."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from temporalio.client import (
    Client,
    RPCTimeoutOrCancelledError,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.common import QueryRejectCondition
from temporalio.service import RPCError, RPCStatusCode

from sagacity.temporal.models import SagaStatus

__all__ = ["Live", "live_status"]


@dataclass(frozen=True, slots=True)
class Live:
    """What a saga answered: its Temporal status and, while it runs, its saga status.

    ``workflow_status`` is ``running`` (with ``status``), a closed workflow's status
    (``completed``, ``terminated``, …), ``not_found``, or ``no_answer`` (``detail`` says why).
    """

    workflow_status: str
    status: SagaStatus | None = None
    detail: str = ""


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
        return Live(err.status.name.lower() if err.status else "closed")
    except RPCError as err:
        if err.status is RPCStatusCode.NOT_FOUND:
            return Live("not_found")
        return Live("no_answer", detail=err.message)
    except WorkflowQueryFailedError as err:
        return Live("no_answer", detail=err.message)
    except RPCTimeoutOrCancelledError as err:
        return Live("no_answer", detail=str(err) or "no answer in time")
    return Live("running", status)
