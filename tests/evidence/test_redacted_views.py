"""Redaction changes what is written, never what runs (real Temporal, real Postgres).

Tools, compensations and ``$ref``s get the real values; the journal, the approval requests, the
``status`` query, ``sagacity saga status`` and the saga's result show keyed fingerprints; an
approval request's hash tells different hidden values apart and still binds the call.
"""

from __future__ import annotations

import asyncio
import json

import psycopg
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from sagacity import CompensationContext, compensable
from sagacity.evidence.redaction import MARKER, FingerprintKey, Redactor
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.activities.typed import scrubbed as scrub_error
from sagacity.temporal.models import Approve, Reject, SagaState, SagaStatus, Step
from sagacity.temporal.plugin import SagacityPlugin
from tests.ops.conftest import Cli
from tests.temporal import sample_tools
from tests.temporal.conftest import awaiting_approval, wait_for
from tests.temporal.test_operations import start_steps


async def table_text(owner: psycopg.AsyncConnection, table: str, saga_id: str) -> str:
    """Every column of ``saga_id``'s rows in ``table``, read directly, as one text to grep."""
    cur = await owner.execute(
        f"SELECT to_jsonb(t)::text FROM {table} t WHERE saga_id = %s", (saga_id,)
    )
    return "\n".join(row[0] for row in await cur.fetchall())


async def test_different_hidden_values_look_different_and_an_edited_request_never_runs(
    temporal_client: Client,
    worker: Worker,
    owner: psycopg.AsyncConnection,
    redactor: Redactor,
) -> None:
    amounts = (1_000_000, 5)
    handles = [
        await start_steps(
            temporal_client,
            worker,
            [Step(tool="grant_tokens", args={"token_amount": n, "account": "acc-1"})],
        )
        for n in amounts
    ]
    pending = []
    for handle in handles:
        status = await wait_for(handle, awaiting_approval)
        assert status.pending_approval is not None
        pending.append(status.pending_approval)

    big, small = pending
    assert big.input_hash != small.input_hash
    shown = [json.loads(p.input_json)["token_amount"][MARKER] for p in pending]
    assert redactor.key is not None
    assert all(s.startswith(f"hmac:{redactor.key.id}:") for s in shown)
    assert shown[0] != shown[1]
    assert big.hidden == small.hidden == ["/token_amount"]
    stored = await table_text(owner, "sagacity_approval_request", handles[0].id)
    assert "1000000" not in stored and shown[0] in stored and big.input_hash in stored

    # a consistent forgery: the small grant's request, fingerprint and hash, over the big one's
    await owner.execute(
        "UPDATE sagacity_approval_request SET input = %s, input_hash = %s"
        " WHERE saga_id = %s AND journal_seq = %s",
        (small.input_json, small.input_hash, handles[0].id, big.journal_seq),
    )
    await handles[0].signal("approve", Approve(journal_seq=big.journal_seq, approver="alice"))
    await handles[1].signal(
        "approve",
        Approve(journal_seq=small.journal_seq, approver="bob", input_hash=small.input_hash),
    )
    refused, granted = [await h.result() for h in handles]

    assert refused.status is SagaState.COMPENSATED
    assert refused.error is not None
    assert "verification refused execution" in refused.error.message
    assert granted.status is SagaState.COMPLETED
    # the tool got the real amount, once, and only for the request that was not edited
    assert sample_tools.RECEIVED == [("grant_tokens", 5)]
    assert granted.value == {"grant_tokens": "granted 5"}


