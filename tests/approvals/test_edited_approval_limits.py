"""Approve with changes at its edges (issue 32), on real Temporal and Postgres: an abort that
lands while an edited approval is checked or journaled runs no call, and edited arguments over
the size a call's arguments may have are refused where they enter, the request still open.
"""

from __future__ import annotations

import asyncio

from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue

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


def edit_payload(seq: int, args: bytes) -> RawValue:
    """An ``approve`` payload whose ``args`` is ``args`` (raw JSON text), as any client may send."""
    body = b'{"journal_seq":%d,"approver":"eve","args":%s}' % (seq, args)
    return RawValue(Payload(metadata={"encoding": b"json/plain"}, data=body))


#: edited arguments no call could take, and what their refusal says
BAD_ARGS = {
    "a JSON array": (b"[1]", "args"),
    "a lone surrogate": (b'{"order_id":"\\udc00x"}', "cannot be decoded"),
    "10k-deep": (b'{"order_id":' + b"[" * 10_000 + b"]" * 10_000 + b"}", "cannot be decoded"),
    "NaN": (b'{"order_id":NaN}', "args"),
    "an unknown field": (b'{"order_id":"o-1","cc":"x"}', "do not fit 'send_confirmation'"),
    "a fingerprint sent back": (b'{"order_id":{"$redacted":"k1:ab"}}', "markers at /order_id"),
}


async def test_bad_edited_arguments_are_refused_recorded_and_the_saga_stays_decidable(
    start_order: StartOrder, journal: JournalStore, shop: Shop
) -> None:
    waiting = await start_order()
    handle, seq = waiting.handle, waiting.seq
    for count, (args, _) in enumerate(BAD_ARGS.values(), start=1):
        await handle.signal("approve", edit_payload(seq, args))
        # one at a time: while an edit is checked, another decision is refused as taken
        await wait_for(handle, lambda s, n=count: len(s.refused_decisions) >= n)  # type: ignore[misc]
    status = await handle.query("status", result_type=SagaStatus)
    for (case, (_, why)), refusal in zip(BAD_ARGS.items(), status.refused_decisions, strict=True):
        assert why in refusal, (case, refusal)
    assert status.state is SagaState.AWAITING_APPROVAL
    assert (await journal.read(handle.id))[-1].phase is Phase.AWAITING_APPROVAL
    await handle.signal("approve", Approve(journal_seq=seq, approver="alice"))
    assert (await handle.result()).status is SagaState.COMPLETED
    assert (await shop.snapshot()).outbox == 1
