"""Approve with edits (issue 32), on real Temporal and Postgres with the decision settings
``sagacity dev`` makes (a keyring, alice's key): the approver changes a call's arguments, the
edited call runs once, the journal keeps both inputs, and ``sagacity verify`` (live and offline)
checks the signed edit and names a swapped one.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from sagacity.evidence.decisions import Signer
from sagacity.evidence.keys import load_private_key
from sagacity.journal import Phase, input_hash, to_json
from sagacity.store import JournalStore
from sagacity.temporal.models import (
    SagaState,
    SagaStatus,
    approval_statement,
    edited_hash,
)
from tests.approvals import test_decisions_bound, test_signed
from tests.approvals.conftest import Cli
from tests.approvals.test_decisions_bound import Verifier, edit_inputs
from tests.approvals.test_signed import Keys, refusals, start_order
from tests.evidence.test_default_config_tamper import Owner
from tests.temporal.conftest import forget_killed_worker
from tests.temporal.test_crash import WorkerProcess
from workflows.order.shop import Shop

keys = test_signed.keys
signed_worker = test_signed.signed_worker
anchors = test_decisions_bound.anchors
verifier = test_decisions_bound.verifier


def edited(
    keys: Keys, saga_id: str, seq: int, request_hash: str, args: dict[str, Any]
) -> dict[str, Any]:
    """Alice's signed approval of the request at ``seq`` with ``args`` instead."""
    statement = approval_statement(saga_id, seq, request_hash, "alice", edited=edited_hash(args))
    signature = Signer(load_private_key(keys.alice)).sign(statement)
    return {
        "journal_seq": seq,
        "approver": "alice",
        "input_hash": request_hash,
        "signature": signature.model_dump(),
        "args": args,
    }


async def decide(handle: WorkflowHandle[Any, Any], body: dict[str, Any]) -> str:
    answer: str = await handle.execute_update("decide", {**body, "approve": True}, result_type=str)
    return answer


