"""Fifty sagas waiting at once (``bench/waiting_sagas.py`` runs the same with a thousand)."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from bench.waiting_sagas import PRODUCT, probe, start_waiting, stock, until_waiting
from sagacity.approvals import ApprovalService, InboxFilter
from sagacity.errors import InvalidInput
from sagacity.store import ApprovalStore
from sagacity.temporal.models import Reject, SagaResult, SagaState
from tests.approvals.conftest import GATE_SEQ
from workflows.order.shop import Shop

SAGAS = 50


async def test_fifty_waiting_sagas_are_listed_and_new_work_still_completes(
    temporal_client: Client,
    worker: Worker,
    approvals: ApprovalStore,
    service: ApprovalService,
    shop: Shop,
) -> None:
    await stock(shop.pool, SAGAS + 1)
    saga_ids = await start_waiting(temporal_client, worker.task_queue, SAGAS, concurrency=25)
    await until_waiting(approvals, saga_ids, timeout=120)

    # the inbox a page at a time: live status for the page's sagas only, counts for them all
    mine = InboxFilter(tool_names=("send_confirmation",), saga_id=None)
    pages = []
    after = None
    while True:
        page = await service.inbox(mine, after=after, limit=20)
        pages.append(page)
        if page.next is None:
            break
        after = page.next
    listed = [r for page in pages for r in page.requests]
    assert {r.saga_id for r in listed if r.waiting and r.intact} >= set(saga_ids)
    assert len(listed) == len({(r.saga_id, r.journal_seq) for r in listed}) == pages[0].total
    assert pages[0].by_tool["send_confirmation"] == pages[0].total >= SAGAS
    assert all(len(p.requests) == 20 for p in pages[:-1])
    assert all(r.deadline is not None and r.deadline > r.requested_at for r in listed)
    with pytest.raises(InvalidInput):
        await service.inbox(after="not-a-cursor")
    assert await probe(temporal_client, service, worker.task_queue) < 30

    # reject them all: each compensates and leaves neither request nor stock behind
    handles = [temporal_client.get_workflow_handle(s, result_type=SagaResult) for s in saga_ids]
    for handle in handles:
        await handle.signal(
            "reject", Reject(journal_seq=GATE_SEQ, approver="ops", reason="cleanup")
        )
    results = await asyncio.gather(*(h.result() for h in handles))
    assert {r.status for r in results} == {SagaState.COMPENSATED}
    assert not set(saga_ids) & {r.saga_id for r in await approvals.list()}
    assert (await shop.snapshot()).available[PRODUCT] == SAGAS  # the probe's unit is gone
