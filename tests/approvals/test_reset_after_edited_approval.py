"""Reset of a saga whose approval changed the call's arguments: the new run meets, in the
journal, a call whose input is not the one its code proposes (the approver's edit). It must take
that call from the journal as it ran (nothing twice, no second approval), and complete with the
same result, the chain unchanged (real Temporal, Postgres, shipped worker with a keyring)."""

from __future__ import annotations

from temporalio.client import Client

from sagacity.store import JournalStore
from sagacity.temporal.models import SagaState
from tests.approvals import test_decisions_bound, test_signed
from tests.approvals.test_edited_approval import decide, edited
from tests.approvals.test_signed import Keys, start_order
from tests.temporal.test_crash import WorkerProcess
from tests.temporal.test_operations import rerun_after_first_call
from workflows.order.shop import Shop

keys = test_signed.keys
signed_worker = test_signed.signed_worker
anchors = test_decisions_bound.anchors


async def test_a_reset_after_an_edited_approval_takes_the_edited_call_from_the_journal(
    signed_worker: WorkerProcess,
    temporal_client: Client,
    task_queue: str,
    keys: Keys,
    shop: Shop,
    journal: JournalStore,
) -> None:
    handle, status = await start_order(temporal_client, task_queue)
    pending = status.pending_approval
    assert pending is not None
    body = edited(keys, handle.id, pending.journal_seq, pending.input_hash, {"order_id": "o-ed"})
    assert await decide(handle, body) == "approved"
    done = await handle.result()
    assert done.status is SagaState.COMPLETED
    before = await journal.read(handle.id)

    result = await rerun_after_first_call(temporal_client, handle)
    assert result.status is SagaState.COMPLETED, result
    assert result.value == done.value
    assert await journal.read(handle.id) == before
    assert (await shop.snapshot()).outbox == 1
    assert await shop.sent("o-ed", "confirmation", handle.id) is not None
