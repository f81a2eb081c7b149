"""Refused edits do not move a request's deadline, and the SLA escalates once across them: an
approver who keeps sending edited arguments that do not fit, before and after the SLA, still
meets the deadline counted from the request's start (real Temporal, Postgres, shipped worker)."""

from __future__ import annotations

import asyncio

from sagacity.errors import SagacityError
from sagacity.journal import Phase
from sagacity.temporal.models import SagaState
from tests.approvals import test_escalation
from tests.approvals.test_escalation import Scene

receiver = test_escalation.receiver
start_worker = test_escalation.start_worker
service = test_escalation.service
scene = test_escalation.scene


async def test_refused_edits_before_and_after_the_sla_neither_extend_the_deadline_nor_reescalate(
    scene: Scene,
) -> None:
    await scene.worker()
    handle, seq = await scene.order(approval_sla_s=2, approval_deadline_s=8)
    refused = 0
    answers: list[str] = []

    async def keep_editing() -> None:
        nonlocal refused
        while True:
            try:
                await scene.service.approve(handle.id, seq, approver="alice", args={"order_id": 7})
            except SagacityError as err:
                answers.append(type(err).__name__)
                refused += 1
            await asyncio.sleep(0.5)

    editing = asyncio.create_task(keep_editing())
    try:
        result = await asyncio.wait_for(handle.result(), 120)
    finally:
        editing.cancel()
    assert refused >= 4, answers  # edits were refused before and after the SLA
    assert result.status is SagaState.COMPENSATED
    row, payload = await scene.decided(handle.id, seq)
    assert row.phase is Phase.REJECTED
    assert (payload["by"], payload["reason"]) == ("sagacity", "timeout")
    assert payload["escalated"]["outcome"] == "sent"
    assert len(scene.receiver.posts) == 1
    assert await scene.outbox() == 0
