"""The tool catalog a saga decides with, read from its workflow history.

A saga learns its worker's tools from the ``open_saga`` (or ``describe_tools``) local activity, or
from its first call's ``open_and_call`` activity (a new declarative saga), and keeps the answer in
its history; the saga then compensates what that catalog says has a
compensation. Reading the same answer back lets a client say what the saga would do without a
query of its own (``sagacity saga abort --dry-run``).
"""

from __future__ import annotations

import json
from typing import Any

from temporalio.client import Client, WorkflowHandle

from sagacity.temporal.models import CallOutcome, SagaOpened, ToolSpec
from sagacity.temporal.names import DESCRIBE_TOOLS, OPEN_AND_CALL, OPEN_SAGA

__all__ = ["recorded_catalog"]

#: how the Temporal SDK's core records a local activity's result in history
_LOCAL_ACTIVITY = "core_local_activity"


async def recorded_catalog(client: Client, handle: WorkflowHandle[Any, Any]) -> dict[str, ToolSpec]:
    """The newest catalog in the saga's current run's history, by tool name (empty: none yet)."""
    catalog: dict[str, ToolSpec] = {}
    opening_calls: set[int] = set()  # scheduled event ids of open_and_call activities
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            if event.activity_task_scheduled_event_attributes.activity_type.name == OPEN_AND_CALL:
                opening_calls.add(event.event_id)
            continue
        if event.HasField("activity_task_completed_event_attributes"):
            completed = event.activity_task_completed_event_attributes
            if completed.scheduled_event_id in opening_calls:
                (outcome,) = await client.data_converter.decode(
                    list(completed.result.payloads), [CallOutcome]
                )
                if outcome.opened is not None:
                    catalog = {s.name: s for s in outcome.opened.tools}
            continue
        if not event.HasField("marker_recorded_event_attributes"):
            continue
        marker = event.marker_recorded_event_attributes
        details = marker.details
        if marker.marker_name != _LOCAL_ACTIVITY or "result" not in details:
            continue  # another marker, or a local activity that failed
        kind = json.loads(details["data"].payloads[0].data).get("activity_type")
        result = list(details["result"].payloads)
        if kind == OPEN_SAGA:
            (opened,) = await client.data_converter.decode(result, [SagaOpened])
            specs: list[ToolSpec] = opened.tools
        elif kind == DESCRIBE_TOOLS:
            (specs,) = await client.data_converter.decode(result, [list[ToolSpec]])
        else:
            continue
        catalog = {s.name: s for s in specs}
    return catalog
