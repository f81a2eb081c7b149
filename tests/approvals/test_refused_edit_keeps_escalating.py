"""A refused edit is not a decision: past the SLA, an edited approval whose arguments do not fit
must not stop the escalation that is still being retried (real Temporal, Postgres, the shipped
worker with a webhook that fails once, then answers)."""

from __future__ import annotations

import pytest

from sagacity.errors import InvalidInput
from sagacity.journal import Phase
from sagacity.temporal.models import SagaState, SagaStatus
from tests.approvals import test_escalation
from tests.approvals.test_escalation import Scene, escalated_to
from tests.temporal.conftest import wait_for

receiver = test_escalation.receiver
start_worker = test_escalation.start_worker
service = test_escalation.service
scene = test_escalation.scene


async def test_a_refused_edit_while_the_webhook_is_retried_does_not_cancel_the_escalation(
    scene: Scene,
) -> None:
    scene.receiver.mode = "fail"
    await scene.worker()
    handle, seq = await scene.order(approval_sla_s=1)
    await scene.receiver.count(1)  # the first POST failed; the next one is 2 s away
    scene.receiver.mode = "ok"  # the chat tool is back
    # an approver's edit that does not fit send_confirmation(order_id: str): refused, and the
    # request stays open, undecided
    with pytest.raises(InvalidInput):
        await scene.service.approve(handle.id, seq, approver="alice", args={"order_id": 5})
    status = await handle.query("status", result_type=SagaStatus)
    assert status.state is SagaState.AWAITING_APPROVAL
    # the escalation's retry still reaches the next tier, and the saga says so
    await scene.receiver.count(2, timeout=30)
    await wait_for(handle, lambda s: escalated_to(s, "sent"), timeout=30)

    await scene.service.approve(handle.id, seq, approver="alice")
    assert (await handle.result()).status is SagaState.COMPLETED
    row, payload = await scene.decided(handle.id, seq)
    assert row.phase is Phase.APPROVED and payload["escalated"]["outcome"] == "sent"
