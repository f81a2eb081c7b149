"""Rolling deploy: a saga started with ``approval_sla_s`` while a worker of the release before
(from git history; it ignores the option) took its first tasks, then finished by a worker of
this release. Whatever the new worker does, its journal must not claim an escalation
that never told anyone (real Temporal, Postgres, the shipped Order worker, a real webhook)."""

from __future__ import annotations

import asyncio

from temporalio.client import Client

from sagacity.journal import Phase
from sagacity.temporal.models import SagaState
from tests.approvals import test_escalation, test_new_decisions_to_old_worker
from tests.approvals.test_escalation import Scene, start_order
from tests.temporal.test_crash import WorkerProcess

receiver = test_escalation.receiver
start_worker = test_escalation.start_worker
service = test_escalation.service
scene = test_escalation.scene
old_worker = test_new_decisions_to_old_worker.old_worker


async def test_an_sla_saga_begun_by_an_old_worker_records_no_escalation_no_one_got(
    old_worker: WorkerProcess, scene: Scene, temporal_client: Client
) -> None:
    handle, seq = await start_order(
        temporal_client, scene.task_queue, approval_sla_s=1, approval_deadline_s=8
    )
    old_worker.stop()  # the deploy replaces it while the saga waits at its gate
    await scene.worker()
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status is SagaState.COMPENSATED
    row, payload = await scene.decided(handle.id, seq)
    assert row.phase is Phase.REJECTED and payload["reason"] == "timeout"
    told = len(scene.receiver.posts)
    assert ("escalated" in payload) == (told > 0), (payload, told)
