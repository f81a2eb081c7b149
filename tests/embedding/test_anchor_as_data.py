"""The Temporal anchor is read as plain data: a plain saga's result and an agent saga's (which
holds the saga's under ``saga``) both give their chain head, with no Temporal glue model."""

from __future__ import annotations

from temporalio.client import Client

from sagacity.agents import AgentSagaRequest, Call, Say, Script
from sagacity.evidence.anchors import temporal_anchor
from sagacity.evidence.report import Anchor
from sagacity.store import JournalStore
from tests.agents.conftest import WorkerFactory, agent_worker, start_agent
from tests.temporal.conftest import approvals, journal, pool, shop, shop_session
from workflows.order.shop import Shop

# fixtures shared by name
__all__ = ["agent_worker", "approvals", "journal", "pool", "shop", "shop_session"]

FLAG_THEN_FAIL = Script(
    turns=[[Call("set_flag", {"name": "anchor"}), Call("explode", {"reason": "no"}), Say("ok")]]
)


async def test_an_agent_sagas_result_anchors_at_its_sagas_head(
    temporal_client: Client, agent_worker: WorkerFactory, shop: Shop, journal: JournalStore
) -> None:
    request = AgentSagaRequest(prompt="go", model="fail")
    async with agent_worker({"fail": FLAG_THEN_FAIL}) as worker:
        saga = (
            await (await start_agent(temporal_client, worker.task_queue, request)).result()
        ).saga
        anchor = await temporal_anchor(temporal_client, saga.saga_id)
    rows = await journal.read(saga.saga_id)

    assert isinstance(anchor, Anchor), anchor
    assert (anchor.seq, anchor.hash) == (rows[-1].seq, rows[-1].hash)
    assert (anchor.seq, anchor.hash) == (saga.head.seq, saga.head.hash)
    assert "compensated" in anchor.ended
