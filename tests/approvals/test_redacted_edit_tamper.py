"""An approver's edit of a call whose arguments hold a redacted secret: the APPROVED and INTENT
rows hold the edited input redacted, so the journal cannot recompute the hash the approver
signed. The database owner then changes the approved amount in both rows (chain recomputed):
``sagacity verify`` and the offline bundle verifier name it (by the checkpoint; the decision
check alone can only warn that the signed hash cannot be recomputed).

Real Temporal and Postgres, ``sagacity worker --app tests.approvals.secret_refund_app`` with the
settings ``sagacity dev`` makes (keyring, alice's key, redaction on).
"""

from __future__ import annotations

import json
import uuid

import pytest
from temporalio.client import Client

from sagacity.journal import Phase
from sagacity.store import JournalStore
from sagacity.temporal.models import SagaOptions, SagaResult, SagaSpec, SagaState, Step
from sagacity.temporal.workflow import STEPS_WORKFLOW
from tests.approvals import test_decisions_bound, test_rule_gated_sagas, test_signed
from tests.approvals.test_decisions_bound import Verifier, edit_inputs
from tests.approvals.test_edited_approval import decide, edited
from tests.approvals.test_signed import Keys
from tests.evidence.test_default_config_tamper import Owner
from tests.temporal.conftest import awaiting_approval, wait_for
from tests.temporal.test_crash import WorkerProcess
from tests.temporal.test_operations import rerun_after_first_call

keys = test_signed.keys
anchors = test_decisions_bound.anchors
verifier = test_decisions_bound.verifier
refund_worker = test_rule_gated_sagas.refund_worker


@pytest.fixture
def refund_app() -> str:
    return "tests.approvals.secret_refund_app"


async def test_the_owner_changing_an_edited_amount_beside_a_redacted_secret_is_named(
    refund_worker: WorkerProcess,
    temporal_client: Client,
    task_queue: str,
    keys: Keys,
    journal: JournalStore,
    owner_database_url: str,
    verifier: Verifier,
) -> None:
    proposed = {"order_id": "o-1", "amount": 1500, "api_token": "tok-s3cr3t-1"}
    handle = await temporal_client.start_workflow(
        STEPS_WORKFLOW,
        SagaSpec(steps=[Step(tool="refund", args=proposed)], options=SagaOptions()),
        id=f"redacted-edit-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
        result_type=SagaResult,
    )
    status = await wait_for(handle, awaiting_approval)
    pending = status.pending_approval
    assert pending is not None and pending.hidden == ["/api_token"]
    seq = pending.journal_seq
    # alice lowers the refund (she must give the real token back: a fingerprint is refused)
    approved = {**proposed, "amount": 300}
    body = edited(keys, handle.id, seq, pending.input_hash, approved)
    assert await decide(handle, body) == "approved"
    assert (await handle.result()).status is SagaState.COMPLETED
    rows = {e.seq: e for e in await journal.read(handle.id)}
    assert rows[seq + 1].phase is Phase.APPROVED and rows[seq + 2].phase is Phase.INTENT
    assert json.loads(rows[seq + 2].input)["amount"] == 300
    assert "tok-s3cr3t-1" not in rows[seq + 2].input
    live, said_live, offline, said_offline = await verifier.both(handle.id)
    assert (live, offline) == (0, 0), said_live + said_offline

    # the database owner raises the refund alice approved to 30000 in every row from APPROVED
    # on (the APPROVED row and the INTENT that must match it), chain recomputed
    await Owner(owner_database_url).rewrite(
        handle.id, edit_inputs(seq + 1, '"amount":300', '"amount":30000')
    )
    forged = {e.seq: e for e in await journal.read(handle.id)}
    assert json.loads(forged[seq + 2].input)["amount"] == 30000
    live, said_live, offline, said_offline = await verifier.both(handle.id)
    assert (live, offline) != (0, 0), said_live + said_offline
    for output in (said_live, said_offline):
        # named by the checkpoint taken after the saga ended; the decision check alone can only
        # warn (the row holds the signed input redacted)
        assert f"checkpoint seq {seq + 1}" in output and "the journal was rewritten" in output
        warned = f"the edited approval at seq {seq + 1} is signed over an input the journal holds"
        assert warned in output


async def test_a_reset_after_an_edit_beside_a_redacted_secret_takes_the_call_from_the_journal(
    refund_worker: WorkerProcess,
    temporal_client: Client,
    task_queue: str,
    keys: Keys,
    journal: JournalStore,
) -> None:
    small = {"order_id": "o-0", "amount": 500, "api_token": "tok-s3cr3t-0"}
    proposed = {"order_id": "o-1", "amount": 1500, "api_token": "tok-s3cr3t-1"}
    handle = await temporal_client.start_workflow(
        STEPS_WORKFLOW,
        SagaSpec(
            steps=[Step(tool="refund", args=small), Step(tool="refund", args=proposed)],
            options=SagaOptions(),
        ),
        id=f"redacted-reset-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
        result_type=SagaResult,
    )
    pending = (await wait_for(handle, awaiting_approval)).pending_approval
    assert pending is not None
    approved = {**proposed, "amount": 300}
    body = edited(keys, handle.id, pending.journal_seq, pending.input_hash, approved)
    assert await decide(handle, body) == "approved"
    done = await handle.result()
    assert done.status is SagaState.COMPLETED
    before = await journal.read(handle.id)

    result = await rerun_after_first_call(temporal_client, handle)
    # the edited refund, its token a marker in the journal, is neither asked for nor made again
    assert result.status is SagaState.COMPLETED and result.value == done.value
    assert await journal.read(handle.id) == before