async def test_runs_get_real_values_while_every_view_holds_fingerprints(
    temporal_client: Client,
    worker: Worker,
    owner: psycopg.AsyncConnection,
    journal: JournalStore,
    sagacity: Cli,
) -> None:
    handle = await start_steps(
        temporal_client,
        worker,
        [
            Step(tool="open_account", args={"owner": "ann"}),
            Step(tool="start_session", args={"api_token": {"$ref": "open_account.api_token"}}),
            Step(
                tool="grant_tokens",
                args={"token_amount": 7, "account": {"$ref": "open_account.account_id"}},
            ),
        ],
    )
    status = await wait_for(handle, awaiting_approval)
    # the $ref passed the real token to the next tool
    assert sample_tools.RECEIVED == [
        ("open_account", "ann"),
        ("start_session", sample_tools.ACCOUNT_TOKEN),
    ]

    views = {
        "status query": status.model_dump_json(),
        "journal": await table_text(owner, "side_effect_journal", handle.id),
        "approval request": await table_text(owner, "sagacity_approval_request", handle.id),
        "saga status": (await sagacity("saga", "status", handle.id)).stdout,
        "saga status --json": (await sagacity("saga", "status", handle.id, "--json")).stdout,
    }
    for name, text in views.items():
        assert handle.id in text or name.startswith("saga status"), name
        assert sample_tools.ACCOUNT_TOKEN not in text, name
    opened, session = status.executed
    assert opened.result["account_id"] == "acc-ann"
    assert opened.result["api_token"][MARKER].startswith("hmac:")
    assert session.input["api_token"] == opened.result["api_token"]  # one value, one fingerprint
    assert "hidden (fingerprinted or removed): /token_amount" in views["saga status"]

    assert status.pending_approval is not None
    await handle.signal(
        "reject", Reject(journal_seq=status.pending_approval.journal_seq, approver="alice")
    )
    result = await handle.result()

    assert result.status is SagaState.COMPENSATED
    # the compensations got the original input and result, newest first
    assert sample_tools.RECEIVED[2:] == [
        ("stop_session", sample_tools.ACCOUNT_TOKEN),
        ("close_account", {"account_id": "acc-ann", "api_token": sample_tools.ACCOUNT_TOKEN}),
    ]
    assert sample_tools.ACCOUNT_TOKEN not in result.model_dump_json()
    assert sample_tools.ACCOUNT_TOKEN not in await table_text(
        owner, "side_effect_journal", handle.id
    )
    assert (await journal.verify(handle.id)).ok
    final = await handle.query("status", result_type=SagaStatus)
    assert sample_tools.ACCOUNT_TOKEN not in final.model_dump_json()


def test_exception_details_leave_a_worker_scrubbed(redactor: Redactor) -> None:
    raised = ApplicationError(
        "denied",
        {"api_key": "sk-live-123", "url": "https://bob:hunter2@example.com/?token=t-1"},
        "Authorization: Bearer abc.def",
        type="Denied",
        non_retryable=True,
    )
    scrubbed = scrub_error(redactor, "charge", raised)

    text = json.dumps(scrubbed.details)
    assert not any(s in text for s in ("sk-live-123", "hunter2", "t-1", "abc.def")), text
    # a field the rules name is fingerprinted as in the journal
    assert (
        scrubbed.details[0]["api_key"]
        == redactor.apply("charge", {"api_key": "sk-live-123"}).value["api_key"]
    )
    assert (scrubbed.type, scrubbed.non_retryable) == ("Denied", True)


#: the worker's redactor, whose key the first attempt of ``rekeyed_call`` changes
REKEYED = Redactor(key=FingerprintKey(b"first-key-" * 2))


@compensable(by="forget_rekeyed", idempotent=True)
def rekeyed_call(api_token: str) -> str:
    """Idempotent; its first attempt fails after a deploy changed the fingerprint key."""
    if REKEYED.key == FingerprintKey(b"first-key-" * 2):
        REKEYED.key = FingerprintKey(b"second-key" * 2)
        raise ConnectionError("dropped")
    return f"done with {len(api_token)} characters"


def forget_rekeyed(ctx: CompensationContext) -> None:
    pass


async def test_a_retry_under_another_fingerprint_key_recognises_its_intent(
    temporal_client: Client,
    task_queue: str,
    journal: JournalStore,
    approvals: ApprovalStore,
) -> None:
    plugin = SagacityPlugin(
        journal=journal, approvals=approvals, tools=[rekeyed_call], redactor=REKEYED
    )
    async with Worker(temporal_client, task_queue=task_queue, plugins=[plugin]) as worker:
        handle = await start_steps(
            temporal_client, worker, [Step(tool="rekeyed_call", args={"api_token": "t-1"})]
        )
        result = await asyncio.wait_for(handle.result(), 60)

    # the INTENT the first attempt wrote under the old key was taken as the call's own: the
    # retry ran the tool, instead of taking the journal for another run's and going SUSPECT
    assert result.status is SagaState.COMPLETED
    assert result.value == {"rekeyed_call": "done with 3 characters"}
    intent, executed = await journal.read(handle.id)
    assert intent.input != executed.input  # fingerprinted under each attempt's key
