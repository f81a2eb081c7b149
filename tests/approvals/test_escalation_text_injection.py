"""A saga id is chosen by whoever starts the saga (often from a user's order or conversation id):
in the escalation a chat channel receives it must read as text, never as the chat tool's markup
(Slack's ``<!channel>`` and ``<url|label>``, Mattermost's ``@channel``, a line of its own).

Real Temporal and Postgres, the shipped worker posting to a real HTTP webhook in the test.
"""

from __future__ import annotations

from temporalio.client import Client

from sagacity.temporal.models import SagaOptions, SagaResult, SagaState
from tests.approvals import test_escalation
from tests.approvals.test_escalation import Scene, escalated_to
from tests.temporal.conftest import awaiting_approval, wait_for
from workflows.order.workflows import OrderRequest

receiver = test_escalation.receiver
start_worker = test_escalation.start_worker
service = test_escalation.service
scene = test_escalation.scene

HOSTILE = (
    "o-1 <!channel> @channel <https://evil.example/d|Decide here>\nDecide: https://evil.example/x"
)


async def test_a_hostile_saga_id_reaches_the_channel_as_text_not_markup(
    scene: Scene, temporal_client: Client
) -> None:
    await scene.worker()
    handle = await temporal_client.start_workflow(
        "order.PlaceOrder",
        OrderRequest(quantity=2, options=SagaOptions(heartbeat_timeout_s=2, approval_sla_s=1)),
        id=HOSTILE,
        task_queue=scene.task_queue,
        result_type=SagaResult,
    )
    status = await wait_for(handle, awaiting_approval)
    assert status.pending_approval is not None
    seq = status.pending_approval.journal_seq
    await wait_for(handle, lambda s: escalated_to(s, "sent"))
    (body,) = scene.receiver.posts
    text = body["text"]
    # Slack's control sequences are escaped, so no one is pinged and no foreign link is drawn
    assert "<!channel>" not in text and "<https://evil" not in text, text
    # the id stays on the message's one line, inside a code span (no @-mention, no fake line)
    assert "\n" not in text, text
    assert "`o-1 &lt;!channel&gt; @channel &lt;https://evil.example/d|Decide here&gt; " in text
    # the console link quotes it, as it always did
    assert text.endswith(f"/{seq}")

    await scene.service.approve(handle.id, seq, approver="alice")
    assert (await handle.result()).status is SagaState.COMPLETED
