"""A worker process SIGKILLed mid MCP call: the call's outcome is unknown to Sagacity (only the
upstream knows), so a non-idempotent call is SUSPECT until a human says what happened, and the
saga then compensates through the upstream."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from temporalio.client import Client

from sagacity.devstack import Endpoints
from sagacity.store import JournalStore
from sagacity.temporal.models import (
    Resolve,
    SagaOptions,
    SagaResult,
    SagaSpec,
    SagaState,
    Step,
)
from sagacity.temporal.workflow import STEPS_WORKFLOW
from tests.mcp.conftest import Desk
from tests.temporal.conftest import wait_for
from tests.temporal.test_crash import WorkerProcess


async def test_a_worker_killed_mid_call_leaves_it_suspect_until_resolved(
    http_desk: Desk,
    temporal_client: Client,
    endpoints: Endpoints,
    database_url: str,
    task_queue: str,
    journal: JournalStore,
    tmp_path: Path,
) -> None:
    worker = WorkerProcess(
        endpoints, database_url, task_queue, tmp_path / "worker.log", apps=("sagacity.mcp.app",)
    )
    worker.env["SAGACITY_MCP_POLICY"] = str(http_desk.policy("http"))
    await worker.start()
    sid = f"mcp-killed-{uuid.uuid4().hex[:8]}"
    try:
        handle = await temporal_client.start_workflow(
            STEPS_WORKFLOW,
            SagaSpec(
                steps=[
                    Step(tool="create_ticket", args={"title": "before the kill"}),
                    Step(tool="create_ticket", args={"title": "hang"}),
                ],
                options=SagaOptions(heartbeat_timeout_s=2, compensation_backoff_s=0.2),
            ),
            id=sid,
            task_queue=task_queue,
            result_type=SagaResult,
        )
        while len(await journal.read(sid)) < 3:  # the second call's INTENT: it is in flight
            await asyncio.sleep(0.05)
        worker.kill()
        await worker.start()

        status = await wait_for(handle, lambda s: s.state is SagaState.SUSPECT, timeout=60)
        assert status.suspect is not None and status.suspect.tool_name == "create_ticket"
        assert "not idempotent" in status.suspect.reason
        # a human asks the desk: the hanging call never made a ticket
        assert list(http_desk.state()["tickets"]) == ["T-1"]
        await handle.signal(
            "resolve", Resolve(call_seq=status.suspect.call_seq, resolver="dave", happened=False)
        )
        result = await asyncio.wait_for(handle.result(), 60)
    finally:
        worker.stop()

    assert result.status is SagaState.COMPENSATED
    assert [(r.tool_name, r.phase.value) for r in await journal.read(sid)] == [
        ("create_ticket", "INTENT"),
        ("create_ticket", "EXECUTED"),
        ("create_ticket", "INTENT"),
        ("create_ticket", "FAILED"),
        ("create_ticket", "COMPENSATED"),
    ]
    # the desk ran the hanging call once (never again) and closed the first ticket
    assert http_desk.calls("create_ticket") == [{"title": "before the kill"}]
    assert http_desk.calls("close_ticket") == [
        {"ticket_id": "T-1", "reason": "rolled back by a saga"}
    ]
    assert (await journal.verify(sid)).ok
