"""Approve with changes at its edges (issue 32), on real Temporal and Postgres: an abort that
lands while an edited approval is checked or journaled runs no call, and edited arguments over
the size a call's arguments may have are refused where they enter, the request still open.
"""

from __future__ import annotations

import asyncio

from sagacity.journal import Phase
from sagacity.store import JournalStore
from sagacity.temporal import limits
from sagacity.temporal.models import Abort, Approve, SagaState, SagaStatus
from tests.approvals.conftest import StartOrder
from tests.temporal.conftest import phases, wait_for
from workflows.order.shop import Shop


async def test_an_abort_right_after_an_edited_approval_runs_no_call(
    start_order: StartOrder, shop: Shop, journal: JournalStore
) -> None:
    waiting = await start_order()
    handle = waiting.handle
    edited = Approve(journal_seq=waiting.seq, approver="alice", args={"order_id": "o-edited"})
    await handle.signal("approve", edited)
    await handle.signal("abort", Abort(reason="changed my mind", by="bob"))
    result = await asyncio.wait_for(handle.result(), 60)

    assert result.status is SagaState.ABORTED
    journaled = await phases(journal, handle.id)
    assert ("send_confirmation", "INTENT") not in journaled
    assert ("approval-gate", "REJECTED") in journaled
    assert journaled[-2:] == [
        ("create_order", "COMPENSATED"),
        ("reserve_inventory", "COMPENSATED"),
    ]
    snap = await shop.snapshot()
    assert (snap.outbox, snap.available["p-1"], snap.placed_orders) == (0, 10, 0)
    assert (await journal.verify(handle.id)).ok


async def test_edited_arguments_too_large_for_a_call_are_refused_and_the_request_stays_open(
    start_order: StartOrder, shop: Shop
) -> None:
    waiting = await start_order()
    huge = {"order_id": "x" * (limits.MAX_VALUE_BYTES + 1)}
    edited = Approve(journal_seq=waiting.seq, approver="alice", args=huge)
    # a client that does not measure what it sends (Temporal takes up to 2 MiB): the saga
    # measures the edit itself, before any activity would carry it
    await waiting.handle.signal("approve", edited)
    status = await wait_for(waiting.handle, lambda s: bool(s.refused_decisions))
    assert status.state is SagaState.AWAITING_APPROVAL
    (said,) = status.refused_decisions
    assert said.startswith("alice: the edited arguments for 'send_confirmation' are ")
    assert f"over the {limits.MAX_VALUE_BYTES}" in said

    # still decidable: approved as proposed, the call runs once
    await waiting.handle.signal("approve", Approve(journal_seq=waiting.seq, approver="alice"))
    assert (await waiting.handle.result()).status is SagaState.COMPLETED
    assert (await shop.snapshot()).outbox == 1
    final = await waiting.handle.query("status", result_type=SagaStatus)
    assert [r.phase for r in final.rows][-2:] == [Phase.INTENT, Phase.EXECUTED]
