"""A rejection's message for whoever made the call (issue 32), on a plain saga, against the real
Temporal server and Postgres with the decision settings ``sagacity dev`` makes.

The worker is the shipped one with a keyring (``test_signed.py``'s ``signed_worker``: only alice
may decide ``send_confirmation``). A rejection with a message is sent the ways a person can
(``sagacity approvals reject``, ``sagacity approvals sign`` and the plain ``temporal`` CLI, the
HTTP API); the saga's result carries it, the REJECTED row journals it under the signature, and
the tables' owner editing it fails ``sagacity verify``, live and from a bundle. A malformed
message is refused on every route, and nothing is journaled.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from sagacity.approvals import ApprovalService
from sagacity.approvals.console import WebConsole, csrf_token
from sagacity.approvals.http import create_app
from sagacity.evidence.decisions import Signer, load_keyring
from sagacity.journal import Phase
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import Rejection, SagaResult, SagaState, SagaStatus
from tests.approvals import test_decisions_bound, test_sign, test_signed
from tests.approvals.conftest import Cli
from tests.approvals.test_decisions_bound import Verifier
from tests.approvals.test_sign import RoundTrip
from tests.approvals.test_signed import Keys, refusals, start_order
from tests.evidence.test_default_config_tamper import Owner
from tests.temporal.conftest import forget_killed_worker, phases
from tests.temporal.test_crash import WorkerProcess

# the signed-decision worker, its keyring, the verifier and the sign round trip, shared by name
keys = test_signed.keys
signed_worker = test_signed.signed_worker
anchors = test_decisions_bound.anchors
verifier = test_decisions_bound.verifier
trip = test_sign.trip

MESSAGE = "Send it to the billing address instead: call update_address first."


async def waiting(client: Client, task_queue: str) -> tuple[WorkflowHandle[Any, SagaResult], int]:
    """An Order saga at its approval gate, and the seq of the request it waits with."""
    handle, status = await start_order(client, task_queue)
    assert status.pending_approval is not None
    return handle, status.pending_approval.journal_seq


async def rejected_row(journal: JournalStore, saga_id: str) -> tuple[int, dict[str, Any]]:
    row = next(e for e in await journal.read(saga_id) if e.phase is Phase.REJECTED)
    body: dict[str, Any] = json.loads(row.payload)
    return row.seq, body


async def test_a_cli_rejection_message_is_in_the_result_signed_and_an_edit_fails_verify(
    signed_worker: WorkerProcess,
    temporal_client: Client,
    task_queue: str,
    keys: Keys,
    cli: Cli,
    journal: JournalStore,
    owner_database_url: str,
    verifier: Verifier,
) -> None:
    handle, seq = await waiting(temporal_client, task_queue)
    said = await cli(
        "approvals", "reject", handle.id, str(seq), "--reason", "wrong address",
        "--message", MESSAGE, "--json", extra_env=keys.env(),
    )  # fmt: skip
    assert said.code == 0, said.stderr
    assert said.json()["message"] == MESSAGE and said.json()["decision"] == "rejected"

    # the plain saga's result says who rejected which call, why, and the message: typed
    result = await handle.result()
    assert result.status is SagaState.COMPENSATED
    assert result.error is not None and result.error.type == "ApprovalRejected"
    assert result.error.rejection == Rejection(
        tool="send_confirmation", by="alice", reason="wrong address", message=MESSAGE
    )
    shown = await cli("saga", "status", handle.id)
    assert f"message from alice: {MESSAGE}" in shown.stdout, shown.stdout + shown.stderr
    as_json = await cli("saga", "status", handle.id, "--json")
    assert as_json.json()["error"]["rejection"]["message"] == MESSAGE

    at, body = await rejected_row(journal, handle.id)
    assert at == seq + 1 and body["decision"] == "reject" and "signature" in body
    assert (body["by"], body["reason"], body["message"]) == ("alice", "wrong address", MESSAGE)
    live, told, offline, told_offline = await verifier.both(handle.id)
    assert (live, offline) == (0, 0), told + told_offline

    # the tables' owner softens the message and recomputes the chain: the signature says no
    owner = Owner(owner_database_url)
    await owner.rewrite(
        handle.id,
        lambda rows: [
            {**r, "payload": r["payload"].replace(MESSAGE, "Fine, go ahead and send it.")}
            if r["phase"] == "REJECTED"
            else r
            for r in rows
        ],
    )
    assert "go ahead" in (await rejected_row(journal, handle.id))[1]["message"]
    live, told, offline, told_offline = await verifier.both(handle.id)
    assert (live, offline) == (1, 1), told + told_offline
    for output in (told, told_offline):
        assert f"seq {at}" in output and "REJECTED by 'alice'" in output, output
        assert "does not verify" in output, output


async def test_sign_prints_a_rejection_with_its_message_for_the_temporal_cli(
    trip: RoundTrip,
) -> None:
    saga = await trip.waiting()
    # a message goes with a rejection only
    approval = await trip.sign(saga.id, saga.seq, "--approve", "--message", MESSAGE)
    assert approval.code != 0 and approval.stdout == ""
    assert "--message goes with --reject" in approval.stderr

    signed = await trip.sign(
        saga.id, saga.seq, "--reject", "--reason", "wrong address", "--message", MESSAGE,
        "--json-only",
    )  # fmt: skip
    assert signed.code == 0, signed.stderr
    assert signed.json()["message"] == MESSAGE
    # whoever can reach Temporal changes the message under alice's signature: refused
    forged = {**signed.json(), "message": "Resend it, twice."}
    await trip.signal(saga.id, "reject", json.dumps(forged))
    refused = await refusals(saga.handle, 1)
    assert "does not verify" in refused[0], refused
    status = await saga.handle.query("status", result_type=SagaStatus)
    assert status.state is SagaState.AWAITING_APPROVAL

    await trip.signal(saga.id, "reject", signed.stdout.strip())
    result: SagaResult = await saga.handle.result()
    assert result.error is not None and result.error.rejection is not None
    assert result.error.rejection.message == MESSAGE
    rejected = await trip.decision(saga.id, Phase.REJECTED)
    assert rejected["message"] == MESSAGE and rejected["by"] == "alice"
    assert await trip.outbox() == 0  # the rejected email was never sent


@pytest.mark.parametrize(
    ("message", "why"),
    [("stop\x1b[2Jnow", "plain text"), ("x" * 2001, "2000 characters")],
)
async def test_a_malformed_message_is_refused_on_every_route_and_nothing_is_journaled(
    signed_worker: WorkerProcess,
    temporal_client: Client,
    task_queue: str,
    keys: Keys,
    cli: Cli,
    journal: JournalStore,
    approvals: ApprovalStore,
    message: str,
    why: str,
) -> None:
    handle, seq = await waiting(temporal_client, task_queue)
    before = await phases(journal, handle.id)

    # the reject signal: refused and listed, never raised in the handler
    await handle.signal(
        "reject", {"journal_seq": seq, "approver": "alice", "reason": "no", "message": message}
    )
    listed = await refusals(handle, 1)
    assert "malformed 'reject' signal" in listed[0] and "message" in listed[0], listed
    assert why in listed[0], listed
    # the decide update: ApprovalRefused, "invalid", recorded as well
    with pytest.raises(WorkflowUpdateFailedError) as raised:
        await handle.execute_update(
            "decide",
            {"journal_seq": seq, "approver": "alice", "approve": False, "message": message},
            result_type=str,
        )
    cause = raised.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "ApprovalRefused"
    assert cause.details[0] == "invalid" and "message" in cause.message
    assert len(await refusals(handle, 2)) == 2
    # the CLI and the HTTP API refuse it before it is sent
    said = await cli(
        "approvals", "reject", handle.id, str(seq), "--reason", "no", "--message", message,
        extra_env=keys.env(),
    )  # fmt: skip
    assert said.code != 0 and "message" in said.stderr, said.stderr
    service = ApprovalService(
        temporal_client,
        approvals,
        signer=Signer.open(keys.service),
        keyring=load_keyring(keys.keyring),
    )
    app = create_app(service, {"t-alice": "alice"})
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://approvals"
    ) as http:
        path = f"/approvals/{handle.id}/{seq}/reject"
        auth = {"Authorization": "Bearer t-alice"}
        refused = await http.post(path, headers=auth, json={"reason": "no", "message": message})
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"] == "invalid_request"
        status = await handle.query("status", result_type=SagaStatus)
        assert status.state is SagaState.AWAITING_APPROVAL and len(status.refused_decisions) == 2
        assert await phases(journal, handle.id) == before

        # the saga is not wedged: a well-formed rejection with a message, by the HTTP API
        taken = await http.post(path, headers=auth, json={"reason": "no", "message": MESSAGE})
    assert taken.status_code == 200, taken.text
    assert taken.json()["message"] == MESSAGE and taken.json()["decision"] == "rejected"
    result = await handle.result()
    assert result.error is not None and result.error.rejection is not None
    assert result.error.rejection.message == MESSAGE
    assert (await rejected_row(journal, handle.id))[1]["message"] == MESSAGE


async def test_the_console_reject_form_takes_a_message_signed_for_the_principal(
    signed_worker: WorkerProcess,
    temporal_client: Client,
    task_queue: str,
    keys: Keys,
    journal: JournalStore,
    approvals: ApprovalStore,
) -> None:
    handle, seq = await waiting(temporal_client, task_queue)
    service = ApprovalService(
        temporal_client,
        approvals,
        signer=Signer.open(keys.service),
        keyring=load_keyring(keys.keyring),
        journal=journal,
    )
    app = create_app(service, {"tok-alice": "alice"}, web=WebConsole(service, journal))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="https://approvals"
    ) as web:
        signed_in = await web.post(
            "/console/sign-in",
            data={"token": "tok-alice", "next": "/console/"},
            headers={"Origin": "https://approvals"},
        )
        assert signed_in.status_code == 303
        page = f"/console/approvals/{handle.id}/{seq}"
        form = await web.get(page)
        assert 'name="message"' in form.text and 'data-testid="reject-message"' in form.text
        # a browser sends a textarea's line breaks as CR LF
        typed = "Not this address.\r\nCall update_address first."
        rejected = await web.post(
            f"{page}/reject",
            data={"csrf": csrf_token("tok-alice"), "reason": "wrong address", "message": typed},
        )
    assert rejected.status_code == 303, rejected.text
    result = await handle.result()
    assert result.error is not None and result.error.rejection is not None
    assert result.error.rejection.message == "Not this address.\nCall update_address first."
    _, body = await rejected_row(journal, handle.id)
    assert body["message"] == "Not this address.\nCall update_address first."
    assert body["by"] == "alice" and "signature" in body


async def test_a_rejection_sent_while_the_worker_is_dead_keeps_its_message(
    signed_worker: WorkerProcess,
    temporal_client: Client,
    task_queue: str,
    keys: Keys,
    cli: Cli,
    journal: JournalStore,
) -> None:
    handle, seq = await waiting(temporal_client, task_queue)
    signed = await cli(
        "approvals", "sign", handle.id, str(seq), "--reject", "--reason", "wrong address",
        "--message", MESSAGE, "--json-only", extra_env=keys.env(),
    )  # fmt: skip
    assert signed.code == 0, signed.stderr
    # the worker is SIGKILLed at the gate; the decision waits in the saga's history
    signed_worker.kill()
    await handle.signal("reject", json.loads(signed.stdout))
    await forget_killed_worker(temporal_client, handle.id)
    await signed_worker.start()
    result = await handle.result()
    assert result.status is SagaState.COMPENSATED
    assert result.error is not None and result.error.rejection is not None
    assert result.error.rejection.message == MESSAGE
    at, body = await rejected_row(journal, handle.id)
    assert (at, body["message"]) == (seq + 1, MESSAGE)
    assert [p for _, p in await phases(journal, handle.id)].count("REJECTED") == 1
