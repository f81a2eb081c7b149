"""Why an ended saga's history does not replay, for the report of a saga whose status failed.

A status query on an ended saga replays its history; when the query fails, the report says
whether the history replays in the workers' replayers, and if not, why.
"""

from __future__ import annotations

from temporalio.client import WorkflowHistory

from tests.temporal.replay import ReplayFailed, replay


async def replay_failure(history: WorkflowHistory) -> str | None:
    """None when ``history`` replays; else the first line of why not."""
    try:
        await replay(history, history.workflow_id)
    except ReplayFailed as failed:
        return str(failed).split("\n")[0][:400]
    return None
