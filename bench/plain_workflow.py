"""The baseline of ``bench.saga_overhead``: a plain workflow of three plain activities.

When a step fails, the earlier ones are undone in reverse, by hand. The workflow sandbox
re-imports this module for every run (as it would a user's workflow module), so it imports only
the standard library and temporalio, which the sandbox passes through.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

NAME = "bench.PlainThreeSteps"
STEPS = 3
#: an attempt may take as long as a Sagacity tool call's default timeout
TIMEOUT = timedelta(minutes=5)


def step_activity(step: int) -> str:
    return f"plain_step_{step}"


def undo_activity(step: int) -> str:
    return f"plain_undo_{step}"


@workflow.defn(name=NAME)
class PlainThreeSteps:
    """Three activities; when one fails, undo the earlier ones in reverse."""

    @workflow.run
    async def run(self, fail_last: bool) -> dict[str, Any]:
        done: list[tuple[int, Any]] = []
        try:
            for step in range(1, STEPS + 1):
                result = await workflow.execute_activity(
                    step_activity(step),
                    args=[step, fail_last and step == STEPS],
                    start_to_close_timeout=TIMEOUT,
                )
                done.append((step, result))
        except ActivityError as err:
            for step, result in reversed(done):
                await workflow.execute_activity(
                    undo_activity(step), args=[result], start_to_close_timeout=TIMEOUT
                )
            return {"status": "compensated", "error": str(err.cause)}
        return {"status": "completed", "results": [r for _, r in done]}
