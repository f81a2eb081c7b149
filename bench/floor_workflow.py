"""The workflow of ``bench.floor``: ``bench.plain_workflow``'s three steps, with what a saga's
guarantees ask of Temporal added one at a time, and no Sagacity code.

It runs in the workflow sandbox (the ``plain`` kind, as the baseline runs) and outside it (the
others, as Sagacity's generic workflow runs); the sandbox re-imports this module for every run,
so it imports only the standard library and temporalio.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey
from temporalio.exceptions import ActivityError

NAME = "bench.FloorThreeSteps"
STEP = "floor_step"
UNDO = "floor_undo"
STEPS = 3
#: as bench.plain_workflow's
TIMEOUT = timedelta(minutes=5)
#: a Sagacity tool call's default: a dead worker's call is tried again within it
HEARTBEAT_TIMEOUT = timedelta(seconds=30)
#: the attribute a saga shows its end state in (sagacity.temporal.visibility.STATE)
STATE = SearchAttributeKey.for_keyword("SagacityState")


@dataclass(frozen=True)
class Adds:
    """What a run adds to the plain three steps."""

    #: each step commits a row before and a row after its work, each durable on its own, and
    #: each undo a row after its own
    journal: bool = False
    #: each step is scheduled with a heartbeat timeout
    heartbeat_timeout: bool = False
    #: the workflow shows its end state in a search attribute
    end_state: bool = False


@workflow.defn(name=NAME)
class FloorThreeSteps:
    """Three activities, each given what ``adds`` says; when one fails (the last, with
    ``fail_last``), the earlier ones undone in reverse; the end state shown if asked."""

    @workflow.run
    async def run(self, adds: Adds, fail_last: bool) -> dict[str, Any]:
        wid = workflow.info().workflow_id
        heartbeat = HEARTBEAT_TIMEOUT if adds.heartbeat_timeout else None
        done: list[int] = []
        status = "completed"
        try:
            for step in range(1, STEPS + 1):
                await workflow.execute_activity(
                    STEP,
                    args=[wid, step, adds.journal, fail_last and step == STEPS],
                    start_to_close_timeout=TIMEOUT,
                    heartbeat_timeout=heartbeat,
                )
                done.append(step)
        except ActivityError:
            status = "compensated"
            for step in reversed(done):
                await workflow.execute_activity(
                    UNDO,
                    args=[wid, step, adds.journal],
                    start_to_close_timeout=TIMEOUT,
                    heartbeat_timeout=heartbeat,
                )
        if adds.end_state:
            workflow.upsert_search_attributes([STATE.value_set(status)])
        return {"status": status, "steps": done}
