"""An agent whose call a human approved with changes (issue 32), on real Temporal and Postgres and
the real Agents SDK loop with a scripted model: the edited call runs once, the model is told what
changed in the tool result it reads, and the agent's step records both inputs.
"""

from __future__ import annotations

import json

from temporalio.client import Client

from sagacity.agents import AgentSagaRequest, Call, Say, Script
from sagacity.evidence.graph import saga_path
from sagacity.journal import Phase
from sagacity.store import JournalStore
from sagacity.temporal.models import Approve, SagaState
from tests.agents.conftest import WorkerFactory, start_agent
from tests.temporal.conftest import awaiting_approval, wait_for
from workflows.order.shop import Shop

#: the agent mails a confirmation for the order it was asked about, then repeats what it was told
CONFIRM = Script(
    turns=[
        [
            Call("send_confirmation", {"order_id": "o-1500"}),
            Say(lambda c: f"The tool said: {c.result_of('send_confirmation')}"),
        ]
    ]
)


async def test_the_agent_is_told_its_call_ran_with_the_approvers_changes(
    temporal_client: Client, agent_worker: WorkerFactory, shop: Shop, journal: JournalStore
) -> None:
    async with agent_worker({"confirm": CONFIRM}) as worker:
        handle = await start_agent(
            temporal_client,
            worker.task_queue,
            AgentSagaRequest(prompt="confirm", model="confirm", tools=["send_confirmation"]),
        )
        waiting = await wait_for(handle, awaiting_approval)
        pending = waiting.pending_approval
        assert pending is not None
        assert json.loads(pending.input_json) == {"order_id": "o-1500"}
        await handle.signal(
            "approve",
            Approve(journal_seq=pending.journal_seq, approver="alice", args={"order_id": "o-300"}),
        )
        result = await handle.result()

    assert result.saga.status is SagaState.COMPLETED
    # the edited call ran, once; the proposed one never did
    assert (await shop.snapshot()).outbox == 1
    assert await shop.sent("o-300", "confirmation", handle.id) is not None
    assert await shop.sent("o-1500", "confirmation", handle.id) is None
    # the model read what changed, and the result of the call that ran
    assert result.final_output is not None
    told = result.final_output
    assert 'Approved with changes by alice: order_id "o-1500" → "o-300"' in told, told
    assert '"order_id": "o-300"' in told
    (step,) = result.steps
    assert step.status == "executed" and step.output["order_id"] == "o-300"
    assert step.arguments == {"order_id": "o-300"}
    assert step.proposed == {"order_id": "o-1500"} and step.approved_by == "alice"
    rows = {r.seq: r for r in await journal.read(handle.id)}
    at = pending.journal_seq
    assert json.loads(rows[at].input) == {"order_id": "o-1500"}
    assert (rows[at + 1].phase, json.loads(rows[at + 1].input)) == (
        Phase.APPROVED,
        {"order_id": "o-300"},
    )
    assert json.loads(rows[at + 1].payload)["edited"] is True
    assert rows[at + 2].phase is Phase.INTENT and rows[at + 2].input == rows[at + 1].input
    assert (await journal.verify(handle.id)).ok
    # the saga's picture says the approval changed the call
    (gate,) = [s for s in saga_path(handle.id, list(rows.values())).forward if s.kind == "gate"]
    assert gate.detail == "by alice: with changes"
