"""Tells a saga history that trips a known Temporal SDK bug on replay from one our code broke.

The bug (``tests/temporal/test_update_query_race.py`` reproduces it, on a plain workflow too):
a workflow task that answered a query ends with a local activity's marker, core forces a new
task and hands the result over only there, and an update that arrived meanwhile is accepted
first. Replay hands the result over one task earlier, so the commands that follow it meet the
update's acceptance and the replay fails. The chaos harness queries its sagas all the time,
also while the worker is down, so the queries wait on the sagas' next tasks and it meets the
bug now and then; it reports such a saga apart, and fails on any other history that does not
replay.
"""

from __future__ import annotations

import re

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

from tests.temporal.replay import ReplayFailed, replay

#: how :func:`replay_failure` begins the reason of a history that meets the bug
KNOWN_SDK_BUG = "known SDK bug (update after a query)"
#: how a replay names the event it could not match
_EVENT = re.compile(
    r"Nondeterminism error: .* HistoryEvent\(id: (\d+), WorkflowExecutionUpdateAccepted\)"
)
#: the events between the marker and the acceptance: the task core forced, started, completed
_FORCED_TASK = [
    EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
]


async def replay_failure(history: WorkflowHistory) -> str | None:
    """None when ``history`` replays; else why not, marked ``known SDK bug`` when it is that."""
    try:
        await replay(history, history.workflow_id)
    except ReplayFailed as failed:
        why = str(failed).split("\n")[0][:400]
        return f"{KNOWN_SDK_BUG}: {why}" if _is_the_bug(history, why) else why
    return None


def _is_the_bug(history: WorkflowHistory, why: str) -> bool:
    found = _EVENT.search(why)
    if found is None:
        return False
    accepted = int(found.group(1))
    by_id = {event.event_id: event for event in history.events}
    between = [by_id.get(accepted - n) for n in (3, 2, 1)]
    marker = by_id.get(accepted - 4)
    return (
        all(e is not None for e in between)
        and [e.event_type for e in between if e is not None] == _FORCED_TASK
        and marker is not None
        and marker.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and marker.marker_recorded_event_attributes.marker_name == "core_local_activity"
    )
