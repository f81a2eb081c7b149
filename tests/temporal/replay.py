"""Replaying recorded saga histories against today's workflow code, as the workers would run it.

Shared by the replay test (``test_replay.py``) and the recorder (``record_histories.py``). A
history is replayed by a :class:`~temporalio.worker.Replayer` configured like each kind of worker
that can run its workflow type: the worker of ``sagacity worker`` (``workers/saga_worker.py``)
with the apps below, so the same workflows, plugins (data converter, sandbox passthroughs, the
Agents SDK's interceptors) and workflow interceptor. See docs/versioning.md.
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Sequence
from pathlib import Path

from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from sagacity.mcp.session import LEASE_AT_GATE_PATCH
from sagacity.observability import ObservabilityInterceptor
from sagacity.settings import Settings
from sagacity.temporal.plugin import SagacityPlugin
from sagacity.temporal.saga.patches import (
    ABORT_ROW_PATCH,
    ADOPT_REDACTED_PATCH,
    BOUND_ROWS_PATCH,
    DECIDE_RECORDED_PATCH,
    HALT_CHECK_PATCH,
    JOURNALED_RESULTS_PATCH,
    OPEN_IN_CALL_PATCH,
    OPEN_PATCH,
)
from sagacity.temporal.workflow import (
    STEPS_OPEN_PATCH,
    VALIDATE_PATCH,
    SagaWorkflow,
    StepsWorkflow,
)
from sagacity.worker import load_apps

HISTORIES = Path(__file__).with_name("histories")
#: histories Temporal wrote that today's code cannot replay (engine bugs), until they are fixed
KNOWN_NONDETERMINISTIC = HISTORIES / "known_nondeterministic"

#: the patch ids workflow code checks with ``workflow.patched``: the corpus must show sagas from
#: before each (no marker) and after it (marker) replaying. Remove an id when it is deprecated.
PATCHED = [
    OPEN_PATCH,
    ADOPT_REDACTED_PATCH,
    ABORT_ROW_PATCH,
    VALIDATE_PATCH,
    LEASE_AT_GATE_PATCH,
    BOUND_ROWS_PATCH,
    HALT_CHECK_PATCH,
    JOURNALED_RESULTS_PATCH,
    DECIDE_RECORDED_PATCH,
    STEPS_OPEN_PATCH,
    OPEN_IN_CALL_PATCH,
]

#: the workers a recorded saga may meet: name -> the apps that worker serves
WORKERS: dict[str, tuple[str, ...]] = {
    "order worker": ("workflows.order.app",),
    "agent worker": ("workflows.order.app", "workflows.agent_order.app"),
    # sagacity.McpSession, the MCP gateway's session workflow
    "mcp worker": ("sagacity.mcp.app",),
}

HINT = (
    "A change to workflow code changed the commands a saga in this state emits, so sagas "
    "running now would fail on the new code. Put the change behind workflow.patched(...) "
    "(docs/versioning.md); never re-record a committed history to make this pass."
)


class ReplayFailed(AssertionError):
    """A recorded history no longer replays; the message names the file and the worker."""


def history_files() -> list[Path]:
    return sorted(HISTORIES.glob("*.json"))


def load(path: Path) -> WorkflowHistory:
    # the file name stands in for the workflow id (the id is not part of the history)
    return WorkflowHistory.from_json(path.stem, path.read_text())


def workflow_type(history: WorkflowHistory) -> str:
    started = history.events[0].workflow_execution_started_event_attributes
    return started.workflow_type.name


@functools.cache
def replayer(worker: str) -> Replayer:
    """A replayer set up as ``sagacity worker --app ...`` sets up its worker (see _running)."""
    app = load_apps(WORKERS[worker])
    settings = Settings()
    extra = [plugin for factory in app.plugin_factories for plugin in factory(settings)]
    workflows: list[type] = [StepsWorkflow, SagaWorkflow]
    workflows += [w for w in app.workflows if w not in workflows]
    return Replayer(
        workflows=workflows,
        # the client-only SagacityPlugin brings the converter and the sandbox passthroughs
        plugins=[SagacityPlugin(), *extra],
        interceptors=[ObservabilityInterceptor()],
    )


@functools.cache
def registered(worker: str) -> frozenset[str]:
    defns = replayer(worker).config()["workflows"]
    return frozenset(str(getattr(w, "__temporal_workflow_definition").name) for w in defns)


def workers_for(history: WorkflowHistory) -> list[str]:
    kind = workflow_type(history)
    return [worker for worker in WORKERS if kind in registered(worker)]


async def replay(history: WorkflowHistory, label: str) -> Sequence[str]:
    """Replay ``history`` on every worker that runs its workflow; the workers it replayed on.

    Raises :class:`ReplayFailed` naming ``label`` (the history file) and the worker.
    """
    workers = workers_for(history)
    if not workers:
        raise ReplayFailed(
            f"{label}: no worker registers workflow type {workflow_type(history)!r} "
            f"(workers: {', '.join(WORKERS)}); add its app to WORKERS in {__name__}"
        )
    for worker in workers:
        try:
            await replayer(worker).replay_workflow(history)
        except Exception as exc:
            raise ReplayFailed(
                f"{label} no longer replays on the {worker} "
                f"({workflow_type(history)}): {type(exc).__name__}: {exc}\n{HINT}"
            ) from exc
    return workers


def patch_markers(path: Path) -> dict[str, bool]:
    """The patches a recorded history's workflow took: patch id -> whether it was deprecated."""
    found: dict[str, bool] = {}
    for event in json.loads(path.read_text())["events"]:
        marker = event.get("markerRecordedEventAttributes")
        if marker and marker.get("markerName") == "core_patch":
            payload = marker["details"]["patch-data"]["payloads"][0]
            data = json.loads(base64.b64decode(payload["data"]))
            found[str(data["id"])] = bool(data.get("deprecated"))
    return found


def patches_in(path: Path) -> set[str]:
    """The patch ids whose new branch a recorded history took."""
    return set(patch_markers(path))