async def test_an_edited_approval_runs_the_edited_input_once_and_verify_names_a_swapped_one(
    signed_worker: WorkerProcess,
    temporal_client: Client,
    task_queue: str,
    keys: Keys,
    shop: Shop,
    journal: JournalStore,
    owner_database_url: str,
    verifier: Verifier,
    cli: Cli,
    anchors: dict[str, str],
) -> None:
    handle, status = await start_order(temporal_client, task_queue)
    pending = status.pending_approval
    assert pending is not None
    seq, request_hash = pending.journal_seq, pending.input_hash
    proposed = json.loads(pending.input_json)["order_id"]

    # edits that do not fit send_confirmation(order_id: str): refused, nothing journaled
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await decide(handle, edited(keys, handle.id, seq, request_hash, {"order_id": 5}))
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError) and cause.details[0] == "invalid_edit"
    unknown = {"order_id": "o-edited", "cc": "mallory@example.com"}
    await handle.signal("approve", edited(keys, handle.id, seq, request_hash, unknown))
    await refusals(handle, 2)
    # signed over the edit, but naming a stale input hash: refused as any decision would be
    stale = edited(keys, handle.id, seq, "0" * 64, {"order_id": "o-edited"})
    await handle.signal("approve", stale)
    # the signature over other arguments than those sent
    swapped = edited(keys, handle.id, seq, request_hash, {"order_id": "o-edited"})
    await handle.signal("approve", {**swapped, "args": {"order_id": "o-other"}})
    said = await refusals(handle, 4)
    assert "do not fit 'send_confirmation'" in said[0]
    assert "do not fit 'send_confirmation'" in said[1] and "cc" in said[1]
    assert "input_hash does not match" in said[2]
    assert "does not verify" in said[3]
    status = await handle.query("status", result_type=SagaStatus)
    assert status.state is SagaState.AWAITING_APPROVAL
    assert [e.phase for e in await journal.read(handle.id)][-1] is Phase.AWAITING_APPROVAL
    assert (await shop.snapshot()).outbox == 0

    # still decidable: the edit that fits runs, once, with the approved input only
    approved_args = {"order_id": "o-edited"}
    answer = await decide(handle, edited(keys, handle.id, seq, request_hash, approved_args))
    assert answer == "approved"
    result = await handle.result()
    assert result.status is SagaState.COMPLETED
    assert (await shop.snapshot()).outbox == 1
    assert await shop.sent("o-edited", "confirmation", handle.id) is not None
    assert await shop.sent(proposed, "confirmation", handle.id) is None

    rows = {e.seq: e for e in await journal.read(handle.id)}
    assert json.loads(rows[seq].input) == {"order_id": proposed}
    assert rows[seq + 1].phase is Phase.APPROVED
    assert json.loads(rows[seq + 1].input) == approved_args
    payload = json.loads(rows[seq + 1].payload)
    assert payload["edited"] is True and payload["decision"] == "approve_edited"
    assert payload["approved_input_hash"] == edited_hash(approved_args)
    assert payload["input_hash"] == request_hash
    assert rows[seq + 2].phase is Phase.INTENT
    assert rows[seq + 2].input == rows[seq + 1].input

    live, said_live, offline, said_offline = await verifier.both(handle.id)
    assert (live, offline) == (0, 0), said_live + said_offline
    assert "WARNING" not in said_live

    # the database owner swaps the input the call ran (INTENT and after), chain recomputed
    owner = Owner(owner_database_url)
    honest = await owner.rows(handle.id)
    await owner.rewrite(handle.id, edit_inputs(seq + 2, "o-edited", "o-forged"))
    forged_hash = input_hash(to_json({"order_id": "o-forged"}))
    live, said_live, offline, said_offline = await verifier.both(handle.id)
    assert (live, offline) == (1, 1), said_live + said_offline
    for output in (said_live, said_offline):
        assert f"INTENT seq {seq + 2} disagrees: it runs input sha256 {forged_hash}" in output

    # and the edited input in the APPROVED row too: no longer what alice signed
    await owner.replace(handle.id, honest)
    await owner.rewrite(handle.id, edit_inputs(seq + 1, "o-edited", "o-forged"))
    live, said_live, offline, said_offline = await verifier.both(handle.id)
    assert (live, offline) == (1, 1), said_live + said_offline
    everything = await cli("verify", "--all", extra_env=anchors)
    assert everything.code != 0
    for output in (said_live, said_offline, everything.stdout + everything.stderr):
        assert (
            f"edited approval seq {seq + 1} disagrees: it holds input sha256 {forged_hash} but "
            f"its approver signed {edited_hash(approved_args)}"
        ) in output, output


async def test_an_edit_sent_while_the_worker_is_killed_runs_once_on_the_next_worker(
    signed_worker: WorkerProcess,
    temporal_client: Client,
    task_queue: str,
    keys: Keys,
    shop: Shop,
    journal: JournalStore,
    verifier: Verifier,
) -> None:
    handle, status = await start_order(temporal_client, task_queue)
    pending = status.pending_approval
    assert pending is not None
    signed_worker.kill()  # SIGKILL at the gate: the saga's history holds the wait
    approved_args = {"order_id": "o-after-kill"}
    await handle.signal(
        "approve",
        edited(keys, handle.id, pending.journal_seq, pending.input_hash, approved_args),
    )
    await forget_killed_worker(temporal_client, handle.id)
    await signed_worker.start()
    assert (await handle.result()).status is SagaState.COMPLETED
    assert (await shop.snapshot()).outbox == 1
    assert await shop.sent("o-after-kill", "confirmation", handle.id) is not None
    intents = [e for e in await journal.read(handle.id) if e.phase is Phase.INTENT]
    assert json.loads(intents[-1].input) == approved_args
    live, said_live, offline, said_offline = await verifier.both(handle.id)
    assert (live, offline) == (0, 0), said_live + said_offline
